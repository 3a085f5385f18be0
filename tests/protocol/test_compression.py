"""Codecs: round trips, interop with kafka-python's codec module, framing
variants (xerial/raw snappy, Kafka's broken LZ4 header checksum), bombs and
corrupt input."""

from __future__ import annotations

import os
import zlib

import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka import codec as kcodec

from kctl.errors import BudgetExceededError, DecodeError, EncodeError
from kctl.protocol.compression import (
    Compression, DecompressionBudget, compress, decompress, decompress_chunks, xxh32,
)
from tests.protocol.kafka_python_shims import snappy_shim, xxhash_shim  # noqa: F401  (fixtures)

CODECS = list(Compression)
DATA = os.urandom(3000) * 20 + b"kafka " * 10000


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("kw", [{}, {"xerial": False}, {"legacy_lz4": True}])
def test_round_trip(codec, kw):
    assert decompress(codec, compress(codec, DATA, **kw)) == DATA
    assert decompress(codec, compress(codec, b"", **kw)) == b""


@given(st.sampled_from(CODECS), st.binary(max_size=2000), st.booleans())
@settings(max_examples=60, deadline=None)
def test_round_trip_property(codec, data, xerial):
    assert decompress(codec, compress(codec, data, xerial=xerial)) == data


def test_from_name():
    assert Compression.from_name("zstd") is Compression.ZSTD
    assert Compression.from_name(" LZ4 ") is Compression.LZ4
    with pytest.raises(ValueError, match="unknown compression type"):
        Compression.from_name("brotli")


def test_unknown_codec():
    with pytest.raises(EncodeError):
        compress(5, b"x")
    with pytest.raises(DecodeError, match="unknown compression codec 7"):
        decompress(7, b"x")


def test_xxh32_known_values():
    # Reference values of the XXH32 specification (seed 0).
    assert xxh32(b"") == 0x02CC5D05
    assert xxh32(b"a") == 0x550D7456
    assert xxh32(b"abc") == 0x32D153FF
    assert xxh32(b"Nobody inspects the spammish repetition") == 0xE2293B2F


# -- interop with kafka-python's codec functions (what a Python peer writes)

def test_kafka_python_gzip_zstd_lz4_interop():
    assert kcodec.gzip_decode(compress(Compression.GZIP, DATA)) == DATA
    assert decompress(Compression.GZIP, kcodec.gzip_encode(DATA)) == DATA
    assert kcodec.zstd_decode(compress(Compression.ZSTD, DATA)) == DATA
    assert decompress(Compression.ZSTD, kcodec.zstd_encode(DATA)) == DATA
    assert kcodec.lz4_decode(compress(Compression.LZ4, DATA)) == DATA
    assert decompress(Compression.LZ4, kcodec.lz4_encode(DATA)) == DATA


def test_snappy_xerial_format_and_raw():
    framed = compress(Compression.SNAPPY, DATA)
    # Java's SnappyOutputStream header: magic, version 1, compat 1.
    assert framed[:16] == b"\x82SNAPPY\x00" + b"\x00\x00\x00\x01" * 2
    raw = compress(Compression.SNAPPY, DATA, xerial=False)
    assert not raw.startswith(b"\x82SNAPPY")
    assert decompress(Compression.SNAPPY, raw) == DATA
    # Blocks hold at most 32 KiB of input each, as Java writes.
    import struct
    pos, total = 16, 0
    import cramjam
    while pos < len(framed):
        n = struct.unpack_from(">i", framed, pos)[0]
        block = framed[pos + 4:pos + 4 + n]
        size = cramjam.snappy.decompress_raw_len(block)
        assert size <= 32 * 1024
        total += size
        pos += 4 + n
    assert total == len(DATA)


def test_kafka_python_snappy_interop(snappy_shim):
    assert kcodec.snappy_decode(compress(Compression.SNAPPY, DATA)) == DATA
    assert kcodec.snappy_decode(compress(Compression.SNAPPY, DATA, xerial=False)) == DATA
    assert decompress(Compression.SNAPPY, kcodec.snappy_encode(DATA)) == DATA
    assert decompress(Compression.SNAPPY, kcodec.snappy_encode(DATA, xerial_compatible=False)) == DATA


def test_lz4_kafka_frame_shape():
    frame = compress(Compression.LZ4, DATA)
    info = lz4.frame.get_frame_info(frame)
    assert info["block_size"] == 64 * 1024
    assert not info["block_linked"]
    assert not info["content_checksum"]
    assert info["content_size"] == 0


def test_lz4_broken_header_checksum(xxhash_shim):
    legacy = compress(Compression.LZ4, DATA, legacy_lz4=True)
    good = compress(Compression.LZ4, DATA)
    assert legacy[:6] == good[:6] and legacy[6] != good[6]
    # liblz4 itself refuses Kafka's broken checksum...
    with pytest.raises(RuntimeError):
        lz4.frame.decompress(legacy)
    # ...we accept it, and kafka-python's magic-0 reader accepts ours.
    assert decompress(Compression.LZ4, legacy) == DATA
    assert kcodec.lz4_decode_old_kafka(legacy) == DATA
    assert decompress(Compression.LZ4, kcodec.lz4_encode_old_kafka(DATA)) == DATA
    # A checksum that is neither is an error, unless told to ignore it.
    bad = bytearray(good)
    bad[6] = next(b for b in range(256) if b not in (good[6], legacy[6]))
    with pytest.raises(DecodeError, match="header checksum"):
        decompress(Compression.LZ4, bytes(bad))
    assert decompress(Compression.LZ4, bytes(bad), legacy_lz4=True) == DATA


