"""A processor of ``kctl inspect``: Kafka's SocketServer ``Processor``, as a proxy.

How this works
--------------
A processor owns a selector and the connections handed to it (``adopt``), from accept
to close: each client connection and the upstream connection made for it form a
``_Link``. ``run_once(max_wait_ns)`` is one turn of the loop: wait for I/O (at most
until the next held response is due), move bytes, write what is due. Everything it
works with is passed in: the clock, the fault plan (``faults.FaultSwitch``), the
response rewriter, the statistics, the capture writer, the frame observer and the
hooks that tell its owner what happened. It never reaches into a proxy object, so the
same class runs in the proxy's thread or in a processor process (``proxy.py``).

Requests (client to upstream). Bytes are forwarded as they are read, in the same
turn: a request needs no rewriting unless the plan may take a batch out of it (the
lost-records fault), so the client's chunk goes upstream whole, and the frames in it
are found afterwards (``_Frames``: size prefixes, any split) for bookkeeping: the
header (API key, version, correlation id), a Produce request's ``acks`` and its
record-batch headers for statistics (``peek.py``; nothing is decoded). Only while
the plan rewrites requests does a processor hold each request until whole, and
forward it (or its rewritten form, or nothing) then. The plan is read at frame
boundaries, so a frame is never forwarded twice or cut.

Responses (upstream to client). Responses are small except Fetch; each whole frame is
decoded (error codes, throttle; broker addresses to rewrite in Metadata,
FindCoordinator, DescribeCluster, ApiVersions and KIP-951 hints) and re-encoded only
when something changed. A Produce response that no fault edits and that has no tagged
field (KIP-951 hints are tagged) is only read for its error codes and throttle time
(``peek.produce_answer``): it has nothing to rewrite, and reading costs a quarter of
decoding. Faults act here (``FaultInjector.on_response``): delay,
throttle, error codes, drops, tiny segments, blackhole, forged acknowledgements.
When a chunk held only whole frames that all pass unchanged and undelayed, the chunk
itself goes to the client (one write, one capture segment per leg, one checksum).
A response is counted, and its latency sampled, when the client's socket has taken
its last byte (``_delivered``), which is also when its client-leg capture segment
is written: the live view and a decode of the capture's client leg measure the same
interval, the one a client waits for.

Order per connection: a client connection has exactly one upstream connection and a
broker answers a connection's requests in order, so pipelined requests (up to the
client's max.in.flight) keep their order without muting the client. Responses are
released in order (one is never released before the one ahead of it, whatever its
delay); a request the processor answers itself (lost records) is answered when every
request ahead of it has been. The only reason a processor stops reading a side is
back-pressure: the other side has ``HIGH_WATER`` bytes waiting.

Captures: each leg has its own TCP flow on its own pcapng interface
(``capture_writer``); the client's bytes and the same bytes forwarded upstream are
written with one checksum. Upstream bytes queued before the upstream connect
completes are written to the capture once the flow exists.

TLS: with a listener context the processor terminates TLS from clients, with an
upstream context it speaks TLS to the brokers (``engine/connection.py`` steps the
handshakes); the capture holds what the proxy forwards, in clear.
"""

from __future__ import annotations

import collections
import dataclasses
import selectors
import ssl
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Final

from kctl.engine.clock import Clock
from kctl.engine.connection import Connection, reset
from kctl.engine.handshake import HandshakeObserver
from kctl.engine.tls import tls_failure
from kctl.errors import DecodeError, KctlError
from kctl.inspect.capture_writer import CaptureWriter, TcpFlow
from kctl.inspect.faults import (
    FIND_COORDINATOR, NO_REQUEST_FAULT, FaultDecision, FaultInjector, FaultSwitch, RequestDecision,
    empty_produce_response, encode_request_frame, segments)
from kctl.inspect.legs import Leg
from kctl.inspect.peek import PRODUCE, produce_acks, produce_answer, produce_summary, request_head
from kctl.inspect.proxy_stats import ProxyStats
from kctl.inspect.rewrite import ResponseRewriter
from kctl.inspect.session import SASL_AUTHENTICATE_KEY, redact_auth_bytes
from kctl.protocol import messages, schema
from kctl.protocol.error_codes import error_for
from kctl.protocol.frames import DEFAULT_MAX_FRAME_BYTES

_SIZE: Final = struct.Struct(">i")
HIGH_WATER: Final = 8 * 1024 * 1024     # stop reading a side while this much waits to be written
_R: Final = selectors.EVENT_READ
_W: Final = selectors.EVENT_WRITE
_SASL_HANDSHAKE: Final = schema.API_BY_NAME["SaslHandshake"].api_key

Address = tuple[str, int]


def fmt(addr: Address) -> str:
    return f"[{addr[0]}]:{addr[1]}" if ":" in addr[0] else f"{addr[0]}:{addr[1]}"


def api_name(api_key: int) -> str:
    info = schema.API_BY_KEY.get(api_key)
    return info.name if info else f"api{api_key}"


