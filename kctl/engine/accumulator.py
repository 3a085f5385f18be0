"""RecordAccumulator: per-partition queues of batches waiting to be sent
(the Java client's RecordAccumulator).

How this works
--------------
- ``append`` (one record, the general path) and ``append_bulk`` (a slice of
  same-template values, the load path) add to the last OPEN batch of the
  partition's deque, or close it and open a new one with a buffer from the
  ``BufferPool``. When the pool has no memory the append stops and says so
  (``needs_memory``); the producer then runs the sender until memory frees or
  ``max.block.ms`` passes (see buffer_pool.py), and appends again.
- ``open_room`` and ``all_batches_full`` answer the producer's partition choice
  (KIP-480's new-batch switch and KIP-794's "switch only when the last batch is
  full").
- ``ready(cluster, now_ns)`` says which leader nodes have something sendable:
  a full batch, more than one batch queued, ``linger.ms`` passed since the
  first append, a flush or close in progress, or a pool that has run dry. A
  batch backing off after a failed attempt waits ``retry.backoff.ms``
  (exponential up to ``retry.backoff.max.ms``) instead of ``linger.ms``. It also
  says when the next batch becomes sendable, so the sender sleeps exactly
  until then, and which topics have no known leader (metadata refresh).
  With ``partitioner.adaptive.partitioning.enable`` it also reports each
  topic's queue sizes (batches per partition) for the partitioner, once every
  partition of the topic has a queue, leaving out partitions whose leader has
  had data it could not take for longer than
  ``partitioner.availability.timeout.ms`` (the sender reports per ready node
  whether it could drain, ``update_node_latency_stats``), as Java's
  ``RecordAccumulator.partitionReady`` does.
- ``drain(cluster, nodes, max_request_size, now_ns)`` takes at most one batch
  per partition for each node, rotating the starting partition per node for
  fairness, up to ``max.request.size`` bytes per node (at least one batch).
  Batches are closed as they are drained; with idempotence the first drain
  of a batch assigns its base sequence.
- Ordering: a partition is *muted* while it has a request in flight when the
  producer must keep order without idempotence (max.in.flight=1). With
  idempotence, order is kept by sequence numbers instead: a retried batch goes
  back in sequence order, and it is only drained once it is the oldest
  unacknowledged batch of its partition (``Idempotence.may_drain``).
- ``expired_batches(now_ns)`` removes batches whose ``delivery.timeout.ms`` has
  passed while they sat in a queue; in-flight batches are the sender's job.

Time is passed in as monotonic nanoseconds (conventions rule 3).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from kctl.config import AccumulatorConfig
from kctl.engine.batch import (
    RECORD_BATCH_OVERHEAD,
    BatchResult,
    BatchState,
    ProducerBatch,
    RecordHandle,
    TopicPartition,
)
from kctl.engine.buffer_pool import BufferPool
from kctl.engine.clock import NS_PER_MS
from kctl.engine.compression_ratio import (
    COMPRESSION_RATE_ESTIMATION_FACTOR,
    CompressionRatioEstimator,
)
from kctl.protocol.batch_builder import BatchTemplate, GeneralBatchBuilder
from kctl.protocol.compression import Compression
from kctl.protocol.records import Header

# Upper bound of a v2 record's framing around key, value and headers:
# length (5) + attributes (1) + timestamp delta (10) + offset delta (5)
# + key length (5) + value length (5) + header count (5).
RECORD_OVERHEAD_BOUND = 36


def _headers_size(headers: Sequence[Header]) -> int:
    size = 0
    for h in headers:
        size += 10 + len(h.key) + (len(h.value) if h.value else 0)
    return size


def record_size_estimate(key: bytes | None, value: bytes | None, headers: Sequence[Header]) -> int:
    size = RECORD_OVERHEAD_BOUND + (len(key) if key else 0) + (len(value) if value else 0)
    if headers:
        size += _headers_size(headers)
    return size


class ClusterView(Protocol):
    """What the accumulator needs to know about the cluster (metadata.py)."""

    def leader_for(self, tp: TopicPartition) -> int | None: ...
    def partition_count(self, topic: str) -> int | None: ...


class SequenceSource(Protocol):
    """Idempotence hooks (idempotence.py); absent when idempotence is off."""

    def has_producer_id(self) -> bool: ...
    def assign_sequence(self, batch: ProducerBatch) -> None: ...
    def may_drain(self, batch: ProducerBatch) -> bool: ...
    def needs_sequence(self, batch: ProducerBatch) -> bool: ...


@dataclass(frozen=True, slots=True)
class PartitionLoad:
    """One topic's queue sizes for adaptive partitioning (KIP-794): batches queued
    per partition whose leader is known and has not been unavailable for longer
    than ``partitioner.availability.timeout.ms`` (those are left out)."""

    topic: str
    partition_ids: tuple[int, ...]
    queue_sizes: tuple[int, ...]
    num_partitions: int


@dataclass(frozen=True, slots=True)
class ReadyCheck:
    ready_nodes: frozenset[int]
    next_ready_check_ns: int            # absolute monotonic time; a large value when idle
    unknown_leader_topics: frozenset[str]
    # Per topic whose every partition has a queue, when adaptive partitioning is on.
    partition_load: tuple[PartitionLoad, ...] = ()


@dataclass(frozen=True, slots=True)
class AppendResult:
    batch: ProducerBatch | None         # the batch the record went into (None: not appended)
    index: int                          # its index in the batch
    new_batch_created: bool
    needs_memory: int = 0               # bytes the pool could not give (append not done)
    abort_for_new_batch: bool = False   # the caller asked to re-partition before a new batch


@dataclass(frozen=True, slots=True)
class BulkAppendResult:
    appended: int                       # how many of the values went in (a prefix)
    new_batches: int
    needs_memory: int = 0


IDLE_NS = 1 << 62


class _NodeLatency:
    """When the sender last found a node with data ready and when it could last drain
    to it (Java's NodeLatencyStats): ``ready_ns - drain_ns`` is how long the node has
    had data it could not take."""

    __slots__ = ("ready_ns", "drain_ns")

    def __init__(self, now_ns: int) -> None:
        self.ready_ns = now_ns
        self.drain_ns = now_ns


class RecordAccumulator:
    def __init__(self, config: AccumulatorConfig, pool: BufferPool, *,
                 sequences: SequenceSource | None = None, guarantee_order: bool = False,
                 wall_offset_ns: int = 0) -> None:
        self.config = config
        self.wall_offset_ns = wall_offset_ns
        self.pool = pool
        self.sequences = sequences
        self.guarantee_order = guarantee_order
        self.linger_ns = config.linger_ms * NS_PER_MS
        self.delivery_timeout_ns = config.delivery_timeout_ms * NS_PER_MS
        self.batch_size = config.batch_size
        self.compression = Compression[config.compression.type.name]
        self.compression_level = config.compression.level
        self.adaptive = config.adaptive_partitioning_enable
        self.availability_timeout_ns = config.partition_availability_timeout_ms * NS_PER_MS
        self._builder = GeneralBatchBuilder(compression=self.compression,
                                            compression_level=self.compression_level)
        # Per topic, how well batches compress: sizes batches against batch.size
        # when compression is on (compression_ratio.py).
        self.estimator = CompressionRatioEstimator()
        self._deques: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._muted: set[TopicPartition] = set()
        self._drain_index: dict[int, int] = {}
        self._incomplete: set[ProducerBatch] = set()
        self._node_stats: dict[int, _NodeLatency] = {}
        self._flushes_in_progress = 0
        self.closed = False
        self.on_batch_done: Callable[[ProducerBatch], None] | None = None

    # -- appending -------------------------------------------------------------------
    def _deque(self, tp: TopicPartition) -> deque[ProducerBatch]:
        dq = self._deques.get(tp)
        if dq is None:
            dq = self._deques[tp] = deque()
        return dq

    def _new_batch(self, tp: TopicPartition, size: int, now_ns: int, wall_ms: int,
                   template: BatchTemplate | None = None,
                   value_size: int | None = None, keyed: bool = False) -> ProducerBatch | None:
        capacity = max(self.batch_size, size + RECORD_BATCH_OVERHEAD)
        buffer = self.pool.try_allocate(capacity)
        if buffer is None:
            return None
        batch = ProducerBatch(tp, now_ns, capacity, buffer, compression=self.compression,
                              compression_level=self.compression_level, template=template,
                              value_size=value_size, created_wall_ms=wall_ms,
                              wall_offset_ns=self.wall_offset_ns, builder=self._builder,
                              keyed=keyed, written_factor=self.written_factor(tp.topic))
        self._deque(tp).append(batch)
        self._incomplete.add(batch)
        return batch

    def append(self, tp: TopicPartition, timestamp_ms: int, key: bytes | None,
               value: bytes | None, headers: Sequence[Header], now_ns: int, *,
               abort_on_new_batch: bool = False,
               callback: Callable[[RecordHandle], object] | None = None) -> AppendResult:
        """One record into the partition's open batch (or a new one)."""
        if self.closed:
            raise RuntimeError("append after the producer was closed")
        size = record_size_estimate(key, value, headers)
        dq = self._deque(tp)
        if dq:
            last = dq[-1]
            if last.state is BatchState.OPEN and last.template is None:
                i = last.try_append(timestamp_ms, key, value, headers, size, now_ns, callback)
                if i >= 0:
                    return AppendResult(last, i, False)
            last.close()
        if abort_on_new_batch:
            return AppendResult(None, -1, False, abort_for_new_batch=True)
        batch = self._new_batch(tp, size, now_ns, timestamp_ms)
        if batch is None:
            return AppendResult(None, -1, False, needs_memory=max(self.batch_size, size + RECORD_BATCH_OVERHEAD))
        i = batch.try_append(timestamp_ms, key, value, headers, size, now_ns, callback)
        assert i == 0
        return AppendResult(batch, i, True)

    def append_bulk(self, tp: TopicPartition, values: Sequence[bytes | None], record_bytes: int,
                    template: BatchTemplate, now_ns: int, wall_ms: int, *,
                    keys: Sequence[bytes | None] | None = None,
                    value_size: int | None = None, intended_first_ns: int = -1,
                    intended_step_ns: int = 0, first_seq: int = -1,
                    positions: Sequence[int] | None = None,
                    positions_base: int = 0, handed_ns: int = -1) -> BulkAppendResult:
        """A slice of values (and keys) sharing ``template`` (``record_bytes`` each,
        framing included, an upper bound), spread over as many batches as needed.
        Appends a prefix of ``values`` when the pool runs dry; the caller waits for
        memory and appends the rest. ``positions``/``positions_base``: the
        records' places on the schedule (``AppendSlice``). ``handed_ns``: when the
        caller handed them over (the send clock starts there, memory waits included;
        default ``now_ns``)."""
        if self.closed:
            raise RuntimeError("append after the producer was closed")
        dq = self._deque(tp)
        done = 0
        new = 0
        total = len(values)
        keyed = keys is not None
        while done < total:
            last = dq[-1] if dq else None
            room = 0
            if last is not None and last.state is BatchState.OPEN:
                if last.template is template and last.keyed == keyed:
                    room = last.room_for(record_bytes)
                if room == 0:
                    last.close()
            if room == 0:
                last = self._new_batch(tp, record_bytes, now_ns, wall_ms, template, value_size, keyed)
                if last is None:
                    return BulkAppendResult(done, new,
                                            needs_memory=max(self.batch_size,
                                                             record_bytes + RECORD_BATCH_OVERHEAD))
                new += 1
                room = last.room_for(record_bytes)
            take = min(room, total - done)
            seq = first_seq + done if first_seq >= 0 else -1
            if positions is None:
                first = intended_first_ns + done * intended_step_ns if intended_first_ns >= 0 else -1
                last.append_bulk(values[done:done + take], keys[done:done + take] if keyed else None,
                                 record_bytes, now_ns, first, intended_step_ns, seq,
                                 handed_ns=handed_ns)
            else:
                last.append_bulk(values[done:done + take], keys[done:done + take] if keyed else None,
                                 record_bytes, now_ns, intended_first_ns, intended_step_ns, seq,
                                 positions[done:done + take], positions_base, handed_ns)
            done += take
        return BulkAppendResult(done, new)

    def open_room(self, tp: TopicPartition, template: BatchTemplate, record_bytes: int,
                  keyed: bool) -> int:
        """How many ``record_bytes`` records of ``template`` the partition's open batch
        still takes (0: the next append opens a new batch)."""
        dq = self._deques.get(tp)
        if not dq:
            return 0
        last = dq[-1]
        if last.template is not template or last.keyed != keyed:
            return 0
        return last.room_for(record_bytes) if last.record_count else 0

    def all_batches_full(self, tp: TopicPartition) -> bool:
        """Java's ``allBatchesFull``: the partition's last batch (if any) is full, so
        a sticky partition may switch without leaving a fractional batch behind."""
        dq = self._deques.get(tp)
        return not dq or dq[-1].is_full()

    # -- readiness ----------------------------------------------------------------------
    def _backoff_ns(self, batch: ProducerBatch) -> int:
        if batch.attempts == 0:
            return 0
        base = self.config.retry_backoff_ms * NS_PER_MS
        cap = self.config.retry_backoff_max_ms * NS_PER_MS
        return min(cap, base << min(batch.attempts - 1, 30))

    def update_node_latency_stats(self, node: int, now_ns: int, can_drain: bool) -> None:
        """The sender found ``node`` with data ready; ``can_drain``: it could send to it
        now (Java's ``updateNodeLatencyStats``). Only kept when
        ``partitioner.availability.timeout.ms`` is set."""
        if self.availability_timeout_ns <= 0:
            return
        stats = self._node_stats.get(node)
        if stats is None:
            stats = self._node_stats[node] = _NodeLatency(now_ns)
        if can_drain:
            stats.drain_ns = now_ns
        stats.ready_ns = now_ns

    def _unavailable(self, leader: int) -> bool:
        if self.availability_timeout_ns <= 0:
            return False
        stats = self._node_stats.get(leader)
        return stats is not None and stats.ready_ns - stats.drain_ns > self.availability_timeout_ns

    def ready(self, cluster: ClusterView, now_ns: int) -> ReadyCheck:
        ready_nodes: set[int] = set()
        unknown: set[str] = set()
        next_check = IDLE_NS
        exhausted = self.pool.exhausted
        forced = exhausted or self.closed or self._flushes_in_progress > 0
        # topic -> [(partition, queue size)] for adaptive partitioning; None: a leader unknown
        loads: dict[str, list[tuple[int, int]]] | None = {} if self.adaptive else None
        queues: dict[str, int] = {}
        for tp, dq in self._deques.items():
            leader = cluster.leader_for(tp)
            if loads is not None:
                queues[tp.topic] = queues.get(tp.topic, 0) + 1
                if leader is not None and leader >= 0 and not self._unavailable(leader):
                    per = loads.get(tp.topic)
                    if per is None:
                        per = loads[tp.topic] = []
                    per.append((tp.partition, len(dq)))
            if not dq:
                continue
            if leader is None or leader < 0:
                unknown.add(tp.topic)
                continue
            if leader in ready_nodes or tp in self._muted:
                continue
            batch = dq[0]
            backoff = self._backoff_ns(batch)
            if backoff:
                waited = now_ns - batch.last_attempt_ns
                if waited < backoff:
                    next_check = min(next_check, batch.last_attempt_ns + backoff)
                    continue
                ready_nodes.add(leader)
                continue
            full = len(dq) > 1 or batch.is_full()
            due = batch.created_ns + self.linger_ns
            if full or forced or now_ns >= due:
                ready_nodes.add(leader)
            else:
                next_check = min(next_check, due)
        load: tuple[PartitionLoad, ...] = ()
        if loads is not None:
            # Java collects queue sizes only once every partition of the topic has a queue.
            out = []
            for topic, n in queues.items():
                count = cluster.partition_count(topic)
                if count and n >= count:
                    per = loads.get(topic, ())
                    out.append(PartitionLoad(topic, tuple(p for p, _ in per),
                                             tuple(q for _, q in per), count))
            load = tuple(out)
        return ReadyCheck(frozenset(ready_nodes), next_check, frozenset(unknown), load)

    def has_undrained(self) -> bool:
        return any(self._deques.values())

    # -- draining -------------------------------------------------------------------------
    def drain(self, partitions_by_node: dict[int, Sequence[TopicPartition]],
              nodes: Iterable[int], max_request_size: int, now_ns: int
              ) -> dict[int, list[ProducerBatch]]:
        """Batches to send per node: one per partition, up to ``max_request_size`` bytes."""
        out: dict[int, list[ProducerBatch]] = {}
        for node in nodes:
            parts = partitions_by_node.get(node) or ()
            if not parts:
                continue
            start = self._drain_index.get(node, 0) % len(parts)
            taken: list[ProducerBatch] = []
            size = 0
            for i in range(len(parts)):
                tp = parts[(start + i) % len(parts)]
                dq = self._deques.get(tp)
                if not dq or tp in self._muted:
                    continue
                batch = dq[0]
                backoff = self._backoff_ns(batch)
                if backoff and now_ns - batch.last_attempt_ns < backoff:
                    continue
                if size + batch.estimated_bytes > max_request_size and taken:
                    self._drain_index[node] = (start + i) % len(parts)
                    break
                if self.sequences is not None:
                    if not self.sequences.has_producer_id():
                        break
                    if not self.sequences.may_drain(batch):
                        continue
                    if self.sequences.needs_sequence(batch):
                        self.sequences.assign_sequence(batch)
                dq.popleft()
                batch.close()
                batch.drained_ns = now_ns
                taken.append(batch)
                size += batch.estimated_bytes
            else:
                self._drain_index[node] = (start + 1) % len(parts)
            if taken:
                out[node] = taken
        return out

    # -- retries, muting, expiry -------------------------------------------------------------
    def reenqueue(self, batch: ProducerBatch, now_ns: int) -> None:
        """Puts a batch to retry back at the front (in sequence order with idempotence)."""
        batch.last_attempt_ns = now_ns
        dq = self._deque(batch.tp)
        if self.sequences is not None and batch.base_sequence >= 0:
            # Keep retries in sequence order ahead of batches without a sequence.
            i = 0
            while i < len(dq) and 0 <= dq[i].base_sequence < batch.base_sequence:
                i += 1
            dq.insert(i, batch)
        else:
            dq.appendleft(batch)

    def written_factor(self, topic: str) -> float:
        """What a new batch of ``topic`` multiplies its records' bytes by to estimate
        its written size: the ratio estimate x 1.05; 0.0 without compression."""
        if not self.compression:
            return 0.0
        return self.estimator.estimation(topic, self.compression) * COMPRESSION_RATE_ESTIMATION_FACTOR

    def batch_encoded(self, batch: ProducerBatch) -> None:
        """A batch was encoded for its first send: with compression, its ratio moves
        its topic's estimate (Java does it in ``ProducerBatch.close()`` at drain)."""
        if self.compression:
            self.estimator.update_estimation(batch.tp.topic, self.compression, batch.observed_ratio)

    def batch_too_large(self, batch: ProducerBatch) -> None:
        """The broker refused ``batch`` as too large and it is being split: the
        topic's estimate becomes the larger of 1.0 and the batch's ratio, so
        splits stay rare (Java's ``splitAndReenqueue``)."""
        if self.compression:
            self.estimator.set_estimation(batch.tp.topic, self.compression,
                                          max(1.0, batch.observed_ratio))

    def requeue_split(self, batches: Sequence[ProducerBatch]) -> None:
        """Batches split from one too large for the broker go to the front, in order."""
        for b in reversed(batches):
            dq = self._deque(b.tp)
            dq.appendleft(b)
            self._incomplete.add(b)

    def mute(self, tp: TopicPartition) -> None:
        self._muted.add(tp)

    def unmute(self, tp: TopicPartition) -> None:
        self._muted.discard(tp)

    def expired_batches(self, now_ns: int) -> list[ProducerBatch]:
        """Queued batches past ``delivery.timeout.ms``; removed from their queues."""
        out: list[ProducerBatch] = []
        limit = now_ns - self.delivery_timeout_ns
        for dq in self._deques.values():
            while dq and dq[0].created_ns <= limit:
                out.append(dq.popleft())
            if dq and dq[-1].created_ns <= limit:
                keep = [b for b in dq if b.created_ns > limit]
                out.extend(b for b in dq if b.created_ns <= limit)
                dq.clear()
                dq.extend(keep)
        return out

    # -- completion, flush, close -----------------------------------------------------------------
    def deallocate(self, batch: ProducerBatch) -> None:
        """Gives a finished batch's buffer back to the pool and forgets it."""
        self._incomplete.discard(batch)
        if batch.buffer is not None:
            buffer, batch.buffer = batch.buffer, None
            batch.release_encoded()
            self.pool.deallocate(buffer, batch.capacity)

    def begin_flush(self) -> None:
        self._flushes_in_progress += 1

    def end_flush(self) -> None:
        self._flushes_in_progress -= 1

    @property
    def incomplete_count(self) -> int:
        """Batches not yet resolved (acknowledged or failed)."""
        return len(self._incomplete)

    def close(self) -> None:
        """No more appends; everything queued becomes sendable at once."""
        self.closed = True

    def remove_topic(self, topic: str) -> list[ProducerBatch]:
        """Takes every queued batch of ``topic`` out (the topic cannot be produced to)."""
        out: list[ProducerBatch] = []
        for tp, dq in self._deques.items():
            if tp.topic == topic:
                out.extend(dq)
                dq.clear()
        return out

    def remove_if(self, predicate: Callable[[ProducerBatch], bool]) -> list[ProducerBatch]:
        """Takes the queued batches ``predicate`` picks out (an aborting transaction's
        batches that were never drained)."""
        out: list[ProducerBatch] = []
        for dq in self._deques.values():
            if any(predicate(b) for b in dq):
                keep = [b for b in dq if not predicate(b)]
                out.extend(b for b in dq if predicate(b))
                dq.clear()
                dq.extend(keep)
        return out

    def remove_all(self) -> list[ProducerBatch]:
        """Takes every queued batch out (the producer cannot go on)."""
        out = [b for dq in self._deques.values() for b in dq]
        for dq in self._deques.values():
            dq.clear()
        return out

    # -- metrics -----------------------------------------------------------------------------
    def queued_batches(self) -> int:
        return sum(len(dq) for dq in self._deques.values())

    def queued_records(self) -> int:
        return sum(b.record_count for dq in self._deques.values() for b in dq)
