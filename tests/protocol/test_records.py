"""RecordBatch v2 and legacy message sets: round trips, kafka-python cross-checks
both ways for every codec and magic, the hot-path builder against the generic
encoder (rule 7), and fuzzing (any bytes -> batches or DecodeError)."""

from __future__ import annotations

import os
import struct

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from kctl.errors import BudgetExceededError, DecodeError, EncodeError
from kctl.protocol.batch_builder import BatchTemplate
from kctl.protocol.compression import Compression, DecompressionBudget, compress
from kctl.protocol.records import (
    ControlRecordType,
    EndTransactionMarker,
    Header,
    Record,
    RecordBatch,
    TimestampType,
    build_batch,
    build_message_set,
    control_record,
    decode_batches,
    decode_control_key,
    decode_end_txn_marker,
    iter_batch_records,
    scan_batches,
)
from tests.protocol.kafka_python_shims import all_codecs, snappy_shim, xxhash_shim  # noqa: F401

CODECS = list(Compression)
INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
TS = st.integers(0, 1 << 45)

headers_st = st.lists(
    st.builds(Header, st.text(max_size=8), st.none() | st.binary(max_size=8)), max_size=3
).map(tuple)


@st.composite
def record_lists(draw, min_size=0, max_size=12):
    n = draw(st.integers(min_size, max_size))
    base_ts = draw(TS)
    deltas = draw(st.lists(st.integers(0, 1 << 20), min_size=n, max_size=n))
    # Offsets strictly increase from 0 but may have gaps (compacted batches).
    gaps = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    out, offset = [], 0
    for i in range(n):
        out.append(Record(
            offset, base_ts + deltas[i],
            draw(st.none() | st.binary(max_size=20)),
            draw(st.none() | st.binary(max_size=200)),
            draw(headers_st)))
        offset += 1 + gaps[i]
    return out


def _one(data: bytes) -> RecordBatch:
    decoded = decode_batches(data)
    assert not decoded.incomplete and decoded.size == len(data)
    assert len(decoded) == 1
    return decoded.batches[0]


# ---------------------------------------------------------------------------
# v2 round trips

@given(records=record_lists(), codec=st.sampled_from(CODECS),
       base_offset=st.integers(0, 1 << 62), producer_id=INT64,
       producer_epoch=st.integers(-1, 32767), base_sequence=st.integers(-1, (1 << 31) - 1),
       transactional=st.booleans(), leader_epoch=st.integers(-1, (1 << 31) - 1))
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_v2_round_trip(records, codec, base_offset, producer_id, producer_epoch,
                       base_sequence, transactional, leader_epoch):
    records = [Record(r.offset + base_offset, r.timestamp, r.key, r.value, r.headers)
               for r in records]
    data = build_batch(records, compression=codec, base_offset=base_offset,
                       producer_id=producer_id, producer_epoch=producer_epoch,
                       base_sequence=base_sequence, is_transactional=transactional,
                       partition_leader_epoch=leader_epoch)
    b = _one(data)
    assert b.records == tuple(records)
    assert (b.base_offset, b.magic, b.compression, b.producer_id, b.producer_epoch,
            b.base_sequence, b.is_transactional, b.is_control, b.partition_leader_epoch) == (
        base_offset, 2, codec, producer_id, producer_epoch, base_sequence, transactional,
        False, leader_epoch)
    assert b.size_in_bytes == len(data)
    if records:
        assert b.last_offset == records[-1].offset
        assert b.base_timestamp == records[0].timestamp
        assert b.max_timestamp == max(r.timestamp for r in records)
    # Uncompressed: decode -> encode reproduces the bytes exactly.
    if codec == Compression.NONE:
        again = build_batch(b.records, base_offset=b.base_offset, producer_id=b.producer_id,
                            producer_epoch=b.producer_epoch, base_sequence=b.base_sequence,
                            is_transactional=b.is_transactional,
                            partition_leader_epoch=b.partition_leader_epoch,
                            base_timestamp=b.base_timestamp, max_timestamp=b.max_timestamp,
                            last_offset_delta=b.last_offset_delta)
        assert again == data