@dataclass(frozen=True, slots=True)
class Handoff:
    """What the acceptor tells a processor about a connection it hands over."""

    conn_id: int                     # accept order over the whole proxy: seeds its faults
    client: Address
    listener: Address
    upstream: Address


@dataclass(frozen=True)
class FrameEvent:
    """One request or response as it passes through the proxy (given to ``on_frame``).

    ``frame`` is the payload without its size prefix: a request as the client sent
    it, a response as the client receives it (after rewriting and faults). ``size``
    counts the 4-byte prefix. A response's event comes when the client's socket has
    taken its last byte (``ts_ns`` then), and ``latency_ns`` runs from the request's
    last byte read to that moment, the live view's figure; a response cut by a drop
    fault comes when its cut part is written, a swallowed one when decided, both
    without a latency. ``fault`` says what was done. ``body`` decodes ``frame``
    on first use, with SaslAuthenticate credentials redacted unless ``show_secrets``.
    Plain values only: events cross from processor processes to the parent."""

    ts_ns: int                      # wall clock
    connection_id: int
    direction: str                  # "request" or "response"
    api_key: int
    api_version: int
    correlation_id: int
    size: int
    frame: bytes
    client: str
    upstream: str
    latency_ns: int | None = None
    fault: FaultDecision | None = None
    show_secrets: bool = False

    @property
    def api_name(self) -> str:
        return api_name(self.api_key)

    @cached_property
    def _decoded(self) -> tuple[Any | None, bool]:
        try:
            if self.direction == "request":
                body = messages.decode_request(self.frame).body
            else:
                body = messages.decode_response(self.frame, self.api_key, self.api_version).body
        except KctlError:
            return None, False
        redacted = (self.api_key == SASL_AUTHENTICATE_KEY and not self.show_secrets
                    and redact_auth_bytes(body))
        return body, bool(redacted)

    @property
    def body(self) -> Any | None:
        """The decoded message (``None`` if it does not decode)."""
        return self._decoded[0]

    @property
    def redacted(self) -> bool:
        """SaslAuthenticate ``auth_bytes`` were taken out of ``body``."""
        return self._decoded[1]


class _Pending:
    """A request waiting for its response."""

    __slots__ = ("api_key", "api_version", "arrived_ns", "fault", "synthetic")

    def __init__(self, api_key: int, api_version: int, arrived_ns: int,
                 fault: RequestDecision | None, synthetic: bool) -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.arrived_ns = arrived_ns                # monotonic
        self.fault = fault                          # the injector's decision on the request
        self.synthetic = synthetic                  # not forwarded: the processor answers it


class _Answer:
    """A response to a request the processor saw, decided and on its way to the client.
    It is counted (response, bytes, errors, throttle, latency sample) only when its last
    byte has been written to the client's socket; one that never gets there is a
    ``dropped`` or ``undelivered`` fault instead."""

    __slots__ = ("api", "size", "arrived_ns", "throttle_ms", "errors", "event")

    def __init__(self, api: str, size: int, arrived_ns: int, throttle_ms: int, errors: list[str],
                 event: FrameEvent | None) -> None:
        self.api = api
        self.size = size                # as the client receives it, with its size prefix
        self.arrived_ns = arrived_ns    # monotonic: the request's last byte read
        self.throttle_ms = throttle_ms
        self.errors = errors
        self.event = event              # for ``on_frame``, emitted when delivered (or dropped)


_NO_ANSWERS: Final[tuple[_Answer, ...]] = ()


class _Release:
    """One write to the client, released at ``at_ns``: a whole chunk, some frames, or a
    segment of one (tiny segments); a capture segment of the client leg, written to
    the capture when the socket has taken all of it."""

    __slots__ = ("at_ns", "data", "sums", "answers", "drop")

    def __init__(self, at_ns: int, data: bytes | memoryview, sums: tuple[int, ...] | None = None,
                 answers: tuple[_Answer, ...] = _NO_ANSWERS, drop: bool = False) -> None:
        self.at_ns = at_ns
        self.data = data
        self.sums = sums            # its segments' payload sums when already known
        self.answers = answers      # responses whose last byte this write carries
        self.drop = drop            # a drop fault: close the connection after it


# What ``_on_response`` decides: (bytes to send instead or None, release time, the fault
# decision when one acts, the answer to count on delivery).
_Decided = tuple[bytes | None, int, FaultDecision | None, _Answer | None]


