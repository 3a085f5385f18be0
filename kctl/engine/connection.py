"""One TCP connection to a Kafka peer: the socket, TLS and framing.

This is what Java splits into a ``TransportLayer`` (plain or SSL), a ``NetworkReceive``
and a ``NetworkSend``, kept in one small class because Python's ``ssl`` already hides
most of the TLS layer. The producer's ``NetworkClient``, the ``BlockingClient`` and
``kctl inspect``'s processors all use it; none of them re-implements the mechanics:

- ``Connection.open`` starts a non-blocking connect (TCP_NODELAY, the buffer sizes
  asked for); completion shows as writability and ``connect_error()`` reads SO_ERROR.
  ``Connection.accepted`` wraps a socket a listener accepted. ``open_blocking`` is
  the blocking form for the ``BlockingClient``.
- ``start_tls`` wraps the socket (``do_handshake_on_connect=False``; the client side
  checks the host name it was opened with) and ``handshake_step`` is one non-blocking
  step: 0 when done, else the selector event the TLS layer waits for. The socket
  object changes when TLS starts: a caller registered in a selector unregisters first
  and registers ``sock`` again after.
- Reads: ``fill`` reads everything available into the connection's ``FrameDecoder``
  (whole frames then come from ``decoder.next_frame()``); ``read_chunk`` returns the
  raw bytes (a proxy forwarding streams). A TLS socket hands out one record per call
  and may hold decrypted bytes the selector cannot see (``pending()``): both keep
  reading until the TLS layer wants the socket again.
- Writes: ``queue`` adds memoryviews (never copied: a 1 MiB request body is written
  from the caller's buffer) and ``write`` writes what the socket takes, with
  ``sendmsg`` when several views wait on a plain socket.

Errors are reported, not phrased: a read returns a ``ReadResult`` saying whether the
peer closed, the TLS layer closed or failed, or the socket broke, after the bytes that
came before it (frames that arrived before a close still count); ``write`` and
``handshake_step`` raise ``OSError`` / ``ssl.SSLError`` as the socket does. Each caller
words the message for its reader (a broker for the producer, a client or an upstream
for the proxy), with ``engine.tls.tls_failure`` for TLS.

No clock, no selector: the callers own those.
"""

from __future__ import annotations

import errno
import socket
import ssl
from dataclasses import dataclass
from typing import Final

from kctl.protocol.frames import DEFAULT_MAX_FRAME_BYTES, FrameDecoder

__all__ = ["CONNECT_IN_PROGRESS", "Connection", "ReadResult", "WOULD_BLOCK", "reset"]

RECV_CHUNK: Final = 256 * 1024
_HAS_SENDMSG: Final = hasattr(socket.socket, "sendmsg")
#: connect_ex results that mean "started" rather than "failed".
CONNECT_IN_PROGRESS: Final = frozenset({0, errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EALREADY,
                                        getattr(errno, "WSAEWOULDBLOCK", errno.EWOULDBLOCK)})
#: What a non-blocking (TLS) socket raises when it cannot go on now.
WOULD_BLOCK: Final = (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError)
_LINGER_RST: Final = b"\x01\x00\x00\x00\x00\x00\x00\x00"   # struct linger {on, 0 s}: close sends RST

EVENT_READ: Final = 1    # selectors.EVENT_READ
EVENT_WRITE: Final = 2   # selectors.EVENT_WRITE


@dataclass(frozen=True, slots=True)
class ReadResult:
    """What one read turn found: ``nbytes`` read, then perhaps why the stream ended."""

    nbytes: int
    eof: bool = False                        # the peer closed its side
    tls_closed: bool = False                 # the peer closed the TLS session
    error: OSError | None = None             # the socket broke
    tls_error: ssl.SSLError | None = None    # the TLS layer failed

    @property
    def ended(self) -> bool:
        return self.eof or self.tls_closed or self.error is not None or self.tls_error is not None


_NOTHING: Final = ReadResult(0)