def test_v2_layout_matches_spec():
    data = build_batch([Record(0, 1000, b"k", b"v", (Header("h", b"x"),))],
                       producer_id=7, producer_epoch=2, base_sequence=5)
    (base_offset, length, epoch, magic, crc, attrs, lod, bts, mts, pid, pep, seq,
     count) = struct.unpack_from(">qiibIhiqqqhii", data)
    assert (base_offset, length, epoch, magic) == (0, len(data) - 12, -1, 2)
    assert crc == crc32c(data[21:])
    assert (attrs, lod, bts, mts, pid, pep, seq, count) == (0, 0, 1000, 1000, 7, 2, 5, 1)
    # length 2*12, attrs 0, ts delta 0, offset delta 0, key len 1 "k", value len 1 "v",
    # 1 header: key len 1 "h", value len 1 "x"
    assert data[61:] == bytes([24, 0, 0, 0, 2]) + b"k" + b"\x02v\x02\x02h\x02x"


def test_attribute_bits():
    r = [Record(0, 5, None, b"x")]
    b = _one(build_batch(r, compression=Compression.LZ4, timestamp_type=1,
                         is_transactional=True, has_delete_horizon_ms=True,
                         max_timestamp=99))
    assert b.attributes == 3 | 8 | 16 | 64
    assert b.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert b.is_transactional and b.has_delete_horizon_ms and b.delete_horizon_ms == 5
    # LOG_APPEND_TIME: every record reports the batch's max timestamp, as in Java.
    assert b.records[0].timestamp == 99


def test_control_batch():
    marker = control_record(ControlRecordType.COMMIT, offset=42, timestamp=1234,
                            coordinator_epoch=17)
    data = build_batch([marker], base_offset=42, producer_id=9, producer_epoch=3,
                       is_transactional=True, is_control=True)
    b = _one(data)
    assert b.is_control and b.is_transactional
    assert b.control_type == ControlRecordType.COMMIT
    assert decode_control_key(b.records[0].key) == (0, 1)
    assert decode_end_txn_marker(b.records[0].value) == EndTransactionMarker(0, 17)
    # kafka-python sees a control record too.
    (rec,) = list(MemoryRecords(data).next_batch())
    assert rec.commit and rec.type == 1 and rec.offset == 42
    abort = control_record(ControlRecordType.ABORT, timestamp=1)
    assert _one(build_batch([abort], is_control=True)).control_type == ControlRecordType.ABORT
    with pytest.raises(EncodeError):
        control_record(ControlRecordType.LEADER_CHANGE, timestamp=1)
    with pytest.raises(DecodeError):
        decode_control_key(b"\x00")
    with pytest.raises(DecodeError):
        decode_end_txn_marker(None)


def test_empty_batch_and_explicit_fields():
    data = build_batch([], base_offset=100, last_offset_delta=9, base_timestamp=5,
                       max_timestamp=6)
    b = _one(data)
    assert b.records == () and b.last_offset == 109 and b.next_offset == 110
    assert b.last_sequence == -1
    b = _one(build_batch([Record(0, 0, None, None)] * 1, base_sequence=(1 << 31) - 1,
                         last_offset_delta=3))
    assert b.last_sequence == 2  # wraps like Java's incrementSequence


def test_encode_errors():
    with pytest.raises(EncodeError):
        build_batch([Record(1 << 40, 0, None, None)])  # offset delta > int32
    with pytest.raises(EncodeError):
        build_batch([Record(0, 0, None, None)], producer_epoch=1 << 20)
    with pytest.raises(EncodeError):
        build_batch([Record(0, 0, None, None)], compression=6)
    with pytest.raises(EncodeError):
        build_message_set([Record(0, 0, None, b"x", (Header("h", None),))], magic=1)


def test_records_are_genuine_frozen_records():
    b = _one(build_batch([Record(0, 1, b"k", b"v")]))
    rec = b.records[0]
    assert type(rec) is Record and rec == Record(0, 1, b"k", b"v")
    with pytest.raises(AttributeError):
        rec.offset = 5  # type: ignore[misc]
    assert hash(rec) == hash(Record(0, 1, b"k", b"v"))


# ---------------------------------------------------------------------------
# several batches, truncated tails

