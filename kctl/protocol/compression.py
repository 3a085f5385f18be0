"""Kafka's record compression codecs, both ways, with a cap on decompressed size.

How this works:
- ``compress(codec, data)`` and ``decompress(codec, data, max_size=...)`` cover
  Kafka's five codecs: none (0), gzip (1), snappy (2), lz4 (3), zstd (4); the
  codec id is the value of the low three bits of a batch's attributes.
- Every decompressor is driven in bounded steps (or, for snappy, checked
  against the length the block declares *before* any output is allocated), so
  a small hostile input can never make us allocate more than ``max_size``
  bytes: exceeding it raises ``DecodeError``, as does any corrupt stream.
  ``decompress_chunks`` hands the output out a step (1 MiB) at a time, so a
  caller that consumes each chunk holds one, whatever the ratio.
- ``DecompressionBudget`` is what a decoder of many batches (``kctl decode``)
  may decompress: per frame and per run, growing with the input it has read,
  so a crafted input cannot multiply a per-batch cap by packing batches.
- Snappy: the Java client writes the xerial block framing
  (``\\x82SNAPPY\\x00``, version and compat int32s, then ``[int32 length][raw
  snappy block]`` chunks of at most 32 KiB of input each); some other clients
  write one plain raw snappy block. We decode both (xerial is detected by its
  magic, like the Java ``SnappyInputStream``) and write xerial by default.
- LZ4: Kafka uses the LZ4 *frame* format with independent 64 KiB blocks. For
  magic 0 the Java client computed the frame header checksum over the wrong
  bytes (the 4 magic bytes included); ``KafkaLZ4BlockInputStream`` ignores the
  checksum for magic 0. We accept the correct checksum, Kafka's broken one, or
  (``legacy_lz4=True``) anything, by patching the header before handing it to
  liblz4; ``compress(..., legacy_lz4=True)`` writes the broken variant, as
  Kafka 0.8/0.9 did, for old brokers and for tests.

Errors raised here carry offset 0 and field ``"compressed records"``: the
caller knows where the compressed bytes sit and re-bases the error with
``DecodeError.within``.

No I/O, no clock (rule 1 of the conventions).
"""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Iterator
from enum import IntEnum
from typing import Final

import cramjam
import lz4.frame as _lz4f
import zstandard as _zstd

from kctl.errors import BudgetExceededError, DecodeError, EncodeError

__all__ = [
    "Compression",
    "DecompressionBudget",
    "DEFAULT_MAX_DECOMPRESSED",
    "DEFAULT_FLOOR",
    "DEFAULT_RATIO",
    "DEFAULT_RECORD_COST",
    "compress",
    "decompress",
    "decompress_chunks",
    "xxh32",
]

DEFAULT_MAX_DECOMPRESSED: Final = 64 * 1024 * 1024
"""Default cap on the decompressed size of one records blob (64 MiB) for ``decode_batches``."""
DEFAULT_FLOOR: Final = 16 * 1024 * 1024
"""A ``DecompressionBudget``'s allowance before any input is counted, per frame and per run."""
DEFAULT_RATIO: Final = 256
"""Decompressed bytes allowed per input byte, per frame and per run: above what Kafka traffic
compresses to (kctl's own zeros payload with 10 KB records: about 90:1 with zstd), far below
a bomb (tens of thousands to one)."""
DEFAULT_RECORD_COST: Final = 512
"""Bytes charged per record decoded out of a decompressed batch, on top of its own: a record
costs about a microsecond to check, whatever its size, so at ``DEFAULT_RATIO`` a captured byte
buys at most about half a record (under 1 s of work per MB of capture)."""
"""Bytes charged per record decoded out of a decompressed batch, on top of its own."""

_FIELD: Final = "compressed records"
# Decompressors hand out at most this much per step, so the memory held is the
# output so far plus one step.
_STEP: Final = 1 << 20


