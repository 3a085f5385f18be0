"""What the proxy reads of a frame without decoding it, sans-IO.

The proxy forwards most frames untouched, so it only needs a few numbers from them:
the request header (API key, version, correlation id), a Produce request's ``acks``
(whether an answer will come back), and for statistics the record-batch headers of a
Produce request (batches, records, codecs, bytes) and a Produce response's error codes
and throttle time. Reading those from fixed offsets and length prefixes costs a few
microseconds where the generic decoder builds a message tree (about 27 µs for a
six-partition Produce response); ``tests/inspect/test_peek.py`` checks every Produce
version against the generic codec (conventions rule 7).

Every function takes a frame's payload (no size prefix) and returns ``None`` when the
bytes do not read as what was asked (too short, a length past the end): the proxy
then forwards the frame anyway and counts it as undecodable; nothing here raises.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from kctl.protocol import schema

PRODUCE: Final = schema.API_BY_NAME["Produce"].api_key
_HEAD: Final = struct.Struct(">hhi")
_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_PRODUCE_FLEXIBLE: Final = 9
_PRODUCE_TOPIC_IDS: Final = 13
#: RecordBatch v2 header offsets (protocol/records.py has the full layout).
_MAGIC_AT: Final = 16
_ATTRIBUTES_AT: Final = 21
_RECORD_COUNT_AT: Final = 57
_V2_HEADER: Final = 61
CODECS: Final = ("none", "gzip", "snappy", "lz4", "zstd")


@dataclass(frozen=True, slots=True)
class RequestHead:
    api_key: int
    api_version: int
    correlation_id: int


def request_head(frame: bytes | memoryview) -> RequestHead | None:
    if len(frame) < 8:
        return None
    return RequestHead(*_HEAD.unpack_from(frame, 0))


def _uvarint(b: bytes | memoryview, pos: int) -> tuple[int, int]:
    """(value, next position); raises IndexError past the end."""
    value = shift = 0
    while True:
        byte = b[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise IndexError("varint too long")


def _skip_tags(b: bytes | memoryview, pos: int) -> int:
    count, pos = _uvarint(b, pos)
    for _ in range(count):
        _, pos = _uvarint(b, pos)
        size, pos = _uvarint(b, pos)
        pos += size
    return pos


def _body_start(frame: bytes | memoryview, api_key: int, api_version: int) -> int:
    """Where the body begins: after the header's client id (and tagged fields, header v2)."""
    pos = 8
    if schema.request_header_version(api_key, api_version) >= 1:
        pos = _skip_nullable_string(frame, pos, False)   # an int16 length even in header v2
    if schema.request_header_version(api_key, api_version) >= 2:
        pos = _skip_tags(frame, pos)
    return pos


def _produce_acks_at(frame: bytes | memoryview, version: int) -> tuple[int, int]:
    """(acks, position after acks) of a Produce request."""
    pos = _body_start(frame, PRODUCE, version)
    if version >= 3:                           # transactional_id
        pos = _skip_nullable_string(frame, pos, version >= _PRODUCE_FLEXIBLE)
    (acks,) = _I16.unpack_from(frame, pos)
    return acks, pos + 2


def produce_acks(frame: bytes | memoryview, version: int) -> int | None:
    """The ``acks`` of a Produce request, or ``None`` when the frame does not read."""
    try:
        acks, end = _produce_acks_at(frame, version)
    except (IndexError, struct.error):
        return None
    return acks if end <= len(frame) else None


@dataclass(frozen=True, slots=True)
class ProduceSummary:
    """A Produce request as statistics see it: from the record-batch headers only."""

    acks: int
    partitions: int
    batches: int
    records: int
    record_bytes: int                 # bytes of record sets (batch headers included)
    codecs: tuple[tuple[str, int], ...]   # codec name -> batches


def produce_summary(frame: bytes | memoryview, version: int) -> ProduceSummary | None:
    """Batches, records and codecs of a Produce request, read from the v2 batch headers
    (magic 0/1 message sets count their outer messages); ``None`` when it does not read."""
    try:
        return _produce_summary(frame, version)
    except (IndexError, struct.error, ValueError):
        return None


def _produce_summary(frame: bytes | memoryview, version: int) -> ProduceSummary | None:
    acks, pos = _produce_acks_at(frame, version)
    pos += 4                                          # timeout_ms
    flexible = version >= _PRODUCE_FLEXIBLE
    end = len(frame)
    topics, pos = _array_length(frame, pos, flexible)
    partitions = batches = records = record_bytes = 0
    codecs = [0, 0, 0, 0, 0, 0, 0, 0]
    for _ in range(max(topics, 0)):
        pos = _after_topic(frame, pos, version, flexible)
        parts, pos = _array_length(frame, pos, flexible)
        for _ in range(max(parts, 0)):
            # partition index, then the record set's length (-1: null), read as an array's
            size, pos = _array_length(frame, pos + 4, flexible)
            partitions += 1
            if size > 0:
                if pos + size > end:
                    return None
                b, r = _count_batches(frame, pos, pos + size, codecs)
                batches += b
                records += r
                record_bytes += size
                pos += size
            if flexible:
                pos = _skip_tags(frame, pos)
        if flexible:
            pos = _skip_tags(frame, pos)
    if pos > end:
        return None
    return ProduceSummary(acks, partitions, batches, records, record_bytes,
                          tuple((CODECS[i] if i < len(CODECS) else f"codec{i}", n)
                                for i, n in enumerate(codecs) if n))


