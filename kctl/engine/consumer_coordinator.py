"""The consumer's side of group membership (the Java client's ``ConsumerCoordinator``):
what it joins with, what it does with an assignment, and committed offsets.

How this works
--------------
- Joining: one protocol per configured assignor (``partition.assignment.strategy``,
  in order), each carrying the subscription (topics, owned partitions, generation,
  ``client.rack``). The rebalance protocol is cooperative when every assignor supports
  it (cooperative-sticky alone), else eager.
- ``on_join_prepare`` (once per rebalance): with ``enable.auto.commit``, commits the
  consumed positions and holds the JoinGroup back until that commit (and any commit
  still in flight) is answered (eager: the partitions are pending revocation meanwhile,
  neither fetched nor handed out, so nothing is read past the commit); a retriable failure is sent again after
  ``retry.backoff.ms``; all of it within the rebalance timeout (Java's onJoinPrepare).
  A commit that fails for good there (answered with a non-retriable error, not sent
  because the member is no longer in a stable generation, or not answered within the
  rebalance timeout) leaves the group's offsets behind what was read: the partitions'
  next owners read those records again. It is kept in ``rebalance_commit_failures``
  for the run to report (when the positions were ahead of this member's last commit). Eager: every partition is revoked before joining.
  Cooperative: only partitions of topics no longer subscribed; a member that lost its
  generation loses everything it owned.
- The leader's ``perform_assignment`` decodes the members' subscriptions, makes sure
  metadata has every subscribed topic's partition count (waiting for a refresh when
  it has not) and runs the assignor the coordinator chose.
- The leader keeps the partition counts it assigned (Java's assignmentSnapshot) and asks
  for a rebalance when metadata shows another count for one of the group's topics
  (partitions added), so new partitions get an owner; a follower keeps none.
- ``on_join_complete``: eager takes the new assignment as is. Cooperative revokes
  owned partitions that are no longer assigned and, when it revoked any, asks for
  another rebalance (so their new owners get them), then takes the assignment.
  The ``RebalanceListener`` hears revoked / assigned / lost partitions; it may queue
  commits (``commit_async``), which the next join waits for.
- Positions: partitions without one (INITIALIZING) get their committed offset with
  OffsetFetch (``require_stable`` with read_committed, KIP-447); a partition with no
  committed offset resets by ``auto.offset.reset``. Without a group they reset directly.
- Commits: ``commit_async(offsets)`` sends OffsetCommit with the generation and member
  id (assign mode: -1 and ""). A subscribed member commits only in a stable generation
  (Java's ``generationIfStable``): otherwise the commit fails at once without a request,
  REBALANCE_IN_PROGRESS while joining or syncing, NOT_IN_GROUP without a generation
  (Java's RebalanceInProgressException / CommitFailedException). ``enable.auto.commit``
  commits every consumed position every ``auto.commit.interval.ms``, changed or not
  (Java's ``allConsumed()``: the same commit load as a Java consumer, idle included),
  and not while a rebalance is wanted or under way (Java's poll does not get to it
  then; ``on_join_prepare`` commits instead); a retriable failure tries again after
  ``retry.backoff.ms``, any other failure waits for the next interval. A commit
  answered ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID drops the generation it was sent with
  (Java's CommitFailedException; not a newer one); REBALANCE_IN_PROGRESS asks for a
  rejoin; NOT_COORDINATOR drops the coordinator; answered failures count in
  ``commit_failures``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from kctl.consumer_config import FetchConfig, GroupConfig, IsolationLevel, RebalanceProtocol
from kctl.engine.assignors import (
    Assignment, Subscription, assignor_for, decode_assignment, decode_subscription, encode_assignment,
    encode_subscription)
from kctl.engine.batch import TopicPartition
from kctl.engine.clock import NS_PER_MS
from kctl.engine.consumer_metrics import ConsumerMetrics
from kctl.engine.coordinator import FATAL_GROUP_ERRORS, Generation, GroupCoordinator, MemberState
from kctl.engine.metadata import Metadata
from kctl.engine.network import ClientRequest, ClientResponse, NetworkClient
from kctl.engine.subscription import FetchPosition, FetchState, SubscriptionState
from kctl.errors import KctlError
from kctl.protocol import messages, schema
from kctl.protocol.error_codes import error_for

__all__ = ["CommitResult", "ConsumerCoordinator", "FailedCommits", "RebalanceListener", "describe_commit_errors"]

log = logging.getLogger(__name__)

OFFSET_COMMIT = schema.API_BY_NAME["OffsetCommit"].api_key
OFFSET_FETCH = schema.API_BY_NAME["OffsetFetch"].api_key
_OffsetCommit = messages.message_class("OffsetCommitRequest")
_OffsetFetch = messages.message_class("OffsetFetchRequest")
#: OffsetCommit/OffsetFetch from this version name topics by id (kctl speaks the last by name).
_BY_TOPIC_ID_VERSION = 10
#: OffsetCommit errors Java raises as retriable (OffsetCommitResponseHandler): a failed
#: auto-commit with one of them is tried again after retry.backoff.ms, not a whole interval.
_COMMIT_RETRIABLE = frozenset({"COORDINATOR_LOAD_IN_PROGRESS", "UNKNOWN_TOPIC_OR_PARTITION",
                               "COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR", "REQUEST_TIMED_OUT",
                               "NETWORK_EXCEPTION"})
#: A subscribed member's commit outside a stable generation fails without a request (Java's
#: sendOffsetCommitRequest): rebalancing (RebalanceInProgressException), or no generation at
#: all (CommitFailedException: the member was dropped from the group). Neither is retriable.
NOT_STABLE_REBALANCING = "REBALANCE_IN_PROGRESS"
NOT_STABLE_NO_GENERATION = "NOT_IN_GROUP"


class RebalanceListener(Protocol):
    def on_partitions_revoked(self, partitions: list[TopicPartition],
                              positions: Mapping[TopicPartition, FetchPosition]) -> None: ...

    def on_partitions_assigned(self, partitions: list[TopicPartition]) -> None: ...

    def on_partitions_lost(self, partitions: list[TopicPartition]) -> None: ...


@dataclass(frozen=True, slots=True)
class CommitResult:
    offsets: dict[TopicPartition, int]
    errors: dict[TopicPartition, str] = field(default_factory=dict)
    answered_ns: int = field(default=0, compare=False)   # monotonic ns the answer (or failure) came
    sent: bool = True        # False: failed without a request (not in a stable generation)

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def retriable(self) -> bool:
        """Failed with an error Java retries (a commit sent again may succeed)."""
        return bool(set(self.errors.values()) & _COMMIT_RETRIABLE)

    def describe(self) -> str:
        """Why it failed, in one phrase (module doc)."""
        if not self.sent:
            return ("not sent: the member was rebalancing (REBALANCE_IN_PROGRESS)"
                    if NOT_STABLE_REBALANCING in self.errors.values() else
                    "not sent: the member was not in the group (its generation was reset)")
        return describe_commit_errors(self.errors)


@dataclass(frozen=True, slots=True)
class FailedCommits:
    """Commits of one kind that failed for good: how many, and why the last one did."""

    count: int = 0
    last_error: str = ""

    def add(self, error: str) -> FailedCommits:
        return FailedCommits(self.count + 1, error)


def describe_commit_errors(errors: Mapping[TopicPartition, str]) -> str:
    """A commit's failed partitions as one phrase: ``t-0 UNKNOWN_MEMBER_ID, t-1 ...``."""
    return ", ".join(f"{tp.topic}-{tp.partition} {why}" for tp, why in sorted(errors.items()))


