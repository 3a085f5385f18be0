"""Reader / Writer: round trips for every primitive, edge cases, truncation errors."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kctl.errors import DecodeError, EncodeError
from kctl.protocol.primitives import (
    INT8_RANGE, INT16_RANGE, INT32_RANGE, INT64_RANGE, UINT16_RANGE, UINT32_RANGE,
    Reader, Writer, encode_uvarint, encode_varint, encode_varlong,
)

_S = settings(max_examples=60, deadline=None)

FIXED = [
    ("int8", INT8_RANGE), ("int16", INT16_RANGE), ("int32", INT32_RANGE),
    ("int64", INT64_RANGE), ("uint16", UINT16_RANGE), ("uint32", UINT32_RANGE),
]


def _round(write: str, read: str, value, **kw):
    w = Writer()
    getattr(w, write)(value)
    data = w.getvalue()
    r = Reader(data)
    got = getattr(r, read)(**kw) if kw else getattr(r, read)()
    assert r.at_end()
    return got, data


@pytest.mark.parametrize(("name", "rng"), FIXED)
@_S
@given(data=st.data())
def test_fixed_ints_round_trip_and_truncate(name, rng, data):
    v = data.draw(st.integers(*rng))
    got, wire = _round(name, name, v)
    assert got == v
    for cut in range(len(wire)):
        with pytest.raises(DecodeError, match="truncated"):
            getattr(Reader(wire[:cut]), name)()


@pytest.mark.parametrize(("name", "rng"), FIXED)
def test_fixed_ints_out_of_range(name, rng):
    for bad in (rng[0] - 1, rng[1] + 1):
        with pytest.raises(EncodeError):
            getattr(Writer(), name)(bad)


@_S
@given(st.floats(allow_nan=False))
def test_float64(v):
    assert _round("float64", "float64", v)[0] == v


@_S
@given(st.booleans())
def test_boolean(v):
    assert _round("boolean", "boolean", v)[0] is v
    assert Reader(b"\x07").boolean() is True   # Kafka reads any non-zero byte as true


@_S
@given(st.builds(uuid.UUID, int=st.integers(0, (1 << 128) - 1)))
def test_uuid(v):
    assert _round("uuid", "uuid", v)[0] == v
    with pytest.raises(DecodeError):
        Reader(v.bytes[:15]).uuid()


@_S
@given(st.integers(0, (1 << 32) - 1))
def test_uvarint(v):
    got, wire = _round("uvarint", "uvarint", v)
    assert got == v and wire == encode_uvarint(v)
    with pytest.raises(DecodeError):
        Reader(wire[:-1]).uvarint()


@_S
@given(st.integers(*INT32_RANGE))
def test_varint(v):
    got, wire = _round("varint", "varint", v)
    assert got == v and wire == encode_varint(v)


@_S
@given(st.integers(*INT64_RANGE))
def test_varlong(v):
    got, wire = _round("varlong", "varlong", v)
    assert got == v and wire == encode_varlong(v)


def test_varint_edges():
    assert encode_varint(-1) == b"\x01" and encode_varint(1) == b"\x02"
    with pytest.raises(DecodeError, match="longer than 5"):
        Reader(b"\xff" * 6).uvarint()
    with pytest.raises(DecodeError, match="truncated"):
        Reader(b"\x80").uvarint()
    with pytest.raises(EncodeError):
        Writer().uvarint(-1)
    with pytest.raises(EncodeError):
        Writer().varint(1 << 31)


@pytest.mark.parametrize(("write", "read", "nullable"), [
    ("string", "string", False), ("nullable_string", "nullable_string", True),
    ("compact_string", "compact_string", False),
    ("compact_nullable_string", "compact_nullable_string", True),
])
@_S
@given(data=st.data())
def test_strings(write, read, nullable, data):
    v = data.draw((st.none() | st.text(max_size=40)) if nullable else st.text(max_size=40))
    got, wire = _round(write, read, v)
    assert got == v
    if wire and v:
        with pytest.raises(DecodeError):
            getattr(Reader(wire[:-1]), read)()


@pytest.mark.parametrize(("write", "read", "nullable"), [
    ("bytes_", "bytes_", False), ("nullable_bytes", "nullable_bytes", True),
    ("compact_bytes", "compact_bytes", False),
    ("compact_nullable_bytes", "compact_nullable_bytes", True),
])
@_S
@given(data=st.data())
def test_bytes(write, read, nullable, data):
    v = data.draw((st.none() | st.binary(max_size=40)) if nullable else st.binary(max_size=40))
    got, wire = _round(write, read, v)
    assert got == v
    if v:
        with pytest.raises(DecodeError):
            getattr(Reader(wire[:-1]), read)()


def test_null_where_not_nullable_and_hostile_lengths():
    with pytest.raises(DecodeError, match="invalid length"):
        Reader(b"\xff\xff").string()
    with pytest.raises(DecodeError, match="exceeds"):
        Reader(b"\x7f\xff\xff\xff").bytes_()          # 2 GiB claimed, nothing present
    with pytest.raises(DecodeError, match="array count"):
        Reader(b"\x7f\xff\xff\xff").array_length()
    with pytest.raises(DecodeError):
        Reader(b"\xff\xff\xff\xff\x0f").compact_bytes()
    with pytest.raises(DecodeError, match="UTF-8"):
        Reader(b"\x00\x01\xff").string()
    assert Reader(b"\xff\xff\xff\xff").array_length(nullable=True) is None
    assert Reader(b"\x00").array_length(compact=True, nullable=True) is None


def test_error_offsets_include_base():
    r = Reader(b"\x00" * 10, pos=8, base=100)
    with pytest.raises(DecodeError) as e:
        r.int32("x")
    assert e.value.offset == 108 and e.value.field == "x"


@_S
@given(st.dictionaries(st.integers(0, 300), st.binary(max_size=10), max_size=5))
def test_tagged_fields(tags):
    got, wire = _round("tagged_fields", "tagged_fields", tags)
    assert got == tags
    if tags:
        with pytest.raises(DecodeError):
            Reader(wire[:-1]).tagged_fields()


def test_tagged_fields_out_of_order():
    with pytest.raises(DecodeError, match="out of order"):
        Reader(b"\x02\x05\x00\x01\x00").tagged_fields()


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=30))
def test_reader_on_garbage_raises_only_decode_error(data):
    for name in ("string", "nullable_string", "compact_string", "compact_nullable_string",
                 "bytes_", "compact_nullable_bytes", "uvarint", "varlong", "tagged_fields",
                 "int64", "uuid", "array_length"):
        try:
            getattr(Reader(data), name)()
        except DecodeError:
            pass