def test_blob_of_mixed_batches_and_truncated_tail():
    a = build_batch([Record(0, 1, None, b"a" * 50)])
    b = build_message_set([Record(1, 2, b"k", b"b")], magic=1)
    c = build_batch([Record(2, 3, None, b"c" * 30), Record(3, 3, None, b"d")],
                    compression=Compression.ZSTD, base_offset=2)
    blob = a + b + c
    d = decode_batches(blob)
    assert [r.offset for r in d.records] == [0, 1, 2, 3] and not d.incomplete
    for cut in range(len(a + b) + 1, len(blob)):
        d = decode_batches(blob[:cut])
        assert len(d) == 2 and d.incomplete and d.size == len(a + b)
        assert d.truncated == cut - len(a + b)
    assert decode_batches(b"").batches == ()


# ---------------------------------------------------------------------------
# cross-checks with kafka-python

def _kp_records(data: bytes):
    out = []
    mr = MemoryRecords(data)
    while mr.has_next():
        batch = mr.next_batch()
        for r in batch:
            out.append((r.offset, r.timestamp, r.key, r.value,
                        tuple((k, v) for k, v in r.headers)))
    return out


def _ours(records):
    return [(r.offset, r.timestamp, r.key, r.value, tuple((h.key, h.value) for h in r.headers))
            for r in records]


SAMPLE = [Record(i, 1_700_000_000_000 + i * 3, None if i % 3 == 0 else b"key-%d" % i,
                 None if i == 7 else os.urandom(i * 7),
                 (Header("trace", b"t%d" % i), Header("empty", None)) if i % 4 == 0 else ())
          for i in range(40)]


@pytest.mark.parametrize("codec", CODECS)
def test_kctl_batches_read_by_kafka_python(codec, all_codecs):
    data = build_batch(SAMPLE, compression=codec, producer_id=11, producer_epoch=2,
                       base_sequence=100, is_transactional=True)
    assert _kp_records(data) == _ours(SAMPLE)
    kb = DefaultRecordBatch(data)
    assert kb.validate_crc()
    assert (kb.producer_id, kb.producer_epoch, kb.base_sequence, kb.is_transactional,
            kb.compression_type) == (11, 2, 100, True, codec)


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_batches_read_by_kctl(codec, all_codecs):
    kb = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=1,
                                   producer_id=11, producer_epoch=2, base_sequence=100,
                                   batch_size=1 << 20)
    for r in SAMPLE:
        kb.append(r.offset, r.timestamp, r.key, r.value,
                  [(h.key, h.value) for h in r.headers])
    data = bytes(kb.build())
    b = _one(data)
    assert _ours(b.records) == _ours(SAMPLE)
    assert (b.producer_id, b.producer_epoch, b.base_sequence, b.is_transactional,
            b.compression) == (11, 2, 100, True, codec)
    if codec == Compression.NONE:
        # Same bytes as ours, bar the leader epoch kafka-python writes as 0.
        assert data == build_batch(SAMPLE, producer_id=11, producer_epoch=2,
                                   base_sequence=100, is_transactional=True,
                                   partition_leader_epoch=0)


LEGACY = [Record(i, 1_600_000_000_000 + i, None if i % 2 else b"k%d" % i,
                 None if i == 3 else b"value-%d" % i * (i + 1)) for i in range(12)]


LEGACY_CODECS = [c for c in CODECS if c != Compression.ZSTD]  # zstd needs magic 2


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_legacy_kafka_python_to_kctl(magic, codec, all_codecs):
    kb = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    for r in LEGACY:
        kb.append(r.offset, r.timestamp if magic else None, r.key, r.value)
    data = bytes(kb.build())
    d = decode_batches(data)
    assert not d.incomplete
    assert [(r.key, r.value) for r in d.records] == [(r.key, r.value) for r in LEGACY]
    # kafka-python writes a magic-1 wrapper at offset 0 (the broker assigns
    # the real one), so both readers see the same shifted offsets.
    kp = [(o, -1 if t is None else t, k, v) for o, t, k, v, _ in _kp_records(data)]
    assert [(r.offset, r.timestamp, r.key, r.value) for r in d.records] == kp
    if magic == 0 or codec == Compression.NONE:
        assert [r.offset for r in d.records] == [r.offset for r in LEGACY]
    assert all(b.magic == magic and b.compression == codec for b in d)
    assert len(d) == (1 if codec else len(LEGACY))


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_legacy_kctl_to_kafka_python(magic, codec, all_codecs):
    data = build_message_set(LEGACY, magic=magic, compression=codec)
    got = [(o, t, k, v) for o, t, k, v, _ in _kp_records(data)]
    want = [(r.offset, r.timestamp if magic else None, r.key, r.value) for r in LEGACY]
    assert got == want
    d = decode_batches(data)
    assert [(r.offset, r.key, r.value) for r in d.records] == [
        (r.offset, r.key, r.value) for r in LEGACY]


