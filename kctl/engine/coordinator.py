"""Group membership over the classic group protocol (the Java client's
``AbstractCoordinator``): finding the coordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup. ``ConsumerCoordinator`` (consumer_coordinator.py) adds what a consumer
puts in and takes out of it: subscriptions, assignors, offsets.

How this works
--------------
``poll(now_ns)`` is one step; it returns when it next needs to run. Each step, in order:

1. no coordinator known: send FindCoordinator (key = the group id) to the least loaded
   broker; its answer names the coordinator, reached over a connection of its own
   (node id ``COORDINATOR_ID_BASE - broker id``, as Java's ``Integer.MAX_VALUE - id``);
2. a join is needed (no generation yet, or a rejoin was asked for): ``on_join_prepare``
   first (it may hold the join back, e.g. for a commit in flight), then JoinGroup with
   the member id (empty at first; KIP-394's MEMBER_ID_REQUIRED answer gives one to join
   with again), ``session.timeout.ms``, ``max.poll.interval.ms`` as rebalance timeout and
   the protocols (``metadata()``). The leader's answer lists the members and their
   metadata: ``perform_assignment`` computes every member's assignment, which goes back
   in SyncGroup (followers send none). SyncGroup's answer is this member's assignment
   for ``on_join_complete``;
3. in a generation: a Heartbeat every ``heartbeat.interval.ms``. REBALANCE_IN_PROGRESS
   asks for a rejoin; ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID drop the generation
   (then rejoin); NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE and an unanswered
   ``session.timeout.ms`` drop the coordinator (then find it again); when the
   application has not polled for ``max.poll.interval.ms`` the member leaves.

The member's state is a table (``MEMBER_TRANSITIONS``); a transition it lacks raises.
Fatal answers (authorization, FENCED_INSTANCE_ID, INCONSISTENT_GROUP_PROTOCOL,
INVALID_SESSION_TIMEOUT, ...) are kept in ``fatal_error`` for the consumer to raise.
Time is passed in; answers arrive through network callbacks.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass

from kctl.consumer_config import GroupConfig
from kctl.engine.clock import NS_PER_MS
from kctl.engine.consumer_metrics import ConsumerMetrics
from kctl.engine.heartbeat import Heartbeat
from kctl.engine.metadata import Metadata
from kctl.engine.network import ClientRequest, ClientResponse, NetworkClient
from kctl.errors import KctlError
from kctl.protocol import messages, requests, schema
from kctl.protocol.error_codes import error_for

__all__ = ["COORDINATOR_ID_BASE", "Generation", "GroupCoordinator", "MemberState", "NO_GENERATION"]

log = logging.getLogger(__name__)

FIND_COORDINATOR = schema.API_BY_NAME["FindCoordinator"].api_key
JOIN_GROUP = schema.API_BY_NAME["JoinGroup"].api_key
SYNC_GROUP = schema.API_BY_NAME["SyncGroup"].api_key
HEARTBEAT = schema.API_BY_NAME["Heartbeat"].api_key
LEAVE_GROUP = schema.API_BY_NAME["LeaveGroup"].api_key

_JoinGroup = messages.message_class("JoinGroupRequest")
_SyncGroup = messages.message_class("SyncGroupRequest")
_Heartbeat = messages.message_class("HeartbeatRequest")
_LeaveGroup = messages.message_class("LeaveGroupRequest")

#: Coordinator connections get node ids of their own (Java: Integer.MAX_VALUE - broker id).
COORDINATOR_ID_BASE = 2**31 - 1
#: A JoinGroup may wait for every member to rejoin: its timeout is the rebalance timeout plus this.
JOIN_GROUP_TIMEOUT_LAPSE_MS = 5000

#: Answers after which retrying cannot help.
FATAL_GROUP_ERRORS = frozenset({
    "GROUP_AUTHORIZATION_FAILED", "FENCED_INSTANCE_ID", "INCONSISTENT_GROUP_PROTOCOL",
    "INVALID_SESSION_TIMEOUT", "INVALID_GROUP_ID", "GROUP_MAX_SIZE_REACHED", "UNSUPPORTED_VERSION",
    "TOPIC_AUTHORIZATION_FAILED", "UNRELEASED_INSTANCE_ID",
})
_COORDINATOR_ERRORS = frozenset({"COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR"})


class MemberState(enum.Enum):
    UNJOINED = "unjoined"                           # no generation (or left)
    PREPARING_REBALANCE = "preparing_rebalance"     # JoinGroup sent
    COMPLETING_REBALANCE = "completing_rebalance"   # joined; SyncGroup sent
    STABLE = "stable"                               # assignment received


MEMBER_TRANSITIONS: dict[MemberState, frozenset[MemberState]] = {
    MemberState.UNJOINED: frozenset({MemberState.PREPARING_REBALANCE, MemberState.UNJOINED}),
    MemberState.PREPARING_REBALANCE: frozenset({MemberState.COMPLETING_REBALANCE, MemberState.UNJOINED,
                                                MemberState.PREPARING_REBALANCE}),
    MemberState.COMPLETING_REBALANCE: frozenset({MemberState.STABLE, MemberState.UNJOINED,
                                                 MemberState.PREPARING_REBALANCE}),
    MemberState.STABLE: frozenset({MemberState.PREPARING_REBALANCE, MemberState.UNJOINED,
                                   MemberState.STABLE}),
}


@dataclass(frozen=True, slots=True)
class Generation:
    generation_id: int
    member_id: str
    protocol_name: str | None

    @property
    def valid(self) -> bool:
        return self.generation_id >= 0


NO_GENERATION = Generation(-1, "", None)


class GroupCoordinator:
    """The membership steps; a subclass supplies the protocol (see module doc)."""

    protocol_type = "consumer"

    def __init__(self, config: GroupConfig, metadata: Metadata, network: NetworkClient,
                 metrics: ConsumerMetrics, *, now_ns: int = 0) -> None:
        self.group = config
        self.metadata = metadata
        self.network = network
        self.metrics = metrics
        self.heartbeat = Heartbeat(session_timeout_ms=config.session_timeout_ms,
                                   heartbeat_interval_ms=config.heartbeat_interval_ms,
                                   max_poll_interval_ms=config.rebalance_timeout_ms,
                                   retry_backoff_ms=config.retry_backoff_ms, now_ns=now_ns)
        self._backoff_ns = config.retry_backoff_ms * NS_PER_MS
        self.state = MemberState.UNJOINED
        self.generation = NO_GENERATION
        self.member_id = ""               # kept across a failed join (KIP-394)
        self.rejoin_needed = True
        self.rejoin_reason = "initial join"
        self.coordinator: int | None = None        # the coordinator connection's node id
        self.coordinator_broker: int | None = None
        self._find_in_flight = False
        self._find_retry_ns = 0
        self._join_in_flight = False
        self._join_retry_ns = 0
        self._heartbeat_in_flight = False
        self._join_prepared = False     # on_join_prepare ran for the rebalance under way
        self._pending_sync: tuple | None = None    # (generation, join answer) awaiting an assignment
        self.fatal_error: KctlError | None = None
        self.joins = 0                              # completed joins (generations taken)

    # -- to be provided by the protocol ----------------------------------------------------------
    def metadata_protocols(self) -> list[tuple[str, bytes]]:
        raise NotImplementedError

    def on_join_prepare(self, generation: Generation, now_ns: int) -> bool:
        """Before a JoinGroup; False holds the join back (asked again next step)."""
        return True

    def perform_assignment(self, leader_id: str, protocol: str, members: list) -> dict[str, bytes] | None:
        """The leader's assignment per member id; None to wait (asked again next step)."""
        raise NotImplementedError

    def on_join_complete(self, generation: Generation, protocol: str, assignment: bytes | None,
                         now_ns: int) -> None:
        raise NotImplementedError

    def on_leave_prepare(self, now_ns: int) -> None:
        """Before leaving (or losing) the group: give up the assignment."""

    @property
    def needs_join(self) -> bool:
        """Whether this member wants to be in a group at all (subscribed)."""
        return True

    # -- state -------------------------------------------------------------------------------------
    def _transition(self, to: MemberState) -> None:
        if to not in MEMBER_TRANSITIONS[self.state]:
            raise KctlError(f"group member state {self.state.value} -> {to.value} is not allowed")
        self.state = to

    def request_rejoin(self, reason: str) -> None:
        if not self.rejoin_needed and self.needs_join:
            log.info("group %s: rejoining: %s", self.group.group_id, reason)
        self.rejoin_needed = True
        self.rejoin_reason = reason

    def reset_generation(self, reason: str, *, keep_member_id: bool = False) -> None:
        log.info("group %s: resetting generation: %s", self.group.group_id, reason)
        self.generation = NO_GENERATION
        if not keep_member_id:
            self.member_id = ""
        self._join_prepared = False     # what was prepared for belongs to the lost generation
        if self.state is not MemberState.UNJOINED:
            self._transition(MemberState.UNJOINED)
        self._pending_sync = None
        self.request_rejoin(reason)

    def polled(self, now_ns: int) -> None:
        """The application polled (restarts the max.poll.interval.ms timer)."""
        self.heartbeat.polled(now_ns)

    def coordinator_unknown(self) -> bool:
        return self.coordinator is None

    def mark_coordinator_unknown(self, reason: str, now_ns: int) -> None:
        if self.coordinator is not None:
            log.info("group %s: coordinator %s lost: %s", self.group.group_id, self.coordinator_broker, reason)
            node = self.coordinator
            self.coordinator = None
            self.coordinator_broker = None
            # Requests in flight to it come back as disconnected and are retried.
            self.network.disconnect(node, now_ns)

    def _fail(self, name: str, where: str) -> None:
        self.fatal_error = KctlError(f"group {self.group.group_id!r}: {where} answered {name}")

    # -- the step --------------------------------------------------------------------------------
    def poll(self, now_ns: int) -> int:
        """One step (module doc); returns when it next needs to run (monotonic ns)."""
        wake = now_ns + 1000 * NS_PER_MS
        if self.fatal_error is not None:
            return wake
        if self.coordinator is None:
            return min(wake, self._find_coordinator(now_ns))
        hb = self.heartbeat
        in_group = self.state in (MemberState.STABLE, MemberState.COMPLETING_REBALANCE)
        # Only a member that heartbeats can miss its session: a JoinGroup in flight keeps
        # the session alive at the coordinator (Java's heartbeat thread is off then too).
        if in_group and hb.session_timeout_expired(now_ns):
            self.mark_coordinator_unknown(
                f"no heartbeat answered for session.timeout.ms ({self.group.session_timeout_ms} ms)", now_ns)
            # A whole session for the rediscovered coordinator, starting with a heartbeat now.
            hb.reset_timeouts(now_ns)
            hb.next_heartbeat_ns = now_ns
            return now_ns
        if self.needs_join and self.generation.valid and hb.poll_timeout_expired(now_ns):
            self.maybe_leave_group("consumer poll timeout has expired (max.poll.interval.ms)", now_ns)
            return now_ns
        if self._pending_sync is not None:
            self._try_sync(now_ns)
        if self.needs_join and (self.rejoin_needed or self.state is MemberState.UNJOINED):
            wake = min(wake, self._maybe_join(now_ns))
        if in_group and self.generation.valid:
            wake = min(wake, self._maybe_heartbeat(now_ns), hb.session_deadline_ns, hb.poll_deadline_ns)
        return wake

    # -- FindCoordinator ---------------------------------------------------------------------------
    def _find_coordinator(self, now_ns: int) -> int:
        if self._find_in_flight:
            return now_ns + 1000 * NS_PER_MS
        if now_ns < self._find_retry_ns:
            return self._find_retry_ns
        # A node that offers FindCoordinator; if no node known does, one that will say so.
        node = self.network.least_loaded_node(now_ns, api_key=FIND_COORDINATOR, any_node_if_none=True)
        if node is None or not self.network.ready(node, now_ns):
            return now_ns + max(NS_PER_MS, self._backoff_ns // 10)
        version = self.network.api_version(node, FIND_COORDINATOR)
        if version is None:         # Java: UnsupportedVersionException, fatal to the consumer
            self.fatal_error = KctlError(f"group {self.group.group_id!r}: broker {node} offers no "
                                         "FindCoordinator version kctl speaks")
            return now_ns + 1000 * NS_PER_MS
        body = requests.find_coordinator(version, self.group.group_id, requests.COORDINATOR_GROUP)
        self._find_in_flight = True
        self.network.send(ClientRequest(node, FIND_COORDINATOR, body, api_version=version,
                                        callback=self._on_find, created_ns=now_ns), now_ns)
        return now_ns + 1000 * NS_PER_MS

    def _on_find(self, resp: ClientResponse) -> None:
        self._find_in_flight = False
        now = resp.received_ns
        if resp.error is not None or resp.body is None:
            self._find_retry_ns = now + self._backoff_ns
            return
        found = requests.read_find_coordinator(resp.body)
        code, node_id, host, port = found.error_code, found.node_id, found.host, found.port
        if code:
            name = error_for(code).name
            self.metrics.errors_by_name[name] += 1
            if name in FATAL_GROUP_ERRORS:
                self._fail(name, "FindCoordinator")
            self._find_retry_ns = now + self._backoff_ns
            return
        conn = COORDINATOR_ID_BASE - node_id
        self.network.add_node(conn, (host, port))
        self.coordinator = conn
        self.coordinator_broker = node_id
        log.info("group %s: coordinator is broker %s at %s:%s", self.group.group_id, node_id, host, port)

    # -- JoinGroup / SyncGroup ---------------------------------------------------------------------
    def _maybe_join(self, now_ns: int) -> int:
        if self._join_in_flight or self._pending_sync is not None:
            return now_ns + 1000 * NS_PER_MS
        if now_ns < self._join_retry_ns:
            return self._join_retry_ns
        if self.state is MemberState.COMPLETING_REBALANCE:
            return now_ns + 1000 * NS_PER_MS   # a SyncGroup is in flight
        if not self._join_prepared:
            if not self.on_join_prepare(self.generation, now_ns):
                return now_ns + 10 * NS_PER_MS
            self._join_prepared = True
        node = self.coordinator
        assert node is not None
        if not self.network.ready(node, now_ns):
            return now_ns + max(NS_PER_MS, self.network.connection_delay_ns(node, now_ns) if
                                self.network.is_blacked_out(node, now_ns) else NS_PER_MS)
        g = self.group
        version = self.network.api_version(node, JOIN_GROUP)
        body = _JoinGroup(
            group_id=g.group_id, session_timeout_ms=g.session_timeout_ms,
            rebalance_timeout_ms=g.rebalance_timeout_ms, member_id=self.member_id,
            group_instance_id=g.group_instance_id, protocol_type=self.protocol_type,
            protocols=[_JoinGroup.JoinGroupRequestProtocol(name=n, metadata=m)
                       for n, m in self.metadata_protocols()])
        if version is not None and version >= 8:
            body.reason = self.rejoin_reason[:255]
        self._transition(MemberState.PREPARING_REBALANCE)
        self._join_in_flight = True
        self.rejoin_needed = False
        timeout = max(g.request_timeout_ms, g.rebalance_timeout_ms + JOIN_GROUP_TIMEOUT_LAPSE_MS)
        log.info("group %s: joining (%s)", g.group_id, self.rejoin_reason)
        self.network.send(ClientRequest(node, JOIN_GROUP, body, callback=self._on_join, created_ns=now_ns,
                                        request_timeout_ms=timeout), now_ns)
        return now_ns + 1000 * NS_PER_MS

    def _on_join(self, resp: ClientResponse) -> None:
        self._join_in_flight = False
        now = resp.received_ns
        if self.state is not MemberState.PREPARING_REBALANCE:
            return      # left or reset meanwhile
        if resp.error is not None or resp.body is None:
            self._transition(MemberState.UNJOINED)
            self.mark_coordinator_unknown(f"JoinGroup failed: {resp.error}", now)
            self.request_rejoin("JoinGroup failed")
            return
        body = resp.body
        name = error_for(body.error_code).name if body.error_code else None
        if body.throttle_time_ms:
            self.network.throttle(resp.node, body.throttle_time_ms, now)
        if name is None and body.protocol_type is not None and body.protocol_type != self.protocol_type:
            # v7+ names the group's protocol type (Java's isProtocolTypeInconsistent): fatal.
            self.fatal_error = KctlError(f"group {self.group.group_id!r}: JoinGroup answered protocol type "
                                         f"{body.protocol_type!r}, not {self.protocol_type!r} "
                                         "(INCONSISTENT_GROUP_PROTOCOL)")
            return
        if name is None:
            self.member_id = body.member_id
            gen = Generation(body.generation_id, body.member_id, body.protocol_name)
            self.generation = gen
            self._transition(MemberState.COMPLETING_REBALANCE)
            self.heartbeat.reset_timeouts(now)
            self._pending_sync = (gen, body)
            self._try_sync(now)
            return
        self.metrics.errors_by_name[name] += 1
        self._transition(MemberState.UNJOINED)
        self.rejoin_needed = True
        if name == "MEMBER_ID_REQUIRED":
            self.member_id = body.member_id          # KIP-394: join again with it, at once
            return
        if name in ("UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION"):
            self.reset_generation(f"JoinGroup: {name}")
            return
        if name in _COORDINATOR_ERRORS:
            self.mark_coordinator_unknown(f"JoinGroup: {name}", now)
            return
        if name in FATAL_GROUP_ERRORS:
            self._fail(name, "JoinGroup")
            return
        # COORDINATOR_LOAD_IN_PROGRESS, REBALANCE_IN_PROGRESS, ...: try again after the backoff.
        self._join_retry_ns = now + self._backoff_ns

    def _try_sync(self, now_ns: int) -> None:
        pending = self._pending_sync
        if pending is None:
            return
        gen, join = pending
        if join.leader == join.member_id:
            assignments = self.perform_assignment(join.leader, join.protocol_name, list(join.members))
            if assignments is None:
                return          # waiting (metadata for the members' topics)
        else:
            assignments = {}
        node = self.coordinator
        if node is None or not self.network.ready(node, now_ns):
            return
        self._pending_sync = None
        g = self.group
        body = _SyncGroup(group_id=g.group_id, generation_id=gen.generation_id, member_id=gen.member_id,
                          group_instance_id=g.group_instance_id, protocol_type=self.protocol_type,
                          protocol_name=gen.protocol_name,
                          assignments=[_SyncGroup.SyncGroupRequestAssignment(member_id=m, assignment=a)
                                       for m, a in assignments.items()])
        self.network.send(ClientRequest(node, SYNC_GROUP, body, callback=self._on_sync, created_ns=now_ns,
                                        user=gen), now_ns)

    def _on_sync(self, resp: ClientResponse) -> None:
        now = resp.received_ns
        gen: Generation = resp.request.user
        if self.state is not MemberState.COMPLETING_REBALANCE or self.generation != gen:
            return
        if resp.error is not None or resp.body is None:
            self._transition(MemberState.UNJOINED)
            self.mark_coordinator_unknown(f"SyncGroup failed: {resp.error}", now)
            self.request_rejoin("SyncGroup failed")
            return
        body = resp.body
        if body.throttle_time_ms:
            self.network.throttle(resp.node, body.throttle_time_ms, now)
        if body.error_code:
            name = error_for(body.error_code).name
            self.metrics.errors_by_name[name] += 1
            self._transition(MemberState.UNJOINED)
            if name == "REBALANCE_IN_PROGRESS":
                self.request_rejoin("SyncGroup: REBALANCE_IN_PROGRESS")
            elif name in ("UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION"):
                # ILLEGAL_GENERATION keeps the member id: the member may still be valid (Java).
                self.reset_generation(f"SyncGroup: {name}", keep_member_id=name == "ILLEGAL_GENERATION")
            elif name in _COORDINATOR_ERRORS:
                self.mark_coordinator_unknown(f"SyncGroup: {name}", now)
                self.request_rejoin(f"SyncGroup: {name}")
            elif name in FATAL_GROUP_ERRORS:
                self._fail(name, "SyncGroup")
            else:
                self.request_rejoin(f"SyncGroup: {name}")
            return
        inconsistent = next((f"protocol {got!r}, not {want!r}" for got, want in (
            (body.protocol_type, self.protocol_type), (body.protocol_name, gen.protocol_name))
            if got is not None and got != want), None)
        if inconsistent is not None:
            # v5+ names the protocol type and assignor (Java's SyncGroupResponseHandler): fatal.
            self.fatal_error = KctlError(f"group {self.group.group_id!r}: SyncGroup answered {inconsistent} "
                                         "(INCONSISTENT_GROUP_PROTOCOL)")
            return
        self._transition(MemberState.STABLE)
        # Prepared once per rebalance (Java's needsJoinPrepare): a JoinGroup or SyncGroup
        # that failed is sent again without a second prepare (no second commit or revoke).
        self._join_prepared = False
        self.heartbeat.reset_timeouts(now)
        self.joins += 1
        self.metrics.rebalances += 1
        log.info("group %s: joined generation %s as %s", self.group.group_id, gen.generation_id, gen.member_id)
        self.on_join_complete(gen, gen.protocol_name or "", body.assignment, now)

    # -- Heartbeat -----------------------------------------------------------------------------
    def _maybe_heartbeat(self, now_ns: int) -> int:
        hb = self.heartbeat
        if self._heartbeat_in_flight:
            return hb.session_deadline_ns
        if not hb.should_heartbeat(now_ns):
            return hb.next_heartbeat_ns
        node = self.coordinator
        assert node is not None
        if not self.network.ready(node, now_ns):
            return now_ns + NS_PER_MS
        g = self.group
        gen = self.generation
        body = _Heartbeat(group_id=g.group_id, generation_id=gen.generation_id, member_id=gen.member_id,
                          group_instance_id=g.group_instance_id)
        self._heartbeat_in_flight = True
        hb.sent(now_ns)
        self.network.send(ClientRequest(node, HEARTBEAT, body, callback=self._on_heartbeat,
                                        created_ns=now_ns, user=gen), now_ns)
        return hb.next_heartbeat_ns

    def _on_heartbeat(self, resp: ClientResponse) -> None:
        self._heartbeat_in_flight = False
        now = resp.received_ns
        hb = self.heartbeat
        if resp.error is not None or resp.body is None:
            hb.failed(now)
            self.mark_coordinator_unknown(f"Heartbeat failed: {resp.error}", now)
            return
        body = resp.body
        if body.throttle_time_ms:
            self.network.throttle(resp.node, body.throttle_time_ms, now)
        if not body.error_code:
            hb.received(now)
            return
        name = error_for(body.error_code).name
        self.metrics.errors_by_name[name] += 1
        if name == "REBALANCE_IN_PROGRESS":
            hb.received(now)           # the coordinator is alive; the session goes on
            if self.state is MemberState.STABLE:
                self.request_rejoin("group is rebalancing (Heartbeat: REBALANCE_IN_PROGRESS)")
        elif name in ("ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID"):
            if resp.request.user == self.generation:
                # As Java: the partitions are lost (not revoked) when the next join is
                # prepared without a generation; ILLEGAL_GENERATION keeps the member id.
                self.reset_generation(f"Heartbeat: {name}", keep_member_id=name == "ILLEGAL_GENERATION")
        elif name in _COORDINATOR_ERRORS:
            hb.failed(now)
            self.mark_coordinator_unknown(f"Heartbeat: {name}", now)
        elif name in FATAL_GROUP_ERRORS:
            self._fail(name, "Heartbeat")
        else:
            hb.failed(now)

    # -- leaving ---------------------------------------------------------------------------------
    def maybe_leave_group(self, reason: str, now_ns: int) -> bool:
        """Sends LeaveGroup when this dynamic member has a member id; gives up the
        generation either way. Returns whether a LeaveGroup was sent."""
        sent = False
        g = self.group
        self.on_leave_prepare(now_ns)
        if (g.group_instance_id is None and self.member_id and self.coordinator is not None
                and self.state is not MemberState.UNJOINED
                and self.network.ready(self.coordinator, now_ns)):
            version = self.network.api_version(self.coordinator, LEAVE_GROUP)
            if version is not None and version >= 3:
                body = _LeaveGroup(group_id=g.group_id, members=[_LeaveGroup.MemberIdentity(
                    member_id=self.member_id, group_instance_id=None, reason=reason[:255])])
            else:
                body = _LeaveGroup(group_id=g.group_id, member_id=self.member_id)
            log.info("group %s: leaving: %s", g.group_id, reason)
            self.network.send(ClientRequest(self.coordinator, LEAVE_GROUP, body, created_ns=now_ns), now_ns)
            sent = True
        self.reset_generation(reason)
        return sent
