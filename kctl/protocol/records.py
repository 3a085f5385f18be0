"""Record batches: RecordBatch v2 (magic 2) and the legacy message sets (magic 0, 1).

How this works:
- ``decode_batches(data)`` walks a records blob (what a Produce or Fetch
  ``records`` field holds): a sequence of entries that all start with
  ``offset int64, length int32`` and carry their magic byte at offset 16. A
  trailing entry cut short (a Fetch response may truncate the last batch) ends
  the walk and is reported in ``DecodedBatches.truncated``, not raised;
  anything malformed raises ``DecodeError`` naming the absolute byte offset in
  the blob and the field (``batch[1].records[3].headers[0].key``).
- Magic 2: the 61-byte header is read with one ``struct`` call, the CRC-32C
  over ``attributes`` to the end is checked, the records section is
  decompressed under a budget (``max_decompressed``, shared by every batch of
  the blob), the record count is checked against the bytes before any record
  is built, and each record must use exactly the bytes its length prefix says.
- ``scan_batches`` does the same checks without keeping records: a compressed
  records section is decompressed and walked a chunk at a time (``_Chunks``;
  a record longer than a chunk is checked field by field and skipped), so
  counting holds about one chunk whatever a batch decompresses to, and it
  returns the batches before any damage with the error instead of raising.
  ``iter_batch_records`` streams records a window at a time for printing.
  Both charge a ``DecompressionBudget``. ``decode_batches`` is built on the
  same walk, holding the records.
- Magic 0/1: as the Java client does, every top-level message is a batch of
  its own; a compressed wrapper message holds an inner message set whose
  offsets are absolute (magic 0) or relative to the wrapper (magic 1:
  ``absolute = wrapper_offset - last_inner_offset + inner_offset`` when that
  base is not negative, as Java's ``DeepRecordsIterator``).
- ``build_batch`` is the generic v2 encoder and ``build_message_set`` the
  legacy one; ``kctl.protocol.batch_builder`` holds the hot-path v2 encoder,
  which tests check byte for byte against ``build_batch``.

Record fields follow Kafka's ``DefaultRecordBatch``/``DefaultRecord`` in
snake_case; a record's ``offset`` and ``timestamp`` are absolute, as Java's
``Record.offset()``/``timestamp()`` are (with ``LOG_APPEND_TIME`` every record
reports the batch's ``max_timestamp``, as in Java).

No I/O and no clock here (rule 1 of the conventions).
"""

from __future__ import annotations

import codecs
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Final, NamedTuple

from crc32c import crc32c

from kctl.errors import BudgetExceededError, DecodeError, EncodeError
from kctl.protocol.compression import (
    DEFAULT_MAX_DECOMPRESSED,
    Compression,
    DecompressionBudget,
    compress,
    decompress_chunks,
)
from kctl.protocol.primitives import (
    INT16_RANGE,
    INT32_RANGE,
    INT64_RANGE,
    Reader,
    encode_varint,
    encode_varlong,
)

__all__ = [
    "Header",
    "Record",
    "RecordBatch",
    "DecodedBatches",
    "BatchInfo",
    "ScannedBatches",
    "TimestampType",
    "ControlRecordType",
    "EndTransactionMarker",
    "decode_batches",
    "scan_batches",
    "iter_batch_records",
    "build_batch",
    "build_message_set",
    "batch_attributes",
    "encode_record",
    "iter_records",
    "control_record",
    "decode_control_key",
    "decode_end_txn_marker",
    "RECORD_BATCH_OVERHEAD",
    "NO_TIMESTAMP",
    "NO_PRODUCER_ID",
    "NO_PRODUCER_EPOCH",
    "NO_SEQUENCE",
    "NO_PARTITION_LEADER_EPOCH",
]

NO_TIMESTAMP: Final = -1
NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
NO_SEQUENCE: Final = -1
NO_PARTITION_LEADER_EPOCH: Final = -1

# baseOffset int64, batchLength int32, partitionLeaderEpoch int32, magic int8,
# crc uint32, attributes int16, lastOffsetDelta int32, baseTimestamp int64,
# maxTimestamp int64, producerId int64, producerEpoch int16, baseSequence int32,
# records count int32.
_V2_HEADER: Final = struct.Struct(">qiibIhiqqqhii")
RECORD_BATCH_OVERHEAD: Final = _V2_HEADER.size  # 61
_LOG_OVERHEAD: Final = 12  # offset + length, common to every magic
_CRC_START: Final = 21  # attributes: where the v2 CRC's coverage begins
_V2_PRE_CRC: Final = struct.Struct(">qiib")  # baseOffset .. magic
_V2_POST_CRC: Final = struct.Struct(">hiqqqhii")  # attributes .. records count
_MIN_RECORD_SIZE: Final = 7  # length, attributes, ts delta, offset delta, key, value, headers

_COMPRESSION_MASK: Final = 0x07
_TIMESTAMP_TYPE_BIT: Final = 0x08
_TRANSACTIONAL_BIT: Final = 0x10
_CONTROL_BIT: Final = 0x20
_DELETE_HORIZON_BIT: Final = 0x40

# Legacy messages: offset int64, size int32, crc uint32, magic int8,
# attributes int8 [, timestamp int64 for magic 1], key bytes, value bytes.
_LEGACY_HEADER: Final = struct.Struct(">qiIbb")
_LEGACY_MIN_SIZE: Final = {0: 14, 1: 22}  # crc .. value with null key and value


