"""The non-blocking network client of the producer engine (the Java client's
``NetworkClient`` with its ``Selector``).

How this works:
- One non-blocking TCP socket per node id, all in one ``selectors`` selector.
  Node ids come from metadata (``set_nodes``); bootstrap addresses get negative
  pseudo ids (-1, -2, ...) until then. ``ready(node, now_ns)`` starts a connect
  when the node is disconnected and its reconnect backoff has passed
  (``ClusterConnectionStates``) and says whether a request may be sent now.
- Each connection's socket, TLS and framing are a ``Connection`` (engine/connection.py).
  With TLS (``security.protocol`` SSL / SASL_SSL) the handshake is stepped from
  ``poll``, still CONNECTING (the setup timeout covers it). A failed handshake is an
  ``AuthenticationError`` naming the broker and the reason (``engine/tls.py``).
- A new connection then runs its ``ClientHandshake`` (engine/handshake.py, sans-IO):
  ApiVersions (kctl's highest version; again at the broker's highest on
  UNSUPPORTED_VERSION, KIP-511), then with SASL SaslHandshake and SaslAuthenticate
  (AUTHENTICATING). It is READY only once the handshake is; the negotiated versions
  are kept per node (``api_version``). No other request is sent before READY. A
  refusal closes it with an ``AuthenticationError`` kept in ``authentication_error(node)``.
  This client only carries the handshake's requests (internal ones, never handed back).
- Re-authentication (KIP-368): when the broker's SaslAuthenticate answer sets a
  session lifetime, the node is READY until a time drawn between 85 % and 95 % of
  it (``sasl.reauthentication_time_ns``, from the client's random source); from
  then on no new request is sent to it, and ``poll`` logs in again on the same
  connection (SaslHandshake, SaslAuthenticate) as soon as no request is partly
  written, as Java's ``KafkaChannel.maybeBeginClientReauthentication``. Requests
  already in flight are answered before the broker reads the SaslHandshake (a
  broker answers a connection's requests in order). ``metrics.reauthentications_total``
  counts them; a refusal closes the connection as a first login's does.
- ``send(request, now_ns)`` assigns the correlation id, frames the request (a
  message object is encoded by the generic codec; pre-encoded body bytes get a
  cached header with the correlation id spliced in) and writes what the socket
  takes at once. The rest stays in the connection's send buffer (a list of
  memoryviews, written with ``sendmsg`` so a 1 MiB body is never copied) and
  the socket is watched for writability only while bytes are pending. A request
  is "sent" (``sent_ns``) when its last byte is written; one that expects no
  response (acks=0 Produce) completes then, as in Java.
- At most one request per connection is partly written, and at most
  ``max.in.flight.requests.per.connection`` are unanswered (``InFlightRequests``).
- ``poll(timeout_ns, now_ns)`` waits on the selector up to the timeout (or the
  next request/connect deadline, or a ``wakeup()``), writes, reads everything
  available into each connection's ``FrameDecoder`` and turns whole frames into
  ``ClientResponse`` objects. A response must carry the correlation id of the
  oldest in-flight request of its connection; anything else breaks the
  connection. After I/O it expires requests older than ``request.timeout.ms``
  and connects older than the connection setup timeout by closing their
  connection.
- A broken or closed connection hands back every in-flight request as a
  ``ClientResponse`` with ``disconnected=True`` (and ``timed_out=True`` when a
  timeout closed it); the caller (the sender) retries or fails them, as Java's
  Sender does. Its next connect waits for the reconnect backoff.
- Completion callbacks run only inside ``poll`` (results produced by ``send``,
  such as a version mismatch, wait in a queue for the next poll).
- Time is passed in; ``poll`` reads the injected clock once after waiting.

Not thread-safe, except ``wakeup()``, which any thread may call.
"""

from __future__ import annotations

import logging
import os
import random as _random
import select
import selectors
import socket
import ssl
import struct
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kctl.config import BrokerAddress, NetworkConfig
from kctl.engine.backoff import Random
from kctl.engine.blocking_client import parse_address
from kctl.engine.clock import Clock, SystemClock
from kctl.engine.connection import RECV_CHUNK, Connection
from kctl.engine.connection_states import NEVER_NS, ClusterConnectionStates, ConnectionState
from kctl.engine.handshake import ClientHandshake
from kctl.engine.inflight import CorrelationIdMismatchError, InFlightRequests
from kctl.engine.sasl import reauthentication_time_ns
from kctl.engine.tls import context_for, tls_failure
from kctl.errors import (
    AuthenticationError, BrokerUnavailableError, ConfigError, DecodeError, KctlError,
    RemoteProtocolError, UnsupportedVersionError)
from kctl.protocol import messages, schema
from kctl.protocol.frames import DEFAULT_MAX_FRAME_BYTES

__all__ = ["ClientRequest", "ClientResponse", "NetworkClient", "NetworkMetrics",
           "NodeNotReadyError", "RequestTimeoutError"]

log = logging.getLogger(__name__)