def test_legacy_zstd_refused_on_encode_accepted_on_decode():
    with pytest.raises(EncodeError, match="magic 2"):
        build_message_set(LEGACY, magic=1, compression=Compression.ZSTD)
    inner = build_message_set(LEGACY[:2], magic=1)
    wrapper = bytearray(build_message_set(LEGACY[:2], magic=1, compression=Compression.GZIP))
    # Lenient decode of a zstd wrapper some odd client wrote.
    from kctl.protocol.records import _encode_message
    odd = _encode_message(1, 1, Compression.ZSTD, 0, None, compress(Compression.ZSTD, inner))
    assert [r.value for r in decode_batches(odd).records] == [r.value for r in LEGACY[:2]]
    assert wrapper


def test_legacy_magic1_relative_offsets_and_log_append_time():
    # Inner offsets 0..n-1, wrapper carrying the absolute last offset (as a broker stores them).
    recs = [Record(500 + i, 10 + i, None, b"v%d" % i) for i in range(3)]
    data = build_message_set(recs, magic=1, compression=Compression.GZIP, timestamp_type=1)
    (b,) = decode_batches(data).batches
    assert [r.offset for r in b.records] == [500, 501, 502]
    assert b.base_offset == 500 and b.last_offset == 502
    assert b.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in b.records] == [12, 12, 12]


def test_legacy_crc_checked():
    data = bytearray(build_message_set([Record(0, 1, None, b"x")], magic=1))
    data[-1] ^= 1
    with pytest.raises(DecodeError, match="CRC-32 mismatch") as e:
        decode_batches(bytes(data))
    assert e.value.offset == 12 and e.value.field == "batch[0].crc"
    assert decode_batches(bytes(data), verify_crc=False).batches[0].records[0].value == b"y"


# ---------------------------------------------------------------------------
# errors name the offset and field

def test_crc_mismatch_names_both_values():
    data = bytearray(build_batch([Record(0, 1, None, b"abc")]))
    data[-2] ^= 0xFF
    with pytest.raises(DecodeError, match=r"CRC-32C mismatch: batch says 0x[0-9a-f]{8}, "
                                          r"computed 0x[0-9a-f]{8}") as e:
        decode_batches(bytes(data))
    assert e.value.field == "batch[0].crc" and e.value.offset == 17


def _reframe(body: bytes, count: int, attrs: int = 0) -> bytes:
    """A v2 batch around a hand-made records section, with a valid CRC."""
    post = struct.pack(">hiqqqhii", attrs, max(count - 1, 0), 0, 0, -1, -1, -1, count)
    crc = crc32c(post + body)
    return struct.pack(">qiibI", 0, 49 + len(body), -1, 2, crc) + post + body


def test_field_paths_in_errors():
    good = build_batch([Record(0, 0, None, b"x")])
    rec = bytes([2 * 11, 0, 0, 0, 1, 2, ord("v"), 2, 2, 0xFF, 2, ord("x")])
    # header key "\xff" is not UTF-8: batch[1].records[0].headers[0].key
    with pytest.raises(DecodeError, match="UTF-8") as e:
        decode_batches(good + _reframe(rec[:1] + rec[1:], 1))
    assert e.value.field == "batch[1].records[0].headers[0].key"
    assert e.value.offset == len(good) + 61 + 8  # the key's length prefix
    # A record whose length runs past the batch.
    with pytest.raises(DecodeError) as e:
        decode_batches(_reframe(bytes([2 * 20]) + b"\x00" * 7, 1))
    assert e.value.field == "batch[0].records[0].length" and e.value.offset == 61
    # Count larger than the bytes could hold is refused before decoding records.
    with pytest.raises(DecodeError, match="record count 1000") as e:
        decode_batches(_reframe(b"\x00" * 20, 1000))
    assert e.value.field == "batch[0].records_count"
    # Bytes left over after the declared records.
    one = bytes([14, 0, 0, 0, 1, 2, ord("v"), 0])
    with pytest.raises(DecodeError, match="bytes left after the declared 1 records"):
        decode_batches(_reframe(one + b"\x00\x00", 1))
    # A record's length prefix disagrees with its fields.
    with pytest.raises(DecodeError, match="record length says"):
        decode_batches(_reframe(bytes([16, 0, 0, 0, 1, 2, ord("v"), 0, 0]), 1))
    # Unknown codec and magic.
    with pytest.raises(DecodeError, match="unknown compression codec 6"):
        decode_batches(_reframe(b"", 0, attrs=6))
    bad_magic = bytearray(good)
    bad_magic[16] = 7
    with pytest.raises(DecodeError, match="unsupported magic 7") as e:
        decode_batches(bytes(bad_magic))
    assert e.value.offset == 16
    with pytest.raises(DecodeError, match="below the v2 minimum"):
        decode_batches(good[:8] + struct.pack(">i", 10) + good[12:])


