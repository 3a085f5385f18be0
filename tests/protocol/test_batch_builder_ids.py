"""BatchTemplate's id headers: byte-identical to the generic encoder (conventions rule 7)."""

import struct

from hypothesis import given, settings, strategies as st

from kctl.protocol.batch_builder import BatchTemplate
from kctl.protocol.compression import Compression
from kctl.protocol.records import Header, Record, build_batch, decode_batches

CONST = (Header("kctl-run", b"r1"), Header("kctl-worker", b"3"))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 20), st.integers(0, 2**40), st.integers(0, 2**62),
                          st.integers(0, 10**6)), min_size=1, max_size=4),
       st.sampled_from(list(Compression)), st.booleans())
def test_id_headers_match_the_generic_encoder(runs, codec, uniform):
    n = sum(r[0] for r in runs)
    values = [bytes([i % 251]) * (50 if uniform else 1 + i % 7) for i in range(n)]
    t = BatchTemplate(headers=CONST, compression=codec, id_headers=("kctl-seq", "kctl-ts-ns"))
    fast = t.build(values, base_timestamp=1_700_000_000_000, ids=runs,
                   value_size=50 if uniform else None)
    records = []
    i = 0
    for count, seq, ts, step in runs:
        for j in range(count):
            hdrs = CONST + (Header("kctl-seq", struct.pack(">Q", seq + j)),
                            Header("kctl-ts-ns", struct.pack(">q", ts + j * step)))
            records.append(Record(i, 1_700_000_000_000, None, values[i], hdrs))
            i += 1
    slow = build_batch(records, compression=codec)
    if codec == Compression.NONE:
        assert fast == slow
    got = list(decode_batches(fast).records)
    assert [(r.value, r.headers) for r in got] == [(r.value, r.headers) for r in records]