class ConsumerCoordinator(GroupCoordinator):
    def __init__(self, config: GroupConfig, fetch: FetchConfig, subscriptions: SubscriptionState,
                 metadata: Metadata, network: NetworkClient, metrics: ConsumerMetrics, *,
                 now_ns: int = 0, wall_ms: Callable[[], int] = lambda: 0,
                 listener: RebalanceListener | None = None) -> None:
        super().__init__(config, metadata, network, metrics, now_ns=now_ns)
        self.fetch_config = fetch
        self.subscriptions = subscriptions
        self.wall_ms = wall_ms
        self.listener = listener
        self.protocol = config.protocol
        self._assignors = [assignor_for(n) for n in config.assignors]
        self._commits_in_flight = 0
        self._next_auto_commit_ns = now_ns + config.auto_commit_interval_ms * NS_PER_MS
        self._last_committed: dict[TopicPartition, int] = {}
        self._offset_fetch_in_flight: frozenset[TopicPartition] | None = None
        self._offset_fetch_retry_ns = 0
        self._prepare_deadline_ns: int | None = None
        # on_join_prepare's auto-commit: in flight, its answer, when a retriable failure is sent
        # again; the rebalance it is for (an answer after its prepare settled is not the next one's)
        self._prepare_round = 0
        self._prepare_commit_in_flight = False
        self._prepare_commit: CommitResult | None = None
        self._prepare_retry_ns = 0
        self.rebalance_commit_failures = FailedCommits()
        # The leader's partition counts at its assignment: (generation id, topic -> count).
        self._assigned_counts: tuple[int, dict[str, int]] | None = None
        self._assignment_snapshot: dict[str, int] | None = None
        self.closing = False
        self.last_commit: CommitResult | None = None

    # -- membership -------------------------------------------------------------------------------
    @property
    def needs_join(self) -> bool:
        return self.subscriptions.has_auto_assigned_partitions and not self.closing

    def metadata_protocols(self) -> list[tuple[str, bytes]]:
        owned = tuple(sorted(self.subscriptions.assigned_partitions()))
        sub = Subscription(
            topics=tuple(sorted(self.subscriptions.subscription)),
            owned_partitions=owned if self.protocol is RebalanceProtocol.COOPERATIVE else (),
            generation_id=self.generation.generation_id, rack_id=self.group.client_rack or None)
        encoded = encode_subscription(sub)
        return [(a.name, encoded) for a in self._assignors]

    def on_join_prepare(self, generation: Generation, now_ns: int) -> bool:
        if self._prepare_deadline_ns is None:
            self._prepare_deadline_ns = now_ns + self.group.rebalance_timeout_ms * NS_PER_MS
            if self.group.enable_auto_commit and self.protocol is RebalanceProtocol.EAGER:
                # Java's maybeMarkPartitionsPendingRevocation: while the commit is in flight
                # nothing more is fetched or handed out, so no record is read past it.
                self.subscriptions.mark_pending_revocation(self.subscriptions.assigned_partitions())
        expired = now_ns >= self._prepare_deadline_ns
        if self.group.enable_auto_commit and not self._prepare_auto_commit(now_ns, expired):
            return False        # its answer (or its retry) first
        if self._commits_in_flight and not expired:
            return False        # a listener's commit is answered first
        self._prepare_deadline_ns = None
        self._prepare_round += 1
        self._prepare_commit_in_flight = False
        self._prepare_commit = None
        self._prepare_retry_ns = 0
        owned = self.subscriptions.assigned_partitions()
        if not generation.valid and owned:
            # We were dropped from the group: what we owned may already be someone else's.
            self._lose(owned)
        elif self.protocol is RebalanceProtocol.EAGER and owned:
            self._revoke(owned)
            self.subscriptions.assign_from_subscribed([])
        elif owned:
            gone = [tp for tp in owned if tp.topic not in self.subscriptions.subscription]
            if gone:
                self._revoke(gone)
                self.subscriptions.assign_from_subscribed([tp for tp in owned if tp not in gone])
        return True

    def _prepare_auto_commit(self, now_ns: int, expired: bool) -> bool:
        """Java's onJoinPrepare commit: True once it is settled (committed, failed for good,
        nothing to commit, or the rebalance timeout passed); False to hold the join back."""
        done = self._prepare_commit
        if done is not None and (done.ok or not done.retriable):
            if not done.ok:
                self._rebalance_commit_failed(done.offsets, done.describe())
            return True
        if expired:
            why = ("no answer" if self._prepare_commit_in_flight else
                   f"still failing ({done.describe()})" if done is not None else "not sent (no coordinator)")
            self._rebalance_commit_failed(
                {tp: p.offset for tp, p in self.subscriptions.all_consumed().items()},
                f"{why} within the rebalance timeout (max.poll.interval.ms {self.group.rebalance_timeout_ms} ms)")
            return True
        if self._prepare_commit_in_flight or now_ns < self._prepare_retry_ns:
            return False
        offsets = self.subscriptions.all_consumed()
        if not offsets:
            return True
        self._prepare_commit = None
        self._prepare_commit_in_flight = True
        rnd = self._prepare_round
        if not self.commit_async(offsets, now_ns, lambda r: self._on_prepare_commit(r, rnd)):
            self._prepare_commit_in_flight = False    # no coordinator ready: retriable
            self._prepare_retry_ns = now_ns + self._backoff_ns
            return False
        # A commit that could not be sent (not in a stable generation) is answered at once.
        return self._prepare_commit is not None and self._prepare_auto_commit(now_ns, expired)

    def _on_prepare_commit(self, result: CommitResult, rnd: int) -> None:
        if rnd != self._prepare_round:
            return              # its rebalance went on without it (the rebalance timeout)
        self._prepare_commit_in_flight = False
        self._prepare_commit = result
        if not result.ok:
            self._prepare_retry_ns = result.answered_ns + self._backoff_ns

    def _rebalance_commit_failed(self, offsets: Mapping[TopicPartition, int], why: str) -> None:
        if all(self._last_committed.get(tp) == o for tp, o in offsets.items()):
            return      # an earlier commit already holds these positions: nothing is read twice
        self.rebalance_commit_failures = self.rebalance_commit_failures.add(why)
        log.warning("group %s: the commit before rebalancing failed: %s; the partitions' next owners "
                    "will read again what was read since the last commit", self.group.group_id, why)

    def _revoke(self, partitions: list[TopicPartition]) -> None:
        if self.listener is not None and partitions:
            positions = {tp: p for tp, p in self.subscriptions.all_consumed().items() if tp in partitions}
            self.listener.on_partitions_revoked(sorted(partitions), positions)

    def _lose(self, partitions: list[TopicPartition]) -> None:
        if self.listener is not None and partitions:
            self.listener.on_partitions_lost(sorted(partitions))
        self.subscriptions.assign_from_subscribed([])

    def on_leave_prepare(self, now_ns: int) -> None:
        owned = self.subscriptions.assigned_partitions() if self.subscriptions.has_auto_assigned_partitions else []
        if owned:
            # Revoked in a stable generation; lost without one or mid-rebalance (Java's
            # onLeavePrepare: rebalanceInProgress), when they may already be someone else's.
            if self.generation.valid and self.state is MemberState.STABLE:
                self._revoke(owned)
            elif self.listener is not None:
                self.listener.on_partitions_lost(sorted(owned))
            self.subscriptions.assign_from_subscribed([])

    def perform_assignment(self, leader_id: str, protocol: str, members: list) -> dict[str, bytes] | None:
        try:
            assignor = assignor_for(protocol)
        except KctlError:
            self.fatal_error = KctlError(f"group {self.group.group_id!r}: the coordinator chose assignor "
                                         f"{protocol!r}, which this member did not offer")
            return None
        subs: dict[str, Subscription] = {}
        for m in members:
            s = decode_subscription(m.metadata)
            subs[m.member_id] = Subscription(s.topics, s.owned_partitions, s.generation_id, s.rack_id,
                                             s.user_data, m.group_instance_id)
        topics = sorted({t for s in subs.values() for t in s.topics})
        self.metadata.add_topics(topics)
        counts = {t: self.metadata.partition_count(t) for t in topics}
        if any(c is None for c in counts.values()):
            self.metadata.request_update()
            return None
        self._assigned_counts = (self.generation.generation_id, {t: c for t, c in counts.items() if c})
        result = assignor.assign({t: c for t, c in counts.items() if c}, subs)
        log.info("group %s: leader assigned with %s: %s", self.group.group_id, protocol,
                 {m: len(p) for m, p in result.items()})
        return {m: encode_assignment(Assignment(tuple(parts))) for m, parts in result.items()}

    def on_join_complete(self, generation: Generation, protocol: str, assignment: bytes | None,
                         now_ns: int) -> None:
        # Only the leader watches for partition changes (Java's onJoinComplete).
        led = self._assigned_counts
        self._assignment_snapshot = led[1] if led is not None and led[0] == generation.generation_id else None
        self._assigned_counts = None
        got = decode_assignment(assignment)
        new = [tp for tp in got.partitions if tp.topic in self.subscriptions.subscription]
        owned = set(self.subscriptions.assigned_partitions())
        added = [tp for tp in new if tp not in owned]
        if self.protocol is RebalanceProtocol.COOPERATIVE:
            revoked = [tp for tp in owned if tp not in set(new)]
            if revoked:
                self._revoke(revoked)
                self.request_rejoin(f"revoked {len(revoked)} partition(s) for their new owners")
        self.subscriptions.assign_from_subscribed(new)
        if self.listener is not None:
            self.listener.on_partitions_assigned(sorted(added if self.protocol is RebalanceProtocol.COOPERATIVE
                                                        else new))
        self._next_auto_commit_ns = now_ns + self.group.auto_commit_interval_ms * NS_PER_MS

    # -- the consumer's step ----------------------------------------------------------------------
    def poll(self, now_ns: int) -> int:
        wake = super().poll(now_ns)
        if self.coordinator is None or self.fatal_error is not None or self.closing:
            return wake     # closing: the consumer's close commits once, itself (Consumer.close)
        wake = min(wake, self._refresh_committed_offsets(now_ns))
        self._maybe_rejoin_for_metadata()
        if self.group.enable_auto_commit and not self.rejoin_needed_or_pending:
            wake = min(wake, self.maybe_auto_commit(now_ns))
        return wake

    def _maybe_rejoin_for_metadata(self) -> None:
        snapshot = self._assignment_snapshot
        if snapshot is None or self.rejoin_needed or not self.needs_join:
            return
        # A topic metadata no longer holds is left alone: kctl's metadata forgets topics no
        # one uses (another member's), where Java's keeps the group's (a deleted topic: not seen).
        now = {t: self.metadata.partition_count(t) for t in snapshot}
        changed = sorted(t for t, c in snapshot.items() if now[t] is not None and now[t] != c)
        if changed:
            self._assignment_snapshot = None
            self.request_rejoin("cached metadata has changed: " + ", ".join(
                f"topic {t} has {now[t]} partitions, not {snapshot[t]}" for t in changed))

    @property
    def rejoin_needed_or_pending(self) -> bool:
        """A subscribed member that wants a rebalance or is in one (Java's
        rejoinNeededOrPending): its poll does not auto-commit (on_join_prepare does)."""
        return self.needs_join and (self.rejoin_needed or self.state is not MemberState.STABLE)

    @property
    def in_stable_group(self) -> bool:
        return not self.needs_join or self.state is MemberState.STABLE

    # -- OffsetFetch ---------------------------------------------------------------------------------
    def _refresh_committed_offsets(self, now_ns: int) -> int:
        if self._offset_fetch_in_flight is not None or now_ns < self._offset_fetch_retry_ns:
            return now_ns + 100 * NS_PER_MS
        if self.needs_join and self.state is not MemberState.STABLE:
            return now_ns + 1000 * NS_PER_MS
        parts = self.subscriptions.initializing_partitions()
        if not parts:
            return now_ns + 1000 * NS_PER_MS
        node = self.coordinator
        if node is None or not self.network.ready(node, now_ns):
            return now_ns + NS_PER_MS
        version = self.network.api_version(node, OFFSET_FETCH)
        if version is None:
            self.fatal_error = KctlError("the group coordinator has no OffsetFetch version kctl speaks")
            return now_ns
        version = min(version, _BY_TOPIC_ID_VERSION - 1)
        by_topic: dict[str, list[int]] = {}
        for tp in parts:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        stable = self.fetch_config.isolation_level is IsolationLevel.READ_COMMITTED
        if version >= 8:
            body = _OffsetFetch(groups=[_OffsetFetch.OffsetFetchRequestGroup(
                group_id=self.group.group_id,
                topics=[_OffsetFetch.OffsetFetchRequestTopics(name=t, partition_indexes=p)
                        for t, p in sorted(by_topic.items())])], require_stable=stable)
        else:
            body = _OffsetFetch(group_id=self.group.group_id, require_stable=stable and version >= 7,
                                topics=[_OffsetFetch.OffsetFetchRequestTopic(name=t, partition_indexes=p)
                                        for t, p in sorted(by_topic.items())])
        self._offset_fetch_in_flight = frozenset(parts)
        self.network.send(ClientRequest(node, OFFSET_FETCH, body, api_version=version,
                                        callback=self._on_offset_fetch, created_ns=now_ns), now_ns)
        return now_ns + 100 * NS_PER_MS

    def _on_offset_fetch(self, resp: ClientResponse) -> None:
        asked = self._offset_fetch_in_flight or frozenset()
        self._offset_fetch_in_flight = None
        now = resp.received_ns
        if resp.error is not None or resp.body is None:
            self.mark_coordinator_unknown(f"OffsetFetch failed: {resp.error}", now)
            return
        body = resp.body
        if body.groups:
            group = body.groups[0]
            code, topics = group.error_code, group.topics
        else:
            code, topics = body.error_code or 0, body.topics
        if code:
            name = error_for(code).name
            self.metrics.errors_by_name[name] += 1
            if name in ("NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE"):
                self.mark_coordinator_unknown(f"OffsetFetch: {name}", now)
            elif name in FATAL_GROUP_ERRORS:
                self._fail(name, "OffsetFetch")
            else:
                self._offset_fetch_retry_ns = now + self._backoff_ns
            return
        subs = self.subscriptions
        uncommitted: list[TopicPartition] = []
        for t in topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                if tp not in asked or not subs.is_assigned(tp):
                    continue
                if subs.state(tp).state is not FetchState.INITIALIZING:
                    continue
                if p.error_code:
                    name = error_for(p.error_code).name
                    self.metrics.errors_by_name[name] += 1
                    if name in FATAL_GROUP_ERRORS:
                        self._fail(name, "OffsetFetch")
                    else:   # UNSTABLE_OFFSET_COMMIT and the like: ask again
                        self._offset_fetch_retry_ns = now + self._backoff_ns
                    continue
                if p.committed_offset is not None and p.committed_offset >= 0:
                    epoch = p.committed_leader_epoch if p.committed_leader_epoch is not None else -1
                    subs.seek(tp, FetchPosition(p.committed_offset, epoch))
                    log.debug("group %s: %s starts at its committed offset %s", self.group.group_id, tp,
                              p.committed_offset)
                else:
                    uncommitted.append(tp)
        subs.reset_initializing_positions(uncommitted)

    # -- OffsetCommit --------------------------------------------------------------------------------
    def maybe_auto_commit(self, now_ns: int) -> int:
        """Every ``auto.commit.interval.ms``, one OffsetCommit of every consumed position,
        changed or not, idle or not (Java's autoCommitOffsetsAsync commits
        ``subscriptions.allConsumed()``); nothing only when no partition has a position. A
        retriable failure, or no coordinator to send to, tries again after retry.backoff.ms;
        any other failure at the next interval."""
        if now_ns < self._next_auto_commit_ns:
            return self._next_auto_commit_ns
        self._next_auto_commit_ns = now_ns + self.group.auto_commit_interval_ms * NS_PER_MS
        offsets = self.subscriptions.all_consumed()
        if offsets and not self.commit_async(offsets, now_ns, self._on_auto_commit):
            self._next_auto_commit_ns = now_ns + self._backoff_ns
        return self._next_auto_commit_ns

    def _on_auto_commit(self, result: CommitResult) -> None:
        if result.retriable:
            self._next_auto_commit_ns = result.answered_ns + self._backoff_ns
        elif not result.ok:
            log.info("group %s: auto-commit failed: %s", self.group.group_id, result.describe())

    @property
    def commits_in_flight(self) -> int:
        return self._commits_in_flight

    def commit_async(self, offsets: Mapping[TopicPartition, FetchPosition], now_ns: int,
                     callback: Callable[[CommitResult], None] | None = None, *,
                     request_timeout_ms: int | None = None) -> bool:
        """Sends one OffsetCommit; False (nothing sent) when the coordinator is not ready.
        A subscribed member outside a stable generation sends nothing: ``callback`` hears
        at once that the commit failed (module doc). ``request_timeout_ms``: this request's
        own (default: request.timeout.ms)."""
        node = self.coordinator
        if not offsets:
            return True
        subscribed = self.subscriptions.has_auto_assigned_partitions
        if subscribed and self.state is not MemberState.STABLE:
            why = NOT_STABLE_REBALANCING if self.generation.valid or self.state in (
                MemberState.PREPARING_REBALANCE, MemberState.COMPLETING_REBALANCE) else NOT_STABLE_NO_GENERATION
            log.info("group %s: commit not sent: %s", self.group.group_id,
                     "the member is rebalancing" if why == NOT_STABLE_REBALANCING else "the member is not in the group")
            if callback is not None:
                callback(CommitResult({tp: p.offset for tp, p in offsets.items()},
                                      {tp: why for tp in offsets}, now_ns, sent=False))
            return True
        if node is None or not self.network.ready(node, now_ns):
            return False
        version = self.network.api_version(node, OFFSET_COMMIT)
        if version is None:
            self.fatal_error = KctlError("the group coordinator has no OffsetCommit version kctl speaks")
            return False
        version = min(version, _BY_TOPIC_ID_VERSION - 1)
        # A subscribed member commits with its generation even while closing (its revoke
        # listener's commit comes before LeaveGroup, as in Java); assign mode with -1 and "".
        gen = self.generation if subscribed else None
        by_topic: dict[str, list] = {}
        for tp, pos in sorted(offsets.items()):
            by_topic.setdefault(tp.topic, []).append(_OffsetCommit.OffsetCommitRequestPartition(
                partition_index=tp.partition, committed_offset=pos.offset,
                committed_leader_epoch=pos.leader_epoch, committed_metadata="",
                commit_timestamp=-1))
        body = _OffsetCommit(
            group_id=self.group.group_id,
            generation_id_or_member_epoch=gen.generation_id if gen is not None else -1,
            member_id=gen.member_id if gen is not None else "",
            # Assign mode commits as no member at all (Java: generation -1, no instance id).
            group_instance_id=self.group.group_instance_id if gen is not None else None, retention_time_ms=-1,
            topics=[_OffsetCommit.OffsetCommitRequestTopic(name=t, partitions=p) for t, p in by_topic.items()])
        self._commits_in_flight += 1
        sent = {tp: pos.offset for tp, pos in offsets.items()}
        self.network.send(ClientRequest(node, OFFSET_COMMIT, body, api_version=version, created_ns=now_ns,
                                        callback=lambda r: self._on_commit(r, sent, gen, callback),
                                        request_timeout_ms=request_timeout_ms), now_ns)
        return True

    def _on_commit(self, resp: ClientResponse, sent: dict[TopicPartition, int], gen: Generation | None,
                   callback: Callable[[CommitResult], None] | None) -> None:
        self._commits_in_flight -= 1
        now = resp.received_ns
        errors: dict[TopicPartition, str] = {}
        if resp.error is not None or resp.body is None:
            errors = {tp: "NETWORK_EXCEPTION" for tp in sent}
            self.mark_coordinator_unknown(f"OffsetCommit failed: {resp.error}", now)
        else:
            body = resp.body
            if body.throttle_time_ms:
                self.network.throttle(resp.node, body.throttle_time_ms, now)
            for t in body.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index)
                    if p.error_code:
                        errors[tp] = error_for(p.error_code).name
                    elif tp in sent:
                        self._last_committed[tp] = sent[tp]
            names = set(errors.values())
            for name in names:
                self.metrics.errors_by_name[name] += 1
            if names & {"ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID", "FENCED_INSTANCE_ID"}:
                if "FENCED_INSTANCE_ID" in names:
                    self._fail("FENCED_INSTANCE_ID", "OffsetCommit")
                elif self.needs_join and gen == self.generation:
                    # Only the generation it was sent with (Java's generationUnchanged): a newer
                    # one stays. ILLEGAL_GENERATION keeps the member id, the member may still be valid.
                    self.reset_generation("OffsetCommit: the member is no longer in this generation",
                                          keep_member_id="UNKNOWN_MEMBER_ID" not in names)
            elif "REBALANCE_IN_PROGRESS" in names:
                self.request_rejoin("OffsetCommit: REBALANCE_IN_PROGRESS")
            elif names & {"NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE"}:
                self.mark_coordinator_unknown("OffsetCommit: coordinator moved", now)
            elif names & {"GROUP_AUTHORIZATION_FAILED", "TOPIC_AUTHORIZATION_FAILED"}:
                self._fail(sorted(names)[0], "OffsetCommit")
        if errors:
            self.metrics.commit_failures += 1
            log.info("group %s: commit failed: %s", self.group.group_id, sorted(set(errors.values())))
        else:
            self.metrics.commits += 1
        result = CommitResult(sent, errors, now)
        self.last_commit = result
        if callback is not None:
            callback(result)

    def committed(self) -> dict[TopicPartition, int]:
        """Offsets this member committed successfully (its own view)."""
        return dict(self._last_committed)
