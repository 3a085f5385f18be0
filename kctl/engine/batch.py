"""ProducerBatch: the records bound for one partition in one RecordBatch, and
their lifecycle (the Java client's ProducerBatch).

How this works
--------------
A batch collects records while OPEN, either one at a time (``try_append``,
the general ``send()`` path: each record has its own key, headers and
timestamp, kept in parallel lists, no object per record) or in slices
(``append_bulk``, the load path: many values at once, with keys or not, that
share one ``BatchTemplate``). A batch holds one kind only. It is CLOSED when
full or drained, encoded once into its pool buffer when first drained
(``encode``), and re-encoded only if its producer id, epoch or sequence change
before a retry.

The lifecycle is a table (conventions rule 5). A transition not in the table
is a bug in the engine and raises ``IllegalBatchTransition`` at once::

    OPEN -> CLOSED -> IN_FLIGHT -> ACKED
                          |  \\-> FAILED / EXPIRED / SPLIT
                          v
                        RETRY -> IN_FLIGHT ...

Completion: the sender calls ``complete`` once; it calls the callbacks that
were registered for its records. A ``RecordHandle`` is a view of (batch,
index): it reads the batch's result, following a split to the batch that
took its record, so a record costs no handle unless the caller keeps one.

Accounting for latency (the stats layer's three clocks): append slices keep
``(count, appended_ns, intended_first_ns, intended_step_ns, first_seq,
positions, positions_base)``, so the stats layer records per slice with a
count instead of per record. The general path keeps no slices: its records
resolve through callbacks and handles.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from kctl.protocol.batch_builder import BatchTemplate, GeneralBatchBuilder, IdRun
from kctl.protocol.compression import Compression
from kctl.protocol.records import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    Header,
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
_OPEN = BatchState.OPEN


class IllegalBatchTransition(RuntimeError):
    """The engine tried a lifecycle step the table does not allow: a bug."""


class AppendSlice(NamedTuple):
    """Records appended together.

    ``intended_*`` are the schedule's send times (``intended_first_ns`` < 0 when
    there is no schedule): record j of the slice was meant to go at
    ``intended_first_ns + k * intended_step_ns``, where k is
    ``positions[j] - positions_base``, or j when ``positions`` is None (the
    records were consecutive on the schedule). ``positions`` lets one slice hold
    one partition's share of a keyed or round-robin slice. ``first_seq`` is the
    load generator's sequence number of the first record (the others follow it
    one by one); -1: none.
    """

    count: int
    appended_ns: int
    intended_first_ns: int
    intended_step_ns: int
    first_seq: int = -1
    positions: Sequence[int] | None = None
    positions_base: int = 0

    def intended_offsets(self) -> Sequence[int]:
        """Each record's schedule step from ``intended_first_ns``."""
        if self.positions is None:
            return range(self.count)
        base = self.positions_base
        if type(self.positions) is range:
            p = self.positions
            return range(p.start - base, p.stop - base, p.step)
        return [k - base for k in self.positions]


@dataclass(frozen=True, slots=True)
class BatchResult:
    """How a batch ended. ``error`` is Kafka's error name (or kctl's reason) when it failed."""

    base_offset: int
    log_append_time_ms: int
    error: str | None = None
    error_message: str = ""