def test_errors_inside_compressed_records():
    body = bytes([2 * 20]) + b"\x00" * 7
    z = compress(Compression.GZIP, body)
    with pytest.raises(DecodeError, match="decompressed records") as e:
        decode_batches(_reframe(z, 1, attrs=1))
    assert e.value.field == "batch[0].records[0].length" and e.value.offset == 61
    with pytest.raises(DecodeError, match="gzip") as e:
        decode_batches(_reframe(b"\x1f\x8b\x08\x00garbage!", 1, attrs=1))
    assert e.value.field == "batch[0].records.compressed records"


def test_decompression_bomb_in_a_batch_is_capped():
    data = build_batch([Record(0, 0, None, bytes(8 << 20))], compression=Compression.ZSTD)
    with pytest.raises(DecodeError, match="exceeds the limit of 1048576"):
        decode_batches(data, max_decompressed=1 << 20)
    # The budget is shared across the batches of one blob.
    one = build_batch([Record(0, 0, None, b"\x00" * 600_000)], compression=Compression.LZ4)
    decode_batches(one, max_decompressed=1 << 20)
    with pytest.raises(DecodeError, match="exceeds the limit"):
        decode_batches(one + one, max_decompressed=1 << 20)


# ---------------------------------------------------------------------------
# fuzz: any bytes give batches or a DecodeError, nothing else

SEED_BLOB = (build_batch(SAMPLE[:6], producer_id=1, producer_epoch=0, base_sequence=0)
             + build_batch(SAMPLE[6:9], compression=Compression.SNAPPY)
             + build_message_set(LEGACY[:3], magic=1, compression=Compression.GZIP)
             + build_message_set(LEGACY[:2], magic=0))


@given(st.binary(max_size=400))
@settings(max_examples=600, deadline=None)
def test_fuzz_arbitrary_bytes(data):
    try:
        d = decode_batches(data, max_decompressed=1 << 20)
    except DecodeError as e:
        assert 0 <= e.offset <= len(data)
        return
    assert d.size + d.truncated == len(data)


@given(st.data())
@settings(max_examples=1500, deadline=None)
def test_fuzz_corrupted_and_truncated(draw):
    data = bytearray(SEED_BLOB)
    for _ in range(draw.draw(st.integers(1, 4))):
        i = draw.draw(st.integers(0, len(data) - 1))
        data[i] = draw.draw(st.integers(0, 255))
    data = bytes(data[:draw.draw(st.integers(0, len(data)))])
    verify = draw.draw(st.booleans())
    try:
        d = decode_batches(data, verify_crc=verify, max_decompressed=1 << 20)
    except DecodeError as e:
        assert 0 <= e.offset <= len(data)
        return
    assert d.size + d.truncated == len(data)


@given(st.data())
@settings(max_examples=800, deadline=None)
def test_fuzz_records_section_with_valid_crc(draw):
    """Corrupt the records themselves and fix up the CRC, so the record parser
    (not the CRC check) meets the damage."""
    body = bytearray(build_batch(SAMPLE[:8])[61:])
    for _ in range(draw.draw(st.integers(1, 3))):
        body[draw.draw(st.integers(0, len(body) - 1))] = draw.draw(st.integers(0, 255))
    count = draw.draw(st.integers(0, 12))
    try:
        decode_batches(_reframe(bytes(body), count))
    except DecodeError:
        pass


