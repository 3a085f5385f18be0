"""The connection layer over a socket pair: frames in any split, raw chunks, queued writes
without copies, the end of stream after the bytes before it, and TLS stepped by a selector."""

from __future__ import annotations

import selectors
import socket
import ssl
import time

import pytest

from kctl.engine.connection import EVENT_READ, EVENT_WRITE, Connection
from kctl.protocol.frames import frame


@pytest.fixture
def pair():
    listener = socket.create_server(("127.0.0.1", 0))
    b = socket.create_connection(listener.getsockname())
    conn = Connection.accepted(listener.accept()[0], "peer:1")
    listener.close()
    yield conn, b
    conn.close()
    b.close()


def test_fill_gives_whole_frames_in_any_split(pair):
    conn, peer = pair
    buf = memoryview(bytearray(7))          # smaller than a frame: several reads per fill
    data = frame(b"first") + frame(b"second-frame")
    peer.sendall(data[:5])
    time.sleep(0.05)
    assert conn.fill(buf).nbytes == 5 and conn.decoder.next_frame() is None
    peer.sendall(data[5:])
    time.sleep(0.05)
    result = conn.fill(buf)
    assert result.nbytes == len(data) - 5 and not result.ended
    assert conn.decoder.frames() == [b"first", b"second-frame"]


def test_end_of_stream_comes_after_the_bytes_before_it(pair):
    conn, peer = pair
    peer.sendall(frame(b"last"))
    peer.close()
    time.sleep(0.05)
    buf = memoryview(bytearray(1024))
    result = conn.fill(buf)
    if not result.eof:                      # a short read ends a plain socket's turn
        assert result.nbytes == 8
        result = conn.fill(buf)
    assert result.eof
    assert conn.decoder.next_frame() == b"last"


def test_read_chunk_and_nothing_yet(pair):
    conn, peer = pair
    assert conn.read_chunk() is None
    peer.sendall(b"abc")
    time.sleep(0.05)
    assert conn.read_chunk() == b"abc"
    peer.shutdown(socket.SHUT_WR)
    assert conn.read_chunk() == b""


def test_queued_views_are_written_in_order_without_copies(pair):
    conn, peer = pair
    big = bytearray(b"x" * (4 << 20))        # more than a socket buffer takes at once
    conn.queue(b"head", big, b"tail")
    assert conn.out[1].obj is big           # by reference
    written = conn.write()
    assert 0 < written < len(big) + 8 and conn.out
    got = bytearray()
    peer.setblocking(False)
    while conn.out or len(got) < len(big) + 8:
        conn.write()
        try:
            got += peer.recv(1 << 20)
        except BlockingIOError:
            pass
    assert got[:4] == b"head" and got[-4:] == b"tail" and len(got) == len(big) + 8


def test_tls_handshake_stepped_by_a_selector(tmp_path):
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("localhost")
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(server_ctx)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    client = Connection.open("localhost", port, f"localhost:{port}")
    server = Connection.accepted(listener.accept()[0], "client")
    listener.close()
    sel = selectors.DefaultSelector()
    client.start_tls(client_ctx)
    server.start_tls(server_ctx, server_side=True)
    waits = {client: EVENT_WRITE, server: EVENT_READ}
    for _ in range(100):
        for c in list(waits):
            waits[c] = c.handshake_step()
            if not waits[c]:
                del waits[c]
        if not waits:
            break
        for c, ev in waits.items():
            sel.register(c.sock, ev)
        sel.select(1)
        for c in waits:
            sel.unregister(c.sock)
    assert not waits and client.tls and not client.handshaking
    client.queue(frame(b"over-tls"))
    while client.out:
        client.write()
    buf = memoryview(bytearray(64))
    for _ in range(100):
        server.fill(buf)
        if (f := server.decoder.next_frame()) is not None:
            break
        sel.register(server.sock, EVENT_READ)
        sel.select(1)
        sel.unregister(server.sock)
    assert f == b"over-tls"
    client.close()
    server.close()
