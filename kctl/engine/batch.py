"""ProducerBatch: the records bound for one partition in one RecordBatch, and
their lifecycle (the Java client's ProducerBatch).

How this works
--------------
A batch collects records while OPEN, either one at a time (``try_append``,
the general ``send()`` path: each record has its own key, headers, timestamp
and completion handle) or in slices (``try_append_bulk``, the load path: many
values at once that share one record template, with no object per record).
A batch holds one kind only. It is CLOSED when full or drained, encoded once
into its pool buffer when first drained (``encode``), and re-encoded only if
its producer id, epoch or sequence change before a retry.

The lifecycle is a table (conventions rule 5). A transition not in the table
is a bug in the engine and raises ``IllegalBatchTransition`` at once::

    OPEN -> CLOSED -> IN_FLIGHT -> ACKED
                          |  \\-> FAILED / EXPIRED / SPLIT
                          v
                        RETRY -> IN_FLIGHT ...

Completion is delivered once, through ``on_complete(batch, result)``, which the
accumulator's owner supplies; per-record handles of the general path are
completed by the batch itself.

Accounting for latency (the stats layer's three clocks): every append slice
keeps ``(count, appended_ns, intended_first_ns, intended_step_ns)``, so the
stats layer can record per slice with a count instead of per record; the
general path keeps one slice per record.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from kctl.protocol.batch_builder import BatchTemplate
from kctl.protocol.compression import Compression
from kctl.protocol.records import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    Header,
    build_batch,
)

#: Bytes of a RecordBatch v2 header (up to and including the record count).
RECORD_BATCH_OVERHEAD = 61


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class BatchState(enum.Enum):
    OPEN = "open"
    CLOSED = "closed"
    IN_FLIGHT = "in_flight"
    RETRY = "retry"
    ACKED = "acked"
    FAILED = "failed"
    EXPIRED = "expired"
    SPLIT = "split"          # too large for the broker: replaced by smaller batches


_TRANSITIONS: dict[BatchState, frozenset[BatchState]] = {
    BatchState.OPEN: frozenset({BatchState.CLOSED, BatchState.FAILED, BatchState.EXPIRED}),
    BatchState.CLOSED: frozenset({BatchState.IN_FLIGHT, BatchState.FAILED, BatchState.EXPIRED}),
    BatchState.IN_FLIGHT: frozenset({BatchState.ACKED, BatchState.RETRY, BatchState.FAILED,
                                     BatchState.EXPIRED, BatchState.SPLIT}),
    BatchState.RETRY: frozenset({BatchState.IN_FLIGHT, BatchState.FAILED, BatchState.EXPIRED}),
    BatchState.ACKED: frozenset(),
    BatchState.FAILED: frozenset(),
    BatchState.EXPIRED: frozenset(),
    BatchState.SPLIT: frozenset(),
}

FINAL_STATES = frozenset({BatchState.ACKED, BatchState.FAILED, BatchState.EXPIRED, BatchState.SPLIT})


class IllegalBatchTransition(RuntimeError):
    """The engine tried a lifecycle step the table does not allow: a bug."""


class PendingRecord(NamedTuple):
    """A record waiting in a batch: the fields ``records.build_batch`` reads, as a
    tuple. Why not ``records.Record``: a frozen dataclass costs about 1 µs to make,
    a third of the general send path; a named tuple about a quarter of that."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    attributes: int = 0


class AppendSlice(NamedTuple):
    """Records appended together; ``intended_*`` are the schedule's send times
    (``intended_first_ns`` < 0 when there is no schedule); ``first_seq`` is the
    load generator's sequence number of the first record (-1: none)."""

    count: int
    appended_ns: int
    intended_first_ns: int
    intended_step_ns: int
    first_seq: int = -1


@dataclass(frozen=True, slots=True)
class BatchResult:
    """How a batch ended. ``error`` is Kafka's error name (or kctl's reason) when it failed."""

    base_offset: int
    log_append_time_ms: int
    error: str | None = None
    error_message: str = ""


