"""The inspector proxy: a transparent Kafka proxy that decodes, measures, rewrites and breaks traffic.

How this works
--------------
The structure follows Kafka's SocketServer (docs/DESIGN.md, "The inspector proxy"):

- a *listener* per upstream broker accepts clients and pairs each one with a new
  connection to that broker (``_Listener``);
- a *processor* owns connections and their selector (``Processor``): it reads whole
  frames from each side (``FrameDecoder``, any split), remembers each request's
  API key and version by correlation id so the response can be decoded, rewrites
  broker addresses in responses (``rewrite.ResponseRewriter``) so clients come
  back through the proxy for every broker, applies faults at the moment a
  response is handed to the client (``faults.FaultInjector``), keeps statistics
  (``proxy_stats.ProxyStats``) and writes the capture (``capture_writer``).
  The one request fault, lost records, is applied where a request is forwarded
  upstream: the injector may take a batch out of a Produce request, and the
  proxy then forwards the rewritten request (or nothing, when that batch was
  all of it) and hands the injector's decision back with the response.

Ordering: a client connection has exactly one upstream connection, and a broker
answers a connection's requests in order, so pipelining requests keeps
per-connection order without muting; responses held back by a delay fault are
released in order (a response is never released before the one ahead of it).
A request the proxy did not forward (lost records) is answered by the proxy
when every request ahead of it has had its answer, so it keeps its place too.

Processes: this implementation runs the listeners and one processor in a single
background thread with one selector loop, which is plenty for tests and for
inspecting a handful of clients. The pieces are kept apart so that the heavy-load
design (one processor per process, each binding the listeners with SO_REUSEPORT
so the kernel spreads connections, sending ``ProxyStats.snapshot()`` to the
parent that renders) only needs a different driver around ``Processor``.

TLS: with ``listen_ssl_context`` the proxy terminates TLS from clients, with
``upstream_ssl_context`` it speaks TLS to the brokers (host names checked against
the upstream address as given or as the cluster advertises it), so it still sees
Kafka frames to decode, rewrite and break. Handshakes are non-blocking steps driven
by the selector (``_Connection.client_hs`` / ``up_hs`` hold the readiness the TLS
layer waits for), and a TLS read drains the records the TLS layer has already
decrypted (``pending()``), which the selector cannot see. The capture records what
the proxy forwards, in clear: TLS is gone from it, SASL credentials are not.

Secrets: ``on_frame`` sees SaslAuthenticate bodies with ``auth_bytes`` redacted
(as ``kctl decode`` shows them) unless ``show_secrets``.

Faults are per connection and reproducible: connection ``n`` (in accept order)
draws from a ``random.Random`` seeded with ``(seed, n)``. ``set_faults()`` swaps
the plan while running; each connection picks it up at its next request or
response.
"""

from __future__ import annotations

import collections
import errno
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from kctl.engine.tls import tls_failure
from kctl.errors import ConfigError, KctlError
from kctl.inspect.capture_writer import CaptureWriter, TcpFlow
from kctl.inspect.legs import Leg
from kctl.inspect.faults import (
    NO_REQUEST_FAULT, ErrorBudget, FaultDecision, FaultInjector, FaultPlan, LossLedger,
    RequestDecision, empty_produce_response, encode_request_frame, segments,
)
from kctl.inspect.proxy_stats import ProxyStats, StatsSnapshot
from kctl.inspect.rewrite import PRODUCE, ResponseRewriter
from kctl.inspect.session import SASL_AUTHENTICATE_KEY, redact_auth_bytes
from kctl.protocol import messages, schema
from kctl.protocol.error_codes import error_for
from kctl.protocol.frames import FrameDecoder

_HEADER: Final = struct.Struct(">hhi")   # api key, api version, correlation id
_SIZE: Final = struct.Struct(">i")
_RECV_BYTES: Final = 256 * 1024
_HIGH_WATER: Final = 8 * 1024 * 1024     # stop reading a side while this much waits to be written
_LINGER_RST: Final = struct.pack("ii", 1, 0)

Address = tuple[str, int]


def _fmt(addr: Address) -> str:
    return f"{addr[0]}:{addr[1]}"


def parse_hostport(text: str, *, what: str = "address") -> Address:
    host, sep, port = text.strip().rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"{what} {text!r}: expected HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


def api_name(api_key: int) -> str:
    info = schema.API_BY_KEY.get(api_key)
    return info.name if info else f"api{api_key}"