class TimestampType(IntEnum):
    NO_TIMESTAMP_TYPE = -1  # magic 0
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlRecordType(IntEnum):
    """The ``type`` in a control record's key (Kafka's ``ControlRecordType``)."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


@dataclass(frozen=True, slots=True)
class Header:
    key: str
    value: bytes | None


@dataclass(slots=True)
class _UnfrozenHeader:
    """``Header``'s mutable twin (see ``_UnfrozenRecord``): records with a few
    headers each made the frozen ``__init__`` a visible share of decoding."""

    key: str
    value: bytes | None


@dataclass(frozen=True, slots=True)
class Record:
    """One record. ``offset`` and ``timestamp`` are absolute.

    ``attributes`` is unused by Kafka (always 0); it is kept so that a decoded
    batch re-encodes to the same bytes (rule 10: keep what we don't understand).
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    attributes: int = 0


@dataclass(slots=True)
class _UnfrozenRecord:
    """``Record``'s mutable twin, same slots in the same order.

    Why: a frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``, which costs ~0.8 us per record, a third of the
    decode time. The decoder builds this twin (plain slot stores) and assigns
    ``__class__ = Record`` before anyone else sees it, so every object that
    leaves this module is a genuine, frozen ``Record``.
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    attributes: int = 0


class _BatchOffsets:
    """What a batch's header fields say, shared by ``RecordBatch`` and ``BatchInfo``."""

    __slots__ = ()
    base_offset: int
    last_offset_delta: int
    base_sequence: int
    base_timestamp: int
    has_delete_horizon_ms: bool

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF

    @property
    def delete_horizon_ms(self) -> int | None:
        return self.base_timestamp if self.has_delete_horizon_ms else None


@dataclass(frozen=True, slots=True)
class RecordBatch(_BatchOffsets):
    """A decoded batch. For magic 0/1 one top-level message (possibly a
    compressed wrapper around several), with the v2-only fields at their
    "none" values."""

    base_offset: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    compression: Compression
    timestamp_type: TimestampType
    is_transactional: bool
    is_control: bool
    has_delete_horizon_ms: bool
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records: tuple[Record, ...]
    size_in_bytes: int

    @property
    def control_type(self) -> int | None:
        """The control record type of a control batch (``ControlRecordType``)."""
        if not self.is_control or not self.records or self.records[0].key is None:
            return None
        return decode_control_key(self.records[0].key)[1]


@dataclass(frozen=True, slots=True)
class DecodedBatches:
    """What ``decode_batches`` found.

    ``size`` is the number of bytes taken by whole batches; ``truncated`` the
    number of trailing bytes that start a batch but do not hold all of it (a
    Fetch response may cut its last batch short): not an error, just an
    incomplete tail, as h11's ``NEED_DATA``.
    """

    batches: tuple[RecordBatch, ...]
    size: int
    truncated: int

    @property
    def incomplete(self) -> bool:
        return self.truncated > 0

    @property
    def records(self) -> Iterator[Record]:
        for batch in self.batches:
            yield from batch.records

    def __iter__(self) -> Iterator[RecordBatch]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


@dataclass(frozen=True, slots=True)
class BatchInfo(_BatchOffsets):
    """A checked batch without its records: the header and how many records it holds
    (``scan_batches``). For magic 0/1 the v2-only fields are at their "none" values and
    ``base_offset`` is the top-level message's offset."""

    base_offset: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    compression: Compression
    timestamp_type: TimestampType
    is_transactional: bool
    is_control: bool
    has_delete_horizon_ms: bool
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    size_in_bytes: int


@dataclass(frozen=True, slots=True)
class ScannedBatches:
    """What ``scan_batches`` found: the whole batches before any damage, ``size`` the
    bytes they take, ``truncated`` a cut-off tail (as in ``DecodedBatches``) and
    ``error`` the damage that ended the walk, if any."""

    batches: tuple[BatchInfo, ...]
    size: int
    truncated: int
    error: DecodeError | None = None

    @property
    def record_count(self) -> int:
        return sum(b.record_count for b in self.batches)

    def __iter__(self) -> Iterator[BatchInfo]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


@dataclass(frozen=True, slots=True)
class EndTransactionMarker:
    """The value of an ABORT or COMMIT control record."""

    version: int
    coordinator_epoch: int


# ---------------------------------------------------------------------------
# decoding

class _RecordsError(Exception):
    """Raised inside the record parser; turned into a DecodeError by the caller,
    who knows where the records section sits in the blob."""

    def __init__(self, reason: str, pos: int, index: int, field: str) -> None:
        self.reason = reason
        self.pos = pos
        self.index = index
        self.field = field


def uvarint_at(data: bytes, pos: int, max_bytes: int) -> tuple[int, int]:
    """Multi-byte LEB128 at ``pos``; IndexError when the data runs out."""
    result = 0
    shift = 0
    for _ in range(max_bytes):
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
    raise ValueError(f"varint longer than {max_bytes} bytes")


def _parse_window(body: bytes, pos: int, end: int, index: int, left: int, limit: int,
                  base_offset: int, base_timestamp: int, log_append_time: int | None,
                  out: list[Record] | None) -> tuple[int, int, int]:
    """Parses up to ``min(left, limit)`` v2 records from ``body[pos:end]``.

    Returns ``(pos, parsed, need)``: where it stopped, how many it parsed, and how many
    more bytes than ``body`` holds the next record needs (0 when it stopped because
    ``left`` or ``limit`` was reached). A record is only parsed once all of its bytes
    are present, so running short is never an error here: the caller decides whether
    more bytes can come. ``out`` receives the records; ``None`` only checks and counts.

    Single-byte varints are decoded inline: this loop is what decoding speed comes down
    to. ``what`` names the field being read so an IndexError becomes a precise error.
    ``index`` is the number of records of the batch before this window (for errors).
    A record is parsed only when it ends by ``end``, so bytes after ``end`` (the next
    batch) are at most read as a bogus length, which then does not fit.
    """
    want = min(left, limit)
    n = 0       # records parsed (the loop's index while it runs)
    what = "length"
    uv = uvarint_at
    fast_record = _UnfrozenRecord
    keep = out is not None
    append = out.append if out is not None else None
    start = pos
    try:
        for n in range(want):  # noqa: B007 - n is read after the loop and in the handlers
            # length (varint): the only field that may run past the bytes present.
            what = "length"
            start = pos
            if pos >= end:
                return pos, n, 1
            b = body[pos]
            if b < 0x80:
                u = b
                pos += 1
            else:
                try:
                    u, pos = uv(body, pos, 5)
                except IndexError:
                    return start, n, 1
            length = (u >> 1) ^ -(u & 1)
            rec_end = pos + length
            if length < _MIN_RECORD_SIZE - 1:
                raise _RecordsError(f"record length {length} is below the minimum "
                                    f"{_MIN_RECORD_SIZE - 1}", start, index + n, what)
            if rec_end > end:
                return start, n, rec_end - end
            what = "attributes"
            attributes = body[pos]
            if attributes > 127:
                attributes -= 256
            pos += 1
            what = "timestamp_delta"
            b = body[pos]
            if b < 0x80:
                u = b
                pos += 1
            else:
                u, pos = uv(body, pos, 10)
            ts_delta = (u >> 1) ^ -(u & 1)
            what = "offset_delta"
            b = body[pos]
            if b < 0x80:
                u = b
                pos += 1
            else:
                u, pos = uv(body, pos, 5)
            offset_delta = (u >> 1) ^ -(u & 1)
            what = "key"
            b = body[pos]
            if b < 0x80:
                u = b
                pos += 1
            else:
                u, pos = uv(body, pos, 5)
            k = (u >> 1) ^ -(u & 1)
            if k == -1:
                key = None
            elif 0 <= k <= rec_end - pos:
                key = body[pos:pos + k] if keep else None
                pos += k
            else:
                raise _RecordsError(f"key length {k} invalid or beyond the record's end",
                                    pos, index + n, what)
            what = "value"
            b = body[pos]
            if b < 0x80:
                u = b
                pos += 1
            else:
                u, pos = uv(body, pos, 5)
            v = (u >> 1) ^ -(u & 1)
            if v == -1:
                value = None
            elif 0 <= v <= rec_end - pos:
                value = body[pos:pos + v] if keep else None
                pos += v
            else:
                raise _RecordsError(f"value length {v} invalid or beyond the record's end",
                                    pos, index + n, what)
            what = "headers"
            b = body[pos]
            if b < 0x80:
                u = b
                pos += 1
            else:
                u, pos = uv(body, pos, 5)
            h = (u >> 1) ^ -(u & 1)
            if h == 0:
                headers: tuple[Header, ...] = ()
            else:
                # Each header takes at least two bytes (key and value lengths).
                if h < 0 or 2 * h > rec_end - pos:
                    raise _RecordsError(f"header count {h} invalid or beyond the record's end",
                                        pos, index + n, what)
                headers = _parse_headers(body, pos, rec_end, h, index + n)
                pos = rec_end
            if pos != rec_end:
                raise _RecordsError(f"record length says {length} bytes but its fields take "
                                    f"{pos - (rec_end - length)}",
                                    start, index + n, "length")
            if append is not None:
                rec = fast_record(base_offset + offset_delta,
                                  log_append_time if log_append_time is not None
                                  else base_timestamp + ts_delta,
                                  key, value, headers, attributes)
                rec.__class__ = Record
                append(rec)
    except IndexError:
        raise _RecordsError("truncated", pos, index + n, what) from None
    except ValueError as e:
        raise _RecordsError(str(e), pos, index + n, what) from None
    return pos, want, 0


def _parse_records(body: bytes, count: int, base_offset: int, base_timestamp: int,
                   log_append_time: int | None) -> list[Record]:
    """Parses ``count`` v2 records that must fill ``body`` exactly."""
    out: list[Record] = []
    pos, n, need = _parse_window(body, 0, len(body), 0, count, count, base_offset,
                                 base_timestamp, log_append_time, out)
    if need:
        raise _RecordsError(f"record length does not fit the {len(body) - pos} bytes left",
                            pos, n, "length")
    if pos != len(body):
        raise _RecordsError(f"{len(body) - pos} bytes left after the declared {count} records",
                            pos, count, "")
    return out


def _parse_headers(body: bytes, pos: int, rec_end: int, count: int,
                   index: int) -> tuple[Header, ...]:
    """Headers of one record; must end exactly at ``rec_end``.

    Fast path: lengths read inline (as in ``_parse_records``) with no per-field
    bookkeeping; anything out of the ordinary (a bad length, bad UTF-8, running
    past the record) is parsed again by ``_parse_headers_checked``, which names
    the field and offset of the error.
    """
    headers = []
    append = headers.append
    p = pos
    try:
        for _ in range(count):
            b = body[p]
            if b < 0x80:
                u = b
                p += 1
            else:
                u, p = uvarint_at(body, p, 5)
            n = (u >> 1) ^ -(u & 1)
            if n < 0 or u > 0xFFFFFFFF or p + n > rec_end:
                break
            key = str(body[p:p + n], "utf-8")
            p += n
            b = body[p]
            if b < 0x80:
                u = b
                p += 1
            else:
                u, p = uvarint_at(body, p, 5)
            n = (u >> 1) ^ -(u & 1)
            if n == -1:
                value = None
            elif n < -1 or u > 0xFFFFFFFF or p + n > rec_end:
                break
            else:
                value = body[p:p + n]
                p += n
            h = _UnfrozenHeader(key, value)
            h.__class__ = Header
            append(h)
        else:
            if p == rec_end:
                return tuple(headers)
    except (IndexError, ValueError):     # UnicodeDecodeError is a ValueError
        pass
    return _parse_headers_checked(body, pos, rec_end, count, index)


def _parse_headers_checked(body: bytes, pos: int, rec_end: int, count: int,
                           index: int) -> tuple[Header, ...]:
    """``_parse_headers`` one field at a time, for a precise error."""
    r = Reader(body, pos, rec_end)
    headers = []
    for h in range(count):
        field = f"headers[{h}].key"
        try:
            start = r.pos
            n = r.varint(field)
            if n < 0:
                raise r.fail(f"invalid header key length {n}", field, at=start)
            if n > r.remaining():
                raise r.fail(f"header key length {n} exceeds the {r.remaining()} bytes left",
                             field, at=start)
            try:
                key = str(r.raw(n, field), "utf-8")
            except UnicodeDecodeError as e:
                raise r.fail(f"invalid UTF-8 ({e.reason})", field, at=start) from None
            field = f"headers[{h}].value"
            start = r.pos
            n = r.varint(field)
            if n < -1 or n > r.remaining():
                raise r.fail(f"invalid header value length {n}", field, at=start)
            value = None if n == -1 else r.raw(n, field)
        except DecodeError as e:
            raise _RecordsError(e.reason, e.offset, index, e.field) from None
        headers.append(Header(key, value))
    if r.pos != rec_end:
        raise _RecordsError(f"{rec_end - r.pos} bytes left in the record after its headers",
                            r.pos, index, "headers")
    return tuple(headers)


@dataclass(frozen=True, slots=True)
class _Message:
    offset: int
    crc: int
    magic: int
    attributes: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    end: int


def _read_message(data: bytes, pos: int, base: int, field: str, verify_crc: bool) -> _Message:
    """One whole legacy message at ``pos`` (its bytes known to be present)."""
    offset, size, crc, magic, attributes = _LEGACY_HEADER.unpack_from(data, pos)
    end = pos + _LOG_OVERHEAD + size
    if magic not in _LEGACY_MIN_SIZE:
        raise DecodeError(f"unsupported magic {magic}", offset=base + pos + 16,
                          field=f"{field}.magic")
    if size < _LEGACY_MIN_SIZE[magic]:
        raise DecodeError(f"message size {size} is below the minimum "
                          f"{_LEGACY_MIN_SIZE[magic]} for magic {magic}",
                          offset=base + pos + 8, field=f"{field}.size")
    if verify_crc:
        actual = zlib.crc32(memoryview(data)[pos + 16:end])
        if actual != crc:
            raise DecodeError(f"CRC-32 mismatch: message says {crc:#010x}, computed {actual:#010x}",
                              offset=base + pos + 12, field=f"{field}.crc")
    r = Reader(data, pos + 18, end, base)
    timestamp = r.int64(f"{field}.timestamp") if magic == 1 else NO_TIMESTAMP
    key = r.nullable_bytes(f"{field}.key")
    value = r.nullable_bytes(f"{field}.value")
    if not r.at_end():
        raise r.fail(f"{r.remaining()} bytes left after the value", f"{field}.value")
    return _Message(offset, crc, magic, attributes, timestamp, key, value, end)


class _Chunks:
    """The bytes of one records section, read forward in chunks (decompressed on the fly,
    or one slice of the blob): a read of a few bytes joins the next chunk, a long span is
    skipped chunk by chunk. Nothing longer than one record is ever joined, and when only
    counting, nothing longer than a chunk is held."""

    __slots__ = ("buf", "pos", "end", "base", "_it")

    def __init__(self, chunks: Iterator[bytes], buf: bytes = b"", pos: int = 0,
                 end: int = 0) -> None:
        # The section is buf[pos:end] and then the chunks: a raw section is read in place
        # in its blob (no copy); a decompressed one starts empty.
        self.buf = buf
        self.pos = pos
        self.end = end
        self.base = -pos       # offset in the section of buf[0]
        self._it = chunks

    @property
    def offset(self) -> int:
        return self.base + self.pos

    def more(self, need: int) -> bool:
        """At least ``need`` bytes from ``pos`` on, before ``end``; False if the section
        ends first."""
        have = self.end - self.pos
        if have >= need:
            return True
        parts = [self.buf[self.pos:self.end]] if have else []
        while have < need:
            chunk = next(self._it, None)
            if chunk is None:
                break
            parts.append(chunk)
            have += len(chunk)
        self.base += self.pos
        self.buf = parts[0] if len(parts) == 1 else b"".join(parts)
        self.pos = 0
        self.end = len(self.buf)
        return have >= need

    def skip(self, n: int, sink: Callable[[bytes], object] | None = None) -> bool:
        """Moves ``n`` bytes on (showing them to ``sink``) without joining them."""
        while n:
            have = self.end - self.pos
            if not have:
                chunk = next(self._it, None)
                if chunk is None:
                    return False
                self.base += self.end
                self.buf, self.pos, self.end = chunk, 0, len(chunk)
                continue
            step = min(have, n)
            if sink is not None:
                sink(self.buf[self.pos:self.pos + step])
            self.pos += step
            n -= step
        return True

    def rest(self) -> int:
        """Skips to the end; returns how many bytes that was."""
        start = self.offset
        while self.skip(1 << 30):
            pass
        return self.offset - start

    def byte(self) -> int:
        if not self.more(1):
            raise IndexError
        b = self.buf[self.pos]
        self.pos += 1
        return b

    def zigzag(self, max_bytes: int) -> int:
        result = shift = 0
        for _ in range(max_bytes):
            b = self.byte()
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return (result >> 1) ^ -(result & 1)
            shift += 7
        raise ValueError(f"varint longer than {max_bytes} bytes")


#: Records materialised at a time when they are streamed out (``iter_batch_records``).
_WINDOW: Final = 1024
#: When only counting, a record longer than this is checked and skipped, never joined.
_BIG_RECORD: Final = 1 << 20


def _skip_record(src: _Chunks, index: int) -> None:
    """Checks one (long) record field by field, skipping its key, value and header bytes
    without holding them; raises ``_RecordsError`` with section offsets."""
    what = "length"
    start = src.offset
    try:
        length = src.zigzag(5)
        rec_end = src.offset + length
        what = "attributes"
        src.byte()
        what = "timestamp_delta"
        src.zigzag(10)
        what = "offset_delta"
        src.zigzag(5)
        for what in ("key", "value"):
            n = src.zigzag(5)
            if n < -1 or n > rec_end - src.offset:
                raise _RecordsError(f"{what} length {n} invalid or beyond the record's end",
                                    src.offset, index, what)
            if n > 0 and not src.skip(n):
                raise IndexError
        what = "headers"
        h = src.zigzag(5)
        if h < 0 or 2 * h > rec_end - src.offset:
            raise _RecordsError(f"header count {h} invalid or beyond the record's end",
                                src.offset, index, what)
        for i in range(h):
            what = f"headers[{i}].key"
            n = src.zigzag(5)
            if n < 0 or n > rec_end - src.offset:
                raise _RecordsError(f"invalid header key length {n}", src.offset, index, what)
            utf8 = codecs.getincrementaldecoder("utf-8")()
            if not src.skip(n, utf8.decode):
                raise IndexError
            utf8.decode(b"", final=True)
            what = f"headers[{i}].value"
            n = src.zigzag(5)
            if n < -1 or n > rec_end - src.offset:
                raise _RecordsError(f"invalid header value length {n}", src.offset, index, what)
            if n > 0 and not src.skip(n):
                raise IndexError
    except IndexError:
        raise _RecordsError("truncated", src.offset, index, what) from None
    except UnicodeDecodeError as e:
        raise _RecordsError(f"invalid UTF-8 ({e.reason})", src.offset, index, what) from None
    except ValueError as e:
        raise _RecordsError(str(e), src.offset, index, what) from None
    if src.offset != rec_end:
        raise _RecordsError(f"record length says {length} bytes but its fields take "
                            f"{src.offset - (rec_end - length)}", start, index, "length")


def _v2_windows(src: _Chunks, count: int, base_offset: int, base_timestamp: int,
                log_append_time: int | None, keep: bool, budget: DecompressionBudget | None,
                window: int = _WINDOW) -> Iterator[list[Record] | int]:
    """The records of one v2 batch, a window at a time: lists of records (``keep``) or
    counts. Errors are ``_RecordsError`` with offsets in the records section.
    ``budget`` (compressed batches only) is charged ``record_cost`` per record."""
    index = 0
    left = count
    limit = window if keep else count
    if left and src.pos == src.end:
        src.more(1)             # a decompressed section starts empty: its first chunk
    while left:
        out: list[Record] | None = [] if keep else None
        try:
            pos, n, need = _parse_window(src.buf, src.pos, src.end, index, left, limit,
                                         base_offset, base_timestamp, log_append_time, out)
        except _RecordsError as e:
            e.pos += src.base
            raise
        src.pos = pos
        if n:
            index += n
            left -= n
            if budget is not None:
                budget.charge(0, n)
            yield out if out is not None else n
            continue
        if not keep and need > _BIG_RECORD:
            _skip_record(src, index)
            index += 1
            left -= 1
            if budget is not None:
                budget.charge(0, 1)
            yield 1
            continue
        if not src.more(src.end - src.pos + need):
            raise _RecordsError(f"the records end inside record {index} of the declared "
                                f"{count}", src.offset, index, "length")
    if src.more(1):
        extra = src.rest()
        raise _RecordsError(f"{extra} bytes left after the declared {count} records",
                            src.offset - extra, count, "")


class _Opened(NamedTuple):
    """A batch whose header is read and checked; its records are read on demand.
    (A named tuple: one is made per batch, and a frozen dataclass costs microseconds.)"""

    index: int
    pos: int                # offset of the batch in the blob
    end: int
    magic: int
    base_offset: int
    partition_leader_epoch: int
    crc: int
    attributes: int
    compression: Compression
    timestamp_type: TimestampType
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    count: int              # v2: the header's record count; legacy: -1
    body_at: int            # where the records section (v2) or the wrapper's value starts
    message: _Message | None = None     # legacy: the top-level message

    def info(self, record_count: int) -> BatchInfo:
        return BatchInfo(self.base_offset, self.partition_leader_epoch, self.magic, self.crc,
                         self.attributes, self.compression, self.timestamp_type,
                         bool(self.attributes & _TRANSACTIONAL_BIT) if self.magic == 2 else False,
                         bool(self.attributes & _CONTROL_BIT) if self.magic == 2 else False,
                         bool(self.attributes & _DELETE_HORIZON_BIT) if self.magic == 2 else False,
                         self.last_offset_delta, self.base_timestamp, self.max_timestamp,
                         self.producer_id, self.producer_epoch, self.base_sequence,
                         record_count, self.end - self.pos)


def _open_v2(data: bytes, pos: int, index: int, verify_crc: bool) -> _Opened:
    """Reads and checks the header of a v2 batch that lies whole in ``data[pos:]``."""
    where = f"batch[{index}]"
    (base_offset, length, leader_epoch, magic, crc, attributes, last_offset_delta,
     base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence,
     count) = _V2_HEADER.unpack_from(data, pos)
    end = pos + _LOG_OVERHEAD + length
    if verify_crc:
        actual = crc32c(memoryview(data)[pos + _CRC_START:end])
        if actual != crc:
            raise DecodeError(f"CRC-32C mismatch: batch says {crc:#010x}, "
                              f"computed {actual:#010x}", offset=pos + 17, field=f"{where}.crc")
    if count < 0:
        raise DecodeError(f"negative record count {count}", offset=pos + 57,
                          field=f"{where}.records_count")
    codec_id = attributes & _COMPRESSION_MASK
    try:
        codec = Compression(codec_id)
    except ValueError:
        raise DecodeError(f"unknown compression codec {codec_id}", offset=pos + 21,
                          field=f"{where}.attributes") from None
    body_at = pos + RECORD_BATCH_OVERHEAD
    if codec is Compression.NONE and count > (end - body_at) // _MIN_RECORD_SIZE:
        raise DecodeError(f"record count {count} cannot fit in {end - body_at} bytes of records",
                          offset=pos + 57, field=f"{where}.records_count")
    return _Opened(index, pos, end, magic, base_offset, leader_epoch, crc, attributes, codec,
                   TimestampType(1 if attributes & _TIMESTAMP_TYPE_BIT else 0),
                   last_offset_delta, base_timestamp, max_timestamp, producer_id,
                   producer_epoch, base_sequence, count, body_at)


def _open_legacy(data: bytes, pos: int, index: int, verify_crc: bool) -> _Opened:
    where = f"batch[{index}]"
    msg = _read_message(data, pos, 0, where, verify_crc)
    codec_id = msg.attributes & _COMPRESSION_MASK
    try:
        codec = Compression(codec_id)
    except ValueError:
        raise DecodeError(f"unknown compression codec {codec_id}", offset=pos + 17,
                          field=f"{where}.attributes") from None
    if msg.magic == 0:
        ts_type = TimestampType.NO_TIMESTAMP_TYPE
    else:
        ts_type = TimestampType(1 if msg.attributes & _TIMESTAMP_TYPE_BIT else 0)
    if codec is not Compression.NONE and msg.value is None:
        raise DecodeError("compressed wrapper message has a null value", offset=pos,
                          field=f"{where}.value")
    value_at = msg.end - len(msg.value) if msg.value is not None else msg.end
    return _Opened(index, pos, msg.end, msg.magic, msg.offset, NO_PARTITION_LEADER_EPOCH,
                   msg.crc, msg.attributes, codec, ts_type, 0, msg.timestamp, msg.timestamp,
                   NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE, -1, value_at, msg)


def _open(data: bytes, pos: int, index: int, verify_crc: bool) -> _Opened | None:
    """The batch at ``pos``, header checked; ``None`` when it is not all there (a cut-off
    tail, which is not an error)."""
    n = len(data)
    if n - pos < 17:
        return None  # not even the magic byte: a cut-off tail
    length = struct.unpack_from(">i", data, pos + 8)[0]
    magic = data[pos + 16]
    if magic == 2:
        if length < RECORD_BATCH_OVERHEAD - _LOG_OVERHEAD:
            raise DecodeError(f"batch length {length} is below the v2 minimum "
                              f"{RECORD_BATCH_OVERHEAD - _LOG_OVERHEAD}",
                              offset=pos + 8, field=f"batch[{index}].batch_length")
        if pos + _LOG_OVERHEAD + length > n:
            return None
        return _open_v2(data, pos, index, verify_crc)
    if magic in (0, 1):
        if length < _LEGACY_MIN_SIZE[magic]:
            raise DecodeError(f"message size {length} is below the minimum "
                              f"{_LEGACY_MIN_SIZE[magic]} for magic {magic}",
                              offset=pos + 8, field=f"batch[{index}].size")
        if pos + _LOG_OVERHEAD + length > n:
            return None
        return _open_legacy(data, pos, index, verify_crc)
    raise DecodeError(f"unsupported magic {magic}", offset=pos + 16,
                      field=f"batch[{index}].magic")


def _section(data: bytes, b: _Opened, budget: DecompressionBudget | None) -> _Chunks:
    """The records section (v2) or the wrapper's value (legacy) as chunks, decompressed
    on the fly and charged to ``budget``."""
    if b.compression is Compression.NONE:
        return _Chunks(iter(()), data, b.body_at, b.end)
    raw = data[b.body_at:b.end]
    if budget is None:
        return _Chunks(decompress_chunks(b.compression, raw, legacy_lz4=b.magic == 0))
    # Nothing is decompressed once the budget is spent; otherwise the codec stops at what
    # is left of it, and each chunk is charged (records are charged as they are read).
    if budget.allowance <= 0:
        raise budget.refusal()
    chunks = decompress_chunks(b.compression, raw, max_size=budget.allowance,
                               legacy_lz4=b.magic == 0)
    return _Chunks(_charged(chunks, budget))


def _charged(chunks: Iterator[bytes], budget: DecompressionBudget) -> Iterator[bytes]:
    try:
        for chunk in chunks:
            budget.charge(len(chunk))
            yield chunk
    except BudgetExceededError:
        raise
    except DecodeError as e:
        if e.reason.startswith("decompressed size exceeds"):
            # The codec stopped at the allowance: that work was done, so it is charged
            # (which raises), and the next batch is refused before any decompression.
            budget.charge(budget.allowance + 1)
        raise


def _records_of(data: bytes, b: _Opened, keep: bool, budget: DecompressionBudget | None,
                window: int = _WINDOW) -> Iterator[list[Record] | int]:
    """Windows of ``b``'s records (lists when ``keep``, else counts); errors are
    ``DecodeError`` with blob offsets and field paths."""
    where = f"batch[{b.index}]"
    compressed = b.compression is not Compression.NONE
    try:
        src = _section(data, b, budget)
        if b.magic == 2:
            yield from _v2_windows(src, b.count, b.base_offset, b.base_timestamp,
                                   b.max_timestamp if b.timestamp_type == 1 else None, keep,
                                   budget if compressed else None, window)
        else:
            yield from _legacy_windows(src, b, keep, budget, where)
    except _RecordsError as e:
        field = f"{where}.records[{e.index}]" + (f".{e.field}" if e.field else "")
        if not compressed:
            raise DecodeError(e.reason, offset=b.body_at + e.pos, field=field) from None
        raise DecodeError(f"{e.reason} (at byte {e.pos} of the decompressed records)",
                          offset=b.body_at, field=field) from None
    except DecodeError as e:
        if e.field.startswith(where):
            raise
        raise e.within(f"{where}.records" if b.magic == 2 else f"{where}.value",
                       b.body_at) from None


def _plain_records(data: bytes, b: _Opened) -> list[Record]:
    """The records of an uncompressed v2 batch, parsed in place in one call: the common
    case of ``decode_batches``, without the chunked walk's machinery (same checks)."""
    out: list[Record] = []
    try:
        pos, n, need = _parse_window(data, b.body_at, b.end, 0, b.count, b.count, b.base_offset,
                                     b.base_timestamp,
                                     b.max_timestamp if b.timestamp_type == 1 else None, out)
        if need:
            raise _RecordsError(f"the records end inside record {n} of the declared {b.count}",
                                pos, n, "length")
        if pos != b.end:
            raise _RecordsError(f"{b.end - pos} bytes left after the declared {b.count} records",
                                pos, b.count, "")
    except _RecordsError as e:
        field = f"batch[{b.index}].records[{e.index}]" + (f".{e.field}" if e.field else "")
        raise DecodeError(e.reason, offset=e.pos, field=field) from None
    return out


def _legacy_windows(src: _Chunks, b: _Opened, keep: bool, budget: DecompressionBudget | None,
                    where: str) -> Iterator[list[Record] | int]:
    msg = b.message
    assert msg is not None
    if b.compression is Compression.NONE:
        yield [Record(msg.offset, msg.timestamp, msg.key, msg.value)] if keep else 1
        return
    # The inner message set, one message at a time (each is joined whole: legacy
    # messages are small, and a wrapper's value never exceeds the budget).
    messages: list[_Message] = []
    count = 0
    while src.more(1):
        field = f"{where}.records[{count}]"
        at = src.offset
        if not src.more(17):
            raise DecodeError("truncated inner message (at byte {at} of the decompressed "
                              "messages)".format(at=at), offset=b.body_at, field=field)
        size = struct.unpack_from(">i", src.buf, src.pos + 8)[0]
        if size < 0 or not src.more(_LOG_OVERHEAD + size):
            raise DecodeError(f"inner message size {size} exceeds the bytes left (at byte {at} "
                              "of the decompressed messages)", offset=b.body_at,
                              field=f"{field}.size")
        try:
            m = _read_message(src.buf, src.pos, 0, field, True)
        except DecodeError as e:
            raise DecodeError(f"{e.reason} (at byte {at + e.offset - src.pos} of the "
                              "decompressed messages)", offset=b.body_at, field=e.field) from None
        if m.attributes & _COMPRESSION_MASK:
            raise DecodeError("compressed message nested in a compressed message (at byte "
                              f"{at + 17} of the decompressed messages)", offset=b.body_at,
                              field=f"{field}.attributes")
        src.pos = m.end
        count += 1
        if budget is not None:
            budget.charge(0, 1)
        if keep:
            messages.append(m)
        else:
            yield 1
    if not keep:
        return
    # As Java's DeepRecordsIterator: magic 1 inner offsets are relative to the wrapper's,
    # unless that would give a negative base (a producer's own, not yet stored, set with
    # wrapper offset 0), then left as is. This needs the last inner offset, so the inner
    # set is held whole here (it was decompressed under the budget).
    shift = msg.offset - messages[-1].offset if msg.magic > 0 and messages else 0
    if shift < 0:
        shift = 0
    append_time = msg.timestamp if b.timestamp_type == TimestampType.LOG_APPEND_TIME else None
    yield [Record(m.offset + shift, m.timestamp if append_time is None else append_time,
                  m.key, m.value) for m in messages]


def _record_batch(data: bytes, b: _Opened, budget: DecompressionBudget | None) -> RecordBatch:
    if b.magic == 2 and b.compression is Compression.NONE:
        records = tuple(_plain_records(data, b))
    else:
        held: list[Record] = []
        for w in _records_of(data, b, True, budget, window=1 << 30):
            held += w  # type: ignore[arg-type]
        records = tuple(held)
    if b.magic == 2:
        base, last_delta = b.base_offset, b.last_offset_delta
    else:
        base = records[0].offset if records else b.base_offset
        last_delta = (records[-1].offset - base) if records else 0
    return RecordBatch(
        base, b.partition_leader_epoch, b.magic, b.crc, b.attributes, b.compression,
        b.timestamp_type, bool(b.attributes & _TRANSACTIONAL_BIT) if b.magic == 2 else False,
        bool(b.attributes & _CONTROL_BIT) if b.magic == 2 else False,
        bool(b.attributes & _DELETE_HORIZON_BIT) if b.magic == 2 else False, last_delta,
        b.base_timestamp, b.max_timestamp, b.producer_id, b.producer_epoch, b.base_sequence,
        records, b.end - b.pos)


def decode_batches(data: bytes | bytearray | memoryview, *, verify_crc: bool = True,
                   max_decompressed: int = DEFAULT_MAX_DECOMPRESSED) -> DecodedBatches:
    """Decodes every batch of a records blob (any mix of magic 0, 1 and 2), records
    included.

    ``max_decompressed`` caps the decompressed bytes of the whole blob; past
    it, ``DecodeError``. A trailing partial batch is reported in
    ``truncated``, not raised. (``scan_batches`` counts without holding records.)
    """
    if not isinstance(data, bytes):
        data = bytes(data)
    budget = DecompressionBudget.fixed(max_decompressed)
    pos = 0
    batches: list[RecordBatch] = []
    while (b := _open(data, pos, len(batches), verify_crc)) is not None:
        batches.append(_record_batch(data, b, budget))
        pos = b.end
    return DecodedBatches(tuple(batches), pos, len(data) - pos)


def scan_batches(data: bytes | bytearray | memoryview, *, verify_crc: bool = True,
                 budget: DecompressionBudget | None = None) -> ScannedBatches:
    """Checks every batch of a records blob and counts its records, holding none of them:
    a compressed batch is decompressed and walked a chunk at a time, so memory stays
    about one chunk (plus one record) whatever the batch decompresses to.

    Never raises for bad data: the first ``DecodeError`` ends the walk and is returned in
    ``error``, with the batches before it. ``budget`` (default: 64 MiB for the blob)
    limits decompression, and charges each record of a compressed batch.
    """
    if not isinstance(data, bytes):
        data = bytes(data)
    if budget is None:
        budget = DecompressionBudget.fixed(DEFAULT_MAX_DECOMPRESSED)
    pos = 0
    infos: list[BatchInfo] = []
    try:
        while (b := _open(data, pos, len(infos), verify_crc)) is not None:
            count = 0
            for n in _records_of(data, b, False, budget):
                count += n  # type: ignore[operator]
            infos.append(b.info(count))
            pos = b.end
    except DecodeError as e:
        return ScannedBatches(tuple(infos), pos, 0, e)
    return ScannedBatches(tuple(infos), pos, len(data) - pos, None)


def iter_batch_records(data: bytes | bytearray | memoryview, *, verify_crc: bool = True,
                       budget: DecompressionBudget | None = None,
                       max_batches: int | None = None) -> Iterator[tuple[int, Record]]:
    """``(batch index, record)`` for every record of a records blob, decoded a window at a
    time: only the records not yet consumed of one window (and one decompressed chunk) are
    held. Stops after ``max_batches`` batches; a malformed batch raises ``DecodeError``."""
    if not isinstance(data, bytes):
        data = bytes(data)
    if budget is None:
        budget = DecompressionBudget.fixed(DEFAULT_MAX_DECOMPRESSED)
    pos = 0
    index = 0
    while max_batches is None or index < max_batches:
        b = _open(data, pos, index, verify_crc)
        if b is None:
            return
        for window in _records_of(data, b, True, budget):
            for r in window:  # type: ignore[union-attr]
                yield index, r
        pos = b.end
        index += 1


# ---------------------------------------------------------------------------
# encoding

def _check(v: int, lo_hi: tuple[int, int], name: str) -> None:
    if not (lo_hi[0] <= v <= lo_hi[1]):
        raise EncodeError(f"{name} {v!r} does not fit its wire type")


# Zigzag varints of -1 .. 8191, indexed by value + 1: offset deltas, lengths
# and small timestamp deltas come from here instead of being encoded per record.
_ZIGZAG: Final = tuple(encode_varint(v) for v in range(-1, 1 << 13))
_ZIGZAG_MAX: Final = len(_ZIGZAG) - 2


def _zz(v: int) -> bytes:
    return _ZIGZAG[v + 1] if -1 <= v <= _ZIGZAG_MAX else encode_varlong(v)


def _nullable_varbytes(v: bytes | None, name: str) -> bytes:
    if v is None:
        return b"\x01"  # zigzag(-1)
    if len(v) > INT32_RANGE[1]:
        raise EncodeError(f"{name} of {len(v)} bytes is too long")
    return _zz(len(v)) + v


def _encode_records(records: Sequence[Record], base_offset: int,
                    base_timestamp: int) -> bytes:
    """The records section of a v2 batch, uncompressed."""
    parts: list[bytes] = []
    append = parts.append
    zz, zz_max = _ZIGZAG, _ZIGZAG_MAX
    lo32, hi32 = INT32_RANGE
    lo64, hi64 = INT64_RANGE
    for r in records:
        od = r.offset - base_offset
        td = r.timestamp - base_timestamp
        if not lo32 <= od <= hi32:
            raise EncodeError(f"offset delta {od} (offset {r.offset}) does not fit int32")
        if not lo64 <= td <= hi64:
            raise EncodeError(f"timestamp delta {td} does not fit int64")
        a = r.attributes
        if not -128 <= a <= 127:
            raise EncodeError(f"record attributes {a} do not fit int8")
        key, value, headers = r.key, r.value, r.headers
        head = b"".join((
            _ATTR_BYTES[a & 0xFF],
            zz[td + 1] if -1 <= td <= zz_max else encode_varlong(td),
            zz[od + 1] if -1 <= od <= zz_max else encode_varint(od),
            b"\x01" if key is None else _nullable_varbytes(key, "key"),
            b"\x01" if value is None else _nullable_varbytes(value, "value"),
        ))
        if headers:
            hparts = [_zz(len(headers))]
            for h in headers:
                if h.key is None:
                    raise EncodeError("a header key must not be null")
                hparts.append(_nullable_varbytes(h.key.encode(), "header key"))
                hparts.append(_nullable_varbytes(h.value, "header value"))
            tail = b"".join(hparts)
        else:
            tail = b"\x00"
        n = len(head) + len(tail)
        append(zz[n + 1] if n <= zz_max else encode_varint(n))
        append(head)
        append(tail)
    return b"".join(parts)


_ATTR_BYTES: Final = tuple(bytes([i]) for i in range(256))


def encode_record(record: Record, base_offset: int, base_timestamp: int) -> bytes:
    """One v2 record, length prefix included."""
    return _encode_records((record,), base_offset, base_timestamp)


def _assemble_v2(records_section: bytes, *, base_offset: int, partition_leader_epoch: int,
                 attributes: int, last_offset_delta: int, base_timestamp: int,
                 max_timestamp: int, producer_id: int, producer_epoch: int,
                 base_sequence: int, count: int) -> bytes:
    """Header + CRC-32C around a (possibly compressed) records section."""
    post = _V2_POST_CRC.pack(attributes, last_offset_delta, base_timestamp, max_timestamp,
                             producer_id, producer_epoch, base_sequence, count)
    crc = crc32c(records_section, crc32c(post))
    length = len(post) + len(records_section) + 4 + 1 + 4  # + epoch, magic, crc
    pre = _V2_PRE_CRC.pack(base_offset, length, partition_leader_epoch, 2)
    return b"".join((pre, crc.to_bytes(4, "big"), post, records_section))


def batch_attributes(compression: int = 0, timestamp_type: int = 0,
                     is_transactional: bool = False, is_control: bool = False,
                     has_delete_horizon_ms: bool = False) -> int:
    """The v2 ``attributes`` int16 for these settings."""
    if not 0 <= compression <= 4:
        raise EncodeError(f"unknown compression codec {compression!r}")
    if timestamp_type not in (0, 1):
        raise EncodeError(f"timestamp type {timestamp_type!r} is not 0 or 1")
    return (compression | (_TIMESTAMP_TYPE_BIT if timestamp_type else 0)
            | (_TRANSACTIONAL_BIT if is_transactional else 0)
            | (_CONTROL_BIT if is_control else 0)
            | (_DELETE_HORIZON_BIT if has_delete_horizon_ms else 0))


def build_batch(records: Sequence[Record], *, compression: int = Compression.NONE,
                base_offset: int = 0, producer_id: int = NO_PRODUCER_ID,
                producer_epoch: int = NO_PRODUCER_EPOCH, base_sequence: int = NO_SEQUENCE,
                is_transactional: bool = False, is_control: bool = False,
                timestamp_type: int = TimestampType.CREATE_TIME,
                partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
                base_timestamp: int | None = None, max_timestamp: int | None = None,
                last_offset_delta: int | None = None, has_delete_horizon_ms: bool = False,
                compression_level: int | None = None, xerial: bool = True) -> bytes:
    """Encodes a RecordBatch v2 (magic 2).

    Record offsets are absolute: offset deltas are ``record.offset -
    base_offset``. ``base_timestamp`` defaults to the first record's timestamp
    (``-1`` with no records), ``max_timestamp`` to the largest, and
    ``last_offset_delta`` to the last record's delta (``-1`` with none), as
    Java's ``MemoryRecordsBuilder`` does; give them to encode, say, a
    LOG_APPEND_TIME batch or an emptied (compacted) batch.
    """
    attributes = batch_attributes(compression, timestamp_type, is_transactional, is_control,
                                  has_delete_horizon_ms)
    if base_timestamp is None:
        base_timestamp = records[0].timestamp if records else NO_TIMESTAMP
    if max_timestamp is None:
        max_timestamp = max((r.timestamp for r in records), default=NO_TIMESTAMP)
    if last_offset_delta is None:
        last_offset_delta = (records[-1].offset - base_offset) if records else -1
    _check(base_offset, INT64_RANGE, "base_offset")
    _check(partition_leader_epoch, INT32_RANGE, "partition_leader_epoch")
    _check(last_offset_delta, INT32_RANGE, "last_offset_delta")
    _check(base_timestamp, INT64_RANGE, "base_timestamp")
    _check(max_timestamp, INT64_RANGE, "max_timestamp")
    _check(producer_id, INT64_RANGE, "producer_id")
    _check(producer_epoch, INT16_RANGE, "producer_epoch")
    _check(base_sequence, INT32_RANGE, "base_sequence")
    body = _encode_records(records, base_offset, base_timestamp)
    if compression != Compression.NONE:
        body = compress(compression, body, level=compression_level, xerial=xerial)
    return _assemble_v2(body, base_offset=base_offset,
                        partition_leader_epoch=partition_leader_epoch, attributes=attributes,
                        last_offset_delta=last_offset_delta, base_timestamp=base_timestamp,
                        max_timestamp=max_timestamp, producer_id=producer_id,
                        producer_epoch=producer_epoch, base_sequence=base_sequence,
                        count=len(records))


def _encode_message(offset: int, magic: int, attributes: int, timestamp: int,
                    key: bytes | None, value: bytes | None) -> bytes:
    parts = [struct.pack(">bb", magic, attributes)]
    if magic == 1:
        parts.append(struct.pack(">q", timestamp))
    for v in (key, value):
        parts.append(b"\xff\xff\xff\xff" if v is None else struct.pack(">i", len(v)) + v)
    body = b"".join(parts)
    return struct.pack(">qiI", offset, len(body) + 4, zlib.crc32(body)) + body


def build_message_set(records: Sequence[Record], *, magic: int,
                      compression: int = Compression.NONE,
                      timestamp_type: int = TimestampType.CREATE_TIME,
                      compression_level: int | None = None, xerial: bool = True) -> bytes:
    """Encodes a legacy message set (magic 0 or 1), as a pre-0.11 client would.

    Uncompressed: one message per record, with its offset. Compressed: one
    wrapper message holding the inner set; inner offsets are absolute for
    magic 0 and relative (0..n-1) for magic 1, the wrapper carrying the last
    record's offset and (magic 1) the largest timestamp. Headers cannot be
    carried and are an error.
    """
    if magic not in (0, 1):
        raise EncodeError(f"legacy magic must be 0 or 1, not {magic!r}")
    if not 0 <= compression <= 3:
        raise EncodeError(f"compression codec {compression!r} is not available below magic 2"
                          if compression == Compression.ZSTD
                          else f"unknown compression codec {compression!r}")
    ts_bit = _TIMESTAMP_TYPE_BIT if (magic == 1 and timestamp_type == 1) else 0
    for r in records:
        if r.headers:
            raise EncodeError(f"magic {magic} messages cannot carry headers")
    if compression == Compression.NONE:
        return b"".join(_encode_message(r.offset, magic, ts_bit, r.timestamp, r.key, r.value)
                        for r in records)
    if not records:
        return b""
    first = records[0].offset
    inner = b"".join(
        _encode_message(r.offset - first if magic == 1 else r.offset, magic, 0, r.timestamp,
                        r.key, r.value)
        for r in records)
    value = compress(compression, inner, level=compression_level, xerial=xerial,
                     legacy_lz4=magic == 0)
    wrapper_ts = max(r.timestamp for r in records)
    return _encode_message(records[-1].offset, magic, compression | ts_bit, wrapper_ts, None,
                           value)


# ---------------------------------------------------------------------------
# control records

_CONTROL_KEY: Final = struct.Struct(">hh")
_END_TXN_VALUE: Final = struct.Struct(">hi")


def decode_control_key(key: bytes) -> tuple[int, int]:
    """``(version, type)`` of a control record key."""
    if len(key) < 4:
        raise DecodeError(f"control record key of {len(key)} bytes is shorter than 4",
                          offset=0, field="key")
    return _CONTROL_KEY.unpack_from(key, 0)


def decode_end_txn_marker(value: bytes | None) -> EndTransactionMarker:
    """The value of an ABORT/COMMIT control record."""
    if value is None or len(value) < 6:
        raise DecodeError("end transaction marker value is shorter than 6 bytes",
                          offset=0, field="value")
    return EndTransactionMarker(*_END_TXN_VALUE.unpack_from(value, 0))


def control_record(kind: ControlRecordType | int, *, offset: int = 0, timestamp: int,
                   coordinator_epoch: int = 0, version: int = 0) -> Record:
    """An ABORT or COMMIT marker record (to go in a batch with ``is_control=True``)."""
    if kind not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        raise EncodeError(f"control_record builds ABORT/COMMIT markers, not {kind!r}")
    return Record(offset, timestamp, _CONTROL_KEY.pack(0, kind),
                  _END_TXN_VALUE.pack(version, coordinator_epoch))


def iter_records(batches: Iterable[RecordBatch]) -> Iterator[Record]:
    """Every record of ``batches``, in order."""
    for batch in batches:
        yield from batch.records
