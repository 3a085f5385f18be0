"""BatchTemplate's identity header and keyed layout: byte-identical to the generic
encoder (conventions rule 7), and readable by the identity decoder and scanner."""

from hypothesis import given, settings, strategies as st

from kctl.protocol.batch_builder import BatchTemplate
from kctl.protocol.compression import Compression
from kctl.protocol.identity import (
    IDENTITY,
    IdentityStamp,
    RecordIdentity,
    find_identity,
    run_tag,
    scan_records,
)
from kctl.protocol.records import Header, Record, build_batch, decode_batches

CONST = (Header("h0", b"value-0"),)
STAMP = IdentityStamp(run_tag("0123456789ab"), 3)

runs_st = st.lists(
    st.tuples(st.integers(1, 20), st.integers(0, 2**40), st.integers(0, 2**62),
              st.integers(0, 10**6), st.sampled_from(["none", "range", "tuple"])),
    min_size=1, max_size=4)


def _positions(kind, count):
    if kind == "none":
        return None
    if kind == "range":
        return range(2, 2 + 3 * count, 3)
    return tuple(sorted({i * 7 % (count * 5) for i in range(count * 3)}))[:count]


@settings(max_examples=80, deadline=None)
@given(runs_st, st.sampled_from(list(Compression)), st.booleans(),
       st.sampled_from(["none", "uniform", "mixed"]), st.booleans())
def test_identity_and_keys_match_the_generic_encoder(runs, codec, uniform, keying, extra):
    runs = [(c, s, ts, step, _positions(kind, c)) for c, s, ts, step, kind in runs]
    runs = [r for r in runs if r[4] is None or len(r[4]) == r[0]]
    if not runs:
        return
    n = sum(r[0] for r in runs)
    values = [bytes([i % 251]) * (50 if uniform else 1 + i % 7) for i in range(n)]
    keys = None
    if keying == "uniform":
        keys = [b"key-%03d" % (i % 13) for i in range(n)]
    elif keying == "mixed":
        keys = [None if i % 4 == 0 else b"k" * (i % 9) for i in range(n)]
    const = CONST if extra else ()
    t = BatchTemplate(headers=const, compression=codec, identity=STAMP)
    for _ in range(2):  # the second build uses the cached pieces
        fast = t.build(values, keys=keys, base_timestamp=1_700_000_000_000, ids=runs,
                       value_size=50 if uniform else None)
    records = []
    i = 0
    for count, seq, ts, step, positions in runs:
        for j in range(count):
            k = j if positions is None else positions[j]
            ident = RecordIdentity(STAMP.run_tag, 3, seq + j, ts + k * step)
            hdrs = const + (Header("kctl", ident.encode()),)
            records.append(Record(i, 1_700_000_000_000, keys[i] if keys else None, values[i], hdrs))
            i += 1
    slow = build_batch(records, compression=codec)
    if codec == Compression.NONE:
        assert fast == slow
    got = list(decode_batches(fast).records)
    assert [(r.key, r.value, r.headers) for r in got] == [(r.key, r.value, r.headers) for r in records]
    assert [find_identity(r.headers) for r in got] == [find_identity(r.headers) for r in records]


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 300), st.integers(0, 200), st.booleans())
def test_keyed_template_without_identity_matches(n, size, sized):
    keys = [b"key-%04d" % (i % 37) for i in range(n)]
    values = [bytes([i % 256]) * size for i in range(n)]
    t = BatchTemplate(headers=CONST)
    fast = t.build(values, keys=keys, base_timestamp=5, value_size=size if sized else None)
    assert fast == build_batch([Record(i, 5, k, v, CONST) for i, (k, v) in enumerate(zip(keys, values))])


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 300), st.sampled_from(["none", "uniform", "mixed"]), st.booleans(),
       st.booleans(), st.sampled_from([Compression.NONE, Compression.ZSTD]))
def test_null_values_are_written_as_length_minus_one(n, keying, stamped, extra, codec):
    """A None value is a null value (a tombstone): value length -1 and no bytes, as
    Java's DefaultRecord.writeTo writes it, never empty bytes; byte-identical to the
    generic encoder, whatever else the template writes."""
    values = [None if i % 3 == 0 else (b"" if i % 3 == 1 else bytes([i % 251]) * (i % 11))
              for i in range(n)]
    keys = None
    if keying == "uniform":
        keys = [b"key-%03d" % (i % 13) for i in range(n)]
    elif keying == "mixed":
        keys = [None if i % 4 == 0 else b"k" * (i % 9) for i in range(n)]
    const = CONST if extra else ()
    t = BatchTemplate(headers=const, compression=codec, identity=STAMP if stamped else None,
                      null_values=True)
    ids = [(n, 7, 1_000, 3, None)] if stamped else None
    for _ in range(2):  # the second build uses the cached pieces
        fast = t.build(values, keys=keys, base_timestamp=9, ids=ids)
    hdrs = [const + ((Header("kctl", RecordIdentity(STAMP.run_tag, 3, 7 + i, 1_000 + 3 * i).encode()),)
                     if stamped else ()) for i in range(n)]
    records = [Record(i, 9, keys[i] if keys else None, values[i], hdrs[i]) for i in range(n)]
    if codec == Compression.NONE:
        assert fast == build_batch(records)
    got = list(decode_batches(fast).records)
    assert [r.value for r in got] == values
    assert [(r.key, r.headers) for r in got] == [(r.key, r.headers) for r in records]