class RecordHandle:
    """One record of ``send()``: completes with (partition, offset, timestamp) or an
    error name. A view of its batch (no state of its own), so it costs nothing
    unless kept."""

    __slots__ = ("_batch", "_index")

    def __init__(self, batch: ProducerBatch, index: int) -> None:
        self._batch = batch
        self._index = index

    def _where(self) -> tuple[ProducerBatch, int]:
        b, i = self._batch, self._index
        while b._split_into is not None:
            for lo, part in reversed(b._split_into):
                if i >= lo:
                    b, i = part, i - lo
                    break
        return b, i

    @property
    def tp(self) -> TopicPartition:
        return self._batch.tp

    @property
    def partition(self) -> int:
        return self._batch.tp.partition

    @property
    def done(self) -> bool:
        b, _ = self._where()
        return b.result is not None

    @property
    def error(self) -> str | None:
        b, _ = self._where()
        return b.result.error if b.result is not None else None

    @property
    def error_message(self) -> str:
        b, _ = self._where()
        return b.result.error_message if b.result is not None else ""

    @property
    def offset(self) -> int:
        b, i = self._where()
        r = b.result
        if r is None or r.error or r.base_offset < 0:
            return -1
        return r.base_offset + i

    @property
    def timestamp_ms(self) -> int:
        b, i = self._where()
        r = b.result
        if r is not None and r.log_append_time_ms >= 0:
            return r.log_append_time_ms
        return b.record_timestamp(i)

    def add_callback(self, fn: Callable[[RecordHandle], Any]) -> None:
        """``fn(handle)`` once the record is acknowledged or has failed (at once if it has)."""
        b, i = self._where()
        if b.result is not None:
            fn(self)
        else:
            b.add_callback(i, fn)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RecordHandle) and self._where() == other._where()

    def __hash__(self) -> int:
        b, i = self._where()
        return hash((id(b), i))

    def __repr__(self) -> str:
        b, i = self._where()
        r = b.result
        state = ("pending" if r is None else f"failed {r.error}" if r.error else f"offset {self.offset}")
        return f"RecordHandle({b.tp}, {state})"