class _Frames:
    """Frame boundaries in a stream fed in chunks: whole frames as (start, end) spans of a
    buffer, where ``start`` is the size prefix. Bytes of a frame not yet whole are kept;
    a chunk that ends on a frame boundary is used as it is (no copy)."""

    __slots__ = ("carry", "max_frame_bytes")

    def __init__(self, max_frame_bytes: int) -> None:
        self.carry: bytearray | None = None
        self.max_frame_bytes = max_frame_bytes

    @property
    def at_boundary(self) -> bool:
        return not self.carry

    def feed(self, chunk: bytes) -> tuple[bytes | bytearray, list[tuple[int, int]], bool]:
        """(buffer, spans of the whole frames in it, whether ``chunk`` held exactly them).
        Raises ``DecodeError`` for a size prefix no frame can have."""
        carry = self.carry
        if carry:
            carry += chunk
            buf: bytes | bytearray = carry
        else:
            buf = chunk
        n = len(buf)
        spans = []
        pos = 0
        limit = self.max_frame_bytes
        unpack = _SIZE.unpack_from
        while n - pos >= 4:
            (size,) = unpack(buf, pos)
            if size < 0 or size > limit:
                raise DecodeError(f"frame size {size} outside 0..{limit}", offset=pos, field="size")
            end = pos + 4 + size
            if end > n:
                break
            spans.append((pos, end))
            pos = end
        if carry:
            if pos:
                # The old buffer stays with the spans; the rest starts a new one.
                self.carry = bytearray(memoryview(buf)[pos:]) if pos < n else None
            return buf, spans, False
        if pos < n:
            self.carry = bytearray(memoryview(buf)[pos:])
        return buf, spans, pos == n


class _Link:
    """A client connection and the upstream connection the processor made for it."""

    __slots__ = ("id", "handoff", "client", "up", "client_addr", "up_addr", "listener_addr",
                 "up_connected", "up_closed", "closed", "requests", "responses", "in_flight",
                 "out", "out_bytes", "writing", "to_up_bytes", "last_release_ns", "injector",
                 "client_flow", "up_flow", "up_backlog", "client_mask", "up_mask", "client_hs",
                 "up_hs", "observer", "hold_requests", "client_eof")

    def __init__(self, handoff: Handoff, client: Connection, up: Connection,
                 max_frame_bytes: int) -> None:
        self.id = handoff.conn_id
        self.handoff = handoff
        self.client = client
        self.up = up
        self.client_addr = fmt(handoff.client)
        self.up_addr = fmt(handoff.upstream)
        self.listener_addr = fmt(handoff.listener)
        self.up_connected = False
        self.up_closed = False
        self.closed = False
        self.requests = _Frames(max_frame_bytes)
        self.responses = _Frames(max_frame_bytes)
        # correlation id -> request, in the order the client sent them
        self.in_flight: dict[int, _Pending] = {}
        self.out: collections.deque[_Release] = collections.deque()
        self.out_bytes = 0                   # bytes waiting in ``out``
        self.writing: _Release | None = None  # released, in the client connection's queue
        self.to_up_bytes = 0                 # bytes queued on the upstream connection
        self.last_release_ns = 0
        self.injector: FaultInjector | None = None
        self.client_flow: TcpFlow | None = None
        self.up_flow: TcpFlow | None = None
        self.up_backlog: list[tuple[bytes | memoryview, tuple[int, ...] | None]] = []
        self.client_mask = 0
        self.up_mask = 0
        self.client_hs = 0                   # TLS handshake with the client: the event it waits for
        self.up_hs = 0
        self.observer = HandshakeObserver()
        self.hold_requests = False
        self.client_eof = False              # the client closed: close once its bytes are upstream


def _errors_in(api_key: int, body: Any) -> list[str]:
    """Names of every non-zero ``error_code`` (``partition_error_code``) in a decoded response."""
    found: list[str] = []
    if api_key == PRODUCE:
        for t in body.responses:
            for p in t.partition_responses:
                if p.error_code:
                    found.append(error_for(p.error_code).name)
        return found
    stack = [body]
    while stack:
        m = stack.pop()
        for f in m._fields:
            v = getattr(m, f)
            if f == "error_code" or f == "partition_error_code":   # AddPartitionsToTxn's
                if v:
                    found.append(error_for(v).name)
            elif type(v) is list:
                if v and isinstance(v[0], messages.Message):
                    stack.extend(v)
            elif isinstance(v, messages.Message):
                stack.append(v)
    return found


def _plausible_request(api_key: int, api_version: int) -> bool:
    api = schema.API_BY_KEY.get(api_key)
    return api is not None and api_version in api.request.valid_versions


@dataclass(slots=True)
class ProcessorHooks:
    """What a processor tells its owner: a connection it owned is closed (``closed``);
    a one-line notice (``notice``: kind, text), e.g. why upstream TLS failed."""

    closed: Callable[[int, str], None] | None = None
    notice: Callable[[str, str], None] | None = None


@dataclass(slots=True)
class ProcessorTls:
    listener: ssl.SSLContext | None = None   # terminate TLS from clients
    upstream: ssl.SSLContext | None = None   # speak TLS to the brokers