# ---------------------------------------------------------------------------
# the hot-path builder against the generic encoder (rule 7)

@given(n=st.integers(1, 200), size=st.integers(0, 300), codec=st.sampled_from(CODECS),
       headers=headers_st, keyed=st.booleans(), ts=TS, pid=INT64,
       epoch=st.integers(-1, 32767), seq=st.integers(-1, (1 << 31) - 1),
       base_offset=st.integers(0, 1 << 40), txn=st.booleans(), sized=st.booleans())
@settings(max_examples=60, deadline=None)
def test_batch_template_matches_generic_encoder(n, size, codec, headers, keyed, ts, pid,
                                                epoch, seq, base_offset, txn, sized):
    values = [os.urandom(size) for _ in range(n)]
    keys = [b"k%d" % i if i % 5 else None for i in range(n)] if keyed else None
    template = BatchTemplate(headers=headers, compression=codec)
    for _ in range(2):  # the second build uses the cached pieces
        hot = template.build(values, base_timestamp=ts, producer_id=pid, producer_epoch=epoch,
                             base_sequence=seq, base_offset=base_offset,
                             is_transactional=txn, keys=keys,
                             value_size=size if sized and not keyed else None)
    records = [Record(base_offset + i, ts, keys[i] if keys else None, v, headers)
               for i, v in enumerate(values)]
    generic = build_batch(records, compression=codec, base_offset=base_offset,
                          producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                          is_transactional=txn)
    assert hot == generic
    assert _one(hot).records == tuple(records)


def test_batch_template_mixed_lengths_and_misuse():
    t = BatchTemplate()
    values = [os.urandom(i % 130) for i in range(150)]
    hot = t.build(values, base_timestamp=7)
    assert hot == build_batch([Record(i, 7, None, v) for i, v in enumerate(values)])
    with pytest.raises(EncodeError, match="not all 100 bytes"):
        t.build([b"x" * 100] * 10 + [b"x" * 99], base_timestamp=1, value_size=100)
    with pytest.raises(EncodeError):
        t.build([], base_timestamp=1)
    with pytest.raises(EncodeError):
        t.build([b"x"], base_timestamp=1, keys=[b"a", b"b"])
    with pytest.raises(EncodeError):
        t.build([b"x"], base_timestamp=1, producer_epoch=1 << 16)


def test_batch_template_read_by_kafka_python():
    t = BatchTemplate(headers=(Header("h", b"v"),))
    values = [os.urandom(100) for _ in range(150)]
    data = t.build(values, base_timestamp=123, producer_id=5, producer_epoch=0,
                   base_sequence=0)
    assert [r.value for r in MemoryRecords(data).next_batch()] == values



# ---------------------------------------------------------------------------
# scan_batches / iter_batch_records: the same answers without holding records (issue 13)

def _same_as_decode(data: bytes, verify: bool = True) -> None:
    """scan_batches and iter_batch_records agree with decode_batches: batch headers,
    counts and records, or the same error at the same offset and field."""
    try:
        d = decode_batches(data, verify_crc=verify, max_decompressed=1 << 20)
    except DecodeError as e:
        scan = scan_batches(data, verify_crc=verify, budget=DecompressionBudget.fixed(1 << 20))
        assert scan.error is not None
        assert (scan.error.offset, scan.error.field, scan.error.reason) == (e.offset, e.field, e.reason)
        return
    scan = scan_batches(data, verify_crc=verify, budget=DecompressionBudget.fixed(1 << 20))
    assert scan.error is None and (scan.size, scan.truncated) == (d.size, d.truncated)
    assert [b.record_count for b in scan.batches] == [len(b.records) for b in d.batches]
    for info, b in zip(scan.batches, d.batches):
        assert (info.magic, info.compression, info.producer_id, info.base_sequence,
                info.is_transactional, info.size_in_bytes) == (
            b.magic, b.compression, b.producer_id, b.base_sequence, b.is_transactional,
            b.size_in_bytes)
    streamed = list(iter_batch_records(data, verify_crc=verify))
    assert [r for _, r in streamed] == [r for b in d.batches for r in b.records]


@given(records=record_lists(max_size=40), codec=st.sampled_from(CODECS))
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_scan_and_stream_agree_with_decode(records, codec):
    _same_as_decode(build_batch(records, compression=codec) + SEED_BLOB)