class ProducerBatch:
    __slots__ = (
        "tp", "state", "created_ns", "last_attempt_ns", "last_append_ns", "drained_ns",
        "attempts", "record_count", "estimated_bytes", "capacity", "buffer", "encoded_size",
        "producer_id", "producer_epoch", "base_sequence", "is_transactional",
        "_values", "_keys", "_timestamps", "_headers", "_callbacks", "template", "value_size",
        "slices", "_encoded_for", "compression", "compression_level", "result", "retry_after_ns",
        "sent_ns", "node_id", "split_generation", "created_wall_ms", "_encoded", "wall_offset_ns",
        "_builder", "_split_into", "value_bytes", "sequence_reset", "uncompressed_bytes",
        "written_factor", "records_size",
    )

    def __init__(self, tp: TopicPartition, created_ns: int, capacity: int,
                 buffer: bytearray | None, *, compression: int = Compression.NONE,
                 compression_level: int | None = None,
                 template: BatchTemplate | None = None, value_size: int | None = None,
                 created_wall_ms: int = -1, wall_offset_ns: int = 0,
                 builder: GeneralBatchBuilder | None = None, keyed: bool = False,
                 written_factor: float = 0.0) -> None:
        self.tp = tp
        self.wall_offset_ns = wall_offset_ns  # wall-clock ns minus monotonic ns
        self.created_wall_ms = created_wall_ms
        self.state = _OPEN
        self.created_ns = created_ns
        self.last_attempt_ns = created_ns
        self.last_append_ns = created_ns
        self.drained_ns = -1
        self.sent_ns = -1
        self.node_id = -1
        self.attempts = 0
        self.record_count = 0
        self.value_bytes = 0          # bytes of record values (what MB/s counts)
        # Java's estimatedBytesWritten: what the batch will take encoded. Without
        # compression it is the header plus the records' bytes as counted on append
        # (upper bounds); with compression, the header plus those bytes x the
        # topic's ratio estimate x 1.05 (compression_ratio.py), ``written_factor``.
        self.estimated_bytes = RECORD_BATCH_OVERHEAD
        self.uncompressed_bytes = RECORD_BATCH_OVERHEAD   # header + records' bytes as counted (compression on only)
        self.written_factor = written_factor   # RecordAccumulator.written_factor; 0.0: no compression
        self.records_size = 0         # the records section's bytes before compression (encode)
        self.capacity = capacity
        self.buffer = buffer          # from the BufferPool (None: not pooled); never replaced
        self._encoded: memoryview | None = None
        self.encoded_size = 0
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = NO_PRODUCER_EPOCH
        self.base_sequence = NO_SEQUENCE
        self.is_transactional = False
        self.sequence_reset = False   # re-sequenced after an epoch bump (Java's sequenceHasBeenReset)
        self.template = template
        self.value_size = value_size
        self.compression = compression
        self.compression_level = compression_level
        self._builder = builder
        self._values: list[bytes | None] = []
        # Bulk: keys only for a keyed template slice; general: always (None entries).
        self._keys: list[bytes | None] | None = [] if (keyed or template is None) else None
        self._timestamps: list[int] | None = [] if template is None else None
        self._headers: list[tuple[Header, ...]] | None = None   # general path, when any record has some
        self._callbacks: list[Any] | None = None
        self.slices: list[AppendSlice] = []
        self._encoded_for: tuple[int, int, int] | None = None
        self.result: BatchResult | None = None
        self.retry_after_ns = 0
        self.split_generation = 0
        self._split_into: list[tuple[int, ProducerBatch]] | None = None

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

    @property
    def keyed(self) -> bool:
        """A bulk batch whose records carry keys (general batches always keep keys)."""
        return self._keys is not None

    def close(self) -> None:
        if self.state is _OPEN:
            self.transition(BatchState.CLOSED)

    def record_timestamp(self, index: int) -> int:
        """A record's CreateTime: its own (general path) or the batch's (bulk)."""
        if self._timestamps is not None:
            return self._timestamps[index]
        return self.created_wall_ms

    # -- appending ---------------------------------------------------------------
    def try_append(self, timestamp_ms: int, key: bytes | None, value: bytes | None,
                   headers: Sequence[Header], size_estimate: int, now_ns: int,
                   callback: Callable[[RecordHandle], Any] | None = None) -> int:
        """Adds one record unless it would overflow the batch (an empty batch takes
        any record); returns its index in the batch, or -1 when it does not fit."""
        n = self.record_count
        if n and self.estimated_bytes + size_estimate > self.capacity:
            return -1
        self._values.append(value)
        if value:
            self.value_bytes += len(value)
        self._keys.append(key)  # type: ignore[union-attr]
        self._timestamps.append(timestamp_ms)  # type: ignore[union-attr]
        if headers:
            if self._headers is None:
                self._headers = [()] * n
            self._headers.append(headers if type(headers) is tuple else tuple(headers))
        elif self._headers is not None:
            self._headers.append(())
        if callback is not None:
            if self._callbacks is None:
                self._callbacks = [None] * n
            self._callbacks.append(callback)
        elif self._callbacks is not None:
            self._callbacks.append(None)
        self.record_count = n + 1
        f = self.written_factor
        if f:
            u = self.uncompressed_bytes = self.uncompressed_bytes + size_estimate
            self.estimated_bytes = RECORD_BATCH_OVERHEAD + int((u - RECORD_BATCH_OVERHEAD) * f)
        else:
            self.estimated_bytes += size_estimate
        self.last_append_ns = now_ns
        return n

    def add_callback(self, index: int, fn: Callable[[RecordHandle], Any]) -> None:
        cbs = self._callbacks
        if cbs is None:
            cbs = self._callbacks = [None] * self.record_count
        cur = cbs[index]
        cbs[index] = fn if cur is None else (cur + [fn] if type(cur) is list else [cur, fn])

    def room_for(self, record_bytes: int) -> int:
        """How many more bulk records of ``record_bytes`` each fit (at least one if empty):
        as many as Java's ``hasRoomFor`` would take one by one (the record itself
        counted uncompressed, the batch so far at its estimated written size)."""
        if self.state is not _OPEN or self.template is None:
            return 0
        if not record_bytes:
            return 1 << 30
        f = self.written_factor
        if not f:
            n = (self.capacity - self.estimated_bytes) // record_bytes
        else:
            # The (j+1)-th more record fits while header + int((U + j*rb) * f) + rb
            # <= capacity, U the records' bytes so far: solve for j, then settle
            # the float rounding at the boundary.
            u = self.uncompressed_bytes - RECORD_BATCH_OVERHEAD
            limit = self.capacity - RECORD_BATCH_OVERHEAD - record_bytes
            n = max(0, int(((limit + 1) / f - u) / record_bytes) + 1)
            while n and int((u + (n - 1) * record_bytes) * f) > limit:
                n -= 1
            while int((u + n * record_bytes) * f) <= limit:
                n += 1
        return max(n, 0 if self.record_count else 1)

    def append_bulk(self, values: Sequence[bytes | None], keys: Sequence[bytes | None] | None,
                    record_bytes: int, now_ns: int, intended_first_ns: int = -1,
                    intended_step_ns: int = 0, first_seq: int = -1,
                    positions: Sequence[int] | None = None, positions_base: int = 0,
                    handed_ns: int = -1) -> None:
        """Appends a slice of same-template values; the caller checked ``room_for``.
        ``handed_ns``: when they were handed to the producer (default ``now_ns``)."""
        assert self.state is _OPEN and self.template is not None
        self._values.extend(values)
        if self._keys is not None:
            self._keys.extend(keys)  # type: ignore[arg-type]
        n = len(values)
        if self.value_size is not None:
            self.value_bytes += n * self.value_size
        elif self.template.null_values:          # a null value has no bytes
            self.value_bytes += sum(len(v) for v in values if v is not None)
        else:
            self.value_bytes += sum(map(len, values))  # type: ignore[arg-type]
        self.slices.append(AppendSlice(n, now_ns if handed_ns < 0 else handed_ns, intended_first_ns,
                                       intended_step_ns, first_seq, positions, positions_base))
        self.record_count += n
        f = self.written_factor
        if f:
            u = self.uncompressed_bytes = self.uncompressed_bytes + n * record_bytes
            self.estimated_bytes = RECORD_BATCH_OVERHEAD + int((u - RECORD_BATCH_OVERHEAD) * f)
        else:
            self.estimated_bytes += n * record_bytes
        self.last_append_ns = now_ns

    def is_full(self) -> bool:
        return self.state is not _OPEN or self.estimated_bytes >= self.capacity

    @property
    def observed_ratio(self) -> float:
        """Compressed records bytes / records bytes as counted on append, once encoded
        (what the ratio estimate learns from: it multiplies the same count)."""
        counted = self.uncompressed_bytes - RECORD_BATCH_OVERHEAD
        if not self.encoded_size or counted <= 0:
            return 1.0
        return (self.encoded_size - RECORD_BATCH_OVERHEAD) / counted

    @property
    def compression_rate(self) -> float:
        """Java's ``compressionRatio()``: compressed / uncompressed records bytes, once
        encoded (1.0 without compression)."""
        if not self.records_size:
            return 1.0
        return (self.encoded_size - RECORD_BATCH_OVERHEAD) / self.records_size

    # -- encoding ------------------------------------------------------------------
    def set_producer_state(self, producer_id: int, producer_epoch: int, base_sequence: int,
                           is_transactional: bool = False) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional

    def reset_producer_state(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
        """New sequence state for a batch that already had one (an epoch bump, or a
        failed batch's gap closed): it is re-encoded before it is sent again."""
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.sequence_reset = True

    def encode(self, now_wall_ms: int) -> memoryview:
        """The batch's RecordBatch v2 bytes (built once; again only if the producer
        state changed since). They live in the pool buffer when it is big enough."""
        key = (self.producer_id, self.producer_epoch, self.base_sequence)
        if self._encoded_for != key:
            if self.template is not None:
                data = self.template.build(
                    self._values, keys=self._keys,  # type: ignore[arg-type]
                    base_timestamp=self._base_timestamp(now_wall_ms),
                    producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                    base_sequence=self.base_sequence, is_transactional=self.is_transactional,
                    value_size=self.value_size, ids=self._ids())
                self.records_size = self.template.records_size
            else:
                builder = self._builder or GeneralBatchBuilder(
                    compression=self.compression, compression_level=self.compression_level)
                data = builder.build(self._timestamps, self._keys, self._values,  # type: ignore[arg-type]
                                     self._headers, producer_id=self.producer_id,
                                     producer_epoch=self.producer_epoch,
                                     base_sequence=self.base_sequence,
                                     is_transactional=self.is_transactional)
                self.records_size = builder.records_size
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

    def _ids(self) -> list[IdRun] | None:
        """Identity runs for a template that writes them: sequence numbers and the
        intended send time (the append time without a schedule) as wall-clock ns."""
        if not self.template.writes_ids:  # type: ignore[union-attr]
            return None
        off = self.wall_offset_ns
        out: list[IdRun] = []
        for s in self.slices:
            if s.intended_first_ns >= 0:
                step = s.intended_step_ns
                first = s.intended_first_ns + off - s.positions_base * step
                out.append((s.count, s.first_seq, first, step, s.positions))
            else:
                out.append((s.count, s.first_seq, s.appended_ns + off, 0, None))
        return out

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
        """Final step: ACKED, FAILED or EXPIRED; calls every record callback once."""
        self.transition(state)
        self.result = result
        cbs = self._callbacks
        if cbs:
            self._callbacks = None
            for i, fn in enumerate(cbs):
                if fn is None:
                    continue
                handle = RecordHandle(self, i)
                if type(fn) is list:
                    for f in fn:
                        f(handle)
                else:
                    fn(handle)

    def split(self, parts: int, now_ns: int) -> list[ProducerBatch]:
        """This batch's records spread over ``parts`` new CLOSED batches, in order,
        each taking its records' callbacks and append slices (MESSAGE_TOO_LARGE).

        The new batches keep ``created_ns`` (delivery.timeout.ms still counts from
        the first append) and have no producer state: they get fresh sequences when
        drained. Handles of this batch's records now resolve to the new batches.
        This batch is left as it was otherwise; the caller fails or drops it.
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
                              wall_offset_ns=self.wall_offset_ns, builder=self._builder,
                              keyed=self._keys is not None)
            b._values = self._values[lo:hi]
            if self._keys is not None:
                b._keys = self._keys[lo:hi]
            if self._timestamps is not None:
                b._timestamps = self._timestamps[lo:hi]
            if self._headers is not None:
                b._headers = self._headers[lo:hi]
            if self._callbacks is not None:
                b._callbacks = self._callbacks[lo:hi]
            b.slices = _slices_between(self.slices, lo, hi)
            b.record_count = hi - lo
            b.value_bytes = sum(len(v) for v in b._values if v)
            b.estimated_bytes = RECORD_BATCH_OVERHEAD + (self.estimated_bytes - RECORD_BATCH_OVERHEAD) * (hi - lo) // n
            b.uncompressed_bytes = (RECORD_BATCH_OVERHEAD
                                    + (self.uncompressed_bytes - RECORD_BATCH_OVERHEAD) * (hi - lo) // n)
            b.attempts = self.attempts
            b.split_generation = self.split_generation + 1
            b.last_append_ns = now_ns
            b.state = BatchState.CLOSED
            out.append(b)
        self._split_into = [(lo, b) for lo, b in zip(bounds, out)]
        self._callbacks = None
        return out

    def handles(self) -> list[RecordHandle]:
        return [RecordHandle(self, i) for i in range(self.record_count)]

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
            seq = s.first_seq + skip if s.first_seq >= 0 else -1
            if s.positions is not None:
                out.append(s._replace(count=b - a, first_seq=seq,
                                      positions=s.positions[skip:skip + b - a]))
            else:
                first = s.intended_first_ns
                out.append(s._replace(count=b - a, first_seq=seq,
                                      intended_first_ns=first + skip * s.intended_step_ns
                                      if first >= 0 else first))
        start = end
    return out