def _count_batches(b: bytes | memoryview, pos: int, end: int, codecs: list[int]) -> tuple[int, int]:
    """(batches, records) of a record set: v2 batch headers, or magic 0/1 outer messages."""
    batches = records = 0
    while pos + 12 <= end:
        (length,) = _I32.unpack_from(b, pos + 8)
        nxt = pos + 12 + length
        if length < 0 or nxt > end or pos + _MAGIC_AT >= end:
            break                                     # a partial batch at the end is allowed
        magic = b[pos + _MAGIC_AT]
        if magic >= 2:
            if pos + _V2_HEADER > end:
                break
            records += max(_I32.unpack_from(b, pos + _RECORD_COUNT_AT)[0], 0)
            codecs[b[pos + _ATTRIBUTES_AT + 1] & 7] += 1
        else:
            # offset int64, size int32, crc int32, magic int8, attributes int8
            records += 1
            codecs[b[pos + _MAGIC_AT + 1] & 7] += 1
        batches += 1
        pos = nxt
    return batches, records


def produce_answer(frame: bytes | memoryview, version: int) -> tuple[list[int], int] | None:
    """A Produce response's non-zero partition error codes (in order) and its throttle
    time, read in place from the frame (response header included, no size prefix).

    ``None`` when the response carries a tagged field anywhere (KIP-951 leader hints,
    ``current_leader`` and ``node_endpoints``, are tagged: the proxy may have to rewrite
    them, so it decodes the frame) or does not read as one whole response."""
    try:
        return _produce_answer(frame, version)
    except (IndexError, struct.error):
        return None


def _array_length(b: bytes | memoryview, pos: int, flexible: bool) -> tuple[int, int]:
    """An array's (or a byte string's) length (-1: null) and the position after it: a
    compact array's unsigned varint (length + 1) in flexible versions, else an int32."""
    if flexible:
        n, pos = _uvarint(b, pos)
        return n - 1, pos
    return _I32.unpack_from(b, pos)[0], pos + 4


def _after_topic(b: bytes | memoryview, pos: int, version: int, flexible: bool) -> int:
    """The position after a Produce topic's name (or its id, from v13)."""
    if version >= _PRODUCE_TOPIC_IDS:
        return pos + 16
    return _skip_nullable_string(b, pos, flexible)


def _produce_answer(b: bytes | memoryview, version: int) -> tuple[list[int], int] | None:
    flexible = version >= _PRODUCE_FLEXIBLE
    pos = 4                                           # correlation id
    if flexible:
        if b[pos]:                                    # the header's tagged fields
            return None
        pos += 1
    unpack_i16 = _I16.unpack_from
    # index, error_code, base_offset, log_append_time_ms (v2+), log_start_offset (v5+)
    fixed = 14 + (8 if version >= 2 else 0) + (8 if version >= 5 else 0)
    errors: list[int] = []
    topics, pos = _array_length(b, pos, flexible)
    for _ in range(max(topics, 0)):
        pos = _after_topic(b, pos, version, flexible)
        parts, pos = _array_length(b, pos, flexible)
        for _ in range(max(parts, 0)):
            (code,) = unpack_i16(b, pos + 4)
            if code:
                errors.append(code)
            pos += fixed
            if version >= 8:
                n_errors, pos = _array_length(b, pos, flexible)
                for _ in range(max(n_errors, 0)):
                    pos = _skip_nullable_string(b, pos + 4, flexible)   # after batch_index
                    if flexible:
                        if b[pos]:
                            return None
                        pos += 1
                pos = _skip_nullable_string(b, pos, flexible)           # error_message
            if flexible:
                if b[pos]:                            # current_leader, or a tag unknown here
                    return None
                pos += 1
        if flexible:
            if b[pos]:
                return None
            pos += 1
    throttle = 0
    if version >= 1:
        (throttle,) = _I32.unpack_from(b, pos)
        pos += 4
    if flexible:
        if b[pos]:                                    # node_endpoints, or a tag unknown here
            return None
        pos += 1
    return (errors, throttle) if pos == len(b) else None


def _skip_nullable_string(b: bytes | memoryview, pos: int, flexible: bool) -> int:
    """The position after a nullable string (a string reads the same): a compact one's
    unsigned varint (length + 1, 0: null) in flexible versions, else an int16 (-1: null)."""
    if flexible:
        n, pos = _uvarint(b, pos)
        return pos + max(n - 1, 0)
    (n,) = _I16.unpack_from(b, pos)
    return pos + 2 + max(n, 0)