_SIZE: Final = struct.Struct(">i")
_NS_PER_MS: Final = 1_000_000
_MAX_SELECT_S: Final = 3600.0
_MAX_UNANSWERED: Final = 4096


class NodeNotReadyError(KctlError):
    """``send`` was called for a node that ``ready``/``is_ready`` did not report ready (a caller bug)."""


class RequestTimeoutError(BrokerUnavailableError):
    """A request went unanswered for ``request.timeout.ms``, or a connect for the setup timeout."""


@dataclass(slots=True, eq=False)
class ClientRequest:
    """A request for one node. The caller fills the first block; the client the second.

    ``body`` is the request message object, or its body already encoded at
    ``api_version`` (bytes, bytearray or memoryview; not copied, so leave it
    unchanged until the request is sent). ``api_version=None`` means the version
    negotiated with the node (message bodies only).
    """

    node: int
    api_key: int
    body: Any
    api_version: int | None = None
    expects_response: bool = True
    callback: Callable[[ClientResponse], None] | None = None
    user: Any = None
    created_ns: int = -1                  # when the caller built it; default: when sent
    request_timeout_ms: int | None = None  # default: request.timeout.ms
    # -- set by the client --
    correlation_id: int = -1
    enqueued_ns: int = -1   # when send() took it; request.timeout.ms counts from here (as Java)
    sent_ns: int = -1       # when its last byte was written to the socket
    timeout_ns: int = 0
    throttle_ns: int = 0    # KIP-219 throttle time added to the timeout
    size_bytes: int = 0     # on the wire, with the size prefix
    internal: bool = field(default=False, repr=False)  # the connection's own handshake


@dataclass(frozen=True, slots=True)
class ClientResponse:
    """The outcome of one request.

    - answered: ``body`` is the decoded response message;
    - ``expects_response=False``: ``body`` is ``None``, completed when written;
    - ``disconnected``: the connection broke (or was closed) before an answer;
      ``timed_out`` too when a request or connect timeout closed it;
    - ``error``: why, when anything went wrong: ``BrokerUnavailableError`` /
      ``RequestTimeoutError`` with a disconnect, ``CorrelationIdMismatchError``
      (the broker broke the protocol), ``UnsupportedVersionError`` (never sent:
      no common version), ``DecodeError`` (answered, but the body did not decode;
      the connection stays up because framing is intact).
    """

    request: ClientRequest
    body: Any
    received_ns: int
    disconnected: bool = False
    timed_out: bool = False
    error: KctlError | None = None

    @property
    def node(self) -> int:
        return self.request.node

    @property
    def version_mismatch(self) -> bool:
        return isinstance(self.error, UnsupportedVersionError)

    @property
    def latency_ns(self) -> int:
        """From the request's creation to this outcome."""
        return self.received_ns - self.request.created_ns


@dataclass(slots=True)
class NetworkMetrics:
    connection_creation_total: int = 0
    connection_close_total: int = 0
    connection_failures_total: int = 0   # connects that never got READY
    request_total: int = 0               # requests handed to the socket (incl. ApiVersions)
    response_total: int = 0
    request_timeouts_total: int = 0
    outgoing_bytes_total: int = 0
    incoming_bytes_total: int = 0
    unexpected_responses_total: int = 0  # answers to acks=0 requests (Tansu sends them)
    reauthentications_total: int = 0     # KIP-368 logins again on an open connection


class _Connection:
    """One node's ``Connection`` and this client's bookkeeping around it."""

    __slots__ = ("node", "channel", "out_request", "events", "connected", "last_active_ns",
                 "unanswered", "handshake")

    def __init__(self, node: int, channel: Connection, now_ns: int) -> None:
        self.node = node
        self.channel = channel
        self.out_request: ClientRequest | None = None   # the request whose bytes are queued
        self.events = 0
        self.connected = False
        self.last_active_ns = now_ns
        # Correlation ids of requests sent without expecting a response (acks=0).
        # A real broker never answers them; Tansu does, in order. Such an answer
        # is dropped instead of breaking the connection.
        self.unanswered: deque[int] = deque(maxlen=_MAX_UNANSWERED)
        self.handshake: ClientHandshake | None = None   # kept for re-authentication

    @property
    def address(self) -> str:
        return self.channel.address

    @property
    def closed(self) -> bool:
        return self.channel.closed


class _Selector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    """The default selector with sub-millisecond timeouts.

    epoll counts whole milliseconds and Python rounds a timeout up to the next one,
    so a 0.3 ms wait sleeps 1 ms: a load worker at 1,000 records/s would wake late
    for every other record and send them in pairs. A timeout that is not whole
    milliseconds waits the whole part on the selector and the rest on the selector's
    own descriptor with select(2), whose timeout has microseconds (an epoll
    descriptor is readable while it has events)."""

    def select(self, timeout: float | None = None):  # type: ignore[override]
        fileno = getattr(self, "fileno", None)
        if timeout is None or timeout <= 0 or fileno is None or fileno() >= 1024:
            return super().select(timeout)
        whole = int(timeout * 1000) / 1000
        if whole > 0:
            ready = super().select(whole)
            if ready:
                return ready
        rest = timeout - whole
        if rest > 0:
            select.select([fileno()], [], [], rest)
        return super().select(0)


