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
``end_offsets`` / ``beginning_offsets`` / ``offsets_for_times``, ``close`` (commits
when ``enable.auto.commit``, leaves the group, closes connections).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
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

__all__ = ["Consumer", "ConsumerRecord"]

log = logging.getLogger(__name__)

#: Longest single wait on the sockets inside poll (a wakeup cannot be missed for longer).
_MAX_WAIT_NS = 100 * NS_PER_MS


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
        deadline = self.clock.now_ns() + int(limit * 1e9)
        g = c.group
        backoff = ExponentialBackoff(g.retry_backoff_ms, RETRY_BACKOFF_EXP_BASE, g.retry_backoff_max_ms,
                                     RETRY_BACKOFF_JITTER, self._random)
        attempts = 0
        while True:
            results: list[CommitResult] = []
            while not results:
                now = self.clock.now_ns()
                if c.coordinator is not None and c.commit_async(positions, now, results.append):
                    break
                if now >= deadline:
                    raise KctlError(f"commit did not complete within {limit:g} s (no coordinator)")
                self._step(deadline - now)
            self._run_until(lambda: bool(results), max(0.0, (deadline - self.clock.now_ns()) / 1e9), "commit")
            result = results[0]
            retry_at = self.clock.now_ns() + backoff.backoff_ns(attempts)
            attempts += 1
            if result.ok or not result.retriable or retry_at >= deadline:
                return result
            while self.clock.now_ns() < retry_at:
                self._step(retry_at - self.clock.now_ns())

    @property
    def rebalance_commit_failures(self) -> FailedCommits:
        """The commits before a rebalance (``enable.auto.commit``) that failed for good:
        the group's offsets were left behind what was read (ConsumerCoordinator's doc)."""
        return self.coordinator.rebalance_commit_failures if self.coordinator is not None else FailedCommits()

    def metrics_snapshot(self) -> ConsumerMetricsSnapshot:
        """The counters, with the network client's SASL re-authentications."""
        return self.metrics.snapshot(reauthentications=self.network.metrics.reauthentications_total)

    # -- closing ---------------------------------------------------------------------------------
    def close(self, timeout_s: float = 30.0) -> None:
        """Commits (with ``enable.auto.commit``), leaves the group, closes connections."""
        if self._closed:
            return
        self._closed = True
        c = self.coordinator
        try:
            if c is not None and c.coordinator is not None and c.fatal_error is None:
                if self.config.enable_auto_commit and self.subscriptions.all_consumed():
                    try:
                        result = self.commit_sync(timeout_s=timeout_s)
                        if not result.ok:
                            self.close_commit_error = result.describe()
                    except KctlError as e:
                        self.close_commit_error = str(e)
                    if self.close_commit_error:
                        log.info("commit on close failed: %s", self.close_commit_error)
                c.closing = True
                now = self.clock.now_ns()
                left = c.maybe_leave_group("the consumer is being closed", now)
                # As Java's close awaits the coordinator's pending requests: a commit sent
                # while closing (the revoke listener's) is waited for within the timeout,
                # LeaveGroup (whose answer does not matter) one short while so it is written.
                commit_end = now + int(timeout_s * 1e9)
                leave_end = now + min(int(timeout_s * 1e9), 1000 * NS_PER_MS) if left else now
                while c.coordinator is not None and self.network.has_in_flight_requests(c.coordinator):
                    t = self.clock.now_ns()
                    if t >= (commit_end if c.commits_in_flight else leave_end):
                        break
                    self.network.poll(10 * NS_PER_MS, t)
        finally:
            self.network.close_all()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wall_ns(self, monotonic_ns: int) -> int:
        """A monotonic reading of this consumer's clock as Unix epoch ns."""
        return monotonic_ns + self.wall_offset_ns

