"""A Fetch's records blob, per batch, without a Python object per record.

How this works
--------------
``scan_fetched(blob)`` walks the batches of one partition's ``records`` field and
returns a ``ScannedBatch`` per whole batch (a trailing batch a Fetch cut short is left
out, and its start reported), reading for each:

- the v2 batch header (offsets, record count, producer id, transactional and control
  flags, max timestamp), with the CRC-32C checked when asked (``check.crcs``);
- for a control batch, its marker type (ABORT/COMMIT) from its one record's key;
- otherwise the records section, decompressed once per batch, and from it
  * the records' key and value sizes: the first record is parsed, which gives the
    layout every record written from one template shares (key length, value length,
    header block length); a regex of that layout (varints for the length and the
    timestamp and offset deltas, the rest fixed) must tile the section exactly
    ``count`` times (``re.split`` leaves only empty strings), which proves every
    record has those key and value sizes, at C speed;
  * the records' ``kctl`` identities, with ``identity.scan_records`` (the one
    identity decoder), when every record carries one.

A batch that does not fit (records of different sizes, compacted offsets, legacy magic
0/1) is decoded in full by ``records.decode_batches`` and carries its ``Record``s; so
does every batch when ``full=True`` (a caller that wants the records themselves).

No I/O and no clock here (rule 1 of the conventions).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Final

from crc32c import crc32c

from kctl.errors import DecodeError
from kctl.protocol.compression import DEFAULT_MAX_DECOMPRESSED, decompress
from kctl.protocol.identity import scan_records
from kctl.protocol.primitives import encode_varint
from kctl.protocol.records import Record, decode_batches, uvarint_at

__all__ = ["ScanResult", "ScannedBatch", "scan_fetched"]

_V2_HEADER: Final = struct.Struct(">qiibIhiqqqhii")
_HEADER_SIZE: Final = _V2_HEADER.size            # 61
_CRC_START: Final = 21
_COMPRESSION_MASK: Final = 0x07
_TRANSACTIONAL_BIT: Final = 0x10
_CONTROL_BIT: Final = 0x20
_VARINT: Final = rb"[\x80-\xff]{0,9}[\x00-\x7f]"
#: Layouts whose regex is kept (key length, value length, header count bytes, header bytes).
_PATTERN_CACHE_MAX: Final = 64


@dataclass(frozen=True, slots=True)
class ScannedBatch:
    """One batch of a fetched records blob.

    ``records`` is None on the fast path: the batch's records are at offsets
    ``base_offset .. base_offset + count - 1``, each with ``key_value_bytes`` //
    ``count`` bytes of key and value, and ``identities`` holds their ``kctl``
    identities (``identity.IDENTITY`` layout, 24 bytes each) or is None when they
    have none. Otherwise ``records`` lists every record (the full decoder's).
    """

    base_offset: int
    last_offset: int            # base offset + last offset delta
    count: int
    producer_id: int
    transactional: bool
    control: bool
    control_type: int           # ABORT 0 / COMMIT 1 for a control batch, else -1
    max_timestamp: int
    size_bytes: int             # on the wire
    key_value_bytes: int        # sum of the records' key and value lengths
    identities: bytes | None
    records: tuple[Record, ...] | None = None
    raw: bytes | memoryview = b""   # the batch as fetched (a view into the blob), for decoding later

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    def decoded(self) -> tuple[Record, ...]:
        """The batch's records (the full decoder's), on the fast path decoded now."""
        if self.records is not None:
            return self.records
        return tuple(r for b in decode_batches(bytes(self.raw), verify_crc=False).batches for r in b.records)


@dataclass(frozen=True, slots=True)
class ScanResult:
    batches: list[ScannedBatch]
    size: int                   # bytes taken by whole batches
    truncated: int              # bytes of a trailing partial batch (0: none)
    scanned: int                # batches on the fast path
    decoded: int                # batches decoded in full


_patterns: dict[tuple[int, int, bytes, int], re.Pattern[bytes]] = {}


def _svarint(data: bytes, pos: int, max_bytes: int = 5) -> tuple[int, int]:
    """A zigzag varint at ``pos`` (records.uvarint_at's errors)."""
    v, pos = uvarint_at(data, pos, max_bytes)
    return (v >> 1) ^ -(v & 1), pos


def _layout_pattern(section: bytes) -> tuple[re.Pattern[bytes], int] | None:
    """The regex matching records laid out like the section's first record, and that
    record's key + value bytes; None when the first record does not parse."""
    try:
        length, pos = _svarint(section, 0)
        end = pos + length
        pos += 1                                   # attributes
        _, pos = uvarint_at(section, pos, 10)      # timestamp delta (varlong)
        _, pos = uvarint_at(section, pos, 5)       # offset delta
        key_len, pos = _svarint(section, pos)
        if key_len > 0:
            pos += key_len
        value_len, pos = _svarint(section, pos)
        if value_len > 0:
            pos += value_len
        hstart = pos
        _, pos = uvarint_at(section, pos, 5)       # header count
        hcount = section[hstart:pos]
        header_bytes = end - pos
    except (IndexError, ValueError):
        return None
    if header_bytes < 0 or end > len(section):
        return None
    key = (key_len, value_len, hcount, header_bytes)
    pat = _patterns.get(key)
    if pat is None:
        keyfield = (re.escape(encode_varint(key_len)) + (b".{%d}" % key_len if key_len > 0 else b""))
        valuefield = (re.escape(encode_varint(value_len)) + (b".{%d}" % value_len if value_len > 0 else b""))
        src = (b"(?s)" + _VARINT + b"." + _VARINT + _VARINT + keyfield + valuefield
               + re.escape(hcount) + (b".{%d}" % header_bytes if header_bytes else b""))
        if len(_patterns) >= _PATTERN_CACHE_MAX:
            _patterns.clear()
        pat = _patterns[key] = re.compile(src)
    return pat, max(key_len, 0) + max(value_len, 0)


def _uniform_kv_bytes(section: bytes, count: int) -> int | None:
    """``count`` * (key + value bytes) when every record of the section has the first
    record's layout; None otherwise."""
    if count <= 0:
        return 0 if not section else None
    found = _layout_pattern(section)
    if found is None:
        return None
    pat, kv = found
    parts = pat.split(section)
    # Tiled exactly: count matches, nothing between or around them.
    if len(parts) != count + 1 or parts.count(b"") != count + 1:
        return None
    return kv * count


def _control_type(entry: bytes) -> int:
    t = decode_batches(entry, verify_crc=False).batches[0].control_type
    return -1 if t is None else t


def _decoded(entry: bytes | memoryview, base_offset: int, verify_crc: bool) -> list[ScannedBatch]:
    """The full decoder's view of one entry (a legacy wrapper may hold several)."""
    out = []
    for b in decode_batches(bytes(entry), verify_crc=verify_crc).batches:
        kv = sum(len(r.key or b"") + len(r.value or b"") for r in b.records)
        last = b.last_offset if b.magic == 2 else (b.records[-1].offset if b.records else base_offset)
        control = b.control_type if b.is_control else None
        out.append(ScannedBatch(
            b.base_offset, last, len(b.records), b.producer_id, b.is_transactional, b.is_control,
            -1 if control is None else control, b.max_timestamp, b.size_in_bytes, kv, None,
            b.records, entry))
    return out


def scan_fetched(data: bytes, *, check_crcs: bool = True, full: bool = False,
                 max_decompressed: int = DEFAULT_MAX_DECOMPRESSED) -> ScanResult:
    """The batches of one partition's fetched records blob (module docstring)."""
    out: list[ScannedBatch] = []
    pos = 0
    n = len(data)
    view = memoryview(data)
    scanned = decoded = 0
    while pos + 17 <= n:
        base_offset = int.from_bytes(data[pos:pos + 8], "big", signed=True)
        length = int.from_bytes(data[pos + 8:pos + 12], "big", signed=True)
        end = pos + 12 + length
        if length < 0:
            raise DecodeError(f"negative batch length {length}", offset=pos + 8, field="length")
        if end > n:
            break
        magic = data[pos + 16]
        if magic == 2 and length + 12 >= _HEADER_SIZE:
            (_, _, _, _, crc, attributes, last_delta, _, max_ts, producer_id, _, _,
             count) = _V2_HEADER.unpack_from(data, pos)
            if check_crcs:
                actual = crc32c(view[pos + _CRC_START:end])
                if actual != crc:
                    raise DecodeError(f"CRC-32C mismatch: batch says {crc:#010x}, computed "
                                      f"{actual:#010x} (check.crcs)", offset=pos + 17, field="crc")
            entry_size = end - pos
            transactional = bool(attributes & _TRANSACTIONAL_BIT)
            if attributes & _CONTROL_BIT:
                out.append(ScannedBatch(base_offset, base_offset + last_delta, count, producer_id,
                                        transactional, True, _control_type(data[pos:end]), max_ts,
                                        entry_size, 0, None, (), view[pos:end]))
                pos = end
                continue
            if not full and last_delta + 1 == count:
                section = data[pos + _HEADER_SIZE:end]
                codec = attributes & _COMPRESSION_MASK
                if codec:
                    section = decompress(codec, section, max_size=max_decompressed)
                kv = _uniform_kv_bytes(section, count)
                if kv is not None:
                    out.append(ScannedBatch(base_offset, base_offset + last_delta, count, producer_id,
                                            transactional, False, -1, max_ts, entry_size, kv,
                                            scan_records(section, count), None, view[pos:end]))
                    scanned += 1
                    pos = end
                    continue
        # v2 CRCs were checked above; a legacy message's CRC is checked by the decoder.
        out.extend(_decoded(view[pos:end], base_offset, check_crcs and magic != 2))
        decoded += 1
        pos = end
    return ScanResult(out, pos, n - pos, scanned, decoded)