def test_zstd_frame_variants():
    for kw in ({"write_checksum": True}, {"write_content_size": False}, {"level": 19}):
        z = zstandard.ZstdCompressor(**kw)
        assert decompress(Compression.ZSTD, z.compress(DATA)) == DATA
        # Several frames, and a skippable frame, as zstd-jni's stream reads.
    one = compress(Compression.ZSTD, b"abc")
    skippable = b"\x50\x2a\x4d\x18" + (3).to_bytes(4, "little") + b"xyz"
    assert decompress(Compression.ZSTD, one + skippable + one) == b"abcabc"


def test_gzip_multi_member_and_trailing_garbage():
    a, b = compress(Compression.GZIP, b"hello "), compress(Compression.GZIP, b"world")
    assert decompress(Compression.GZIP, a + b) == b"hello world"
    assert decompress(Compression.GZIP, a + b"\x00\x00junk") == b"hello "


# -- caps and corruption

@pytest.mark.parametrize("codec", CODECS)
def test_cap_is_exact(codec):
    data = b"\x00" * 100_000
    z = compress(codec, data)
    assert decompress(codec, z, max_size=100_000) == data
    with pytest.raises(DecodeError, match="exceeds the limit of 99999"):
        decompress(codec, z, max_size=99_999)


@pytest.mark.parametrize("codec", [c for c in CODECS if c != Compression.NONE])
def test_decompression_bomb_is_capped(codec):
    bomb = compress(codec, b"\x00" * (80 << 20))  # 80 MiB of zeros; a few KiB to ~4 MiB
    assert len(bomb) < (5 << 20)
    with pytest.raises(DecodeError, match="exceeds the limit"):
        decompress(codec, bomb)  # default cap: 64 MiB
    with pytest.raises(DecodeError, match="exceeds the limit of 1024 "):
        decompress(codec, bomb, max_size=1024)


def test_snappy_declared_size_checked_before_allocation():
    # A raw block that claims 2**31 bytes of output in a 6-byte input.
    claim = bytes([0x80, 0x80, 0x80, 0x80, 0x08]) + b"\x00"
    with pytest.raises(DecodeError, match="exceeds the limit"):
        decompress(Compression.SNAPPY, claim)


@pytest.mark.parametrize("codec", [c for c in CODECS if c != Compression.NONE])
def test_truncated_streams_are_errors(codec):
    z = compress(codec, DATA)
    for cut in (1, 5, 17, len(z) // 2, len(z) - 1):
        with pytest.raises(DecodeError):
            decompress(codec, z[:cut])


@given(st.sampled_from(CODECS), st.binary(max_size=300))
@settings(max_examples=300, deadline=None)
def test_arbitrary_bytes_decode_or_decode_error(codec, data):
    try:
        out = decompress(codec, data, max_size=1 << 20)
    except DecodeError:
        return
    assert len(out) <= 1 << 20


@given(st.sampled_from(CODECS), st.binary(min_size=1, max_size=500), st.data())
@settings(max_examples=200, deadline=None)
def test_corrupted_streams_decode_or_decode_error(codec, data, draw):
    z = bytearray(compress(codec, data))
    i = draw.draw(st.integers(0, len(z) - 1))
    z[i] ^= draw.draw(st.integers(1, 255))
    try:
        decompress(codec, bytes(z), max_size=1 << 20)
    except DecodeError:
        pass


def test_gzip_error_text():
    with pytest.raises(DecodeError) as e:
        decompress(Compression.GZIP, b"\x1f\x8b\x08\x00garbage")
    assert e.value.field == "compressed records"
    assert zlib  # the stdlib codec underneath


# -- streaming and the budget (issue 13)

@pytest.mark.parametrize("codec", [c for c in CODECS if c is not Compression.NONE])
def test_chunks_are_bounded_and_join_to_the_whole(codec):
    """A bomb comes out 1 MiB at a time (snappy: one xerial block at a time), so a
    consumer that drops each chunk holds one; the cap stops it before the chunk past it."""
    data = bytes(16 << 20)
    z = compress(codec, data)
    sizes = [len(c) for c in decompress_chunks(codec, z, max_size=len(data))]
    assert sum(sizes) == len(data) and max(sizes) <= 1 << 20
    seen = 0
    with pytest.raises(DecodeError, match="exceeds the limit of 3000000"):
        for c in decompress_chunks(codec, z, max_size=3_000_000):
            seen += len(c)
    assert seen <= 3_000_000


def test_budget_per_frame_and_per_run():
    b = DecompressionBudget(frame_floor=1000, run_floor=1500, ratio=2, record_cost=10)
    b.start_frame(100)                      # this frame: 1000 + 2 * 100
    assert b.allowance == 1200
    b.charge(1100, records=10)              # 1200 charged: the frame's allowance is spent
    assert b.allowance == 0
    with pytest.raises(BudgetExceededError, match="this frame's decompression limit"):
        b.charge(1)
    b.start_frame(0)                        # next frame: 1000, but the run has 1500 - 1201
    assert b.allowance == 299
    b.add_input(50)                         # input read lets the run grow by 2 per byte
    assert b.allowance == 399
    with pytest.raises(BudgetExceededError, match="this run's decompression budget is spent"):
        b.charge(400)
    assert b.allowance == 0 and b.spent == 1601


def test_fixed_budget_reads_as_the_old_cap():
    b = DecompressionBudget.fixed(10)
    with pytest.raises(BudgetExceededError, match="exceeds the limit of 10 bytes"):
        b.charge(11)
    assert isinstance(b.refusal(), DecodeError)
