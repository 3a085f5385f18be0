"""What a consumer reads and where it is (the Java client's ``SubscriptionState``).

How this works
--------------
A consumer either *assigns* partitions itself (``assign``: no group) or *subscribes*
to topics (``subscribe``) and gets partitions from its group's leader
(``assign_from_subscribed``, called by the coordinator after each rebalance). Each
assigned partition has a ``PartitionState``: its fetch state, its position (the next
offset to hand out, with the leader epoch of the record before it), and what the last
Fetch response said about the log (high watermark, last stable offset, log start
offset, preferred read replica).

Fetch states are a table (``TRANSITIONS``): a new partition is INITIALIZING until it
has a position; ``seek`` makes it FETCHING; ``request_offset_reset`` (a ``--from``
position, no committed offset, or OFFSET_OUT_OF_RANGE) makes it AWAIT_RESET until the
OffsetFetcher's ListOffsets answer seeks it. Only FETCHING partitions that are not
paused are fetched. A transition the table lacks is a bug and raises.

No I/O, no clock: times are passed in.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from kctl.consumer_config import AutoOffsetReset, IsolationLevel, OffsetResetStrategy
from kctl.engine.batch import TopicPartition
from kctl.errors import KctlError

__all__ = ["FetchPosition", "FetchState", "PartitionState", "SubscriptionState", "SubscriptionType",
           "ResetKind", "ResetRequest", "NoOffsetForPartitionError", "OffsetOutOfRangeError"]


class FetchState(enum.Enum):
    INITIALIZING = "initializing"    # assigned, no position yet
    FETCHING = "fetching"            # has a position; fetched unless paused
    AWAIT_RESET = "await_reset"      # waiting for ListOffsets to give a position


#: Allowed fetch-state transitions (h11-style table); anything else raises.
TRANSITIONS: dict[FetchState, frozenset[FetchState]] = {
    FetchState.INITIALIZING: frozenset({FetchState.FETCHING, FetchState.AWAIT_RESET}),
    FetchState.FETCHING: frozenset({FetchState.FETCHING, FetchState.AWAIT_RESET}),
    FetchState.AWAIT_RESET: frozenset({FetchState.FETCHING, FetchState.AWAIT_RESET}),
}


class SubscriptionType(enum.Enum):
    NONE = "none"
    USER_ASSIGNED = "assign"
    AUTO_TOPICS = "subscribe"


@dataclass(frozen=True, slots=True)
class FetchPosition:
    offset: int
    leader_epoch: int = -1       # epoch of the record before ``offset`` (-1: unknown)


class ResetKind(enum.Enum):
    EARLIEST = "earliest"
    LATEST = "latest"
    TIMESTAMP = "timestamp"        # the first offset with a timestamp >= timestamp_ms
    BY_DURATION = "by_duration"    # TIMESTAMP at now minus duration_ms (KIP-1106)


@dataclass(frozen=True, slots=True)
class ResetRequest:
    """Where a reset goes (``auto.offset.reset``, or a ``--from`` position)."""

    kind: ResetKind
    timestamp_ms: int = -1
    duration_ms: int = 0

    def list_offsets_timestamp(self, now_wall_ms: int) -> int:
        """ListOffsets' timestamp: -2 earliest, -1 latest, else a time in ms."""
        if self.kind is ResetKind.EARLIEST:
            return -2
        if self.kind is ResetKind.LATEST:
            return -1
        if self.kind is ResetKind.BY_DURATION:
            return max(0, now_wall_ms - self.duration_ms)
        return self.timestamp_ms

    @classmethod
    def from_config(cls, reset: AutoOffsetReset) -> ResetRequest | None:
        """``auto.offset.reset`` as a request; None for ``none``."""
        kind = {OffsetResetStrategy.EARLIEST: ResetKind.EARLIEST, OffsetResetStrategy.LATEST: ResetKind.LATEST,
                OffsetResetStrategy.BY_DURATION: ResetKind.BY_DURATION}.get(reset.strategy)
        return None if kind is None else cls(kind, duration_ms=reset.duration_ms)