class RecordHandle:
    """Completes with (partition, offset, timestamp) or an error name: what ``send()`` returns."""

    __slots__ = ("tp", "timestamp_ms", "offset", "error", "error_message", "done", "_callbacks")

    def __init__(self, tp: TopicPartition, timestamp_ms: int) -> None:
        self.tp = tp
        self.timestamp_ms = timestamp_ms
        self.offset = -1
        self.error: str | None = None
        self.error_message = ""
        self.done = False
        self._callbacks: list[Callable[[RecordHandle], Any]] | None = None

    @property
    def partition(self) -> int:
        return self.tp.partition

    def add_callback(self, fn: Callable[[RecordHandle], Any]) -> None:
        """``fn(handle)`` once the record is acknowledged or has failed (at once if it has)."""
        if self.done:
            fn(self)
        else:
            if self._callbacks is None:
                self._callbacks = []
            self._callbacks.append(fn)

    def _complete(self, offset: int, timestamp_ms: int, error: str | None, message: str) -> None:
        self.offset = offset
        self.timestamp_ms = timestamp_ms
        self.error = error
        self.error_message = message
        self.done = True
        if self._callbacks:
            for fn in self._callbacks:
                fn(self)
            self._callbacks = None

    def __repr__(self) -> str:
        state = ("pending" if not self.done else
                 f"failed {self.error}" if self.error else f"offset {self.offset}")
        return f"RecordHandle({self.tp}, {state})"


