"""A scripted fake broker on 127.0.0.1 for network tests.

It accepts any number of connections (one thread each), answers ApiVersions by
itself (``api_versions``: {api_key: (min, max)}; ``api_versions_handler`` to script
it) and hands every other decoded request to ``handler(broker, conn_id, request)``,
which may answer with bytes (``broker.response_frame(...)``), do nothing (the test
answers later with ``broker.send``), or kill the connection (``broker.kill``).
Everything it received is in ``broker.requests`` as (conn_id, Request).
"""

from __future__ import annotations

import socket
import threading
import time

from kctl.protocol import messages
from kctl.protocol.frames import FrameDecoder, frame

API_VERSIONS = 18
DEFAULT_VERSIONS = {API_VERSIONS: (0, 4), 0: (3, 11), 3: (0, 12)}


class FakeBroker:
    def __init__(self, handler=None, *, api_versions=None, api_versions_handler=None,
                 read_delay_s: float = 0.0, recv_buffer: int | None = None) -> None:
        self.handler = handler
        self.api_versions = DEFAULT_VERSIONS if api_versions is None else api_versions
        self.api_versions_handler = api_versions_handler
        self.read_delay_s = read_delay_s
        self.recv_buffer = recv_buffer
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self.requests: list[tuple[int, messages.Request]] = []
        self.raw: list[bytes] = []
        self.conns: list[socket.socket] = []
        self.cond = threading.Condition()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    # -- serving ------------------------------------------------------------------
    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            if self.recv_buffer:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.recv_buffer)
            with self.cond:
                self.conns.append(conn)
                conn_id = len(self.conns) - 1
                self.cond.notify_all()
            threading.Thread(target=self._serve, args=(conn_id, conn), daemon=True).start()

    def _serve(self, conn_id: int, conn: socket.socket) -> None:
        dec = FrameDecoder()
        if self.read_delay_s:
            time.sleep(self.read_delay_s)
        try:
            while data := conn.recv(1 << 20):
                dec.feed(data)
                for f in dec.frames():
                    req = messages.decode_request(f)
                    with self.cond:
                        self.requests.append((conn_id, req))
                        self.raw.append(f)
                        self.cond.notify_all()
                    if req.header.request_api_key == API_VERSIONS:
                        out = (self.api_versions_handler or self._answer_api_versions)(req)
                    elif self.handler is not None:
                        out = self.handler(self, conn_id, req)
                    else:
                        out = None
                    if out:
                        conn.sendall(out)
        except OSError:
            pass

    def _answer_api_versions(self, req: messages.Request) -> bytes:
        return api_versions_frame(req, req.header.request_api_version, ranges=self.api_versions)

    # -- scripting ----------------------------------------------------------------
    def response_frame(self, req: messages.Request, body, *, correlation_id: int | None = None) -> bytes:
        key, version = req.header.request_api_key, req.header.request_api_version
        cid = req.header.correlation_id if correlation_id is None else correlation_id
        return frame(messages.encode_response(key, version, cid, body))

    def send(self, conn_id: int, data: bytes, *, segment: int = 0, pause_s: float = 0.0) -> None:
        """Writes ``data`` on a connection, in ``segment``-byte pieces with pauses if asked."""
        conn = self.conns[conn_id]
        if not segment:
            conn.sendall(data)
            return
        for i in range(0, len(data), segment):
            conn.sendall(data[i:i + segment])
            if pause_s:
                time.sleep(pause_s)

    def kill(self, conn_id: int = -1) -> None:
        _shut(self.conns[conn_id])

    def wait_requests(self, n: int, timeout_s: float = 5.0, *, api_key: int | None = None) -> list:
        """Waits until ``n`` requests (of ``api_key``, if given) have arrived; returns them."""
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while True:
                got = [r for r in self.requests
                       if api_key is None or r[1].header.request_api_key == api_key]
                if len(got) >= n:
                    return got
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{len(got)} of {n} requests arrived")
                self.cond.wait(left)

    def wait_connections(self, n: int, timeout_s: float = 5.0) -> None:
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while len(self.conns) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{len(self.conns)} of {n} connections")
                self.cond.wait(left)

    def close(self) -> None:
        # shutdown() first: close() alone does not wake a thread blocked in accept/recv.
        _shut(self.listener)
        for c in self.conns:
            _shut(c)

    def __enter__(self) -> FakeBroker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def api_versions_frame(req: messages.Request, version: int, *, error_code: int = 0,
                       ranges: dict[int, tuple[int, int]] | None = None) -> bytes:
    cls = messages.response_class(API_VERSIONS)
    keys = [cls.ApiVersion(api_key=k, min_version=lo, max_version=hi)
            for k, (lo, hi) in (ranges or DEFAULT_VERSIONS).items()]
    body = cls(error_code=error_code, api_keys=keys, throttle_time_ms=0)
    return frame(messages.encode_response(API_VERSIONS, version, req.header.correlation_id, body))
