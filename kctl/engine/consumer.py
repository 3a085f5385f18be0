"""Consumer: the read side's front door (the Java client's KafkaConsumer).

How this works
--------------
One consumer per process and thread, like the producer: the thread that polls runs
the I/O loop. ``run_once(now_ns)`` is the loop body, one step without waiting: fail
on a TLS/SASL refusal or a fatal group/offset error, refresh metadata when due
(``MetadataUpdater``, shared with the producer; an error for a topic it reads raises), let the
group coordinator find its coordinator, join, sync, heartbeat, fetch committed offsets
and auto-commit (``ConsumerCoordinator.poll``), give partitions without a position one
(their committed offset, or ``auto.offset.reset`` / a ``seek_to_*`` through ListOffsets),
and send Fetches (``Fetcher.send_fetches``). It returns when it next needs to run.

``poll_batches(timeout_s)`` (the load path) and ``poll(timeout_s)`` (one
``ConsumerRecord`` per record, for everyone else) run steps and wait on the sockets
until records are there or the timeout passes, then hand out at most
``max.poll.records`` records; before returning they send the next Fetches, so the
broker fills them while the caller works (Java's pipelining). ``poll_batches`` hands
out ``ConsumedBatch``es: per batch, with the records' ``kctl`` identities scanned and
no object per record.

Blocking helpers run the loop until done or a timeout: ``commit_sync``,
``end_offsets`` / ``beginning_offsets`` / ``offsets_for_times``, ``close``.

``close(timeout_s)`` is Java's ``KafkaConsumer.close(Duration)`` and takes at most
``close_bound_s``: the timeout (Java's default, 30 s), but no more than
``request.timeout.ms`` (Java's close timer). Within it: with ``enable.auto.commit``, one
synchronous commit (Java's commitOffsetsSync: a retriable failure, such as a request that
timed out and dropped the coordinator, is sent again after its backoff once a coordinator
is found); nothing else is fetched, joined or auto-committed meanwhile (heartbeats go on, as
Java's heartbeat thread does). Then LeaveGroup when a coordinator is known (as Java's
maybeLeaveGroup; written at once even when the commit took the whole bound), then the rest
of the bound for the coordinator's pending requests, then the connections close, a commit
still in flight with them (its outcome unknown: the coordinator may have stored it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from kctl.consumer_config import ConsumerConfig
from kctl.engine.backoff import RETRY_BACKOFF_EXP_BASE, RETRY_BACKOFF_JITTER, ExponentialBackoff, Random
from kctl.engine.batch import TopicPartition
from kctl.engine.clock import NS_PER_MS, Clock, SystemClock
from kctl.engine.consumer_coordinator import (
    CommitResult, ConsumerCoordinator, FailedCommits, RebalanceListener)
from kctl.engine.consumer_metrics import ConsumerMetrics, ConsumerMetricsSnapshot
from kctl.engine.fetcher import ConsumedBatch, Fetcher
from kctl.engine.metadata import Metadata, MetadataUpdate
from kctl.engine.metadata_updater import MetadataUpdater
from kctl.engine.network import NetworkClient
from kctl.engine.offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, ListedOffset, OffsetFetcher
from kctl.engine.subscription import FetchPosition, ResetKind, ResetRequest, SubscriptionState
from kctl.errors import ConfigError, KctlError
from kctl.protocol.records import Header

__all__ = ["DEFAULT_CLOSE_TIMEOUT_S", "Consumer", "ConsumerRecord", "close_bound_s"]

log = logging.getLogger(__name__)

#: Longest single wait on the sockets inside poll (a wakeup cannot be missed for longer).
_MAX_WAIT_NS = 100 * NS_PER_MS
#: Java's ``KafkaConsumer.close()`` timeout (DEFAULT_CLOSE_TIMEOUT_MS).
DEFAULT_CLOSE_TIMEOUT_S = 30.0
#: Added to close's own commit's request timeout, so that the close's bound passes first.
_CLOSE_COMMIT_TIMEOUT_LAPSE_MS = 1000
#: How long close waits for LeaveGroup's answer at most (within its bound): it does not matter.
_LEAVE_WAIT_NS = 1000 * NS_PER_MS


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


class ConsumerClosedError(KctlError):
    """poll() after close()."""


def close_bound_s(config: ConsumerConfig, timeout_s: float = DEFAULT_CLOSE_TIMEOUT_S) -> float:
    """How long ``close(timeout_s)`` takes at most: the timeout, but no more than
    ``request.timeout.ms`` (Java's close timer, ``createTimerForRequest``). A process that
    runs a consumer gives it this long to close before it is killed (load/consume_run.py)."""
    return min(timeout_s, config.request_timeout_ms / 1000)


class _SyncCommit:
    """One synchronous commit's attempts (Java's ``commitOffsetsSync``): sent once a
    coordinator is ready, its answer awaited, a retriable failure sent again after a growing
    backoff (retry.backoff.ms to retry.backoff.max.ms), until it succeeds, fails for good or
    the deadline passes. After ``run``: ``answer`` is the last attempt's answer (None: none
    came); ``in_flight``, the last attempt was sent and is unanswered; ``retrying``, a
    retriable failure was waiting for its backoff or for a coordinator to send to again."""

    def __init__(self, consumer: Consumer, coordinator: ConsumerCoordinator,
                 positions: Mapping[TopicPartition, FetchPosition], *,
                 request_timeout_ms: int | None = None) -> None:
        self.clock = consumer.clock
        self.coordinator = coordinator
        self.positions = positions
        self.request_timeout_ms = request_timeout_ms
        g = coordinator.group
        self._backoff = ExponentialBackoff(g.retry_backoff_ms, RETRY_BACKOFF_EXP_BASE, g.retry_backoff_max_ms,
                                           RETRY_BACKOFF_JITTER, consumer._random)
        self._attempts = 0
        self.answer: CommitResult | None = None
        self.in_flight = False
        self.retrying = False

    def _answered(self, result: CommitResult) -> None:
        self.in_flight = False
        self.answer = result

    def run(self, deadline_ns: int, step: Callable[[int], None]) -> None:
        """``step(max_wait_ns)``: one turn of the caller's loop (finds the coordinator, does I/O)."""
        clock, c = self.clock, self.coordinator
        while True:
            while True:
                now = clock.now_ns()
                if c.coordinator is not None:
                    self.in_flight = True
                    if c.commit_async(self.positions, now, self._answered,
                                      request_timeout_ms=self.request_timeout_ms):
                        break
                    self.in_flight = False
                if now >= deadline_ns:
                    return
                step(deadline_ns - now)
            self.retrying = False
            while self.in_flight:
                now = clock.now_ns()
                if now >= deadline_ns:
                    return
                step(deadline_ns - now)
            answer = self.answer
            assert answer is not None
            retry_at = clock.now_ns() + self._backoff.backoff_ns(self._attempts)
            self._attempts += 1
            if answer.ok or not answer.retriable or retry_at >= deadline_ns:
                return
            self.retrying = True
            while clock.now_ns() < retry_at:
                step(retry_at - clock.now_ns())