class ProducerBatch:
    __slots__ = (
        "tp", "state", "created_ns", "last_attempt_ns", "last_append_ns", "drained_ns",
        "attempts", "record_count", "estimated_bytes", "capacity", "buffer", "encoded_size",
        "producer_id", "producer_epoch", "base_sequence", "is_transactional",
        "_records", "_handles", "_values", "template", "value_size", "slices",
        "_encoded_for", "compression", "compression_level", "result", "retry_after_ns",
        "sent_ns", "node_id", "split_generation", "created_wall_ms", "_encoded", "wall_offset_ns",
    )

    def __init__(self, tp: TopicPartition, created_ns: int, capacity: int,
                 buffer: bytearray | None, *, compression: int = Compression.NONE,
                 compression_level: int | None = None,
                 template: BatchTemplate | None = None, value_size: int | None = None,
                 created_wall_ms: int = -1, wall_offset_ns: int = 0) -> None:
        self.tp = tp
        self.wall_offset_ns = wall_offset_ns  # wall-clock ns minus monotonic ns
        self.created_wall_ms = created_wall_ms
        self.state = BatchState.OPEN
        self.created_ns = created_ns
        self.last_attempt_ns = created_ns
        self.last_append_ns = created_ns
        self.drained_ns = -1
        self.sent_ns = -1
        self.node_id = -1
        self.attempts = 0
        self.record_count = 0
        self.estimated_bytes = RECORD_BATCH_OVERHEAD
        self.capacity = capacity
        self.buffer = buffer          # from the BufferPool (None: not pooled); never replaced
        self._encoded: memoryview | None = None
        self.encoded_size = 0
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = NO_PRODUCER_EPOCH
        self.base_sequence = NO_SEQUENCE
        self.is_transactional = False
        self.template = template
        self.value_size = value_size
        self.compression = compression
        self.compression_level = compression_level
        self._records: list[PendingRecord] | None = None if template is not None else []
        self._handles: list[RecordHandle] | None = None if template is not None else []
        self._values: list[bytes] | None = [] if template is not None else None
        self.slices: list[AppendSlice] = []
        self._encoded_for: tuple[int, int, int] | None = None
        self.result: BatchResult | None = None
        self.retry_after_ns = 0
        self.split_generation = 0

    # -- lifecycle ------------------------------------------------------------
    def transition(self, new: BatchState) -> None:
        if new not in _TRANSITIONS[self.state]:
            raise IllegalBatchTransition(f"batch {self.tp}: {self.state.value} -> {new.value}")
        self.state = new

    @property
    def is_done(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def last_sequence(self) -> int:
        """Sequence number of the batch's last record (-1 without a sequence)."""
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.record_count - 1) & 0x7FFFFFFF

    @property
    def is_bulk(self) -> bool:
        return self.template is not None

    def close(self) -> None:
        if self.state is BatchState.OPEN:
            self.transition(BatchState.CLOSED)

    # -- appending ---------------------------------------------------------------
    def try_append(self, timestamp_ms: int, key: bytes | None, value: bytes | None,
                   headers: Sequence[Header], now_ns: int, size_estimate: int,
                   intended_ns: int = -1, seq: int = -1) -> RecordHandle | None:
        """Adds one record unless it would overflow the batch (an empty batch takes
        any record); ``None`` when it does not fit."""
        if self.state is not BatchState.OPEN or self._records is None:
            return None
        if self.record_count and self.estimated_bytes + size_estimate > self.capacity:
            return None
        self._records.append(PendingRecord(self.record_count, timestamp_ms, key, value,
                                           headers if type(headers) is tuple else tuple(headers)))
        handle = RecordHandle(self.tp, timestamp_ms)
        self._handles.append(handle)  # type: ignore[union-attr]
        self.slices.append(AppendSlice(1, now_ns, intended_ns, 0, seq))
        self.record_count += 1
        self.estimated_bytes += size_estimate
        self.last_append_ns = now_ns
        return handle

    def room_for(self, record_bytes: int) -> int:
        """How many more bulk records of ``record_bytes`` each fit (at least one if empty)."""
        if self.state is not BatchState.OPEN or self._values is None:
            return 0
        n = (self.capacity - self.estimated_bytes) // record_bytes if record_bytes else 1 << 30
        return max(n, 0 if self.record_count else 1)

    def append_bulk(self, values: Sequence[bytes], record_bytes: int, now_ns: int,
                    intended_first_ns: int = -1, intended_step_ns: int = 0,
                    first_seq: int = -1) -> None:
        """Appends a slice of same-template values; the caller checked ``room_for``."""
        assert self._values is not None and self.state is BatchState.OPEN
        self._values.extend(values)
        n = len(values)
        self.slices.append(AppendSlice(n, now_ns, intended_first_ns, intended_step_ns, first_seq))
        self.record_count += n
        self.estimated_bytes += n * record_bytes
        self.last_append_ns = now_ns

    def is_full(self) -> bool:
        return self.state is not BatchState.OPEN or self.estimated_bytes >= self.capacity

    # -- encoding ------------------------------------------------------------------
    def set_producer_state(self, producer_id: int, producer_epoch: int, base_sequence: int,
                           is_transactional: bool = False) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional

    def encode(self, now_wall_ms: int) -> memoryview:
        """The batch's RecordBatch v2 bytes (built once; again only if the producer
        state changed since). They live in the pool buffer when it is big enough."""
        key = (self.producer_id, self.producer_epoch, self.base_sequence)
        if self._encoded_for != key:
            if self._values is not None:
                data = self.template.build(  # type: ignore[union-attr]
                    self._values, base_timestamp=self._base_timestamp(now_wall_ms),
                    producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                    base_sequence=self.base_sequence, is_transactional=self.is_transactional,
                    value_size=self.value_size, ids=self._ids())
            else:
                data = build_batch(self._records, compression=self.compression,  # type: ignore[arg-type]
                                   compression_level=self.compression_level,
                                   producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                                   base_sequence=self.base_sequence,
                                   is_transactional=self.is_transactional)
            n = len(data)
            if self.buffer is not None and len(self.buffer) >= n:
                self.buffer[:n] = data
                self._encoded = memoryview(self.buffer)[:n]
            else:
                # No pool buffer (a batch split from another) or an encoding larger
                # than the estimate: keep the bytes themselves.
                self._encoded = memoryview(data)
            self.encoded_size = n
            self._encoded_for = key
        return self._encoded  # type: ignore[return-value]

    def _ids(self) -> list[tuple[int, int, int, int]] | None:
        """Id-header runs for a template that writes them: sequence numbers and the
        intended send time (the append time without a schedule) as wall-clock ns."""
        if not self.template.writes_ids:  # type: ignore[union-attr]
            return None
        off = self.wall_offset_ns
        return [(s.count, s.first_seq,
                 (s.intended_first_ns if s.intended_first_ns >= 0 else s.appended_ns) + off,
                 s.intended_step_ns if s.intended_first_ns >= 0 else 0)
                for s in self.slices]

    def _base_timestamp(self, now_wall_ms: int) -> int:
        # Bulk records carry the wall-clock time at which the batch was created.
        return self.created_wall_ms if self.created_wall_ms >= 0 else now_wall_ms

    def release_encoded(self) -> None:
        """Drops the view into the pool buffer before the buffer goes back to the pool."""
        if self._encoded is not None:
            try:
                self._encoded.release()
            except BufferError:
                pass  # a socket write still holds it; the pool reuses the buffer regardless
            self._encoded = None
            self._encoded_for = None

    # -- completion ----------------------------------------------------------------
    def complete(self, state: BatchState, result: BatchResult) -> None:
        """Final step: ACKED, FAILED or EXPIRED; completes every record handle once."""
        self.transition(state)
        self.result = result
        if self._handles:
            err = result.error
            msg = result.error_message
            base = result.base_offset
            append_time = result.log_append_time_ms
            for i, h in enumerate(self._handles):
                ts = append_time if append_time >= 0 else h.timestamp_ms
                h._complete(-1 if err or base < 0 else base + i, ts, err, msg)

    def split(self, parts: int, now_ns: int) -> list[ProducerBatch]:
        """This batch's records spread over ``parts`` new CLOSED batches, in order,
        each taking its records' handles and append slices (MESSAGE_TOO_LARGE).

        The new batches keep ``created_ns`` (delivery.timeout.ms still counts from
        the first append) and have no producer state: they get fresh sequences when
        drained. This batch is left as it was; the caller fails or drops it.
        """
        n = self.record_count
        parts = max(1, min(parts, n))
        bounds = [n * i // parts for i in range(parts + 1)]
        out = []
        for lo, hi in zip(bounds, bounds[1:]):
            b = ProducerBatch(self.tp, self.created_ns, self.capacity, None,
                              compression=self.compression,
                              compression_level=self.compression_level,
                              template=self.template, value_size=self.value_size,
                              created_wall_ms=self.created_wall_ms,
                              wall_offset_ns=self.wall_offset_ns)
            if self._records is not None:
                b._records = [r._replace(offset=i) for i, r in enumerate(self._records[lo:hi])]
                b._handles = self._handles[lo:hi]  # type: ignore[index]
            else:
                b._values = self._values[lo:hi]  # type: ignore[index]
            b.slices = _slices_between(self.slices, lo, hi)
            b.record_count = hi - lo
            b.estimated_bytes = RECORD_BATCH_OVERHEAD + (self.estimated_bytes - RECORD_BATCH_OVERHEAD) * (hi - lo) // n
            b.attempts = self.attempts
            b.split_generation = self.split_generation + 1
            b.last_append_ns = now_ns
            b.state = BatchState.CLOSED
            out.append(b)
        return out

    def handles(self) -> list[RecordHandle]:
        return list(self._handles or ())

    def __repr__(self) -> str:
        return (f"ProducerBatch({self.tp}, {self.state.value}, records={self.record_count}, "
                f"attempts={self.attempts}, seq={self.base_sequence})")


def _slices_between(slices: Sequence[AppendSlice], lo: int, hi: int) -> list[AppendSlice]:
    """The part of ``slices`` that covers records ``lo`` (inclusive) to ``hi``."""
    out = []
    start = 0
    for s in slices:
        end = start + s.count
        a, b = max(lo, start), min(hi, end)
        if a < b:
            skip = a - start
            first = s.intended_first_ns + skip * s.intended_step_ns if s.intended_first_ns >= 0 else -1
            seq = s.first_seq + skip if s.first_seq >= 0 else -1
            out.append(AppendSlice(b - a, s.appended_ns, first, s.intended_step_ns, seq))
        start = end
    return out