class Compression(IntEnum):
    """Kafka's codec ids (the low three bits of a batch's attributes)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_name(cls, name: str) -> Compression:
        """Parses a ``compression.type`` value (``none``, ``gzip``, ...)."""
        try:
            return cls[name.strip().upper()]
        except KeyError:
            raise ValueError(f"unknown compression type {name!r}; expected one of "
                             f"{', '.join(c.name.lower() for c in cls)}") from None


def _fail(reason: str) -> DecodeError:
    return DecodeError(reason, offset=0, field=_FIELD)


def _too_big(max_size: int) -> DecodeError:
    return _fail(f"decompressed size exceeds the limit of {max_size} bytes")


# ---------------------------------------------------------------------------
# gzip

def _gzip_compress(data: bytes, level: int | None) -> bytes:
    # Java's GZIPOutputStream uses Deflater.DEFAULT_COMPRESSION (6). wbits=31
    # writes a gzip header with mtime 0, so output is deterministic.
    c = zlib.compressobj(6 if level is None else level, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


def _gzip_chunks(data: bytes, max_size: int) -> Iterator[bytes]:
    total = 0
    buf = memoryview(data)
    d = zlib.decompressobj(31)
    try:
        while True:
            chunk = d.decompress(buf, min(max_size - total + 1, _STEP))
            total += len(chunk)
            if total > max_size:
                raise _too_big(max_size)
            if chunk:
                yield chunk
            if d.eof:
                rest = d.unused_data
                # Like java.util.zip.GZIPInputStream: read a following member if
                # one starts here, ignore anything else that trails.
                if rest[:2] != b"\x1f\x8b":
                    break
                d = zlib.decompressobj(31)
                buf = memoryview(rest)
                continue
            buf = memoryview(d.unconsumed_tail)
            if not buf and not chunk:
                raise _fail("truncated gzip stream")
    except zlib.error as e:
        raise _fail(f"corrupt gzip stream ({e})") from None


# ---------------------------------------------------------------------------
# snappy

_XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER: Final = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK: Final = 32 * 1024  # SnappyOutputStream's default block size
_I32: Final = struct.Struct(">i")


def _snappy_compress(data: bytes, xerial: bool) -> bytes:
    raw = cramjam.snappy.compress_raw
    if not xerial:
        return bytes(raw(data))
    parts = [_XERIAL_HEADER]
    view = memoryview(data)
    for i in range(0, len(data), _XERIAL_BLOCK):
        block = bytes(raw(view[i:i + _XERIAL_BLOCK]))
        parts.append(_I32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_raw_len(block: bytes | memoryview) -> int:
    try:
        return cramjam.snappy.decompress_raw_len(block)
    except Exception as e:  # cramjam raises its own error types
        raise _fail(f"corrupt snappy block header ({e})") from None


def _snappy_chunks(data: bytes, max_size: int) -> Iterator[bytes]:
    """Xerial blocks one by one (each at most what its 32 KiB of input declares); a plain
    raw snappy block whole. Every declared size is checked against ``max_size`` before
    anything is decompressed."""
    view = memoryview(data)
    if bytes(view[:8]) != _XERIAL_MAGIC:
        blocks = [view]
    else:
        if len(view) < 16:
            raise _fail("truncated xerial snappy header")
        blocks = []
        pos = 16
        while pos < len(view):
            if pos + 4 > len(view):
                raise _fail(f"truncated xerial snappy block length at byte {pos}")
            n = _I32.unpack_from(view, pos)[0]
            if n < 0 or pos + 4 + n > len(view):
                raise _fail(f"xerial snappy block length {n} at byte {pos} exceeds the input")
            blocks.append(view[pos + 4:pos + 4 + n])
            pos += 4 + n
    sizes = []
    total = 0
    for block in blocks:
        n = _snappy_raw_len(block)
        total += n
        if total > max_size:
            raise _too_big(max_size)
        sizes.append(n)
    for block, n in zip(blocks, sizes):
        out = bytearray(n)
        try:
            got = cramjam.snappy.decompress_raw_into(block, out)
        except Exception as e:  # cramjam raises its own error types
            raise _fail(f"corrupt snappy data ({e})") from None
        if got != n:
            raise _fail(f"snappy block produced {got} bytes, its header says {n}")
        if n:
            yield bytes(out)


# ---------------------------------------------------------------------------
# lz4

_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32: Final = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 of ``data`` (pure Python: used on the few bytes of an LZ4 frame header)."""
    n = len(data)
    i = 0
    if n >= 16:
        v = [(seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed & _M32, (seed - _P1) & _M32]
        while i <= n - 16:
            for lane in range(4):
                w = int.from_bytes(data[i:i + 4], "little")
                v[lane] = (_rotl((v[lane] + w * _P2) & _M32, 13) * _P1) & _M32
                i += 4
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while i + 4 <= n:
        h = (_rotl((h + int.from_bytes(data[i:i + 4], "little") * _P3) & _M32, 17) * _P4) & _M32
        i += 4
    while i < n:
        h = (_rotl((h + data[i] * _P5) & _M32, 11) * _P1) & _M32
        i += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h


_LZ4_MAGIC: Final = b"\x04\x22\x4d\x18"


def _lz4_header_end(frame: bytes | bytearray) -> int:
    """Position of the header checksum byte (HC) of an LZ4 frame."""
    if len(frame) < 7 or frame[:4] != _LZ4_MAGIC:
        raise _fail("not an LZ4 frame (bad magic)")
    flg = frame[4]
    hc = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    if len(frame) <= hc:
        raise _fail("truncated LZ4 frame header")
    return hc


def _lz4_compress(data: bytes, level: int | None, legacy: bool) -> bytes:
    # As KafkaLZ4BlockOutputStream: 64 KiB independent blocks, no checksums
    # beyond the header's, no content size.
    frame = _lz4f.compress(
        data, compression_level=0 if level is None else level,
        block_size=_lz4f.BLOCKSIZE_MAX64KB, block_linked=False,
        content_checksum=False, store_size=False, return_bytearray=legacy)
    if legacy:
        hc = _lz4_header_end(frame)
        frame[hc] = (xxh32(bytes(frame[:hc])) >> 8) & 0xFF
        frame = bytes(frame)
    return frame


def _lz4_chunks(data: bytes, max_size: int, legacy: bool) -> Iterator[bytes]:
    hc = _lz4_header_end(data)
    good = (xxh32(bytes(data[4:hc])) >> 8) & 0xFF
    if data[hc] != good:
        broken = (xxh32(bytes(data[:hc])) >> 8) & 0xFF
        if not legacy and data[hc] != broken:
            raise _fail(f"LZ4 frame header checksum mismatch (expected {good:#04x}, "
                        f"got {data[hc]:#04x})")
        patched = bytearray(data)
        patched[hc] = good
        data = bytes(patched)
    d = _lz4f.LZ4FrameDecompressor()
    total = 0
    buf: bytes | memoryview = data
    while True:
        try:
            chunk = d.decompress(buf, min(max_size - total + 1, _STEP))
        except Exception as e:  # lz4 raises RuntimeError for corrupt frames
            raise _fail(f"corrupt LZ4 frame ({e})") from None
        buf = b""
        total += len(chunk)
        if total > max_size:
            raise _too_big(max_size)
        if chunk:
            yield chunk
        if d.eof:
            break  # bytes after the end mark are ignored, as Kafka does
        if d.needs_input:
            raise _fail("truncated LZ4 frame")


# ---------------------------------------------------------------------------
# zstd

# Creating a zstd context costs ~15 us (more than decompressing a 16 KiB
# batch), so each thread keeps one per level; contexts are not thread-safe.
_zstd_local = threading.local()


def _zstd_compressor(level: int) -> _zstd.ZstdCompressor:
    cache = getattr(_zstd_local, "compressors", None)
    if cache is None:
        cache = _zstd_local.compressors = {}
    c = cache.get(level)
    if c is None:
        c = cache[level] = _zstd.ZstdCompressor(level=level)
    return c


def _zstd_decompressor() -> _zstd.ZstdDecompressor:
    d = getattr(_zstd_local, "decompressor", None)
    if d is None:
        d = _zstd_local.decompressor = _zstd.ZstdDecompressor()
    return d


def _zstd_compress(data: bytes, level: int | None) -> bytes:
    return _zstd_compressor(3 if level is None else level).compress(data)


_ZSTD_MAGIC: Final = 0xFD2FB528
_DICT_ID_SIZE: Final = (0, 1, 2, 4)
_FCS_SIZE: Final = (0, 2, 4, 8)


def _zstd_check_frames(data: bytes) -> None:
    """Walks the frame and block headers, so a truncated stream is an error.

    libzstd's streaming reader returns what it could decode from a cut-off
    frame without complaint; the block headers tell us whether every frame is
    whole. Skippable frames are allowed, as zstd-jni's ZstdInputStream does.
    """
    n = len(data)
    pos = 0
    while pos < n:
        if pos + 4 > n:
            raise _fail(f"truncated zstd frame magic at byte {pos}")
        magic = int.from_bytes(data[pos:pos + 4], "little")
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame
            if pos + 8 > n:
                raise _fail(f"truncated zstd skippable frame at byte {pos}")
            pos += 8 + int.from_bytes(data[pos + 4:pos + 8], "little")
            continue
        if magic != _ZSTD_MAGIC:
            raise _fail(f"not a zstd frame at byte {pos} (magic {magic:#010x})")
        if pos + 5 > n:
            raise _fail(f"truncated zstd frame header at byte {pos}")
        fhd = data[pos + 4]
        single = (fhd >> 5) & 1
        fcs = _FCS_SIZE[fhd >> 6] or single  # flag 0 means 1 byte when single-segment
        pos += 5 + (1 - single) + _DICT_ID_SIZE[fhd & 3] + fcs
        while True:
            if pos + 3 > n:
                raise _fail(f"truncated zstd block header at byte {pos}")
            bh = int.from_bytes(data[pos:pos + 3], "little")
            kind = (bh >> 1) & 3
            if kind == 3:
                raise _fail(f"reserved zstd block type at byte {pos}")
            pos += 3 + (1 if kind == 1 else bh >> 3)
            if bh & 1:
                break
        if fhd & 0x04:
            pos += 4  # content checksum
    if pos > n:
        raise _fail("truncated zstd frame")


def _zstd_chunks(data: bytes, max_size: int) -> Iterator[bytes]:
    _zstd_check_frames(data)
    total = 0
    try:
        reader = _zstd_decompressor().stream_reader(data, read_across_frames=True)
    except _zstd.ZstdError as e:
        raise _fail(f"corrupt zstd stream ({e})") from None
    with reader:
        while True:
            try:
                chunk = reader.read(min(max_size - total + 1, _STEP))
            except _zstd.ZstdError as e:
                raise _fail(f"corrupt zstd stream ({e})") from None
            if not chunk:
                break
            total += len(chunk)
            if total > max_size:
                raise _too_big(max_size)
            yield chunk


# ---------------------------------------------------------------------------
# entry points

def compress(codec: int, data: bytes, *, level: int | None = None, xerial: bool = True,
             legacy_lz4: bool = False) -> bytes:
    """Compresses ``data`` with ``codec`` (a ``Compression`` or its id).

    ``level`` overrides the codec's default level (gzip 6, lz4 0, zstd 3, as
    the Java client); ``xerial=False`` writes plain raw snappy instead of the
    Java client's xerial framing; ``legacy_lz4=True`` writes the broken LZ4
    header checksum of magic 0 message sets.
    """
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        return _gzip_compress(data, level)
    if codec == Compression.SNAPPY:
        return _snappy_compress(data, xerial)
    if codec == Compression.LZ4:
        return _lz4_compress(data, level, legacy_lz4)
    if codec == Compression.ZSTD:
        return _zstd_compress(data, level)
    raise EncodeError(f"unknown compression codec {codec!r}")


def decompress_chunks(codec: int, data: bytes, *, max_size: int = DEFAULT_MAX_DECOMPRESSED,
                      legacy_lz4: bool = False) -> Iterator[bytes]:
    """Decompresses ``data`` as a stream of chunks of at most 1 MiB (a raw, non-xerial
    snappy block comes whole): a caller that consumes each chunk before asking for the next
    never holds more than one, whatever the ratio. More than ``max_size`` bytes of output in
    all is a ``DecodeError``, raised before the chunk that would pass it is produced.

    ``legacy_lz4=True`` ignores the LZ4 frame header checksum entirely (magic 0 message
    sets); without it, the correct checksum and Kafka's broken one are both accepted.
    """
    if max_size < 0:
        raise ValueError("max_size must not be negative")
    if codec == Compression.NONE:
        if len(data) > max_size:
            raise _too_big(max_size)
        return iter((bytes(data),) if data else ())
    if codec == Compression.GZIP:
        return _gzip_chunks(data, max_size)
    if codec == Compression.SNAPPY:
        return _snappy_chunks(data, max_size)
    if codec == Compression.LZ4:
        return _lz4_chunks(data, max_size, legacy_lz4)
    if codec == Compression.ZSTD:
        return _zstd_chunks(data, max_size)
    raise _fail(f"unknown compression codec {codec}")


def decompress(codec: int, data: bytes, *, max_size: int = DEFAULT_MAX_DECOMPRESSED,
               legacy_lz4: bool = False) -> bytes:
    """Decompresses ``data`` whole; more than ``max_size`` bytes of output is a
    ``DecodeError``. (``decompress_chunks`` streams it instead.)"""
    if codec == Compression.NONE:
        if max_size < 0:
            raise ValueError("max_size must not be negative")
        if len(data) > max_size:
            raise _too_big(max_size)
        return bytes(data)
    return b"".join(decompress_chunks(codec, data, max_size=max_size, legacy_lz4=legacy_lz4))


# ---------------------------------------------------------------------------
# the budget


class DecompressionBudget:
    """Decompressed bytes a decoder may still produce: per frame and per run.

    Why both: a per-batch cap alone lets a small crafted input pack many batches that
    each decompress to just under it. Here one frame may produce at most
    ``frame_floor + ratio * its own size``, and a whole run at most ``run_floor + ratio *
    the input bytes reported so far`` (``add_input``): ordinary traffic, compressed well
    under ``ratio``:1, never runs out, and a crafted capture cannot multiply the work.
    Each record decoded out of a decompressed batch is charged ``record_cost`` bytes on
    top of its own, because decoding costs per record as much as per byte.

    Sans-IO and single-threaded: the caller says where frames start (``start_frame``)
    and how much input it has read; decoders ``charge`` what they produce.
    """

    __slots__ = ("frame_floor", "run_floor", "ratio", "record_cost", "_run_left", "_frame_left",
                 "spent", "input_bytes")

    def __init__(self, *, frame_floor: int = DEFAULT_FLOOR,
                 run_floor: int = DEFAULT_FLOOR, ratio: int = DEFAULT_RATIO,
                 record_cost: int = DEFAULT_RECORD_COST) -> None:
        if min(frame_floor, run_floor, ratio, record_cost) < 0:
            raise ValueError("budget figures must not be negative")
        self.frame_floor = frame_floor
        self.run_floor = run_floor
        self.ratio = ratio
        self.record_cost = record_cost
        self._run_left = run_floor
        self._frame_left = frame_floor
        self.spent = 0              # charged over the whole run
        self.input_bytes = 0

    @classmethod
    def fixed(cls, max_bytes: int, *, record_cost: int = 0) -> DecompressionBudget:
        """One allowance of ``max_bytes`` (frame and run alike), not growing with input."""
        return cls(frame_floor=max_bytes, run_floor=max_bytes, ratio=0, record_cost=record_cost)

    def add_input(self, nbytes: int) -> None:
        """``nbytes`` more input read: the run's allowance grows by ``ratio`` times that."""
        self.input_bytes += nbytes
        self._run_left += self.ratio * nbytes

    def start_frame(self, frame_bytes: int) -> None:
        """A new frame of ``frame_bytes`` begins; its own allowance starts afresh."""
        self._frame_left = self.frame_floor + self.ratio * frame_bytes

    @property
    def allowance(self) -> int:
        """Bytes that may still be produced now."""
        return max(0, min(self._frame_left, self._run_left))

    def charge(self, nbytes: int, records: int = 0) -> None:
        """Counts ``nbytes`` produced and ``records`` decoded; past the allowance, a
        ``DecodeError`` that says which limit was reached."""
        cost = nbytes + records * self.record_cost
        over = cost > self.allowance
        reason = self.exhausted_reason() if over else ""
        self._frame_left -= cost
        self._run_left -= cost
        self.spent += cost
        if over:
            raise BudgetExceededError(reason, offset=0, field=_FIELD)

    def exhausted_reason(self) -> str:
        if not self.ratio and self.frame_floor == self.run_floor:
            return f"decompressed size exceeds the limit of {self.run_floor} bytes"
        if self._run_left <= self._frame_left:
            return (f"this run's decompression budget is spent ({self.spent} bytes; it allows "
                    f"{self.run_floor} + {self.ratio} per input byte)")
        return (f"this frame's decompression limit is reached ({self.frame_floor} + "
                f"{self.ratio} per byte of the frame)")

    def refusal(self) -> BudgetExceededError:
        """The error for decompression refused or stopped by this budget."""
        return BudgetExceededError(self.exhausted_reason(), offset=0, field=_FIELD)