@dataclass(frozen=True, slots=True)
class FrameEvent:
    """One request or response as it passes through the proxy (given to ``on_frame``).

    ``size`` counts the 4-byte size prefix. For a response, ``body`` is what the
    client receives (after rewriting and faults), ``latency_ns`` runs from the
    request's arrival to the response's release, and ``fault`` says what was done."""

    ts_ns: int                      # wall clock
    connection_id: int
    direction: str                  # "request" or "response"
    api_key: int
    api_version: int
    correlation_id: int
    size: int
    body: Any | None
    client: str
    upstream: str
    latency_ns: int | None = None
    fault: FaultDecision | None = None
    redacted: bool = False          # SaslAuthenticate auth_bytes taken out of ``body``

    @property
    def api_name(self) -> str:
        return api_name(self.api_key)


@dataclass(frozen=True, slots=True)
class ListenerInfo:
    address: Address
    upstream: Address
    node_id: int | None             # the virtual node id, in virtual-broker mode


class _Listener:
    __slots__ = ("sock", "address", "upstream", "node_id")

    def __init__(self, sock: socket.socket, upstream: Address, node_id: int | None) -> None:
        self.sock = sock
        self.address: Address = sock.getsockname()[:2]
        self.upstream = upstream
        self.node_id = node_id


class _Pending:
    """A request waiting for its response."""

    __slots__ = ("api_key", "api_version", "arrived_ns", "fault", "synthetic")

    def __init__(self, api_key: int, api_version: int, arrived_ns: int,
                 fault: RequestDecision | None, synthetic: bool) -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.arrived_ns = arrived_ns                # monotonic
        self.fault = fault                          # the injector's decision on the request
        self.synthetic = synthetic                  # not forwarded: the proxy answers it


class _Connection:
    __slots__ = ("id", "listener", "client", "client_addr", "up", "up_addr", "up_connected",
                 "req_dec", "resp_dec", "in_flight", "to_up", "out", "last_release_ns",
                 "injector", "plan_gen", "client_flow", "up_flow", "up_closed", "closed",
                 "client_mask", "up_mask", "out_bytes", "client_hs", "up_hs")

    def __init__(self, conn_id: int, listener: _Listener, client: socket.socket,
                 client_addr: Address, up: socket.socket) -> None:
        self.id = conn_id
        self.listener = listener
        self.client = client
        self.client_addr = client_addr
        self.up = up
        self.up_addr = listener.upstream
        self.up_connected = False
        self.req_dec = FrameDecoder()
        self.resp_dec = FrameDecoder()
        # correlation id -> request, in the order the client sent them
        self.in_flight: dict[int, _Pending] = {}
        self.to_up = bytearray()
        # [release monotonic ns, bytes, drop after it, last write of a tracked response]:
        # each entry is one write to the client
        self.out: collections.deque[list[Any]] = collections.deque()
        self.last_release_ns = 0
        self.injector: FaultInjector | None = None
        self.plan_gen = -1
        self.client_flow: TcpFlow | None = None
        self.up_flow: TcpFlow | None = None
        self.up_closed = False
        self.closed = False
        self.client_mask = 0
        self.up_mask = 0
        self.out_bytes = 0      # bytes waiting in ``out``
        # TLS handshake in progress on that side: the selector event it waits for (0: none)
        self.client_hs = 0
        self.up_hs = 0


def _recv(sock: socket.socket) -> bytes | None:
    """What a readable socket has: ``None`` if nothing yet, ``b""`` at end of stream.

    A TLS socket hands out one record per call, and records it has already decrypted
    (``pending()``) make no selector event: read until the TLS layer wants the socket,
    past ``_RECV_BYTES`` only while decrypted bytes are pending. A TLS error is an
    ``OSError`` like any broken connection."""
    if not isinstance(sock, ssl.SSLSocket):
        try:
            return sock.recv(_RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return None
    chunks: list[bytes] = []
    total = 0
    while True:
        try:
            data = sock.recv(_RECV_BYTES)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError, InterruptedError):
            break
        if not data:
            if not chunks:
                return b""
            break   # the end of stream is read again at the next event
        chunks.append(data)
        total += len(data)
        if total >= _RECV_BYTES and not sock.pending():
            break
    return b"".join(chunks) if chunks else None


_WOULD_BLOCK: Final = (BlockingIOError, InterruptedError, ssl.SSLWantWriteError, ssl.SSLWantReadError)