def _address_of(value: tuple[str, int] | BrokerAddress | str) -> tuple[str, int]:
    if isinstance(value, BrokerAddress):
        return value.host, value.port
    if isinstance(value, str):
        return parse_address(value)
    return value[0], int(value[1])


def _fmt(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class NetworkClient:
    """Non-blocking connections to every broker, with in-flight tracking."""

    def __init__(self, config: NetworkConfig, *, clock: Clock | None = None,
                 random: Random | None = None, client_id: str | None = None,
                 bootstrap: Iterable[tuple[str, int] | BrokerAddress | str] | None = None,
                 on_disconnect: Callable[[int, str], None] | None = None,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.config = config
        self._clock = clock or SystemClock()
        self._random = random or _random.random
        self.client_id = config.client_id if client_id is None else client_id
        self._on_disconnect = on_disconnect
        self._max_frame_bytes = max_frame_bytes
        self._request_timeout_ns = config.request_timeout_ms * _NS_PER_MS
        self._idle_ns = (config.connections_max_idle_ms * _NS_PER_MS
                         if config.connections_max_idle_ms >= 0 else NEVER_NS)

        self._addresses: dict[int, tuple[str, int]] = {}
        boot = list(config.bootstrap_servers if bootstrap is None else bootstrap)
        self._bootstrap_nodes = [-(i + 1) for i in range(len(boot))]
        for node, addr in zip(self._bootstrap_nodes, boot):
            self._addresses[node] = _address_of(addr)
        self._metadata_nodes: list[int] = []

        self._states = ClusterConnectionStates(
            config.reconnect_backoff_ms, config.reconnect_backoff_max_ms,
            config.socket_connection_setup_timeout_ms, config.socket_connection_setup_timeout_max_ms,
            random=self._random)
        self._in_flight: InFlightRequests[ClientRequest] = InFlightRequests(
            config.max_in_flight_requests_per_connection)
        self._conns: dict[int, _Connection] = {}
        self._versions: dict[int, Any] = {}   # node -> NegotiatedVersions
        self._pending: list[ClientResponse] = []  # outcomes produced outside poll
        self._correlation_id = 0
        self._headers: dict[tuple[int, int], bytes] = {}
        self._recv_buf = memoryview(bytearray(RECV_CHUNK))
        self._auth_errors: dict[int, AuthenticationError] = {}
        self._reauth_check_ns = NEVER_NS   # no node needs re-authenticating before this
        self.metrics = NetworkMetrics()

        self._selector = _Selector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._closed = False

    # -- nodes ------------------------------------------------------------------
    def set_nodes(self, nodes: Mapping[int, tuple[str, int] | BrokerAddress | str]) -> None:
        """The brokers from metadata (node id -> address). An address change takes
        effect at the node's next connect; existing connections stay."""
        for node, addr in nodes.items():
            if node < 0:
                raise ValueError(f"node id {node}: negative ids are reserved for bootstrap addresses")
            self._addresses[node] = _address_of(addr)
        self._metadata_nodes = sorted(nodes)

    def add_node(self, node: int, address: tuple[str, int] | BrokerAddress | str) -> None:
        """A node that is not one of metadata's brokers (a group coordinator's own
        connection, as Java's ``Integer.MAX_VALUE - id``): reachable by ``ready``/``send``,
        never chosen by ``least_loaded_node``."""
        if node < 0:
            raise ValueError(f"node id {node}: negative ids are reserved for bootstrap addresses")
        self._addresses[node] = _address_of(address)

    @property
    def bootstrap_nodes(self) -> list[int]:
        return list(self._bootstrap_nodes)

    def nodes(self) -> list[int]:
        """The nodes requests may go to: metadata's brokers, or the bootstrap addresses until then."""
        return list(self._metadata_nodes or self._bootstrap_nodes)

    def address(self, node: int) -> str:
        host, port = self._addresses[node]
        return _fmt(host, port)

    # -- readiness ----------------------------------------------------------------
    def ready(self, node: int, now_ns: int) -> bool:
        """True if a request may be sent to ``node`` now; otherwise starts a connect
        when the node is disconnected and its backoff has passed, and returns False."""
        if self.is_ready(node, now_ns):
            return True
        if self._states.can_connect(node, now_ns):
            self._initiate_connect(node, now_ns)
        return False

    def is_ready(self, node: int, now_ns: int) -> bool:
        """READY, not throttled, and the in-flight limit allows another request."""
        return self._states.is_ready(node, now_ns) and self._in_flight.can_send_more(node)

    def connection_state(self, node: int) -> ConnectionState:
        return self._states.state(node)

    def connection_delay_ns(self, node: int, now_ns: int) -> int:
        """Until a connect may start: the rest of the reconnect backoff when
        disconnected; the setup timeout while connecting; ``NEVER_NS`` when connected."""
        return self._states.connection_delay_ns(node, now_ns)

    def poll_delay_ns(self, node: int, now_ns: int) -> int:
        """The throttle delay of a connected node, else ``connection_delay_ns`` (Java ``pollDelayMs``)."""
        return self._states.poll_delay_ns(node, now_ns)

    def is_blacked_out(self, node: int, now_ns: int) -> bool:
        """Disconnected and still inside its reconnect backoff."""
        return self._states.is_blacked_out(node, now_ns)

    def unready_nodes(self) -> list[int]:
        """Nodes being connected (TCP, TLS, ApiVersions, SASL) or whose last connection
        failed: what a caller waiting on the cluster names when it gives up."""
        return self._states.unready_nodes()

    def connection_error(self, node: int) -> str | None:
        """Why the node's last connection ended (``None`` once it is READY again)."""
        return self._states.last_error(node)

    def authentication_error(self, node: int | None = None) -> AuthenticationError | None:
        """The last TLS or SASL failure of ``node`` (any node when ``None``); cleared
        when the node becomes READY. Retrying cannot fix it: callers should stop."""
        if node is None:
            return next(iter(self._auth_errors.values()), None)
        return self._auth_errors.get(node)

    def api_versions(self, node: int) -> Any:
        """The ``NegotiatedVersions`` of a READY node, else ``None``."""
        return self._versions.get(node)

    def api_version(self, node: int, api_key: int) -> int | None:
        """The version negotiated with ``node`` for ``api_key`` (``None``: not connected or no common version)."""
        v = self._versions.get(node)
        return None if v is None else v.version_for(api_key)

    def throttle(self, node: int, throttle_ms: int, now_ns: int) -> None:
        """KIP-219: hold requests to ``node`` for ``throttle_ms``; in-flight requests'
        timeouts are extended by as much (Java ``maybeThrottle``)."""
        if throttle_ms > 0:
            ns = throttle_ms * _NS_PER_MS
            self._in_flight.add_throttle(node, ns)
            self._states.throttle(node, now_ns + ns)

    def least_loaded_node(self, now_ns: int, *, api_key: int | None = None,
                          any_node_if_none: bool = False) -> int | None:
        """A ready node with the fewest in-flight requests; else a node that is
        connecting; else the one whose last connect attempt is oldest among those
        allowed to connect; ``None`` when every node is in backoff (Java's choice).
        With ``api_key``, a connected node that has no common version of that API is
        passed over (Java's choice does not look, and keeps picking it); with
        ``any_node_if_none`` too, when no node known offers it any node is chosen, one
        whose answer will say the API is missing."""
        if any_node_if_none and api_key is not None:
            node = self.least_loaded_node(now_ns, api_key=api_key)
            return node if node is not None else self.least_loaded_node(now_ns)
        nodes = self.nodes()
        if not nodes:
            return None
        offset = int(self._random() * len(nodes)) % len(nodes)
        best_ready, best_count = None, 1 << 30
        connecting = can_connect = None
        for i in range(len(nodes)):
            node = nodes[(offset + i) % len(nodes)]
            if api_key is not None and node in self._versions and self.api_version(node, api_key) is None:
                continue
            if self.is_ready(node, now_ns):
                n = self._in_flight.count(node)
                if n == 0:
                    return node
                if n < best_count:
                    best_ready, best_count = node, n
            elif self._states.is_preparing_connection(node):
                connecting = node
            elif self._states.can_connect(node, now_ns):
                if (can_connect is None or self._states.last_connect_attempt_ns(can_connect)
                        > self._states.last_connect_attempt_ns(node)):
                    can_connect = node
        if best_ready is not None:
            return best_ready
        return connecting if connecting is not None else can_connect

    def in_flight_request_count(self, node: int | None = None) -> int:
        return self._in_flight.count(node)

    def has_in_flight_requests(self, node: int | None = None) -> bool:
        return self._in_flight.count(node) > 0

    # -- sending --------------------------------------------------------------------
    def send(self, request: ClientRequest, now_ns: int) -> None:
        """Queues ``request`` for its node, which must be ready (``is_ready``).

        Writes as much as the socket takes at once. Raises ``NodeNotReadyError``
        for a node that is not ready, ``EncodeError`` for a body that cannot be
        encoded. With ``api_version=None`` and no common version the request is
        not sent: it comes back from the next poll with an ``UnsupportedVersionError``.
        """
        node = request.node
        if not self.is_ready(node, now_ns):
            raise NodeNotReadyError(
                f"node {node} is not ready for a request ({self._states.state(node).value}, "
                f"{self._in_flight.count(node)} in flight)")
        if request.api_version is None:
            if not isinstance(request.body, messages.Message):
                raise ValueError("pre-encoded request bodies need an explicit api_version")
            try:
                request.api_version = self._versions[node].require(request.api_key)
            except UnsupportedVersionError as e:
                if request.created_ns < 0:
                    request.created_ns = now_ns
                self._pending.append(ClientResponse(request, None, now_ns, error=e))
                return
        self._do_send(self._conns[node], request, now_ns, self._pending)

    def _do_send(self, conn: _Connection, request: ClientRequest, now_ns: int,
                 responses: list[ClientResponse]) -> None:
        cid = self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        body = request.body
        if isinstance(body, messages.Message):
            payload = messages.encode_request(request.api_key, request.api_version, cid,
                                              self.client_id, body)
            head = _SIZE.pack(len(payload))
            size = len(payload) + 4
            out = [memoryview(head), memoryview(payload)]
        else:
            header = self._header(request.api_key, request.api_version)
            size = len(header) + len(body) + 4
            head = b"".join((_SIZE.pack(size - 4), header[:4], _SIZE.pack(cid), header[8:]))
            out = [memoryview(head), memoryview(body).cast("B")]
        request.correlation_id = cid
        request.enqueued_ns = now_ns
        if request.created_ns < 0:
            request.created_ns = now_ns
        request.timeout_ns = (self._request_timeout_ns if request.request_timeout_ms is None
                              else request.request_timeout_ms * _NS_PER_MS)
        request.size_bytes = size
        request.sent_ns = -1
        self._in_flight.add(conn.node, request)
        conn.channel.queue(*out)
        conn.out_request = request
        self.metrics.request_total += 1
        self._write(conn, now_ns, responses)

    def _header(self, api_key: int, api_version: int) -> bytes:
        """The request header for (api_key, version) with correlation id 0 at bytes 4..8,
        encoded once by the generic codec."""
        key = (api_key, api_version)
        h = self._headers.get(key)
        if h is None:
            hv = schema.request_header_version(api_key, api_version)
            hdr = messages.RequestHeader(request_api_key=api_key, request_api_version=api_version,
                                         correlation_id=0)
            if hv >= 1:
                hdr.client_id = self.client_id
            h = self._headers[key] = messages.encode(hdr, hv)
        return h

    # -- polling ----------------------------------------------------------------------
    def poll(self, timeout_ns: int, now_ns: int) -> list[ClientResponse]:
        """Does network I/O for up to ``timeout_ns`` and returns what completed.

        Returns early when anything completes, at the next request or connect
        deadline, or on ``wakeup()``. Runs each response's callback, then returns
        them all (if a callback raises, the others still run and the first error
        is raised after them).
        """
        if self._closed:
            raise KctlError("the network client is closed")
        responses = self._pending
        self._pending = []
        self._reauthenticate(now_ns, responses)
        if responses:
            timeout_ns = 0
        else:
            deadline = self._next_deadline_ns(now_ns)
            if deadline is not None:
                timeout_ns = min(timeout_ns, max(deadline - now_ns, 0))
        timeout_s = min(max(timeout_ns, 0) / 1e9, _MAX_SELECT_S)
        events = self._selector.select(timeout_s)
        now = max(self._clock.now_ns(), now_ns)

        for key, mask in events:
            conn: _Connection | None = key.data
            if conn is None:
                self._drain_wakeup()
                continue
            if conn.closed:
                continue
            if not conn.connected:
                self._finish_connect(conn, now, responses)
                continue
            if conn.channel.handshaking:
                self._handshake(conn, now, responses)
                continue
            if mask & selectors.EVENT_WRITE and conn.channel.out:
                self._write(conn, now, responses)
            if mask & selectors.EVENT_READ and not conn.closed:
                self._read(conn, now, responses)

        self._expire(now, responses)
        self._reauthenticate(now, responses)
        for r in responses:
            if r.request.expects_response and not r.disconnected and r.error is None:
                self.metrics.response_total += 1
        self._run_callbacks(responses)
        return responses

    def wakeup(self) -> None:
        """Makes a blocked or the next ``poll`` return at once. Safe from any thread."""
        try:
            self._wake_w.send(b"\x00")
        except OSError:
            pass  # the pipe is full (a wakeup is already pending) or closed

    def _drain_wakeup(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass

    def _next_deadline_ns(self, now_ns: int) -> int | None:
        best = self._in_flight.next_timeout_ns()
        again = self._reauth_check_ns
        if again != NEVER_NS and again > now_ns and (best is None or again < best):
            best = again    # (one already due waits for its write, which wakes the selector)
        for node in self._states.connecting_nodes():
            s = self._states.get(node)
            t = s.last_connect_attempt_ns + s.connection_setup_timeout_ns + 1
            if best is None or t < best:
                best = t
        return best

    def _run_callbacks(self, responses: list[ClientResponse]) -> None:
        first: BaseException | None = None
        for r in responses:
            cb = r.request.callback
            if cb is not None:
                try:
                    cb(r)
                except Exception as e:  # noqa: BLE001 - re-raised below, after the rest ran
                    if first is None:
                        first = e
        if first is not None:
            raise first

    # -- connecting -----------------------------------------------------------------------
    def _initiate_connect(self, node: int, now_ns: int) -> None:
        try:
            host, port = self._addresses[node]
        except KeyError:
            raise LookupError(f"node {node} has no known address (set_nodes)") from None
        address = _fmt(host, port)
        self._states.connecting(node, now_ns)
        self.metrics.connection_creation_total += 1
        try:
            channel = Connection.open(
                host, port, address, attempt=self._states.get(node).failed_attempts,
                send_buffer_bytes=self.config.send_buffer_bytes,
                receive_buffer_bytes=self.config.receive_buffer_bytes,
                max_frame_bytes=self._max_frame_bytes)
        except socket.gaierror as e:
            self._connect_failed(node, now_ns, f"cannot resolve broker {address}: {e.strerror or e}")
            return
        except OSError as e:
            self._connect_failed(node, now_ns, f"cannot connect to broker {address}: {e.strerror or e}")
            return
        conn = _Connection(node, channel, now_ns)
        self._conns[node] = conn
        # Connect completion shows as writability; _finish_connect checks SO_ERROR.
        conn.events = selectors.EVENT_WRITE
        self._selector.register(channel.sock, conn.events, conn)
        log.debug("connecting to node %s at %s", node, address)

    def _connect_failed(self, node: int, now_ns: int, reason: str) -> None:
        log.info("node %s: %s", node, reason)
        self.metrics.connection_failures_total += 1
        self._states.disconnected(node, now_ns, reason)
        if self._on_disconnect is not None:
            self._on_disconnect(node, reason)

    def _finish_connect(self, conn: _Connection, now_ns: int, responses: list[ClientResponse]) -> None:
        err = conn.channel.connect_error()
        if err:
            self._disconnect(conn, now_ns, responses,
                             f"cannot connect to broker {conn.address}: {_strerror(err)}")
            return
        conn.connected = True
        conn.last_active_ns = now_ns
        security = self.config.security
        if security.uses_tls:
            try:
                context = context_for(security)
            except ConfigError as e:
                self._disconnect(conn, now_ns, responses, str(e), error=AuthenticationError(str(e)))
                return
            channel = conn.channel
            self._selector.unregister(channel.sock)
            channel.start_tls(context)          # a new socket object, the same fd
            conn.events = selectors.EVENT_READ | selectors.EVENT_WRITE
            self._selector.register(channel.sock, conn.events, conn)
            self._handshake(conn, now_ns, responses)
            return
        self._connection_established(conn, now_ns, responses)

    def _handshake(self, conn: _Connection, now_ns: int, responses: list[ClientResponse]) -> None:
        """One step of the TLS handshake; waits for whatever the TLS layer wants."""
        try:
            wanted = conn.channel.handshake_step()
        except (ssl.SSLError, ssl.CertificateError) as e:
            self._auth_failed(conn, now_ns, responses,
                              tls_failure(conn.address, e, security=self.config.security))
            return
        except OSError as e:
            self._disconnect(conn, now_ns, responses,
                             f"connection to broker {conn.address} broke during the TLS handshake: "
                             f"{e.strerror or e}")
            return
        if wanted:
            self._set_events(conn, wanted)
            return
        conn.last_active_ns = now_ns
        log.debug("node %s: TLS established with %s (%s)", conn.node, conn.address,
                  conn.channel.sock.version())
        self._connection_established(conn, now_ns, responses)

    def _auth_failed(self, conn: _Connection, now_ns: int, responses: list[ClientResponse],
                     error: AuthenticationError) -> None:
        self._auth_errors[conn.node] = error
        self._disconnect(conn, now_ns, responses, str(error), error=error)

    def _connection_established(self, conn: _Connection, now_ns: int,
                                responses: list[ClientResponse]) -> None:
        self._set_events(conn, selectors.EVENT_READ)
        self._states.checking_api_versions(conn.node)
        conn.handshake = ClientHandshake(self.config.security, conn.address)
        self._send_handshake(conn, now_ns, responses)

    def _send_handshake(self, conn: _Connection, now_ns: int, responses: list[ClientResponse]) -> None:
        assert conn.handshake is not None
        step = conn.handshake.next_request()
        if step is None:
            return
        req = ClientRequest(node=conn.node, api_key=step.api_key, body=step.body,
                            api_version=step.api_version, internal=True)
        self._do_send(conn, req, now_ns, responses)

    def _on_handshake(self, conn: _Connection, frame: bytes, now_ns: int,
                      responses: list[ClientResponse]) -> None:
        handshake = conn.handshake
        assert handshake is not None
        again = handshake.reauthenticating
        try:
            handshake.on_response(frame)
        except AuthenticationError as e:
            self._auth_failed(conn, now_ns, responses, e)
            return
        except RemoteProtocolError as e:
            self._disconnect(conn, now_ns, responses,
                             str(e) if conn.address in str(e) else f"broker {conn.address}: {e}",
                             error=e)
            return
        if handshake.ready:
            self._versions[conn.node] = handshake.versions
            if again:
                self.metrics.reauthentications_total += 1
            self._connection_ready(conn, now_ns)
            return
        if handshake.authenticating and self._states.state(conn.node) is not ConnectionState.AUTHENTICATING:
            self._states.authenticating(conn.node)
        self._send_handshake(conn, now_ns, responses)

    def _connection_ready(self, conn: _Connection, now_ns: int) -> None:
        handshake = conn.handshake
        assert handshake is not None
        lifetime_ms = handshake.session_lifetime_ms
        again_ns = reauthentication_time_ns(now_ns, lifetime_ms, self._random)
        if again_ns is None:
            conn.handshake = None           # no re-authentication to come
        else:
            self._reauth_check_ns = min(self._reauth_check_ns, again_ns)
        self._states.ready(conn.node, again_ns)
        self._auth_errors.pop(conn.node, None)
        log.debug("node %s at %s is ready%s", conn.node, conn.address,
                  f" (session lifetime {lifetime_ms} ms)" if lifetime_ms else "")

    def _reauthenticate(self, now_ns: int, responses: list[ClientResponse]) -> None:
        """Starts the KIP-368 re-authentication of every READY node whose time has come,
        once nothing is partly written on its connection."""
        if now_ns < self._reauth_check_ns:
            return
        for node in self._states.reauthentication_due(now_ns):
            conn = self._conns.get(node)
            if conn is None or conn.closed or conn.out_request is not None or conn.channel.out:
                continue
            assert conn.handshake is not None
            log.debug("node %s: re-authenticating with %s", node, conn.address)
            self._states.reauthenticating(node)
            conn.handshake.reauthenticate()
            self._send_handshake(conn, now_ns, responses)
        again = self._states.next_reauthentication_ns()
        self._reauth_check_ns = NEVER_NS if again is None else again

    # -- I/O ---------------------------------------------------------------------------------
    def _set_events(self, conn: _Connection, events: int) -> None:
        if events != conn.events:
            conn.events = events
            self._selector.modify(conn.channel.sock, events, conn)

    def _write(self, conn: _Connection, now_ns: int, responses: list[ClientResponse]) -> None:
        channel = conn.channel
        try:
            n = channel.write()
        except ssl.SSLError as e:
            self._auth_failed(conn, now_ns, responses,
                              tls_failure(conn.address, e, security=self.config.security))
            return
        except OSError as e:
            self._disconnect(conn, now_ns, responses,
                             f"connection to broker {conn.address} broke while sending: {e.strerror or e}")
            return
        if n:
            self.metrics.outgoing_bytes_total += n
            conn.last_active_ns = now_ns
        if channel.out:
            self._set_events(conn, selectors.EVENT_READ | selectors.EVENT_WRITE)
            return
        self._set_events(conn, selectors.EVENT_READ)
        req = conn.out_request
        conn.out_request = None
        if req is None:
            return
        req.sent_ns = now_ns
        if not req.expects_response:
            self._in_flight.complete_newest(conn.node)
            conn.unanswered.append(req.correlation_id)
            responses.append(ClientResponse(req, None, now_ns))

    def _read(self, conn: _Connection, now_ns: int, responses: list[ClientResponse]) -> None:
        channel = conn.channel
        result = channel.fill(self._recv_buf)
        if result.nbytes:
            self.metrics.incoming_bytes_total += result.nbytes
            conn.last_active_ns = now_ns
        # Frames that arrived before a close still count.
        decoder = channel.decoder
        try:
            while (frame := decoder.next_frame()) is not None:
                self._on_frame(conn, frame, now_ns, responses)
                if conn.closed:
                    return
        except DecodeError as e:
            self._disconnect(conn, now_ns, responses,
                             f"broker {conn.address} broke the framing: {e}", error=e)
            return
        if result.tls_error is not None:
            self._auth_failed(conn, now_ns, responses,
                              tls_failure(conn.address, result.tls_error, security=self.config.security))
        elif result.tls_closed:
            self._disconnect(conn, now_ns, responses, f"broker {conn.address} closed the TLS connection")
        elif result.error is not None:
            e = result.error
            self._disconnect(conn, now_ns, responses,
                             f"connection to broker {conn.address} broke: {e.strerror or e}")
        elif result.eof:
            self._disconnect(conn, now_ns, responses, f"broker {conn.address} closed the connection")

    def _on_frame(self, conn: _Connection, frame: bytes, now_ns: int,
                  responses: list[ClientResponse]) -> None:
        node = conn.node
        try:
            cid = messages.peek_correlation_id(frame)
            req = self._in_flight.complete_next(node, cid)
        except CorrelationIdMismatchError as e:
            if e.got in conn.unanswered:
                # An answer to an acks=0 request (Tansu): skip it and older ones.
                while conn.unanswered.popleft() != e.got:
                    pass
                self.metrics.unexpected_responses_total += 1
                return
            err = CorrelationIdMismatchError(node, e.got, e.expected,
                                             where=f"broker {conn.address} (node {node})")
            self._disconnect(conn, now_ns, responses, f"{err}; connection closed", error=err)
            return
        except DecodeError as e:
            self._disconnect(conn, now_ns, responses,
                             f"broker {conn.address} sent a frame without a response header: {e}", error=e)
            return
        if req.sent_ns < 0:
            # Answered before it was fully written: impossible for a real broker.
            self._in_flight.add(node, req)  # keep it so the disconnect hands it back
            err = RemoteProtocolError(f"broker {conn.address} answered correlation id {cid} "
                                      "before the request was fully sent")
            self._disconnect(conn, now_ns, responses, str(err), error=err)
            return
        if req.internal:
            self._on_handshake(conn, frame, now_ns, responses)
            return
        try:
            body = messages.decode_response(frame, req.api_key, req.api_version).body
        except DecodeError as e:
            responses.append(ClientResponse(req, None, now_ns, error=e))
            return
        responses.append(ClientResponse(req, body, now_ns))

    # -- timeouts and disconnects ----------------------------------------------------------------
    def _expire(self, now_ns: int, responses: list[ClientResponse]) -> None:
        for node in self._states.nodes_with_connection_setup_timeout(now_ns):
            conn = self._conns.get(node)
            if conn is not None:
                ms = self._states.get(node).connection_setup_timeout_ns // _NS_PER_MS
                self._disconnect(conn, now_ns, responses,
                                 f"connecting to broker {conn.address} timed out after {ms} ms",
                                 timed_out=True)
        for node in self._in_flight.timed_out_nodes(now_ns):
            conn = self._conns.get(node)
            if conn is not None:
                self.metrics.request_timeouts_total += 1
                self._disconnect(
                    conn, now_ns, responses,
                    f"broker {conn.address} (node {node}) did not answer within "
                    f"{self.config.request_timeout_ms} ms (request.timeout.ms)", timed_out=True)
        if self._idle_ns != NEVER_NS:
            for conn in list(self._conns.values()):
                if (conn.connected and now_ns - conn.last_active_ns > self._idle_ns
                        and not self._in_flight.count(conn.node)):
                    self._disconnect(conn, now_ns, responses,
                                     f"connection to broker {conn.address} idle for "
                                     f"{self.config.connections_max_idle_ms} ms")

    def _disconnect(self, conn: _Connection, now_ns: int, responses: list[ClientResponse] | None,
                    reason: str, *, timed_out: bool = False, error: KctlError | None = None) -> None:
        node = conn.node
        if not conn.closed:
            try:
                self._selector.unregister(conn.channel.sock)
            except (KeyError, ValueError):
                pass
            conn.channel.close()
        if self._conns.get(node) is conn:
            del self._conns[node]
        if not conn.connected or self._states.state(node) is not ConnectionState.READY:
            self.metrics.connection_failures_total += 1
        self.metrics.connection_close_total += 1
        self._states.disconnected(node, now_ns, reason)
        self._versions.pop(node, None)
        log.info("node %s: %s", node, reason)
        requests = self._in_flight.clear_all(node)
        if responses is not None:
            if error is None:
                error = (RequestTimeoutError if timed_out else BrokerUnavailableError)(reason)
            for req in requests:
                if not req.internal:
                    responses.append(ClientResponse(req, None, now_ns, disconnected=True,
                                                    timed_out=timed_out, error=error))
        if self._on_disconnect is not None:
            self._on_disconnect(node, reason)

    def disconnect(self, node: int, now_ns: int) -> None:
        """Closes ``node``'s connection; its in-flight requests come back from the
        next poll as disconnected, and the reconnect backoff applies (Java ``disconnect``)."""
        conn = self._conns.get(node)
        if conn is not None:
            self._disconnect(conn, now_ns, self._pending, f"connection to node {node} closed by kctl")

    def close(self, node: int) -> None:
        """Closes ``node``'s connection and forgets its requests and backoff: they are
        neither returned nor called back (Java ``close(nodeId)``)."""
        conn = self._conns.pop(node, None)
        if conn is not None and not conn.closed:
            self._selector.unregister(conn.channel.sock)
            conn.channel.close()
            self.metrics.connection_close_total += 1
        self._in_flight.clear_all(node)
        self._versions.pop(node, None)
        self._states.remove(node)

    def close_all(self, linger_s: float = 0.0) -> None:
        """Closes every connection and the selector; the client cannot be used afterwards.

        With ``linger_s`` > 0 the close is graceful: each connection first shuts
        down its sending side and waits (up to ``linger_s`` in all) for the broker
        to close its own, so a request written just before closing (acks=0 has
        no answer to wait for) is read by the broker before the connection goes.
        """
        if self._closed:
            return
        if linger_s > 0:
            self._drain_until_peer_closes(linger_s)
        for node in list(self._conns):
            self.close(node)
        self._pending.clear()
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()
        self._closed = True

    def _drain_until_peer_closes(self, linger_s: float) -> None:
        open_socks = []
        for conn in self._conns.values():
            if conn.connected and not conn.closed and not conn.channel.out:
                try:
                    conn.channel.sock.shutdown(socket.SHUT_WR)
                    open_socks.append(conn.channel.sock)
                except OSError:
                    pass
        deadline = time.monotonic() + linger_s
        while open_socks:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            readable, _, _ = select.select(open_socks, [], [], left)
            for sock in readable:
                try:
                    data = sock.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    open_socks.remove(sock)

    def __enter__(self) -> NetworkClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close_all()


def _strerror(err: int) -> str:
    try:
        return os.strerror(err)
    except (ValueError, OverflowError):
        return f"error {err}"
