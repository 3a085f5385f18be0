"""scan_fetched against the generic decoder: every batch, offset, count, key+value byte
and identity the scan reports is what decode_batches reads, for uniform batches (the fast
path), mixed ones, compressed, control, transactional, legacy and truncated blobs."""

import os

import pytest
from hypothesis import given, settings, strategies as st

from kctl.errors import DecodeError
from kctl.protocol.compression import Compression
from kctl.protocol.identity import IDENTITY, find_identity
from kctl.protocol.record_scan import scan_fetched
from kctl.protocol.records import (
    ControlRecordType, Header, Record, build_batch, build_message_set, control_record, decode_batches)


def ident(i):
    return Header("kctl", IDENTITY.pack(b"tag1", 3, i, 1_700_000_000_000_000_000 + i))


def uniform(base, n, size=100, key=None, headers=True, **kw):
    recs = [Record(base + i, 1_700_000_000_000 + i * 7, key, os.urandom(size),
                   (ident(base + i),) if headers else ()) for i in range(n)]
    return build_batch(recs, base_offset=base, **kw)


def expect(blob):
    """What the generic decoder says, in scan_fetched's terms."""
    out = []
    for b in decode_batches(blob).batches:
        kv = sum(len(r.key or b"") + len(r.value or b"") for r in b.records)
        ids = [find_identity(r.headers) for r in b.records]
        out.append((b.base_offset, b.last_offset, len(b.records), kv, b.is_control,
                    None if b.is_control else ids))
    return out


def scanned(blob):
    r = scan_fetched(blob)
    out = []
    for b in r.batches:
        if b.identities is not None:
            ids = [IDENTITY.unpack_from(b.identities, 24 * i) for i in range(b.count)]
            ids = [find_identity([Header("kctl", IDENTITY.pack(*x))]) for x in ids]
        elif b.records is not None and not b.control:
            ids = [find_identity(x.headers) for x in b.records]
        else:
            ids = None if b.control else [None] * b.count
        out.append((b.base_offset, b.last_offset, b.count, b.key_value_bytes, b.control,
                    None if b.control else ids))
    return r, out


def test_uniform_batches_take_the_fast_path():
    blob = uniform(0, 150) + uniform(150, 20, key=b"kk") + uniform(170, 5, size=0)
    r, got = scanned(blob)
    assert got == expect(blob)
    assert r.scanned == 3 and r.decoded == 0 and r.truncated == 0


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_compressed_batches_are_scanned_after_decompression(codec):
    blob = uniform(10, 50, compression=codec)
    r, got = scanned(blob)
    assert got == expect(blob) and r.scanned == 1


def test_mixed_sizes_fall_back_to_the_decoder():
    recs = [Record(i, 1, None, b"x" * (10 + i), (ident(i),)) for i in range(5)]
    blob = build_batch(recs)
    r, got = scanned(blob)
    assert got == expect(blob) and r.decoded == 1


def test_records_without_identity_scan_with_sizes():
    blob = uniform(0, 10, headers=False)
    r, got = scanned(blob)
    assert got == expect(blob) and r.scanned == 1 and r.batches[0].identities is None


def test_control_batches_carry_their_marker_type():
    blob = uniform(0, 3, producer_id=5, is_transactional=True) + build_batch(
        [control_record(ControlRecordType.ABORT, offset=3, timestamp=1)], base_offset=3, is_control=True,
        is_transactional=True, producer_id=5)
    r = scan_fetched(blob)
    assert [(b.transactional, b.control, b.control_type, b.producer_id) for b in r.batches] == [
        (True, False, -1, 5), (True, True, ControlRecordType.ABORT, 5)]


def test_a_truncated_last_batch_is_left_out():
    blob = uniform(0, 10) + uniform(10, 10)
    r = scan_fetched(blob[:-7])
    assert [b.base_offset for b in r.batches] == [0] and r.truncated == len(blob) - 7 - r.size


def test_legacy_message_sets_decode():
    blob = build_message_set([Record(0, 1, None, b"abc"), Record(1, 1, b"k", b"de")], magic=1)
    r, got = scanned(blob)
    assert [(b.base_offset, b.count, b.key_value_bytes) for b in r.batches] == [(0, 1, 3), (1, 1, 3)]


def test_crc_checked_when_asked():
    blob = bytearray(uniform(0, 4))
    blob[70] ^= 1
    with pytest.raises(DecodeError, match="CRC"):
        scan_fetched(bytes(blob))
    assert scan_fetched(bytes(blob), check_crcs=False).batches[0].count == 4


def test_decoded_on_demand_matches():
    blob = uniform(0, 8)
    b = scan_fetched(blob).batches[0]
    assert b.records is None and [r.offset for r in b.decoded()] == list(range(8))


record = st.builds(lambda k, v, h: (k, v, h),
                   st.one_of(st.none(), st.binary(max_size=8)), st.one_of(st.none(), st.binary(max_size=40)),
                   st.booleans())


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(record, min_size=1, max_size=12), min_size=1, max_size=4),
       st.sampled_from([Compression.NONE, Compression.LZ4]))
def test_scan_agrees_with_the_decoder(batches, codec):
    blob = b""
    base = 0
    for recs in batches:
        rs = [Record(base + i, 1000 + i, k, v, (ident(base + i),) if h else ()) for i, (k, v, h) in enumerate(recs)]
        blob += build_batch(rs, base_offset=base, compression=codec)
        base += len(rs)
    _, got = scanned(blob)
    assert got == expect(blob)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_garbage_never_crashes(data):
    try:
        scan_fetched(data)
    except DecodeError:
        pass


_VALID = uniform(0, 6, size=20) + uniform(6, 4, size=20, compression=Compression.LZ4) + uniform(10, 3, key=b"k")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(_VALID) - 1), st.integers(0, 255)), min_size=1, max_size=6))
def test_mutated_batches_decode_or_fail_cleanly(flips):
    blob = bytearray(_VALID)
    for pos, value in flips:
        blob[pos] = value
    try:
        r = scan_fetched(bytes(blob), check_crcs=False)
    except DecodeError:
        return
    for b in r.batches:
        assert b.count >= 0 and b.key_value_bytes >= 0
