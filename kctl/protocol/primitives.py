"""Kafka's primitive wire types: a bounds-checked Reader and an appending Writer.

How this works:
- ``Reader`` walks a buffer from ``pos`` to ``end``. Every read checks that the
  bytes it needs are present and raises ``DecodeError`` naming the offset and
  the field otherwise; a length or count prefix is checked against the bytes
  that remain *before* anything is allocated, so a hostile length can never make
  the reader allocate more than the input holds.
- ``Writer`` appends to a ``bytearray``; values out of range for their wire type
  raise ``EncodeError``.
- Compact forms (flexible versions, KIP-482) prefix lengths with an unsigned
  varint holding length + 1, with 0 meaning null.

No I/O and no clock here: the module is pure (rule 1 of the conventions).
"""

from __future__ import annotations

import struct
import uuid as _uuid
from typing import Final

from kctl.errors import DecodeError, EncodeError

_I8: Final = struct.Struct(">b")
_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_I64: Final = struct.Struct(">q")
_U16: Final = struct.Struct(">H")
_U32: Final = struct.Struct(">I")
_F64: Final = struct.Struct(">d")

ZERO_UUID: Final = _uuid.UUID(int=0)

INT8_RANGE: Final = (-(1 << 7), (1 << 7) - 1)
INT16_RANGE: Final = (-(1 << 15), (1 << 15) - 1)
INT32_RANGE: Final = (-(1 << 31), (1 << 31) - 1)
INT64_RANGE: Final = (-(1 << 63), (1 << 63) - 1)
UINT16_RANGE: Final = (0, (1 << 16) - 1)
UINT32_RANGE: Final = (0, (1 << 32) - 1)