def test_scan_finds_every_identity_or_defers():
    t = BatchTemplate(identity=STAMP)
    values = [b"x" * 40] * 10
    data = t.build(values, base_timestamp=1, ids=[(10, 100, 5_000, 7, None)])
    batch = next(iter(decode_batches(data)))
    section = data[61:]
    found = scan_records(section, 10)
    assert [RecordIdentity(*x) for x in IDENTITY.iter_unpack(found)] == [
        RecordIdentity(STAMP.run_tag, 3, 100 + j, 5_000 + 7 * j) for j in range(10)]
    assert [find_identity(r.headers).sequence for r in batch.records] == list(range(100, 110))
    # A value holding the header's lead-in: the scan defers to the full decoder.
    tricky = t.build([b"\x08kctl0" + b"y" * 30] + values[1:], base_timestamp=1,
                     ids=[(10, 0, 0, 0, None)])
    assert scan_records(tricky[61:], 10) is None
    # Records without an identity: too.
    plain = BatchTemplate().build(values, base_timestamp=1)
    assert scan_records(plain[61:], 10) is None


def test_run_tag_is_the_first_four_bytes_of_the_run_id():
    assert run_tag("0123456789ab") == bytes.fromhex("01234567")
    for bad in ("xyz", "0123", "0123456z89ab"):
        try:
            run_tag(bad)
        except ValueError:
            continue
        raise AssertionError(bad)
    assert RecordIdentity.decode(b"short") is None
    assert len(RecordIdentity(b"abcd", 1, 2, -3).encode()) == 24


header_st = st.lists(st.builds(Header, st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=6))),
                     max_size=2).map(tuple)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(-5, 20_000), st.one_of(st.none(), st.binary(max_size=20)),
                          st.one_of(st.none(), st.binary(max_size=300)), header_st),
                min_size=1, max_size=60),
       st.sampled_from(list(Compression)), st.booleans())
def test_general_builder_matches_the_generic_encoder(recs, codec, txn):
    from kctl.protocol.batch_builder import GeneralBatchBuilder

    base = 1_700_000_000_000
    b = GeneralBatchBuilder(compression=codec)
    ts = [base + r[0] for r in recs]
    hdrs = [r[3] for r in recs]
    for _ in range(2):
        fast = b.build(ts, [r[1] for r in recs], [r[2] for r in recs],
                       hdrs if any(hdrs) else None, producer_id=7, producer_epoch=1,
                       base_sequence=3, is_transactional=txn)
    records = [Record(i, t, r[1], r[2], r[3]) for i, (t, r) in enumerate(zip(ts, recs))]
    slow = build_batch(records, compression=codec, producer_id=7, producer_epoch=1, base_sequence=3,
                       is_transactional=txn)
    if codec == Compression.NONE:
        assert fast == slow
    assert list(decode_batches(fast).records) == list(decode_batches(slow).records)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=300), st.integers(0, 200),
       st.booleans(), st.sampled_from(list(Compression)))
def test_general_builder_uniform_batches_match(steps, size, go_back, codec):
    """The general path's common batch (no keys, no headers, one value length): runs of
    equal timestamps laid out from cached pieces; a clock that went back falls back."""
    from itertools import accumulate

    from kctl.protocol.batch_builder import GeneralBatchBuilder

    ts = [1_700_000_000_000 + t for t in accumulate(steps)]
    if go_back and len(ts) > 2:
        ts[len(ts) // 2] -= 5
    values = [bytes([i % 256]) * size for i in range(len(ts))]
    b = GeneralBatchBuilder(compression=codec)
    for _ in range(2):
        fast = b.build(ts, [None] * len(ts), values, None)
    slow = build_batch([Record(i, t, None, v) for i, (t, v) in enumerate(zip(ts, values))],
                       compression=codec)
    if codec == Compression.NONE:
        assert fast == slow
    assert list(decode_batches(fast).records) == list(decode_batches(slow).records)


def test_the_identity_header_costs_30_bytes_per_record():
    """What README and identity.py say: 30 bytes on the wire per record (31 where the
    record's length varint grows a byte: a 30-byte value's record crosses 63 -> 64)."""
    from kctl.protocol.identity import HEADER_KEY, IDENTITY_SIZE
    from kctl.protocol.records import encode_record
    header = (Header(HEADER_KEY, b"\0" * IDENTITY_SIZE),)
    cost = {n: len(encode_record(Record(0, 0, None, b"x" * n, header), 0, 0))
            - len(encode_record(Record(0, 0, None, b"x" * n), 0, 0)) for n in (0, 30, 100, 1000, 10_000)}
    assert cost == {0: 30, 30: 31, 100: 30, 1000: 30, 10_000: 30}