class PartitionState:
    """One assigned partition (Java's ``TopicPartitionState``)."""

    __slots__ = ("tp", "state", "position", "high_watermark", "last_stable_offset",
                 "log_start_offset", "paused", "reset", "next_reset_ns", "preferred_replica",
                 "preferred_replica_expiry_ns", "end_offset_at_start", "pending_revocation")

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.state = FetchState.INITIALIZING
        self.position: FetchPosition | None = None
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.log_start_offset = -1
        self.paused = False
        self.reset: ResetRequest | None = None
        self.next_reset_ns = 0           # a failed reset retries after retry.backoff.ms
        self.preferred_replica = -1
        self.preferred_replica_expiry_ns = 0
        self.end_offset_at_start = -1    # for lag and backlog figures, when asked for
        # Java's pendingRevocation: an eager rebalance's commit is in flight; no Fetch for it
        # and nothing handed out, so the position stays at what is being committed.
        self.pending_revocation = False

    def transition(self, to: FetchState) -> None:
        if to not in TRANSITIONS[self.state]:
            raise KctlError(f"{self.tp}: fetch state {self.state.value} -> {to.value} is not allowed")
        self.state = to

    def lag(self, isolation: IsolationLevel) -> int | None:
        """End offset (high watermark, or last stable offset for read_committed) minus
        position; None until both are known (Java's ``partitionLag``)."""
        end = self.last_stable_offset if isolation is IsolationLevel.READ_COMMITTED else self.high_watermark
        if self.position is None or end < 0:
            return None
        return end - self.position.offset