def _errors_in(body: Any) -> list[str]:
    """Names of every non-zero ``error_code`` anywhere in a decoded message."""
    found: list[str] = []
    stack = [body]
    while stack:
        m = stack.pop()
        for f in m._fields:
            v = getattr(m, f)
            if f == "error_code":
                if v:
                    found.append(error_for(v).name)
            elif type(v) is list:
                if v and isinstance(v[0], messages.Message):
                    stack.extend(v)
            elif isinstance(v, messages.Message):
                stack.append(v)
    return found


class Processor:
    """Owns a selector, the listeners registered in it, and the connections it accepted.

    ``run_once(max_wait_ns)`` is one turn of the loop: wait for I/O (at most until
    the next delayed response is due), handle it, write what is due."""

    def __init__(self, proxy: InspectorProxy) -> None:
        import selectors
        self._selectors = selectors
        self.proxy = proxy
        self.sel = selectors.DefaultSelector()
        self.conns: dict[int, _Connection] = {}
        self._next_id = 0
        self._timed: set[_Connection] = set()     # connections with output held for later
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.sel.register(self._wake_r, selectors.EVENT_READ, ("wake", None))

    # -- control ----------------------------------------------------------------------------
    def wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def add_listener(self, listener: _Listener) -> None:
        self.sel.register(listener.sock, self._selectors.EVENT_READ, ("listen", listener))

    def close(self) -> None:
        for conn in list(self.conns.values()):
            self._close(conn, reason="proxy stopped")
        self.sel.close()
        self._wake_r.close()
        self._wake_w.close()

    # -- the loop ---------------------------------------------------------------------------
    def run_once(self, max_wait_ns: int) -> None:
        now = time.monotonic_ns()
        wait = max_wait_ns
        for conn in self._timed:
            if conn.out:
                wait = min(wait, max(0, conn.out[0][0] - now))
        events = self.sel.select(wait / 1e9)
        for key, mask in events:
            kind, obj = key.data
            if kind == "wake":
                try:
                    while self._wake_r.recv(4096):
                        pass
                except (BlockingIOError, InterruptedError):
                    pass
            elif kind == "listen":
                self._accept(obj)
            elif kind == "client":
                if obj.closed:
                    continue
                if obj.client_hs:
                    self._client_handshake(obj)
                elif mask & self._selectors.EVENT_READ:
                    self._client_readable(obj)
                if mask & self._selectors.EVENT_WRITE and not obj.closed:
                    self._flush_client(obj, time.monotonic_ns())
            elif kind == "up":
                if obj.closed:
                    continue
                if obj.up_hs:
                    self._up_handshake(obj)
                    mask &= ~self._selectors.EVENT_READ   # read at the next event if still readable
                elif mask & self._selectors.EVENT_WRITE:
                    self._up_writable(obj)
                if mask & self._selectors.EVENT_READ and not obj.closed:
                    self._up_readable(obj)
            if kind in ("client", "up") and not obj.closed:
                self._update(obj)
        if self._timed:
            now = time.monotonic_ns()
            for conn in list(self._timed):
                if not conn.closed and conn.out and conn.out[0][0] <= now:
                    self._flush_client(conn, now)
                    if not conn.closed:
                        self._update(conn)

    # -- connections ------------------------------------------------------------------------
    def _accept(self, listener: _Listener) -> None:
        try:
            client, addr = listener.sock.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            return
        client.setblocking(False)
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        proxy = self.proxy
        if proxy.listen_ssl_context is not None:
            try:
                client = proxy.listen_ssl_context.wrap_socket(client, server_side=True,
                                                              do_handshake_on_connect=False)
            except (OSError, ValueError):
                self._reset(client)
                proxy.stats.on_fault("client_tls_failed")
                return
        try:
            family, _, _, _, sockaddr = socket.getaddrinfo(
                listener.upstream[0], listener.upstream[1], type=socket.SOCK_STREAM)[0]
            up = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            self._reset(client)
            proxy.stats.on_fault("upstream_unreachable")
            return
        up.setblocking(False)
        up.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Connection(self._next_id, listener, client, addr[:2], up)
        if proxy.listen_ssl_context is not None:
            conn.client_hs = self._selectors.EVENT_READ    # the ClientHello comes first
        self._next_id += 1
        err = up.connect_ex(sockaddr)
        if err not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK):
            up.close()
            self._reset(client)
            proxy.stats.on_fault("upstream_unreachable")
            return
        self.conns[conn.id] = conn
        if proxy.capture is not None:
            conn.client_flow = proxy.capture.open_flow(conn.client_addr, listener.address, time.time_ns())
        proxy.stats.on_connection_open(conn.id, _fmt(conn.client_addr), _fmt(conn.up_addr),
                                       _fmt(listener.address))
        conn.client_mask = self._selectors.EVENT_READ
        self.sel.register(client, conn.client_mask, ("client", conn))
        conn.up_mask = self._selectors.EVENT_WRITE
        self.sel.register(up, conn.up_mask, ("up", conn))

    @staticmethod
    def _reset(sock: socket.socket) -> None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
        except OSError:
            pass
        sock.close()

    def _close(self, conn: _Connection, *, reason: str, reset: bool = False,
               client_first: bool = True) -> None:
        if conn.closed:
            return
        conn.closed = True
        self._timed.discard(conn)
        self.conns.pop(conn.id, None)
        ts = time.time_ns()
        for sock in (conn.client, conn.up):
            try:
                self.sel.unregister(sock)
            except (KeyError, ValueError, OSError):
                pass
            if reset:
                self._reset(sock)
            else:
                sock.close()
        # The client leg: the proxy is the server; the upstream leg: the proxy is the client.
        if conn.client_flow is not None:
            conn.client_flow.close(ts, from_client=client_first, reset=reset)
        if conn.up_flow is not None:
            conn.up_flow.close(ts, from_client=client_first or reset, reset=reset)
        self.proxy.stats.on_connection_close(conn.id)

    def _update(self, conn: _Connection) -> None:
        """Sets each socket's selector interest from the connection's buffers."""
        R, W = self._selectors.EVENT_READ, self._selectors.EVENT_WRITE
        now = time.monotonic_ns()
        cmask = 0
        if len(conn.to_up) < _HIGH_WATER:
            cmask |= R
        if conn.out:
            if conn.out[0][0] <= now:
                cmask |= W
                self._timed.discard(conn)
            else:
                self._timed.add(conn)
        else:
            self._timed.discard(conn)
            if conn.up_closed:
                self._close(conn, reason="upstream closed", client_first=False)
                return
        if conn.client_hs:
            cmask = conn.client_hs
        if cmask != conn.client_mask:
            self._set_mask(conn.client, conn.client_mask, cmask, ("client", conn))
            conn.client_mask = cmask
        if conn.up_closed:
            return
        if conn.up_hs:
            umask = conn.up_hs
        else:
            umask = R if conn.up_connected and conn.out_bytes < _HIGH_WATER else 0
            if conn.to_up or not conn.up_connected:
                umask |= W
        if umask != conn.up_mask:
            self._set_mask(conn.up, conn.up_mask, umask, ("up", conn))
            conn.up_mask = umask

    def _set_mask(self, sock: socket.socket, old: int, new: int, data: Any) -> None:
        if not new:
            self.sel.unregister(sock)
        elif not old:
            self.sel.register(sock, new, data)
        else:
            self.sel.modify(sock, new, data)

    def _handshake_step(self, sock: Any) -> int:
        """One non-blocking TLS handshake step: 0 when it is done, else the selector
        event it waits for. Raises OSError or ValueError when the handshake fails."""
        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            return self._selectors.EVENT_READ
        except ssl.SSLWantWriteError:
            return self._selectors.EVENT_WRITE
        return 0

    # -- client side ------------------------------------------------------------------------
    def _client_handshake(self, conn: _Connection) -> None:
        """One step of the TLS handshake with a client (the proxy is the server)."""
        try:
            conn.client_hs = self._handshake_step(conn.client)
        except (OSError, ValueError) as e:
            self.proxy.stats.on_fault("client_tls_failed")
            self._close(conn, reason=f"TLS handshake with the client failed: {e}", reset=True)
            return
        if conn.client_hs:
            return
        # The first request may have come with the handshake's last flight.
        self._client_readable(conn)

    def _client_readable(self, conn: _Connection) -> None:
        try:
            data = _recv(conn.client)
        except OSError:
            self._close(conn, reason="client connection error", reset=True)
            return
        if data is None:
            return
        if not data:
            self._close(conn, reason="client closed")
            return
        if conn.client_flow is not None:
            conn.client_flow.data(time.time_ns(), True, data)
        conn.req_dec.feed(data)
        try:
            frames = conn.req_dec.frames()
        except KctlError:
            self.proxy.stats.on_decode_error()
            self._close(conn, reason="client broke framing", reset=True)
            return
        for f in frames:
            self._on_request(conn, f)

    def _on_request(self, conn: _Connection, payload: bytes) -> None:
        proxy = self.proxy
        now = time.monotonic_ns()
        size = 4 + len(payload)
        if len(payload) < _HEADER.size:
            conn.to_up += _SIZE.pack(len(payload))
            conn.to_up += payload
            proxy.stats.on_decode_error()
            return
        api_key, api_version, corr = _HEADER.unpack_from(payload)
        body = None
        expects_response = True
        fault = NO_REQUEST_FAULT
        forward: bytes | None = payload
        if api_key == PRODUCE or proxy.on_frame is not None:
            try:
                request = messages.decode_request(payload)
            except KctlError:
                proxy.stats.on_decode_error()
            else:
                body = request.body
                # acks=0: a Kafka broker sends nothing back (some brokers answer anyway;
                # such an answer is forwarded as an unknown correlation id).
                if api_key == PRODUCE and body.acks == 0:
                    expects_response = False
                fault = proxy.injector_for(conn).on_request(api_key, body)
                if fault.lost is not None:
                    forward = encode_request_frame(request) if fault.forward else None
                    proxy.stats.on_fault("lost")
                    proxy.stats.on_fault("lost_records", fault.lost.offset_count)
        if forward is not None:
            conn.to_up += _SIZE.pack(len(forward))
            conn.to_up += forward
        if expects_response:
            conn.in_flight[corr] = _Pending(api_key, api_version, now,
                                            None if fault is NO_REQUEST_FAULT else fault,
                                            synthetic=forward is None)
        proxy.stats.on_request(conn.id, api_name(api_key), size, expects_response)
        if proxy.on_frame is not None:
            # The body is decoded for observers only (the payload is what was forwarded).
            redacted = (api_key == SASL_AUTHENTICATE_KEY and not proxy.show_secrets
                        and redact_auth_bytes(body))
            proxy.emit(FrameEvent(time.time_ns(), conn.id, "request", api_key, api_version, corr,
                                  size, body, _fmt(conn.client_addr), _fmt(conn.up_addr),
                                  redacted=redacted))
        if forward is None:
            self._answer_unforwarded(conn)

    def _flush_client(self, conn: _Connection, now: int) -> None:
        out = conn.out
        while out and out[0][0] <= now:
            item = out[0]
            chunk = item[1]
            if chunk:
                try:
                    n = conn.client.send(chunk)
                except _WOULD_BLOCK:
                    # TLS: the same bytes are sent again later (a moved buffer is allowed)
                    return
                except OSError:
                    self._close(conn, reason="client connection error", reset=True)
                    return
                if conn.client_flow is not None:
                    conn.client_flow.data(time.time_ns(), False, chunk[:n])
                conn.out_bytes -= n
                if n < len(chunk):
                    item[1] = chunk[n:]
                    return
            out.popleft()
            if item[3]:
                self.proxy.stats.on_delivered(conn.id)
            if item[2]:
                # A drop fault: part of the response went out; now the connection dies.
                self.proxy.stats.on_fault("dropped")
                self._close(conn, reason="drop fault", reset=True, client_first=False)
                return

    # -- upstream side ----------------------------------------------------------------------
    def _up_writable(self, conn: _Connection) -> None:
        if not conn.up_connected:
            err = conn.up.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                self.proxy.stats.on_fault("upstream_unreachable")
                self._close(conn, reason=f"cannot connect to {_fmt(conn.up_addr)}", reset=True)
                return
            conn.up_connected = True
            if self.proxy.capture is not None:
                local = conn.up.getsockname()[:2]
                peer = conn.up.getpeername()[:2]
                conn.up_flow = self.proxy.capture.open_flow(local, peer, time.time_ns(), Leg.UPSTREAM)
            context = self.proxy.upstream_ssl_context
            if context is not None:
                # wrap_socket detaches the plain socket: the selector must forget it first.
                self.sel.unregister(conn.up)
                conn.up_mask = 0
                try:
                    conn.up = context.wrap_socket(conn.up, server_hostname=conn.up_addr[0],
                                                  do_handshake_on_connect=False)
                except (OSError, ValueError) as e:
                    self.proxy.stats.on_fault("upstream_tls_failed")
                    self._close(conn, reason=f"TLS with {_fmt(conn.up_addr)} failed: {e}", reset=True)
                    return
                conn.up_hs = self._selectors.EVENT_WRITE
                self._up_handshake(conn)
                return
        if conn.to_up:
            try:
                n = conn.up.send(conn.to_up)
            except _WOULD_BLOCK:
                return
            except OSError:
                self._close(conn, reason="upstream connection error", reset=True, client_first=False)
                return
            if conn.up_flow is not None:
                conn.up_flow.data(time.time_ns(), True, memoryview(conn.to_up)[:n])
            del conn.to_up[:n]

    def _up_handshake(self, conn: _Connection) -> None:
        """One step of the TLS handshake with the broker (the proxy is the client)."""
        try:
            conn.up_hs = self._handshake_step(conn.up)
        except (OSError, ValueError) as e:
            # The client sees its connection reset; the reason is kept for the owner.
            self.proxy.stats.on_fault("upstream_tls_failed")
            # The engine's one-line explanation, naming the setting that fixes it.
            self.proxy.last_upstream_tls_error = str(tls_failure(_fmt(conn.up_addr), e))
            self._close(conn, reason=self.proxy.last_upstream_tls_error, reset=True)

    def _up_readable(self, conn: _Connection) -> None:
        try:
            data = _recv(conn.up)
        except OSError:
            data = b""
        if data is None:
            return
        if not data:
            conn.up_closed = True
            try:
                self.sel.unregister(conn.up)
            except (KeyError, ValueError):
                pass
            conn.up_mask = 0
            return
        if conn.up_flow is not None:
            conn.up_flow.data(time.time_ns(), False, data)
        conn.resp_dec.feed(data)
        try:
            frames = conn.resp_dec.frames()
        except KctlError:
            self.proxy.stats.on_decode_error()
            self._close(conn, reason="upstream broke framing", reset=True, client_first=False)
            return
        for f in frames:
            self._on_response(conn, f)
            self._answer_unforwarded(conn)

    def _answer_unforwarded(self, conn: _Connection) -> None:
        """Answers the requests at the head of the line that were never forwarded (a
        lost batch was all they carried): an empty Produce response goes through the
        usual response path, where the injector adds the forged entry."""
        in_flight = conn.in_flight
        while in_flight and not conn.closed:
            corr, pending = next(iter(in_flight.items()))
            if not pending.synthetic:
                return
            self._on_response(conn, empty_produce_response(pending.api_version, corr))

    def _on_response(self, conn: _Connection, payload: bytes) -> None:
        proxy = self.proxy
        now = time.monotonic_ns()
        try:
            corr = messages.peek_correlation_id(payload)
        except KctlError:
            corr = None
        entry = conn.in_flight.pop(corr, None) if corr is not None else None
        if entry is None:
            # Not a request we saw (or one we did not expect an answer to): pass it on.
            self._queue(conn, _SIZE.pack(len(payload)) + payload, now, FaultDecision(), counted=False)
            return
        api_key, api_version, arrived_ns = entry.api_key, entry.api_version, entry.arrived_ns
        injector = proxy.injector_for(conn)
        body = None
        errors: list[str] = []
        throttle_ms = 0
        out = payload
        try:
            resp = messages.decode_response(payload, api_key, api_version)
        except KctlError:
            proxy.stats.on_decode_error()
            decision = injector.on_response(api_key, 4 + len(payload), None)
        else:
            body = resp.body
            changed = proxy.rewriter.rewrite(api_key, body)
            decision = injector.on_response(api_key, 4 + len(payload), body, entry.fault)
            if decision.throttle_ms or decision.errors_injected or decision.forged:
                changed = True
            if changed:
                try:
                    out = messages.encode_response(api_key, api_version, corr, body)
                except KctlError:
                    proxy.stats.on_decode_error()
                    out = payload
            errors = _errors_in(body)
            throttle_ms = getattr(body, "throttle_time_ms", 0) or 0
        self._count_faults(decision)
        release = max(now + decision.delay_ns, conn.last_release_ns)
        if decision.swallow:
            release = None
        else:
            conn.last_release_ns = release
            data = _SIZE.pack(len(out)) + out
            self._queue(conn, data, release, decision)
            proxy.stats.on_response(conn.id, api_name(api_key), len(data), release - arrived_ns,
                                    throttle_ms, errors)
        if proxy.on_frame is not None:
            # ``out`` is already encoded: redacting the decoded body changes nothing sent.
            redacted = (api_key == SASL_AUTHENTICATE_KEY and not proxy.show_secrets
                        and redact_auth_bytes(body))
            proxy.emit(FrameEvent(time.time_ns(), conn.id, "response", api_key, api_version, corr,
                                  4 + len(out), body, _fmt(conn.client_addr), _fmt(conn.up_addr),
                                  None if release is None else release - arrived_ns, decision,
                                  redacted))

    def _count_faults(self, d: FaultDecision) -> None:
        stats = self.proxy.stats
        if d.swallow:
            stats.on_fault("swallowed")
        if d.delay_ns:
            stats.on_fault("delayed")
        if d.throttle_ms:
            stats.on_fault("throttled")
        if d.errors_injected:
            stats.on_fault("errors_injected", d.errors_injected)
        if d.segment_bytes:
            stats.on_fault("tiny_segments")
        if d.forged:
            stats.on_fault("forged", d.forged)

    def _queue(self, conn: _Connection, data: bytes, release_ns: int, d: FaultDecision,
               counted: bool = True) -> None:
        if d.drop_at is not None:
            data = data[:d.drop_at]
        chunks = segments(data, d.segment_bytes)
        for c in chunks:
            conn.out.append([release_ns, c, False, False])
        conn.out_bytes += len(data)
        if d.drop_at is not None:
            conn.out[-1][2] = True
        else:
            conn.out[-1][3] = counted