@given(st.data())
@settings(max_examples=600, deadline=None)
def test_scan_agrees_with_decode_on_damaged_blobs(draw):
    data = bytearray(SEED_BLOB + build_batch(SAMPLE, compression=Compression.ZSTD))
    for _ in range(draw.draw(st.integers(1, 4))):
        data[draw.draw(st.integers(0, len(data) - 1))] = draw.draw(st.integers(0, 255))
    _same_as_decode(bytes(data[:draw.draw(st.integers(0, len(data)))]), draw.draw(st.booleans()))


def test_records_stream_across_chunk_boundaries():
    """Records of every size straddling the 1 MiB decompressed chunks, including ones
    longer than a chunk (checked and skipped when counting, joined when printing)."""
    sizes = [10, 1 << 20, 3, (3 << 20) + 7, 500_000, 0, 2 << 20]
    recs = [Record(i, i, b"k" * (i % 3), os.urandom(n) if n < 100 else bytes(n),
                   (Header("h", b"v" * (n // 2)),) if n > 100 else ()) for i, n in enumerate(sizes)]
    for codec in (Compression.ZSTD, Compression.LZ4, Compression.GZIP):
        data = build_batch(recs, compression=codec)
        assert scan_batches(data, budget=DecompressionBudget.fixed(64 << 20)).record_count == len(recs)
        assert [r for _, r in iter_batch_records(data)] == recs


def test_a_long_record_is_checked_while_skipped():
    """A record longer than a chunk with a header key that is not UTF-8: the counting walk
    (which never joins it) finds the same damage as the full decode."""
    good = build_batch([Record(0, 0, None, bytes(3 << 20), (Header("k", b"v"),))],
                       compression=Compression.NONE)
    bad = bytearray(good[61:])
    at = bytes(bad).rindex(b"k")
    bad[at] = 0xFF
    blob = build_batch([Record(0, 0, None, b"x")]) + _reframe(bytes(bad), 1)
    z = _reframe(compress(Compression.ZSTD, bytes(bad)), 1, attrs=Compression.ZSTD)
    for data in (blob, z):
        with pytest.raises(DecodeError, match="UTF-8"):
            decode_batches(data, max_decompressed=64 << 20)
        scan = scan_batches(data, budget=DecompressionBudget.fixed(64 << 20))
        assert scan.error is not None and "UTF-8" in scan.error.reason


def test_scanning_a_bomb_holds_one_chunk_not_the_batch():
    """63 MiB of zeros in a 2 KB zstd batch: counted with a few MiB of Python memory."""
    import tracemalloc
    data = build_batch([Record(i, 0, None, bytes(9 << 20)) for i in range(7)],
                       compression=Compression.ZSTD)
    assert len(data) < 4096
    tracemalloc.start()
    try:
        scan = scan_batches(data, budget=DecompressionBudget.fixed(64 << 20))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert scan.error is None and scan.record_count == 7
    assert peak < 6 << 20, peak


def test_a_budget_shared_by_record_sets_and_charged_per_record():
    bomb = build_batch([Record(0, 0, None, bytes(40 << 20))], compression=Compression.ZSTD)
    budget = DecompressionBudget(frame_floor=64 << 20, run_floor=64 << 20, ratio=0)
    budget.start_frame(0)
    assert scan_batches(bomb, budget=budget).record_count == 1
    second = scan_batches(bomb, budget=budget)       # 40 + 40 > 64 MiB
    assert isinstance(second.error, BudgetExceededError) and second.batches == ()
    assert second.error.field == "batch[0].records.compressed records"
    # Tiny records cost their record charge: a million of them in a few KB of zstd.
    tiny = build_batch([Record(0, 0, None, None)] * 1_000_000, compression=Compression.ZSTD)
    budget = DecompressionBudget(frame_floor=16 << 20, run_floor=16 << 20, ratio=0, record_cost=64)
    budget.start_frame(0)
    scan = scan_batches(tiny, budget=budget)
    # The charge lands per decompressed chunk walked: it overshoots by one chunk at most.
    one_chunk = (1 << 20) + 64 * (1 << 20) // 7
    assert isinstance(scan.error, BudgetExceededError) and budget.spent < (16 << 20) + one_chunk