class SubscriptionState:
    def __init__(self, default_reset: AutoOffsetReset) -> None:
        self.default_reset = default_reset
        self.type = SubscriptionType.NONE
        self.subscription: frozenset[str] = frozenset()
        self._assigned: dict[TopicPartition, PartitionState] = {}
        self.assignment_version = 0     # bumped whenever the assignment changes

    # -- subscribing and assigning -------------------------------------------------------
    def _set_type(self, kind: SubscriptionType) -> None:
        if self.type is SubscriptionType.NONE:
            self.type = kind
        elif self.type is not kind:
            raise KctlError("subscribe() and assign() cannot be mixed on one consumer "
                            "(the Java consumer refuses it too)")

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Manual assignment (no group): exactly these partitions, keeping the state of
        those already assigned."""
        self._set_type(SubscriptionType.USER_ASSIGNED)
        self._replace(list(partitions))

    def subscribe(self, topics: Iterable[str]) -> bool:
        """Group subscription; True when the topic set changed."""
        self._set_type(SubscriptionType.AUTO_TOPICS)
        topics = frozenset(topics)
        changed = topics != self.subscription
        self.subscription = topics
        return changed

    def assign_from_subscribed(self, partitions: Iterable[TopicPartition]) -> None:
        """The coordinator's assignment after a rebalance."""
        if self.type is not SubscriptionType.AUTO_TOPICS:
            raise KctlError("assign_from_subscribed without subscribe()")
        parts = list(partitions)
        for tp in parts:
            if tp.topic not in self.subscription:
                raise KctlError(f"the group assigned {tp}, whose topic this consumer does not subscribe to")
        self._replace(parts)

    def _replace(self, parts: list[TopicPartition]) -> None:
        old = self._assigned
        self._assigned = {tp: old.get(tp) or PartitionState(tp) for tp in parts}
        for s in self._assigned.values():
            s.pending_revocation = False
        if set(old) != set(self._assigned):
            self.assignment_version += 1

    def unsubscribe(self) -> None:
        self._assigned = {}
        self.subscription = frozenset()
        self.type = SubscriptionType.NONE
        self.assignment_version += 1

    @property
    def has_auto_assigned_partitions(self) -> bool:
        return self.type is SubscriptionType.AUTO_TOPICS

    # -- questions ---------------------------------------------------------------------------
    def assigned_partitions(self) -> list[TopicPartition]:
        return list(self._assigned)

    def is_assigned(self, tp: TopicPartition) -> bool:
        return tp in self._assigned

    def state(self, tp: TopicPartition) -> PartitionState:
        try:
            return self._assigned[tp]
        except KeyError:
            raise KctlError(f"{tp} is not assigned to this consumer") from None

    def states(self) -> list[PartitionState]:
        return list(self._assigned.values())

    def fetchable_partitions(self) -> list[PartitionState]:
        """Partitions a Fetch may ask for now: FETCHING with a position, not paused, not
        pending revocation."""
        return [s for s in self._assigned.values()
                if s.state is FetchState.FETCHING and not s.paused and not s.pending_revocation
                and s.position is not None]

    def mark_pending_revocation(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self.state(tp).pending_revocation = True

    def is_pending_revocation(self, tp: TopicPartition) -> bool:
        s = self._assigned.get(tp)
        return s is not None and s.pending_revocation

    def initializing_partitions(self) -> list[TopicPartition]:
        return [tp for tp, s in self._assigned.items() if s.state is FetchState.INITIALIZING]

    def partitions_needing_reset(self, now_ns: int) -> list[PartitionState]:
        return [s for s in self._assigned.values()
                if s.state is FetchState.AWAIT_RESET and now_ns >= s.next_reset_ns]

    def has_all_fetch_positions(self) -> bool:
        return all(s.state is FetchState.FETCHING for s in self._assigned.values())

    def position(self, tp: TopicPartition) -> FetchPosition | None:
        s = self._assigned.get(tp)
        return None if s is None else s.position

    def all_consumed(self) -> dict[TopicPartition, FetchPosition]:
        """Positions of FETCHING partitions (what a commit of "consumed so far" commits)."""
        return {tp: s.position for tp, s in self._assigned.items()
                if s.state is FetchState.FETCHING and s.position is not None}

    # -- moving ------------------------------------------------------------------------------
    def seek(self, tp: TopicPartition, position: FetchPosition) -> None:
        s = self.state(tp)
        s.transition(FetchState.FETCHING)
        s.position = position
        s.reset = None

    def seek_unvalidated(self, tp: TopicPartition, offset: int) -> None:
        """A user's seek (``--from <offset>``): fetch from ``offset`` as given."""
        self.seek(tp, FetchPosition(offset))

    def request_offset_reset(self, tp: TopicPartition, reset: ResetRequest | None = None) -> None:
        """Ask for a position from ListOffsets (default: ``auto.offset.reset``)."""
        s = self.state(tp)
        if reset is None:
            reset = self.default_reset_request(tp)
        s.transition(FetchState.AWAIT_RESET)
        s.reset = reset
        s.next_reset_ns = 0

    def default_reset_request(self, tp: TopicPartition) -> ResetRequest:
        request = ResetRequest.from_config(self.default_reset)
        if request is None:
            raise NoOffsetForPartitionError.of([tp])
        return request

    def reset_initializing_positions(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Partitions still without a position (of ``partitions``, default every one) reset
        by ``auto.offset.reset``; with ``none``, one error naming them all (Java's
        ``resetInitializingPositions``)."""
        wanted = None if partitions is None else set(partitions)
        parts = [tp for tp in self.initializing_partitions() if wanted is None or tp in wanted]
        if parts and not self.has_default_reset:
            raise NoOffsetForPartitionError.of(parts)
        for tp in parts:
            self.request_offset_reset(tp)

    @property
    def has_default_reset(self) -> bool:
        return self.default_reset.strategy is not OffsetResetStrategy.NONE

    def reset_failed(self, tp: TopicPartition, retry_at_ns: int) -> None:
        s = self._assigned.get(tp)
        if s is not None and s.state is FetchState.AWAIT_RESET:
            s.next_reset_ns = retry_at_ns

    def pause(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self.state(tp).paused = True

    def resume(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self.state(tp).paused = False


class NoOffsetForPartitionError(KctlError):
    """auto.offset.reset=none and a partition has no position (Java's NoOffsetForPartitionException)."""

    @classmethod
    def of(cls, partitions: Iterable[TopicPartition]) -> NoOffsetForPartitionError:
        names = ", ".join(str(tp) for tp in sorted(partitions))
        # Java's wording, then which setting says so.
        return cls(f"Undefined offset with no reset policy for partitions: [{names}] (auto.offset.reset=none)")


class OffsetOutOfRangeError(KctlError):
    """The position is outside the log and auto.offset.reset=none (Java's OffsetOutOfRangeException)."""