class Reader:
    """Reads Kafka primitives from ``data[pos:end]``.

    ``base`` is added to every offset reported in errors, so a reader over a
    slice of a larger buffer reports positions in the larger buffer.
    """

    __slots__ = ("data", "pos", "end", "base")

    def __init__(self, data: bytes | bytearray | memoryview, pos: int = 0,
                 end: int | None = None, base: int = 0) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else end
        self.base = base

    # -- helpers ----------------------------------------------------------
    def remaining(self) -> int:
        return self.end - self.pos

    def at_end(self) -> bool:
        return self.pos >= self.end

    def offset(self) -> int:
        """Position of the next byte, as reported in errors."""
        return self.base + self.pos

    def fail(self, reason: str, field: str, at: int | None = None) -> DecodeError:
        return DecodeError(reason, offset=self.base + (self.pos if at is None else at), field=field)

    def _short(self, need: int, field: str) -> DecodeError:
        return self.fail(f"truncated: need {need} bytes, {self.end - self.pos} left", field)

    def _fixed(self, st: struct.Struct, field: str):
        pos = self.pos
        nxt = pos + st.size
        if nxt > self.end:
            raise self._short(st.size, field)
        self.pos = nxt
        return st.unpack_from(self.data, pos)[0]

    def raw(self, n: int, field: str = "bytes") -> bytes:
        """``n`` raw bytes, copied out."""
        if n < 0:
            raise self.fail(f"negative length {n}", field)
        pos = self.pos
        nxt = pos + n
        if nxt > self.end:
            raise self._short(n, field)
        self.pos = nxt
        return bytes(self.data[pos:nxt])

    def skip(self, n: int, field: str = "bytes") -> None:
        if n < 0 or self.pos + n > self.end:
            raise self._short(n, field)
        self.pos += n

    # -- fixed-width ------------------------------------------------------
    def int8(self, field: str = "int8") -> int:
        return self._fixed(_I8, field)

    def int16(self, field: str = "int16") -> int:
        return self._fixed(_I16, field)

    def int32(self, field: str = "int32") -> int:
        return self._fixed(_I32, field)

    def int64(self, field: str = "int64") -> int:
        return self._fixed(_I64, field)

    def uint16(self, field: str = "uint16") -> int:
        return self._fixed(_U16, field)

    def uint32(self, field: str = "uint32") -> int:
        return self._fixed(_U32, field)

    def float64(self, field: str = "float64") -> float:
        return self._fixed(_F64, field)

    def boolean(self, field: str = "bool") -> bool:
        # Kafka reads any non-zero byte as true.
        return self._fixed(_I8, field) != 0

    def uuid(self, field: str = "uuid") -> _uuid.UUID:
        return _uuid.UUID(bytes=self.raw(16, field))

    # -- variable-length integers ----------------------------------------
    def uvarint(self, field: str = "unsigned varint", max_bytes: int = 5) -> int:
        """Unsigned LEB128; at most 5 bytes (32 bits) unless ``max_bytes`` says more."""
        data = self.data
        pos = self.pos
        end = self.end
        result = 0
        shift = 0
        for i in range(max_bytes):
            if pos >= end:
                raise self.fail("truncated varint", field)
            b = data[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                self.pos = pos
                return result
            shift += 7
        raise self.fail(f"varint longer than {max_bytes} bytes", field)

    def uvarlong(self, field: str = "unsigned varlong") -> int:
        return self.uvarint(field, 10)

    def varint(self, field: str = "varint") -> int:
        v = self.uvarint(field, 5)
        if v > 0xFFFFFFFF:
            raise self.fail("varint overflows 32 bits", field)
        return (v >> 1) ^ -(v & 1)

    def varlong(self, field: str = "varlong") -> int:
        v = self.uvarint(field, 10)
        if v > 0xFFFFFFFFFFFFFFFF:
            raise self.fail("varlong overflows 64 bits", field)
        return (v >> 1) ^ -(v & 1)

    # -- strings and bytes -----------------------------------------------
    def _length(self, n: int, field: str, nullable: bool, start: int) -> int | None:
        """Checks a decoded length: -1 is null when allowed, anything else must fit."""
        if n == -1 and nullable:
            return None
        if n < 0:
            raise self.fail(f"invalid length {n}", field, at=start)
        if n > self.end - self.pos:
            raise self.fail(f"length {n} exceeds the {self.end - self.pos} bytes left", field, at=start)
        return n

    def _text(self, n: int, field: str, start: int) -> str:
        pos = self.pos
        self.pos = pos + n
        try:
            return str(self.data[pos:pos + n], "utf-8")
        except UnicodeDecodeError as e:
            raise self.fail(f"invalid UTF-8 ({e.reason})", field, at=start) from None

    def string(self, field: str = "string") -> str:
        start = self.pos
        n = self._length(self._fixed(_I16, field), field, False, start)
        return self._text(n, field, start)

    def nullable_string(self, field: str = "string") -> str | None:
        start = self.pos
        n = self._length(self._fixed(_I16, field), field, True, start)
        return None if n is None else self._text(n, field, start)

    def compact_string(self, field: str = "compact string") -> str:
        start = self.pos
        n = self._length(self.uvarint(field) - 1, field, False, start)
        return self._text(n, field, start)

    def compact_nullable_string(self, field: str = "compact string") -> str | None:
        start = self.pos
        n = self._length(self.uvarint(field) - 1, field, True, start)
        return None if n is None else self._text(n, field, start)

    def bytes_(self, field: str = "bytes") -> bytes:
        start = self.pos
        n = self._length(self._fixed(_I32, field), field, False, start)
        return self.raw(n, field)

    def nullable_bytes(self, field: str = "bytes") -> bytes | None:
        start = self.pos
        n = self._length(self._fixed(_I32, field), field, True, start)
        return None if n is None else self.raw(n, field)

    def compact_bytes(self, field: str = "compact bytes") -> bytes:
        start = self.pos
        n = self._length(self.uvarint(field) - 1, field, False, start)
        return self.raw(n, field)

    def compact_nullable_bytes(self, field: str = "compact bytes") -> bytes | None:
        start = self.pos
        n = self._length(self.uvarint(field) - 1, field, True, start)
        return None if n is None else self.raw(n, field)

    # -- arrays and tagged fields ----------------------------------------
    def array_length(self, field: str = "array", *, compact: bool = False,
                     nullable: bool = False) -> int | None:
        """An array's element count, or ``None`` for a null array.

        Every element takes at least one byte on the wire, so a count larger
        than the bytes left is rejected here, before any list is built.
        """
        start = self.pos
        n = self.uvarint(field) - 1 if compact else self._fixed(_I32, field)
        if n == -1 and nullable:
            return None
        if n < 0:
            raise self.fail(f"invalid array length {n}", field, at=start)
        if n > self.end - self.pos:
            raise self.fail(f"array count {n} exceeds the {self.end - self.pos} bytes left",
                            field, at=start)
        return n

    def tagged_fields(self, field: str = "tagged fields") -> dict[int, bytes]:
        """A tagged-field section as ``{tag: raw bytes}``; tags must ascend."""
        start = self.pos
        count = self.uvarint(field)
        if count > self.end - self.pos:
            raise self.fail(f"tagged field count {count} exceeds the bytes left", field, at=start)
        out: dict[int, bytes] = {}
        last = -1
        for _ in range(count):
            tag_at = self.pos
            tag = self.uvarint(field)
            if tag <= last:
                raise self.fail(f"tag {tag} out of order or repeated", field, at=tag_at)
            last = tag
            size = self.uvarint(field)
            out[tag] = self.raw(size, f"{field}[{tag}]")
        return out


class Writer:
    """Appends Kafka primitives to a ``bytearray`` (``out``)."""

    __slots__ = ("out",)

    def __init__(self, out: bytearray | None = None) -> None:
        self.out = bytearray() if out is None else out

    def getvalue(self) -> bytes:
        return bytes(self.out)

    def _fixed(self, st: struct.Struct, lo_hi: tuple[int, int], v: int, name: str) -> None:
        if not (lo_hi[0] <= v <= lo_hi[1]):
            raise EncodeError(f"{v!r} does not fit {name}")
        self.out += st.pack(v)

    def int8(self, v: int) -> None:
        self._fixed(_I8, INT8_RANGE, v, "int8")

    def int16(self, v: int) -> None:
        self._fixed(_I16, INT16_RANGE, v, "int16")

    def int32(self, v: int) -> None:
        self._fixed(_I32, INT32_RANGE, v, "int32")

    def int64(self, v: int) -> None:
        self._fixed(_I64, INT64_RANGE, v, "int64")

    def uint16(self, v: int) -> None:
        self._fixed(_U16, UINT16_RANGE, v, "uint16")

    def uint32(self, v: int) -> None:
        self._fixed(_U32, UINT32_RANGE, v, "uint32")

    def float64(self, v: float) -> None:
        self.out += _F64.pack(v)

    def boolean(self, v: bool) -> None:
        self.out.append(1 if v else 0)

    def uuid(self, v: _uuid.UUID | None) -> None:
        self.out += (v or ZERO_UUID).bytes

    def raw(self, b: bytes | bytearray | memoryview) -> None:
        self.out += b

    def uvarint(self, v: int) -> None:
        if v < 0:
            raise EncodeError(f"{v!r} is negative; unsigned varint needed")
        out = self.out
        while v >= 0x80:
            out.append((v & 0x7F) | 0x80)
            v >>= 7
        out.append(v)

    def varint(self, v: int) -> None:
        if not (INT32_RANGE[0] <= v <= INT32_RANGE[1]):
            raise EncodeError(f"{v!r} does not fit varint")
        self.uvarint(((v << 1) ^ (v >> 31)) & 0xFFFFFFFF)

    def varlong(self, v: int) -> None:
        if not (INT64_RANGE[0] <= v <= INT64_RANGE[1]):
            raise EncodeError(f"{v!r} does not fit varlong")
        self.uvarint(((v << 1) ^ (v >> 63)) & 0xFFFFFFFFFFFFFFFF)

    def string(self, v: str) -> None:
        b = v.encode()
        if len(b) > INT16_RANGE[1]:
            raise EncodeError(f"string of {len(b)} bytes is longer than int16 allows")
        self.out += _I16.pack(len(b))
        self.out += b

    def nullable_string(self, v: str | None) -> None:
        if v is None:
            self.out += b"\xff\xff"
        else:
            self.string(v)

    def compact_string(self, v: str) -> None:
        b = v.encode()
        self.uvarint(len(b) + 1)
        self.out += b

    def compact_nullable_string(self, v: str | None) -> None:
        if v is None:
            self.out.append(0)
        else:
            self.compact_string(v)

    def bytes_(self, v: bytes | bytearray | memoryview) -> None:
        self.out += _I32.pack(len(v))
        self.out += v

    def nullable_bytes(self, v: bytes | bytearray | memoryview | None) -> None:
        if v is None:
            self.out += b"\xff\xff\xff\xff"
        else:
            self.bytes_(v)

    def compact_bytes(self, v: bytes | bytearray | memoryview) -> None:
        self.uvarint(len(v) + 1)
        self.out += v

    def compact_nullable_bytes(self, v: bytes | bytearray | memoryview | None) -> None:
        if v is None:
            self.out.append(0)
        else:
            self.compact_bytes(v)

    def array_length(self, n: int | None, *, compact: bool = False) -> None:
        """Writes an array's count; ``None`` writes a null array."""
        if compact:
            self.uvarint(0 if n is None else n + 1)
        else:
            self.out += _I32.pack(-1 if n is None else n)

    def tagged_fields(self, fields: dict[int, bytes]) -> None:
        self.uvarint(len(fields))
        for tag in sorted(fields):
            value = fields[tag]
            self.uvarint(tag)
            self.uvarint(len(value))
            self.out += value


# Stand-alone varint helpers for hot paths that build bytes without a Writer.

def encode_uvarint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def encode_varint(v: int) -> bytes:
    """Zigzag varint of a 32-bit value (RecordBatch v2 record fields)."""
    return encode_uvarint(((v << 1) ^ (v >> 31)) & 0xFFFFFFFF)


def encode_varlong(v: int) -> bytes:
    return encode_uvarint(((v << 1) ^ (v >> 63)) & 0xFFFFFFFFFFFFFFFF)