class InspectorProxy:
    """A transparent Kafka proxy in a background thread; see the module docstring.

    ``upstreams``: broker addresses (bootstrap servers) to front. One listener is
    made per upstream at start, and one more for each further broker that a
    response names. ``virtual_brokers`` > 1 presents the single upstream as that
    many brokers (node ids 1..N, one listener each). ``on_frame`` is called in the
    proxy's thread for every request and response (keep it quick); SaslAuthenticate
    credentials are redacted from its bodies unless ``show_secrets``.

    ``listen_ssl_context`` (a server context, e.g. ``engine.tls.listener_context``)
    makes every listener terminate TLS; ``upstream_ssl_context`` (a client context,
    e.g. ``engine.tls.context_for``) makes the proxy speak TLS to the brokers."""

    def __init__(self, upstreams: Iterable[Address | str], listen_host: str = "127.0.0.1",
                 listen_port: int = 0, *, faults: FaultPlan | None = None,
                 capture: str | Path | None = None, virtual_brokers: int = 1,
                 on_frame: Callable[[FrameEvent], object] | None = None,
                 advertised_host: str | None = None,
                 listen_ssl_context: ssl.SSLContext | None = None,
                 upstream_ssl_context: ssl.SSLContext | None = None,
                 show_secrets: bool = False) -> None:
        ups = [parse_hostport(u, what="upstream") if isinstance(u, str) else (u[0], int(u[1]))
               for u in upstreams]
        if not ups:
            raise ConfigError("the proxy needs at least one upstream broker")
        if virtual_brokers < 1:
            raise ConfigError(f"virtual brokers must be at least 1, not {virtual_brokers}")
        if virtual_brokers > 1 and len(ups) > 1:
            raise ConfigError("virtual brokers present one upstream broker as several: "
                              "give exactly one upstream")
        self.upstreams = ups
        self.listen_host = listen_host
        self.listen_port = listen_port
        self.advertised_host = advertised_host or (
            "127.0.0.1" if listen_host in ("0.0.0.0", "", "::") else listen_host)
        self.virtual_brokers = virtual_brokers
        self.on_frame = on_frame
        self.listen_ssl_context = listen_ssl_context
        self.upstream_ssl_context = upstream_ssl_context
        self.show_secrets = show_secrets
        self.last_upstream_tls_error: str | None = None
        self.capture_path = Path(capture) if capture is not None else None
        self.capture: CaptureWriter | None = None
        self.stats = ProxyStats()
        self._plan_lock = threading.Lock()
        self._plan_gen = 0
        self._plan = faults or FaultPlan()
        self._budget = ErrorBudget(self._plan.error.limit if self._plan.error else None)
        self._ledger = LossLedger.for_plan(self._plan)
        self._listeners: list[_Listener] = []
        self._by_upstream: dict[Address, _Listener] = {}
        self._listeners_lock = threading.Lock()
        self._processor: Processor | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.rewriter: ResponseRewriter = ResponseRewriter(self.advertised_host, self._listener_port)
        self.loop_error: BaseException | None = None
        self._frame_errors = 0

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> InspectorProxy:
        if self._thread is not None:
            return self
        self._processor = Processor(self)
        try:
            if self.capture_path is not None:
                self.capture = CaptureWriter(self.capture_path)
            if self.virtual_brokers > 1:
                virtual = []
                for i in range(self.virtual_brokers):
                    node_id = i + 1
                    lst = self._add_listener(self.upstreams[0], node_id)
                    virtual.append((node_id, lst.address[1]))
                self.rewriter = ResponseRewriter(self.advertised_host, self._listener_port, virtual)
            else:
                for up in self.upstreams:
                    self._listener_port(*up)
        except BaseException:
            self._shutdown()
            raise
        self._thread = threading.Thread(target=self._run, name="kctl-inspect-proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Closes every connection and listener, and the capture file; idempotent."""
        self._stopping = True
        thread = self._thread
        if thread is not None and self._processor is not None:
            self._processor.wake()
            thread.join(timeout=10)
        self._thread = None
        self._shutdown()

    def _shutdown(self) -> None:
        if self._processor is not None:
            self._processor.close()
            self._processor = None
        with self._listeners_lock:
            for lst in self._listeners:
                lst.sock.close()
        if self.capture is not None:
            self.capture.close()

    def __enter__(self) -> InspectorProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        proc = self._processor
        assert proc is not None
        try:
            while not self._stopping:
                proc.run_once(200_000_000)
        except BaseException as e:   # surfaced to the owner through loop_error
            self.loop_error = e
            raise

    # -- listeners ------------------------------------------------------------------------------
    def _add_listener(self, upstream: Address, node_id: int | None) -> _Listener:
        sock = socket.socket(socket.AF_INET6 if ":" in self.listen_host else socket.AF_INET,
                             socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        port = 0
        if self.listen_port:
            port = self.listen_port + len(self._listeners)
        try:
            sock.bind((self.listen_host, port))
        except OSError as e:
            if not self._listeners:   # the port the user asked for
                sock.close()
                raise ConfigError(f"cannot listen on {self.listen_host}:{port}: {e.strerror or e}") from None
            sock.bind((self.listen_host, 0))
        sock.listen(128)
        sock.setblocking(False)
        lst = _Listener(sock, upstream, node_id)
        with self._listeners_lock:
            self._listeners.append(lst)
            self._by_upstream.setdefault(upstream, lst)
        assert self._processor is not None
        self._processor.add_listener(lst)
        return lst

    def _listener_port(self, host: str, port: int) -> int:
        """The listener port forwarding to upstream ``host:port``, made on first use."""
        lst = self._by_upstream.get((host, port))
        if lst is None:
            lst = self._add_listener((host, port), None)
        return lst.address[1]

    @property
    def listeners(self) -> list[Address]:
        """Every listener's (host, port), first the ones made at start."""
        with self._listeners_lock:
            return [(self.advertised_host, lst.address[1]) for lst in self._listeners]

    @property
    def listener_info(self) -> list[ListenerInfo]:
        with self._listeners_lock:
            return [ListenerInfo((self.advertised_host, lst.address[1]), lst.upstream, lst.node_id)
                    for lst in self._listeners]

    @property
    def bootstrap(self) -> str:
        """The first listener as "host:port", to give clients as bootstrap.servers."""
        if not self._listeners:
            raise KctlError("the proxy is not started")
        return _fmt(self.listeners[0])

    # -- faults and stats -----------------------------------------------------------------------
    @property
    def faults(self) -> FaultPlan:
        return self._plan

    def set_faults(self, plan: FaultPlan | None) -> None:
        """Replaces the fault plan; connections switch at their next request or response.
        A batch lost under the old plan is still acknowledged under the new one."""
        with self._plan_lock:
            self._plan = plan or FaultPlan()
            self._budget = ErrorBudget(self._plan.error.limit if self._plan.error else None)
            self._ledger = LossLedger.for_plan(self._plan)
            self._plan_gen += 1

    def injector_for(self, conn: _Connection) -> FaultInjector:
        if conn.plan_gen != self._plan_gen or conn.injector is None:
            with self._plan_lock:
                conn.injector = FaultInjector(self._plan, conn.id, budget=self._budget,
                                              ledger=self._ledger)
                conn.plan_gen = self._plan_gen
        return conn.injector

    def snapshot(self) -> StatsSnapshot:
        return self.stats.snapshot(time.monotonic_ns())

    def emit(self, event: FrameEvent) -> None:
        assert self.on_frame is not None
        try:
            self.on_frame(event)
        except Exception:
            # A broken observer must not break the traffic it observes.
            self._frame_errors += 1