class Processor:
    """Owns a selector and the connections handed to it; see the module docstring."""

    def __init__(self, index: int, *, clock: Clock, faults: FaultSwitch, rewriter: ResponseRewriter,
                 stats: ProxyStats, capture: CaptureWriter | None = None,
                 on_frame: Callable[[FrameEvent], object] | None = None,
                 tls: ProcessorTls | None = None, hooks: ProcessorHooks | None = None,
                 show_secrets: bool = False, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.index = index
        self.clock = clock
        self.faults = faults
        self.rewriter = rewriter
        self.stats = stats
        self.capture = capture
        self.on_frame = on_frame
        self.tls = tls or ProcessorTls()
        self.hooks = hooks or ProcessorHooks()
        self.show_secrets = show_secrets
        self.max_frame_bytes = max_frame_bytes
        self.sel = selectors.DefaultSelector()
        self.links: dict[int, _Link] = {}
        self._timed: set[_Link] = set()     # links with output held for later
        self.frame_errors = 0               # exceptions raised by on_frame (traffic goes on)
        # Held while a turn moves bytes (not while it waits): a thread reading ``stats``
        # under it sees whole turns, e.g. a response counted once the client has it.
        self.turn = threading.RLock()

    # -- ownership ----------------------------------------------------------------------------
    def watch(self, fileobj: Any, on_readable: Callable[[], None]) -> None:
        """Calls ``on_readable`` when ``fileobj`` is readable (listeners, control pipes)."""
        self.sel.register(fileobj, _R, on_readable)

    def unwatch(self, fileobj: Any) -> None:
        try:
            self.sel.unregister(fileobj)
        except (KeyError, ValueError):
            pass

    def adopt(self, sock: Any, handoff: Handoff) -> None:
        """Takes over an accepted client socket and connects upstream for it."""
        stats = self.stats
        client = Connection.accepted(sock, fmt(handoff.client), max_frame_bytes=self.max_frame_bytes)
        if self.tls.listener is not None:
            try:
                client.start_tls(self.tls.listener, server_side=True)
            except (OSError, ValueError):
                reset(client.sock)
                stats.on_fault("client_tls_failed")
                self._gone(handoff.conn_id, "TLS with the client failed")
                return
        host, port = handoff.upstream
        try:
            up = Connection.open(host, port, fmt(handoff.upstream), max_frame_bytes=self.max_frame_bytes)
        except OSError as e:
            reset(client.sock)
            stats.on_fault("upstream_unreachable")
            self._gone(handoff.conn_id, f"cannot connect to {fmt(handoff.upstream)}: {e.strerror or e}")
            return
        link = _Link(handoff, client, up, self.max_frame_bytes)
        if self.tls.listener is not None:
            link.client_hs = _R                       # the ClientHello comes first
        self.links[link.id] = link
        if self.capture is not None:
            link.client_flow = self.capture.open_flow(handoff.client, handoff.listener,
                                                      self.clock.wall_ns(), Leg.CLIENT)
        stats.on_connection_open(link.id, link.client_addr, link.up_addr, link.listener_addr)
        link.client_mask = _R
        self.sel.register(client.sock, _R, (link, True))
        link.up_mask = _W
        self.sel.register(up.sock, _W, (link, False))

    def _gone(self, conn_id: int, reason: str) -> None:
        if self.hooks.closed is not None:
            self.hooks.closed(conn_id, reason)

    def close(self) -> None:
        for link in list(self.links.values()):
            self._close(link, reason="proxy stopped")
        self.sel.close()

    # -- the loop -----------------------------------------------------------------------------
    def next_wake_ns(self, now_ns: int) -> int | None:
        """When held output is next due (monotonic), if any."""
        best = None
        for link in self._timed:
            if link.out:
                at = link.out[0].at_ns
                if best is None or at < best:
                    best = at
        return best

    def run_once(self, max_wait_ns: int) -> None:
        now = self.clock.now_ns()
        wait = max_wait_ns
        due = self.next_wake_ns(now)
        if due is not None:
            wait = min(wait, max(0, due - now))
        events = self.sel.select(wait / 1e9)
        with self.turn:
            self._handle(events)

    def _handle(self, events: list[tuple[selectors.SelectorKey, int]]) -> None:
        for key, mask in events:
            data = key.data
            if type(data) is not tuple:
                data()
                continue
            link, client_side = data
            if link.closed:
                continue
            if client_side:
                if link.client_hs:
                    self._client_handshake(link)
                elif mask & _R:
                    self._client_readable(link)
                if mask & _W and not link.closed:
                    self._flush_client(link, self.clock.now_ns())
            else:
                if link.up_hs:
                    self._up_handshake(link)
                    mask &= ~_R           # read at the next event if still readable
                elif mask & _W:
                    self._up_writable(link)
                if mask & _R and not link.closed:
                    self._up_readable(link)
            if not link.closed:
                self._update(link)
        if self._timed:
            now = self.clock.now_ns()
            for link in list(self._timed):
                if not link.closed and link.out and link.out[0].at_ns <= now:
                    self._flush_client(link, now)
                    if not link.closed:
                        self._update(link)

    # -- interest -----------------------------------------------------------------------------
    def _update(self, link: _Link) -> None:
        """Sets each socket's selector interest from the link's buffers."""
        now = self.clock.now_ns()
        cmask = _R if link.to_up_bytes < HIGH_WATER and not link.client_eof else 0
        if link.client.out:
            cmask |= _W
            self._timed.discard(link)
        elif link.out:
            if link.out[0].at_ns <= now:
                cmask |= _W
                self._timed.discard(link)
            else:
                self._timed.add(link)
        else:
            self._timed.discard(link)
            if link.up_closed:
                self._close(link, reason="upstream closed", client_first=False)
                return
        if link.client_hs:
            cmask = link.client_hs
        if cmask != link.client_mask:
            self._set_mask(link.client.sock, link.client_mask, cmask, (link, True))
            link.client_mask = cmask
        if link.up_closed:
            return
        if link.up_hs:
            umask = link.up_hs
        else:
            umask = _R if link.up_connected and link.out_bytes < HIGH_WATER else 0
            if link.to_up_bytes or not link.up_connected:
                umask |= _W
        if umask != link.up_mask:
            self._set_mask(link.up.sock, link.up_mask, umask, (link, False))
            link.up_mask = umask

    def _set_mask(self, sock: Any, old: int, new: int, data: Any) -> None:
        if not new:
            self.sel.unregister(sock)
        elif not old:
            self.sel.register(sock, new, data)
        else:
            self.sel.modify(sock, new, data)

    # -- closing ------------------------------------------------------------------------------
    def _close(self, link: _Link, *, reason: str, reset_peer: bool = False,
               client_first: bool = True) -> None:
        if link.closed:
            return
        link.closed = True
        self._timed.discard(link)
        self.links.pop(link.id, None)
        # Responses read from the broker that the client will never have (behind a drop,
        # the client gone, the proxy stopping): named, never counted as responses.
        undelivered = sum(len(r.answers) for r in link.out)
        if link.writing is not None:
            undelivered += len(link.writing.answers)
        if undelivered:
            self.stats.on_fault("undelivered", undelivered)
        wall = self.clock.wall_ns()
        for conn in (link.client, link.up):
            try:
                self.sel.unregister(conn.sock)
            except (KeyError, ValueError, OSError):
                pass
            conn.close(reset_peer=reset_peer)
        # The client leg: the proxy is the server; the upstream leg: the proxy is the client.
        if link.client_flow is not None:
            link.client_flow.close(wall, from_client=client_first, reset=reset_peer)
        if link.up_flow is not None:
            link.up_flow.close(wall, from_client=client_first or reset_peer, reset=reset_peer)
        self.stats.on_connection_close(link.id)
        self._gone(link.id, reason)

    # -- TLS ----------------------------------------------------------------------------------
    def _client_handshake(self, link: _Link) -> None:
        """One step of the TLS handshake with a client (the proxy is the server)."""
        try:
            link.client_hs = link.client.handshake_step()
        except (OSError, ValueError) as e:
            self.stats.on_fault("client_tls_failed")
            self._close(link, reason=f"TLS handshake with the client failed: {e}", reset_peer=True)
            return
        if not link.client_hs:
            # The first request may have come with the handshake's last flight.
            self._client_readable(link)

    def _up_handshake(self, link: _Link) -> None:
        """One step of the TLS handshake with the broker (the proxy is the client)."""
        try:
            link.up_hs = link.up.handshake_step()
        except (OSError, ValueError) as e:
            # The client sees its connection reset; the reason goes to the owner, in the
            # engine's words (naming the setting that fixes it).
            self.stats.on_fault("upstream_tls_failed")
            text = str(tls_failure(link.up_addr, e))
            if self.hooks.notice is not None:
                self.hooks.notice("upstream_tls", text)
            self._close(link, reason=text, reset_peer=True)

    # -- requests: client to upstream ---------------------------------------------------------
    def _client_readable(self, link: _Link) -> None:
        try:
            data = link.client.read_chunk()
        except OSError:
            self._close(link, reason="client connection error", reset_peer=True)
            return
        if data is None:
            return
        if not data:
            if link.to_up_bytes and link.up_connected and not link.up_hs:
                link.client_eof = True      # what it sent last still goes upstream first
                return
            self._close(link, reason="client closed")
            return
        now = self.clock.now_ns()
        wall = self.clock.wall_ns()
        frames = link.requests
        if frames.at_boundary:
            link.hold_requests = self.faults.rewrites_requests
        try:
            buf, spans, _ = frames.feed(data)
        except DecodeError:
            self.stats.on_decode_error()
            self._close(link, reason="client broke framing", reset_peer=True)
            return
        hold = link.hold_requests
        if not hold:
            # Forward first: bookkeeping and the capture come after the bytes are on their way.
            link.up.queue(data)
            link.to_up_bytes += len(data)
            self._write_up(link)
            if link.closed:
                return
        if link.client_flow is not None:
            sums = link.client_flow.data(wall, True, data)
            if not hold:
                self._capture_up(link, data, sums, wall)
        if spans:
            view = memoryview(buf)
            for start, end in spans:
                self._on_request(link, view[start + 4:end], now, wall, hold)
                if link.closed:
                    return
            if hold:
                self._write_up(link)

    def _forward_frame(self, link: _Link, payload: bytes | memoryview, wall: int) -> None:
        """Hold mode: one whole request (maybe rewritten) goes upstream."""
        data = _SIZE.pack(len(payload)) + bytes(payload)
        link.up.queue(data)
        link.to_up_bytes += len(data)
        if self.capture is not None:
            self._capture_up(link, data, None, wall)

    def _capture_up(self, link: _Link, data: bytes | memoryview, sums: tuple[int, ...] | None,
                    wall: int) -> None:
        if link.up_flow is not None:
            link.up_flow.data(wall, True, data, sums)
        else:
            link.up_backlog.append((data, sums))        # written once the upstream flow opens

    def _write_up(self, link: _Link) -> None:
        """Writes what is queued upstream, as far as the socket takes it now."""
        if not link.to_up_bytes or not link.up_connected or link.up_hs:
            return
        try:
            n = link.up.write()
        except OSError:
            self._close(link, reason="upstream connection error", reset_peer=True, client_first=False)
            return
        link.to_up_bytes -= n
        if link.client_eof and not link.to_up_bytes:
            self._close(link, reason="client closed")

    def _on_request(self, link: _Link, payload: memoryview, now: int, wall: int, hold: bool) -> None:
        stats = self.stats
        size = 4 + len(payload)
        observer = link.observer
        head = request_head(payload)
        if observer.raw_sasl:
            if head is None or not _plausible_request(head.api_key, head.api_version):
                # A raw SASL token (after SaslHandshake v0): no header, answered in turn.
                if hold:
                    self._forward_frame(link, payload, wall)
                stats.on_request(link.id, "SaslToken", size, False)
                return
            observer.on_raw_token_end()
        if head is None:
            stats.on_decode_error()
            if hold:
                self._forward_frame(link, payload, wall)
            return
        api_key, api_version, corr = head.api_key, head.api_version, head.correlation_id
        before = observer.state
        observer.on_request(api_key, api_version)
        if observer.state is not before:
            stats.on_connection_state(link.id, observer.state.value)
        expects_response = True
        summary = None
        if api_key == PRODUCE:
            summary = produce_summary(payload, api_version)
            acks = summary.acks if summary is not None else produce_acks(payload, api_version)
            if acks is None:
                stats.on_decode_error()
            # acks=0: a Kafka broker sends nothing back (some brokers answer anyway;
            # such an answer is forwarded as an unknown correlation id).
            expects_response = acks != 0
        fault = NO_REQUEST_FAULT
        forward: memoryview | bytes | None = payload
        if hold:
            injector = link.injector = self.faults.injector(link.id, link.injector)
            if injector.needs_request_body(api_key):
                request = self._decoded_request(payload)
                if request is not None:
                    fault = injector.on_request(api_key, request.body)
                    if fault.lost is not None:
                        forward = encode_request_frame(request) if fault.forward else None
                        # A rejected batch (lose_error) is answered with an error, not lost.
                        kind = "rejected" if fault.lost.error_code else "lost"
                        stats.on_fault(kind)
                        stats.on_fault(f"{kind}_records", fault.lost.offset_count)
            if forward is not None:
                self._forward_frame(link, forward, wall)
        elif api_key == FIND_COORDINATOR:
            # Already forwarded as it came: read only (the key_type an error rewrite selects).
            injector = link.injector = self.faults.injector(link.id, link.injector)
            if injector.needs_request_body(api_key):
                request = self._decoded_request(payload)
                if request is not None:
                    fault = injector.on_request(api_key, request.body)
        if expects_response:
            link.in_flight[corr] = _Pending(api_key, api_version, now,
                                            None if fault is NO_REQUEST_FAULT else fault,
                                            synthetic=forward is None)
        stats.on_request(link.id, api_name(api_key), size, expects_response, summary)
        if self.on_frame is not None:
            self._emit(FrameEvent(wall, link.id, "request", api_key, api_version, corr, size,
                                  bytes(payload), link.client_addr, link.up_addr,
                                  show_secrets=self.show_secrets))
        if forward is None:
            self._answer_unforwarded(link, now, wall)

    def _decoded_request(self, payload: memoryview) -> messages.Request | None:
        try:
            return messages.decode_request(bytes(payload))
        except KctlError:
            self.stats.on_decode_error()
            return None

    # -- upstream -----------------------------------------------------------------------------
    def _up_writable(self, link: _Link) -> None:
        up = link.up
        if not link.up_connected:
            err = up.connect_error()
            if err:
                self.stats.on_fault("upstream_unreachable")
                self._close(link, reason=f"cannot connect to {link.up_addr}", reset_peer=True)
                return
            link.up_connected = True
            if self.capture is not None:
                local = up.sock.getsockname()[:2]
                peer = up.sock.getpeername()[:2]
                wall = self.clock.wall_ns()
                link.up_flow = flow = self.capture.open_flow(local, peer, wall, Leg.UPSTREAM)
                for data, sums in link.up_backlog:
                    flow.data(wall, True, data, sums)
                link.up_backlog.clear()
            if self.tls.upstream is not None:
                # The socket object changes: the selector must forget the plain one first.
                self.sel.unregister(up.sock)
                link.up_mask = 0
                try:
                    up.start_tls(self.tls.upstream)
                except (OSError, ValueError) as e:
                    self.stats.on_fault("upstream_tls_failed")
                    self._close(link, reason=f"TLS with {link.up_addr} failed: {e}", reset_peer=True)
                    return
                link.up_hs = _W
                self._up_handshake(link)
                return
        self._write_up(link)

    def _up_readable(self, link: _Link) -> None:
        try:
            data = link.up.read_chunk()
        except OSError:
            data = b""
        if data is None:
            return
        if not data:
            link.up_closed = True
            try:
                self.sel.unregister(link.up.sock)
            except (KeyError, ValueError):
                pass
            link.up_mask = 0
            return
        now = self.clock.now_ns()
        wall = self.clock.wall_ns()
        sums = None
        if link.up_flow is not None:
            sums = link.up_flow.data(wall, False, data)
        try:
            buf, spans, whole = link.responses.feed(data)
        except DecodeError:
            self.stats.on_decode_error()
            self._close(link, reason="upstream broke framing", reset_peer=True, client_first=False)
            return
        if not spans:
            return
        view = memoryview(buf)
        # A chunk of whole frames that all pass unchanged, undelayed, goes on as it is.
        plain = whole
        answers: list[tuple[bytes | memoryview, _Decided | None]] = []
        for start, end in spans:
            v = self._on_response(link, view[start + 4:end], now, wall)
            if v is None or v[0] is not None or v[1] != now or v[2] is not None:
                plain = False
            answers.append((view[start:end], v))
            if link.closed:
                return
            # Requests the proxy answers itself that were waiting for this one come next.
            synthetic = self._synthetic_answers(link, now, wall)
            if synthetic:
                plain = False
                answers += synthetic
        if plain and not link.out:
            self._queue(link, _Release(now, data, sums,
                                       tuple(v[3] for _, v in answers if v is not None and v[3] is not None)))
        else:
            for frame, v in answers:
                if v is None:
                    continue
                out, release, decision, answer = v
                self._queue_response(link, frame if out is None else _SIZE.pack(len(out)) + out,
                                     release, decision, answer)
        if not link.client_hs and not link.closed:
            self._flush_client(link, now)

    def _answer_unforwarded(self, link: _Link, now: int, wall: int) -> None:
        for frame, v in self._synthetic_answers(link, now, wall):
            if v is not None:
                out, release, decision, answer = v
                self._queue_response(link, frame if out is None else _SIZE.pack(len(out)) + out,
                                     release, decision, answer)

    def _synthetic_answers(self, link: _Link, now: int, wall: int
                           ) -> list[tuple[bytes | memoryview, _Decided | None]]:
        """Answers for the requests at the head of the line that were never forwarded (a
        lost batch was all they carried): an empty Produce response goes through the
        usual response path, where the injector adds the forged entry."""
        answers = []
        in_flight = link.in_flight
        while in_flight and not link.closed:
            corr, pending = next(iter(in_flight.items()))
            if not pending.synthetic:
                break
            empty = empty_produce_response(pending.api_version, corr)
            answers.append((_SIZE.pack(len(empty)) + empty,
                            self._on_response(link, memoryview(empty), now, wall)))
        return answers

    def _on_response(self, link: _Link, payload: memoryview, now: int, wall: int) -> _Decided | None:
        """Decides one response: (the bytes to send instead, or None for the frame as it
        is; its release time; the fault decision if any fault acts; the ``_Answer`` to
        count when it is delivered, None for a response to no request seen) or None when
        it is never delivered (blackhole)."""
        corr = _SIZE.unpack_from(payload, 0)[0] if len(payload) >= 4 else None
        entry = link.in_flight.pop(corr, None) if corr is not None else None
        if entry is None:
            # Not a request we saw (or one we did not expect an answer to): pass it on.
            return None, max(now, link.last_release_ns), None, None
        api_key, api_version = entry.api_key, entry.api_version
        injector = link.injector = self.faults.injector(link.id, link.injector)
        frame = bytes(payload)
        quick = None
        if api_key == PRODUCE and entry.fault is None and not injector.needs_body(api_key):
            # Nothing to rewrite unless it has a tagged field (leader hints), and no fault
            # edits it: its error codes and throttle are read in place (peek.py).
            quick = produce_answer(frame, api_version)
        if quick is not None:
            codes, throttle_ms = quick
            errors = [error_for(c).name for c in codes]
            out = None
            decision = injector.on_response(api_key, 4 + len(frame), None)
        else:
            out, errors, throttle_ms, decision = self._decode_response(link, entry, injector, frame, corr)
        self._count_faults(decision)
        sent = out if out is not None else frame
        event = None
        if self.on_frame is not None:
            # Its latency is filled in when the client has it (``_delivered``).
            event = FrameEvent(wall, link.id, "response", api_key, api_version, corr,
                               4 + len(sent), sent, link.client_addr, link.up_addr,
                               None, decision, self.show_secrets)
        if decision.swallow:
            if event is not None:
                self._emit(event)
            return None
        release = max(now + decision.delay_ns, link.last_release_ns)
        link.last_release_ns = release
        answer = _Answer(api_name(api_key), 4 + len(sent), entry.arrived_ns, throttle_ms, errors, event)
        plain = not (decision.delay_ns or decision.drop_at is not None or decision.segment_bytes)
        return out, release, (None if plain else decision), answer

    def _decode_response(self, link: _Link, entry: _Pending, injector: FaultInjector, frame: bytes,
                         corr: int) -> tuple[bytes | None, list[str], int, FaultDecision]:
        """A response decoded, rewritten and given to the injector: (the bytes to send
        instead or None, its error names, its throttle time, the injector's decision)."""
        stats = self.stats
        api_key, api_version = entry.api_key, entry.api_version
        out: bytes | None = None
        try:
            resp = messages.decode_response(frame, api_key, api_version)
        except KctlError:
            stats.on_decode_error()
            return None, [], 0, injector.on_response(api_key, 4 + len(frame), None)
        body = resp.body
        changed = self.rewriter.rewrite(api_key, body)
        decision = injector.on_response(api_key, 4 + len(frame), body, entry.fault)
        if decision.throttle_ms or decision.errors_injected or decision.forged:
            changed = True
        if changed:
            try:
                out = messages.encode_response(api_key, api_version, corr, body)
            except KctlError:
                stats.on_decode_error()
        if api_key == _SASL_HANDSHAKE or api_key == SASL_AUTHENTICATE_KEY:
            before = link.observer.state
            link.observer.on_response(api_key, api_version, not getattr(body, "error_code", 0))
            if link.observer.state is not before:
                stats.on_connection_state(link.id, link.observer.state.value)
        return out, _errors_in(api_key, body), getattr(body, "throttle_time_ms", 0) or 0, decision

    def _count_faults(self, d: FaultDecision) -> None:
        stats = self.stats
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

    def _queue_response(self, link: _Link, data: bytes | memoryview, release_ns: int,
                        d: FaultDecision | None, answer: _Answer | None) -> None:
        answers = _NO_ANSWERS if answer is None else (answer,)
        if d is None:
            self._queue(link, _Release(release_ns, data, None, answers))
            return
        if d.drop_at is not None:
            data = data[:d.drop_at]
        chunks = segments(data, d.segment_bytes)
        last = len(chunks) - 1
        for i, c in enumerate(chunks):
            # A dropped response's answer rides with its last (cut) write, to be named
            # as dropped there, never counted as a response.
            self._queue(link, _Release(release_ns, c, None, answers if i == last else _NO_ANSWERS,
                                       drop=i == last and d.drop_at is not None))

    def _queue(self, link: _Link, item: _Release) -> None:
        link.out.append(item)
        link.out_bytes += len(item.data)

    # -- writing to the client ----------------------------------------------------------------
    def _flush_client(self, link: _Link, now: int) -> None:
        """Writes released output; one release at a time reaches the socket, so tiny
        segments stay separate writes and nothing follows a dropped response."""
        client = link.client
        out = link.out
        while True:
            if client.out:
                try:
                    client.write()
                except OSError:
                    self._close(link, reason="client connection error", reset_peer=True)
                    return
                if client.out:
                    return                      # the socket is full: wait for writability
            done = link.writing
            if done is not None:
                # The socket has taken its last byte: what a client-side capture sees.
                link.writing = None
                if done.answers or link.client_flow is not None:
                    now = self.clock.now_ns()
                    wall = self.clock.wall_ns()
                    if link.client_flow is not None:
                        link.client_flow.data(wall, False, done.data, done.sums)
                if done.drop:
                    # A drop fault: part of the response went out; now the connection dies.
                    self.stats.on_fault("dropped")
                    for a in done.answers:
                        if a.event is not None:
                            self._emit(dataclasses.replace(a.event, ts_ns=wall))
                    self._close(link, reason="drop fault", reset_peer=True, client_first=False)
                    return
                if done.answers:
                    self._delivered(link, done.answers, now, wall)
            if not out or out[0].at_ns > now:
                return
            item = out.popleft()
            link.out_bytes -= len(item.data)
            link.writing = item
            client.queue(item.data)

    def _delivered(self, link: _Link, answers: tuple[_Answer, ...], now: int, wall: int) -> None:
        """Responses whose last byte the client socket took at ``now``: counted, and their
        latency sampled (request's last byte read -> response's last byte written)."""
        on_response = self.stats.on_response
        for a in answers:
            latency = now - a.arrived_ns
            on_response(link.id, a.api, a.size, latency, a.throttle_ms, a.errors)
            if a.event is not None:
                self._emit(dataclasses.replace(a.event, ts_ns=wall, latency_ns=latency))

    # -- observers ----------------------------------------------------------------------------
    def _emit(self, event: FrameEvent) -> None:
        assert self.on_frame is not None
        try:
            self.on_frame(event)
        except Exception:
            # A broken observer must not break the traffic it observes.
            self.frame_errors += 1
