"""Per-node connection state (the Java client's ``ClusterConnectionStates``).

How this works: each node id (a broker id from metadata, or a negative pseudo id
for a bootstrap address) has a ``NodeConnectionState``; the network client moves
it through the table below and asks it whether a connect may start now.

    DISCONNECTED -> CONNECTING -> CHECKING_API_VERSIONS -> [AUTHENTICATING ->] READY
         ^              |                 |                     |             |
         +--------------+-----------------+---------------------+-------------+   (disconnected)

CONNECTING covers the TCP connect and the TLS handshake. ``AUTHENTICATING`` is
SASL: it comes after ApiVersions, because kctl needs the negotiated versions of
SaslHandshake and SaslAuthenticate (the Java client also asks ApiVersions first).

READY -> AUTHENTICATING -> READY is a re-authentication (KIP-368) on the same
connection: a node whose broker set a session lifetime is READY with a
``reauthenticate_at_ns``; from then on ``is_ready`` is false (no new request goes
out on an expiring session) until the network client has logged in again
(``reauthenticating``, then ``ready`` with the next time), as Java's channel is not
ready while it re-authenticates.

Backoff, as Java: every disconnect (a refused connect, a broken or timed-out
connection, a failed handshake) sets the reconnect backoff to
``reconnect.backoff.ms * 2**failures`` (capped at ``reconnect.backoff.max.ms``,
±20 % jitter) and counts a failure; reaching READY resets the count. A connect
that stays CONNECTING longer than the connection setup timeout is abandoned; that
timeout grows the same way (``socket.connection.setup.timeout.ms`` up to
``...max.ms``) with each attempt that failed while connecting.

All times are monotonic nanoseconds passed in (``now_ns``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kctl.engine.backoff import ExponentialBackoff, Random

NEVER_NS = (1 << 63) - 1
"""A delay that never ends (Java's ``Long.MAX_VALUE``)."""


class ConnectionState(enum.Enum):
    DISCONNECTED = "disconnected"
    CONNECTING = "connecting"
    AUTHENTICATING = "authenticating"  # SASL, after ApiVersions
    CHECKING_API_VERSIONS = "checking_api_versions"
    READY = "ready"

    @property
    def is_connected(self) -> bool:
        return self in (ConnectionState.CHECKING_API_VERSIONS, ConnectionState.AUTHENTICATING,
                        ConnectionState.READY)


_S = ConnectionState
# Allowed transitions; a move not listed here is a bug (conventions rule 5).
_TRANSITIONS: dict[ConnectionState, frozenset[ConnectionState]] = {
    _S.DISCONNECTED: frozenset({_S.CONNECTING, _S.DISCONNECTED}),
    _S.CONNECTING: frozenset({_S.AUTHENTICATING, _S.CHECKING_API_VERSIONS, _S.READY, _S.DISCONNECTED}),
    _S.AUTHENTICATING: frozenset({_S.READY, _S.DISCONNECTED}),
    _S.CHECKING_API_VERSIONS: frozenset({_S.AUTHENTICATING, _S.READY, _S.DISCONNECTED}),
    _S.READY: frozenset({_S.AUTHENTICATING, _S.DISCONNECTED}),   # AUTHENTICATING: KIP-368
}


@dataclass(slots=True)
class NodeConnectionState:
    state: ConnectionState
    last_connect_attempt_ns: int
    reconnect_backoff_ns: int
    connection_setup_timeout_ns: int
    failed_attempts: int = 0          # disconnects since the last READY
    failed_connect_attempts: int = 0  # of those, the ones that happened while CONNECTING
    throttle_until_ns: int = 0        # KIP-219 client-side throttling
    last_error: str | None = None     # why the last connection ended, for messages
    reauthenticate_at_ns: int = NEVER_NS  # KIP-368: log in again from then (READY only)


class ClusterConnectionStates:
    """Connection state, reconnect backoff and setup timeout of every node."""

    def __init__(self, reconnect_backoff_ms: int, reconnect_backoff_max_ms: int,
                 connection_setup_timeout_ms: int, connection_setup_timeout_max_ms: int,
                 *, random: Random | None = None) -> None:
        self.reconnect_backoff = ExponentialBackoff(
            reconnect_backoff_ms, 2, reconnect_backoff_max_ms, 0.2, random)
        self.connection_setup_timeout = ExponentialBackoff(
            connection_setup_timeout_ms, 2, connection_setup_timeout_max_ms, 0.2, random)
        self._nodes: dict[int, NodeConnectionState] = {}
        self._connecting: set[int] = set()

    # -- queries --------------------------------------------------------------
    def get(self, node: int) -> NodeConnectionState | None:
        return self._nodes.get(node)

    def state(self, node: int) -> ConnectionState:
        s = self._nodes.get(node)
        return ConnectionState.DISCONNECTED if s is None else s.state

    def can_connect(self, node: int, now_ns: int) -> bool:
        """Disconnected, and the reconnect backoff since the last attempt has passed."""
        s = self._nodes.get(node)
        if s is None:
            return True
        return (s.state is ConnectionState.DISCONNECTED
                and now_ns - s.last_connect_attempt_ns >= s.reconnect_backoff_ns)

    def is_blacked_out(self, node: int, now_ns: int) -> bool:
        s = self._nodes.get(node)
        return (s is not None and s.state is ConnectionState.DISCONNECTED
                and now_ns - s.last_connect_attempt_ns < s.reconnect_backoff_ns)

    def connection_delay_ns(self, node: int, now_ns: int) -> int:
        """How long until a connect may start: the rest of the backoff when
        disconnected, the setup timeout while connecting, ``NEVER_NS`` when
        connected (only a disconnect will change anything)."""
        s = self._nodes.get(node)
        if s is None:
            return 0
        if s.state is ConnectionState.CONNECTING:
            return s.connection_setup_timeout_ns
        if s.state is ConnectionState.DISCONNECTED:
            return max(s.reconnect_backoff_ns - (now_ns - s.last_connect_attempt_ns), 0)
        return NEVER_NS

    def is_connecting(self, node: int) -> bool:
        return self.state(node) is ConnectionState.CONNECTING

    def is_preparing_connection(self, node: int) -> bool:
        return self.state(node) in (ConnectionState.CONNECTING, ConnectionState.AUTHENTICATING,
                                    ConnectionState.CHECKING_API_VERSIONS)

    def is_connected(self, node: int) -> bool:
        return self.state(node).is_connected

    def is_disconnected(self, node: int) -> bool:
        return self.state(node) is ConnectionState.DISCONNECTED

    def is_ready(self, node: int, now_ns: int) -> bool:
        """READY, not throttled, and not due to re-authenticate."""
        s = self._nodes.get(node)
        return (s is not None and s.state is ConnectionState.READY
                and s.throttle_until_ns <= now_ns and now_ns < s.reauthenticate_at_ns)

    def throttle_delay_ns(self, node: int, now_ns: int) -> int:
        s = self._nodes.get(node)
        return 0 if s is None else max(s.throttle_until_ns - now_ns, 0)

    def poll_delay_ns(self, node: int, now_ns: int) -> int:
        """Throttle delay of a connected node, else the connection delay (Java ``pollDelayMs``)."""
        throttle = self.throttle_delay_ns(node, now_ns)
        if self.is_connected(node) and throttle > 0:
            return throttle
        return self.connection_delay_ns(node, now_ns)

    def last_connect_attempt_ns(self, node: int) -> int:
        s = self._nodes.get(node)
        return 0 if s is None else s.last_connect_attempt_ns

    def last_error(self, node: int) -> str | None:
        s = self._nodes.get(node)
        return None if s is None else s.last_error

    def unready_nodes(self) -> list[int]:
        """Nodes being connected, or whose last connection failed (with a reason)."""
        return [n for n, s in self._nodes.items()
                if s.state is not ConnectionState.READY
                and (s.state is not ConnectionState.DISCONNECTED or s.last_error is not None)]

    def nodes_with_connection_setup_timeout(self, now_ns: int) -> list[int]:
        return [n for n in self._connecting
                if now_ns - self._nodes[n].last_connect_attempt_ns
                > self._nodes[n].connection_setup_timeout_ns]

    def reauthentication_due(self, now_ns: int) -> list[int]:
        """READY nodes whose session is due to be renewed (KIP-368)."""
        return [n for n, s in self._nodes.items()
                if s.state is ConnectionState.READY and s.reauthenticate_at_ns <= now_ns]

    def next_reauthentication_ns(self) -> int | None:
        """The earliest re-authentication time of a READY node, if any."""
        times = [s.reauthenticate_at_ns for s in self._nodes.values()
                 if s.state is ConnectionState.READY and s.reauthenticate_at_ns != NEVER_NS]
        return min(times) if times else None

    def connecting_nodes(self) -> frozenset[int]:
        return frozenset(self._connecting)

    # -- transitions ----------------------------------------------------------
    def _move(self, s: NodeConnectionState, to: ConnectionState, node: int) -> None:
        if to not in _TRANSITIONS[s.state]:
            raise AssertionError(f"node {node}: connection state {s.state.name} -> {to.name} is not allowed")
        s.state = to

    def connecting(self, node: int, now_ns: int) -> None:
        s = self._nodes.get(node)
        if s is None:
            s = self._nodes[node] = NodeConnectionState(
                ConnectionState.DISCONNECTED, now_ns, self.reconnect_backoff.backoff_ns(0),
                self.connection_setup_timeout.backoff_ns(0))
        self._move(s, ConnectionState.CONNECTING, node)
        s.last_connect_attempt_ns = now_ns
        self._connecting.add(node)

    def disconnected(self, node: int, now_ns: int, error: str | None = None) -> None:
        s = self._nodes.get(node)
        if s is None:
            return
        s.last_connect_attempt_ns = now_ns
        s.reconnect_backoff_ns = self.reconnect_backoff.backoff_ns(s.failed_attempts)
        s.failed_attempts += 1
        if s.state is ConnectionState.CONNECTING:
            s.failed_connect_attempts += 1
            s.connection_setup_timeout_ns = self.connection_setup_timeout.backoff_ns(
                s.failed_connect_attempts)
        else:
            self._reset_setup_timeout(s)
        self._connecting.discard(node)
        s.reauthenticate_at_ns = NEVER_NS
        if error is not None:
            s.last_error = error
        self._move(s, ConnectionState.DISCONNECTED, node)

    def checking_api_versions(self, node: int) -> None:
        s = self._nodes[node]
        self._move(s, ConnectionState.CHECKING_API_VERSIONS, node)
        self._reset_setup_timeout(s)
        self._connecting.discard(node)

    def authenticating(self, node: int) -> None:
        self._move(self._nodes[node], ConnectionState.AUTHENTICATING, node)

    def reauthenticating(self, node: int) -> None:
        """A READY node starts logging in again on its connection (KIP-368)."""
        s = self._nodes[node]
        if s.state is not ConnectionState.READY:
            raise AssertionError(f"node {node}: re-authentication from {s.state.name}, not READY")
        self._move(s, ConnectionState.AUTHENTICATING, node)
        s.reauthenticate_at_ns = NEVER_NS

    def ready(self, node: int, reauthenticate_at_ns: int | None = None) -> None:
        """READY; with ``reauthenticate_at_ns``, the session must be renewed from then on."""
        s = self._nodes[node]
        self._move(s, ConnectionState.READY, node)
        s.reauthenticate_at_ns = NEVER_NS if reauthenticate_at_ns is None else reauthenticate_at_ns
        s.failed_attempts = 0
        s.reconnect_backoff_ns = self.reconnect_backoff.backoff_ns(0)
        s.last_error = None
        self._reset_setup_timeout(s)
        self._connecting.discard(node)

    def throttle(self, node: int, until_ns: int) -> None:
        s = self._nodes.get(node)
        if s is not None and until_ns > s.throttle_until_ns:
            s.throttle_until_ns = until_ns

    def remove(self, node: int) -> None:
        """Forget a node: its next connect is not delayed by any backoff."""
        self._nodes.pop(node, None)
        self._connecting.discard(node)

    def _reset_setup_timeout(self, s: NodeConnectionState) -> None:
        s.failed_connect_attempts = 0
        s.connection_setup_timeout_ns = self.connection_setup_timeout.backoff_ns(0)