def reset(sock: socket.socket) -> None:
    """Closes ``sock`` with a RST instead of a FIN (the peer sees the connection reset)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
    except OSError:
        pass
    sock.close()


class Connection:
    """A non-blocking TCP (optionally TLS) connection with a frame decoder and a send queue."""

    __slots__ = ("sock", "host", "address", "tls", "handshaking", "decoder", "out", "closed")

    def __init__(self, sock: socket.socket, address: str, *, host: str = "",
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.sock = sock
        self.host = host                 # checked against the peer's certificate (client side)
        self.address = address           # "host:port", for messages
        self.tls = False                 # ``sock`` is an SSLSocket
        self.handshaking = False         # TLS started, its handshake not finished
        self.decoder = FrameDecoder(max_frame_bytes)
        self.out: list[memoryview] = []  # queued, not yet written
        self.closed = False

    # -- opening ---------------------------------------------------------------------------
    @classmethod
    def open(cls, host: str, port: int, address: str, *, attempt: int = 0,
             send_buffer_bytes: int = -1, receive_buffer_bytes: int = -1,
             max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> Connection:
        """Starts a non-blocking connect to ``host:port`` (the ``attempt``-th resolved
        address, so retries go round them). Raises ``OSError`` when it cannot start:
        ``socket.gaierror`` for a name that does not resolve."""
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        family, kind, proto, _, sockaddr = infos[attempt % len(infos)]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if send_buffer_bytes > 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer_bytes)
            if receive_buffer_bytes > 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer_bytes)
            err = sock.connect_ex(sockaddr)
        except OSError as e:
            sock.close()
            raise OSError(e.errno or errno.EIO, e.strerror or str(e)) from None
        if err not in CONNECT_IN_PROGRESS:
            sock.close()
            raise OSError(err, _strerror(err))
        return cls(sock, address, host=host, max_frame_bytes=max_frame_bytes)

    @classmethod
    def accepted(cls, sock: socket.socket, address: str, *,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> Connection:
        """A connection a listener accepted (made non-blocking, TCP_NODELAY)."""
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(sock, address, max_frame_bytes=max_frame_bytes)

    def connect_error(self) -> int:
        """After the connect shows writable: 0, or the errno it failed with."""
        return self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)

    # -- TLS -------------------------------------------------------------------------------
    def start_tls(self, context: ssl.SSLContext, *, server_side: bool = False) -> None:
        """Wraps the socket (the object changes; the fd stays). Raises ``OSError`` /
        ``ValueError`` when the context refuses."""
        self.sock = context.wrap_socket(self.sock, server_side=server_side,
                                        server_hostname=None if server_side else self.host,
                                        do_handshake_on_connect=False)
        self.tls = self.handshaking = True

    def handshake_step(self) -> int:
        """One non-blocking step of the TLS handshake: 0 when done, else the selector
        event (``EVENT_READ`` / ``EVENT_WRITE``) it waits for. Raises ``ssl.SSLError``,
        ``ssl.CertificateError`` or ``OSError`` when it fails."""
        try:
            self.sock.do_handshake()
        except ssl.SSLWantReadError:
            return EVENT_READ
        except ssl.SSLWantWriteError:
            return EVENT_WRITE
        self.handshaking = False
        return 0

    # -- reading ---------------------------------------------------------------------------
    def fill(self, buf: memoryview) -> ReadResult:
        """Reads all that is available into ``decoder`` through ``buf`` (a scratch buffer)."""
        sock = self.sock
        decoder = self.decoder
        size = len(buf)
        tls = self.tls
        total = 0
        while True:
            try:
                n = sock.recv_into(buf)
            except WOULD_BLOCK:
                break
            except ssl.SSLZeroReturnError:
                return ReadResult(total, tls_closed=True)
            except ssl.SSLError as e:
                return ReadResult(total, tls_error=e)
            except OSError as e:
                return ReadResult(total, error=e)
            if n == 0:
                return ReadResult(total, eof=True)
            total += n
            decoder.feed(buf[:n])
            if n < size and not tls:
                break
        return ReadResult(total) if total else _NOTHING

    def read_chunk(self, max_bytes: int = RECV_CHUNK) -> bytes | None:
        """What a readable socket has: ``None`` if nothing yet, ``b""`` at end of stream.
        Past ``max_bytes`` only while a TLS socket holds decrypted bytes. Raises
        ``OSError`` (``ssl.SSLError`` included) when the connection broke."""
        sock = self.sock
        if not self.tls:
            try:
                return sock.recv(max_bytes)
            except (BlockingIOError, InterruptedError):
                return None
        chunks: list[bytes] = []
        total = 0
        while True:
            try:
                data = sock.recv(max_bytes)
            except WOULD_BLOCK:
                break
            except ssl.SSLZeroReturnError:
                data = b""
            if not data:
                if not chunks:
                    return b""
                break   # the end of stream is read again at the next event
            chunks.append(data)
            total += len(data)
            if total >= max_bytes and not sock.pending():
                break
        return b"".join(chunks) if chunks else None

    # -- writing ---------------------------------------------------------------------------
    def queue(self, *views: bytes | bytearray | memoryview) -> None:
        """Adds bytes to send after what is queued (kept by reference, not copied)."""
        for v in views:
            if len(v):
                self.out.append(v if isinstance(v, memoryview) else memoryview(v))

    def write(self) -> int:
        """Writes what the socket takes of the queue; returns the bytes written (0 when it
        would block: a TLS socket is then given the same bytes again, as it requires).
        Raises ``OSError`` / ``ssl.SSLError`` when the connection broke."""
        out = self.out
        if not out:
            return 0
        try:
            if _HAS_SENDMSG and len(out) > 1 and not self.tls:
                n = self.sock.sendmsg(out)
            else:
                n = self.sock.send(out[0])
        except WOULD_BLOCK:
            return 0
        written = n
        while n:
            first = out[0]
            if n >= len(first):
                n -= len(first)
                del out[0]
            else:
                out[0] = first[n:]
                n = 0
        return written

    # -- closing ---------------------------------------------------------------------------
    def close(self, *, reset_peer: bool = False) -> None:
        if self.closed:
            return
        self.closed = True
        self.out.clear()
        if reset_peer:
            reset(self.sock)
        else:
            self.sock.close()


def open_blocking(host: str, port: int, timeout_s: float) -> socket.socket:
    """A connected blocking socket with TCP_NODELAY (``BlockingClient``); ``OSError`` when not."""
    sock = socket.create_connection((host, port), timeout=timeout_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _strerror(err: int) -> str:
    import os
    try:
        return os.strerror(err)
    except (ValueError, OverflowError):
        return f"error {err}"