class Consumer:
    def __init__(self, config: ConsumerConfig, *, clock: Clock | None = None,
                 network: NetworkClient | None = None, listener: RebalanceListener | None = None,
                 random: Random | None = None) -> None:
        """``random``: the jitter source of the metadata refresh backoff (``Metadata``);
        pinned by tests that step the consumer with a fake clock."""
        if not config.bootstrap_servers and network is None:
            raise ConfigError("bootstrap.servers is required")
        self.config = config
        self.clock = clock or SystemClock()
        now = self.clock.now_ns()
        self.wall_offset_ns = self.clock.wall_ns() - now   # monotonic -> Unix epoch ns
        self.metrics = ConsumerMetrics()
        self.metadata = Metadata(config.metadata, allow_auto_topic_creation=config.allow_auto_create_topics,
                                 random=random)
        self.network = network or NetworkClient(config.network, clock=self.clock,
                                                bootstrap=config.bootstrap_servers)
        self.subscriptions = SubscriptionState(config.auto_offset_reset)
        fetch = config.fetch
        self.fetcher = Fetcher(fetch, self.subscriptions, self.metadata, self.network, self.metrics,
                               metadata_max_age_ms=config.metadata_max_age_ms)
        self.offsets = OffsetFetcher(fetch, self.subscriptions, self.metadata, self.network, self.metrics,
                                     wall_ms=self.clock.wall_ms)
        group = config.group
        self.coordinator = (ConsumerCoordinator(group, fetch, self.subscriptions, self.metadata, self.network,
                                                self.metrics, now_ns=now, wall_ms=self.clock.wall_ms,
                                                listener=listener)
                            if group is not None else None)
        self.metadata_updater = MetadataUpdater(self.metadata, self.network, self._on_metadata_update)
        self._random = random
        self._closed = False
        self.close_commit_error: str | None = None   # why close()'s commit failed (None: it did not)
        self._next_wake_ns = now

    # -- what to read ----------------------------------------------------------------------------
    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions (no group membership; commits still go to
        ``group.id`` when it is set, as in Java)."""
        parts = list(partitions)
        self.subscriptions.assign(parts)
        self.metadata.add_topics({tp.topic for tp in parts})
        self.fetcher.clear_buffered(keep=self.subscriptions.is_assigned)

    def subscribe(self, topics: Iterable[str]) -> None:
        """Join ``group.id`` for these topics; partitions come from the group's leader."""
        if self.coordinator is None:
            raise ConfigError("subscribe() needs a group.id (or use assign mode)")
        topics = list(topics)
        if self.subscriptions.subscribe(topics):
            self.metadata.add_topics(topics)
            self.coordinator.request_rejoin("subscription changed")

    def assignment(self) -> list[TopicPartition]:
        return self.subscriptions.assigned_partitions()

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.subscriptions.seek_unvalidated(tp, offset)
        self.fetcher.clear_buffered(keep=lambda x: x != tp)

    def seek_to_beginning(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self.subscriptions.request_offset_reset(tp, ResetRequest(ResetKind.EARLIEST))

    def seek_to_end(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self.subscriptions.request_offset_reset(tp, ResetRequest(ResetKind.LATEST))

    def seek_to_timestamp(self, partitions: Iterable[TopicPartition], timestamp_ms: int) -> None:
        """The first offset whose timestamp is at least ``timestamp_ms`` (the end when none is)."""
        for tp in partitions:
            self.subscriptions.request_offset_reset(tp, ResetRequest(ResetKind.TIMESTAMP, timestamp_ms))

    def position(self, tp: TopicPartition) -> int | None:
        p = self.subscriptions.position(tp)
        return None if p is None else p.offset

    def lag(self) -> dict[TopicPartition, int | None]:
        """Per assigned partition: end offset (high watermark, or last stable offset with
        read_committed) minus position, from the latest Fetch answer."""
        iso = self.config.isolation_level
        return {s.tp: s.lag(iso) for s in self.subscriptions.states()}

    # -- the loop ------------------------------------------------------------------------------
    def run_once(self, now_ns: int) -> int:
        """One step (module doc); returns when the next is due (monotonic ns)."""
        auth = self.network.authentication_error()
        if auth is not None:
            raise KctlError(str(auth))
        wake = now_ns + 1000 * NS_PER_MS
        wake = min(wake, self.metadata_updater.maybe_update(now_ns))
        if self.coordinator is not None:
            wake = min(wake, self.coordinator.poll(now_ns))
            if self.coordinator.fatal_error is not None:
                raise self.coordinator.fatal_error
        else:
            self.subscriptions.reset_initializing_positions()
        self.offsets.reset_positions_if_needed(now_ns)
        self.offsets.poll_queries(now_ns)
        if self.offsets.fatal_error is not None:
            raise self.offsets.fatal_error
        self.fetcher.send_fetches(now_ns)
        self._next_wake_ns = wake
        return wake

    def _on_metadata_update(self, update: MetadataUpdate, now_ns: int) -> None:
        wanted = {tp.topic for tp in self.subscriptions.assigned_partitions()} | set(self.subscriptions.subscription)
        for topic, error in update.topic_errors.items():
            if topic in wanted:
                raise KctlError(f"topic {topic!r}: {error}")

    def step(self, timeout_s: float = 0.0) -> None:
        """One loop turn (positions, group, Fetches) waiting on the sockets up to
        ``timeout_s``, without handing records out: they stay buffered for the next poll."""
        if self._closed:
            raise ConsumerClosedError("step after close()")
        if self.coordinator is not None:
            self.coordinator.polled(self.clock.now_ns())
        self._step(int(timeout_s * 1e9))

    def _step(self, max_wait_ns: int) -> None:
        now = self.clock.now_ns()
        wake = self.run_once(now)
        if self.fetcher.has_completed_fetches:
            max_wait_ns = 0
        self.network.poll(max(0, min(wake - now, max_wait_ns, _MAX_WAIT_NS)), now)

    def poll_batches(self, timeout_s: float = 0.0) -> list[ConsumedBatch]:
        """The load path: records per batch (module doc), ``max.poll.records`` at most."""
        if self._closed:
            raise ConsumerClosedError("poll after close()")
        clock = self.clock
        start = clock.now_ns()
        if self.coordinator is not None:
            self.coordinator.polled(start)
        deadline = start + int(timeout_s * 1e9)
        stepped = False
        while True:
            if self.fetcher.has_completed_fetches:
                now = clock.now_ns()
                out = self.fetcher.collect(self.config.max_poll_records, now)
                if out:
                    # Pipelining: ask for the next data before the caller works on this.
                    self.fetcher.send_fetches(now)
                    self.network.poll(0, now)
                    return out
                if self.fetcher.has_completed_fetches:
                    continue
            now = clock.now_ns()
            if stepped and now >= deadline:
                return []
            self._step(max(0, deadline - now))
            stepped = True

    def poll(self, timeout_s: float = 0.0) -> list[ConsumerRecord]:
        """One ``ConsumerRecord`` per record handed out (Java's ``poll``)."""
        out = []
        for cb in self.poll_batches(timeout_s):
            t, p = cb.tp.topic, cb.tp.partition
            out.extend(ConsumerRecord(t, p, r.offset, r.timestamp, r.key, r.value, r.headers)
                       for r in cb.records)
        return out

    def _run_until(self, done, timeout_s: float, what: str) -> None:
        deadline = self.clock.now_ns() + int(timeout_s * 1e9)
        while not done():
            now = self.clock.now_ns()
            if now >= deadline:
                raise KctlError(f"{what} did not complete within {timeout_s:g} s")
            self._step(deadline - now)

    # -- offsets ---------------------------------------------------------------------------------
    def _list(self, timestamps: Mapping[TopicPartition, int], timeout_s: float | None) -> dict[TopicPartition, ListedOffset]:
        for tp in timestamps:
            self.metadata.add_topics([tp.topic])
        q = self.offsets.list_offsets(timestamps, self.clock.now_ns())
        limit = self.config.default_api_timeout_ms / 1000 if timeout_s is None else timeout_s
        self._run_until(lambda: q.done, limit, "ListOffsets")
        if q.errors:
            tp, name = sorted(q.errors.items())[0]
            raise KctlError(f"ListOffsets for {tp}: {name}")
        return q.results

    def end_offsets(self, partitions: Sequence[TopicPartition], timeout_s: float | None = None) -> dict[TopicPartition, int]:
        return {tp: r.offset for tp, r in self._list({tp: LATEST_TIMESTAMP for tp in partitions}, timeout_s).items()}

    def beginning_offsets(self, partitions: Sequence[TopicPartition],
                          timeout_s: float | None = None) -> dict[TopicPartition, int]:
        return {tp: r.offset for tp, r in self._list({tp: EARLIEST_TIMESTAMP for tp in partitions}, timeout_s).items()}

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int],
                          timeout_s: float | None = None) -> dict[TopicPartition, ListedOffset]:
        return self._list(timestamps, timeout_s)

    def partitions_for(self, topic: str, timeout_s: float | None = None) -> tuple[int, ...]:
        """The topic's partitions, waiting for metadata (``default.api.timeout.ms``)."""
        self.metadata.add_topics([topic])
        if self.metadata.partition_count(topic) is None:
            self.metadata.request_update()
        limit = self.config.default_api_timeout_ms / 1000 if timeout_s is None else timeout_s
        try:
            self._run_until(lambda: self.metadata.partition_count(topic) is not None, limit,
                            f"metadata for topic {topic!r}")
        except KctlError as e:
            refresh_error = self.metadata_updater.last_error
            if refresh_error is None:
                raise
            raise KctlError(f"{e}; the last metadata refresh failed: {refresh_error}") from None
        return tuple(range(self.metadata.partition_count(topic) or 0))

    # -- commits ---------------------------------------------------------------------------------
    def _need_group(self) -> ConsumerCoordinator:
        if self.coordinator is None:
            raise ConfigError("committing offsets needs a group.id")
        return self.coordinator

    def commit_async(self, offsets: Mapping[TopicPartition, int] | None = None) -> bool:
        c = self._need_group()
        positions = (self.subscriptions.all_consumed() if offsets is None
                     else {tp: FetchPosition(o) for tp, o in offsets.items()})
        return c.commit_async(positions, self.clock.now_ns())

    def commit_sync(self, offsets: Mapping[TopicPartition, int] | None = None,
                    timeout_s: float | None = None) -> CommitResult:
        """Commits (the consumed positions by default) and runs the loop until answered; a
        retriable failure is sent again after retry.backoff.ms (growing to
        retry.backoff.max.ms) while the timeout lasts (Java's commitOffsetsSync), then its
        last failure is the result."""
        c = self._need_group()
        positions = (self.subscriptions.all_consumed() if offsets is None
                     else {tp: FetchPosition(o) for tp, o in offsets.items()})
        if not positions:
            return CommitResult({})
        limit = self.config.default_api_timeout_ms / 1000 if timeout_s is None else timeout_s
        sync = _SyncCommit(self, c, positions)
        sync.run(self.clock.now_ns() + int(limit * 1e9), self._step)
        if sync.answer is not None and not sync.in_flight and not sync.retrying:
            return sync.answer
        raise KctlError(f"commit did not complete within {limit:g} s" + ("" if sync.in_flight else " (no coordinator)"))

    @property
    def rebalance_commit_failures(self) -> FailedCommits:
        """The commits before a rebalance (``enable.auto.commit``) that failed for good:
        the group's offsets were left behind what was read (ConsumerCoordinator's doc)."""
        return self.coordinator.rebalance_commit_failures if self.coordinator is not None else FailedCommits()

    def metrics_snapshot(self) -> ConsumerMetricsSnapshot:
        """The counters, with the network client's SASL re-authentications."""
        return self.metrics.snapshot(reauthentications=self.network.metrics.reauthentications_total)

    # -- closing ---------------------------------------------------------------------------------
    def close(self, timeout_s: float = DEFAULT_CLOSE_TIMEOUT_S) -> None:
        """Java's ``KafkaConsumer.close(Duration)``, bounded by ``close_bound_s`` (module doc):
        with ``enable.auto.commit`` one synchronous commit of the consumed positions (a
        retriable failure sent again after its backoff) within the bound, then LeaveGroup
        (written even when the commit took the whole bound: Java's maybeLeaveGroup polls
        once), then what is left of the bound for requests still pending at the coordinator
        (LeaveGroup's answer one short while at most), then the connections close. A commit
        that failed, or was not done within the bound, is kept in ``close_commit_error`` and
        counts once in ``commit_failures`` (an answered failure when answered; one left
        unanswered, or never sent, here)."""
        if self._closed:
            return
        self._closed = True
        c = self.coordinator
        try:
            if c is not None and c.fatal_error is None:
                self._close_group(c, timeout_s)
        finally:
            self.network.close_all()

    def _close_group(self, c: ConsumerCoordinator, timeout_s: float) -> None:
        bound_s = close_bound_s(self.config, timeout_s)
        start = self.clock.now_ns()
        deadline = start + int(bound_s * 1e9)
        # Nothing joins, auto-commits or fetches from here: Java's close does not run poll().
        c.closing = True
        positions = self.subscriptions.all_consumed() if self.config.enable_auto_commit else {}
        sync = None
        unanswered = False
        if positions:
            # The bound passes before the commit's own request timeout can (Java's close timer
            # starts before the commit is sent): a commit in flight at the bound is unanswered
            # and the coordinator still known for LeaveGroup, however late the last wait woke.
            sync = _SyncCommit(self, c, positions,
                               request_timeout_ms=self.config.request_timeout_ms + _CLOSE_COMMIT_TIMEOUT_LAPSE_MS)
            try:
                sync.run(deadline, lambda wait_ns: self._close_step(c, wait_ns))
            except KctlError as e:          # the group failed for good meanwhile
                self.close_commit_error = str(e)
            unanswered = sync.in_flight     # at the bound (a timeout may answer it just after)
        now = self.clock.now_ns()
        had_member = bool(c.member_id) and c.group.group_instance_id is None
        left = c.maybe_leave_group("the consumer is being closed", now)
        if left:
            self.network.poll(0, now)       # written now, whatever is left of the bound
        elif had_member and c.coordinator is None:
            log.info("group %s: LeaveGroup not sent: no coordinator known at close", c.group.group_id)
        # Java's close awaits the coordinator's pending requests within the bound: a commit
        # sent while closing (the revoke listener's) is waited for; LeaveGroup (whose answer
        # does not matter) one short while.
        leave_end = min(deadline, now + _LEAVE_WAIT_NS) if left else now
        while c.coordinator is not None and self.network.has_in_flight_requests(c.coordinator):
            t = self.clock.now_ns()
            if t >= (deadline if c.commits_in_flight else leave_end):
                break
            self.network.poll(10 * NS_PER_MS, t)
        if sync is not None and self.close_commit_error is None:
            self.close_commit_error = self._close_commit_failure(sync, unanswered, bound_s)

    def _close_step(self, c: ConsumerCoordinator, max_wait_ns: int) -> None:
        """One turn of the loop while closing: the coordinator found again, heartbeats
        (Java's heartbeat thread runs on through the closing commit); no Fetch."""
        now = self.clock.now_ns()
        wake = c.poll(now)
        if c.fatal_error is not None:
            raise c.fatal_error
        self.network.poll(max(0, min(wake - now, max_wait_ns, _MAX_WAIT_NS)), now)

    def _close_commit_failure(self, sync: _SyncCommit, unanswered: bool, bound_s: float) -> str | None:
        """Why close's commit left the group's offsets behind what was read (None: it did
        not). ``unanswered``: its last attempt was in flight when the bound passed (then
        either still is, or was answered while LeaveGroup was written: a request timeout's
        disconnect is no answer from the coordinator)."""
        bound = (f"the close's {bound_s:g} s (min(close timeout, request.timeout.ms "
                 f"{self.config.request_timeout_ms}))")
        answer = sync.answer
        if sync.in_flight or answer is None or not answer.sent:
            self.metrics.commit_failures += 1   # failed with no answer to count it (module doc)
        if sync.in_flight or (unanswered and answer is not None and not answer.ok
                              and set(answer.errors.values()) == {"NETWORK_EXCEPTION"}):
            return (f"OffsetCommit not answered within {bound}; whether the coordinator stored it "
                    "is unknown")
        if sync.retrying or answer is None:
            last = f" (the last attempt: {answer.describe()})" if answer is not None else ""
            return f"not sent: no coordinator ready within {bound}{last}"
        return None if answer.ok else answer.describe()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wall_ns(self, monotonic_ns: int) -> int:
        """A monotonic reading of this consumer's clock as Unix epoch ns."""
        return monotonic_ns + self.wall_offset_ns

