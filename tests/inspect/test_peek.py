"""The proxy's hand-written peeks agree with the generic codec on every Produce version
(conventions rule 7), and never raise on bytes that do not read."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from kctl.inspect.peek import produce_acks, produce_summary, request_head
from kctl.protocol import messages, schema
from kctl.protocol.compression import Compression
from kctl.protocol.records import Record, build_batch, build_message_set

PRODUCE = 0
REQ = messages.message_class("ProduceRequest")


def _records(n: int, codec: int, magic: int = 2) -> bytes:
    recs = [Record(offset=i, timestamp=1_700_000_000_000 + i, key=None, value=b"v%d" % i)
            for i in range(n)]
    if magic == 2:
        return build_batch(recs, compression=codec)
    return build_message_set(recs, magic=magic)


def _request(version: int, acks: int, sets: list[list[bytes | None]], tx: str | None = None):
    topics = []
    for t, parts in enumerate(sets):
        data = [REQ.PartitionProduceData(index=p, records=r) for p, r in enumerate(parts)]
        topics.append(REQ.TopicProduceData(name=f"topic-{t}", topic_id=uuid.UUID(int=t + 1),
                                           partition_data=data))
    body = REQ(transactional_id=tx if version >= 3 else None, acks=acks, timeout_ms=30000,
               topic_data=topics)
    return messages.encode_request(PRODUCE, version, 77, "producer-1", body)


def test_every_produce_version_reads_like_the_generic_decoder():
    codecs = [Compression.NONE, Compression.GZIP, Compression.LZ4, Compression.ZSTD]
    for version in sorted(schema.API_BY_KEY[PRODUCE].request.valid_versions):
        magic = 2 if version >= 3 else 1
        sets = [[_records(3, codecs[version % 4] if magic == 2 else 0, magic) + _records(2, 0, magic),
                 None, _records(5, 0, magic)], [_records(1, 0, magic)]]
        for acks in (0, 1, -1):
            frame = _request(version, acks, sets, tx="tx-1")
            head = request_head(frame)
            decoded = messages.decode_request(frame)
            assert (head.api_key, head.api_version, head.correlation_id) == (PRODUCE, version, 77)
            assert produce_acks(frame, version) == decoded.body.acks == acks
            s = produce_summary(frame, version)
            assert s is not None, version
            assert (s.acks, s.partitions) == (acks, 4)
            assert s.batches == (4 if magic == 2 else 11)
            assert s.records == 11
            assert s.record_bytes == sum(len(r) for t in sets for r in t if r)
            assert sum(n for _, n in s.codecs) == s.batches


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.integers(0, 13))
def test_garbage_never_raises(data, version):
    produce_acks(data, version)
    produce_summary(data, version)
    request_head(data)


def test_cut_frames_do_not_read():
    frame = _request(9, 1, [[_records(4, 0)]])
    for cut in range(0, len(frame) - 1, 7):
        s = produce_summary(frame[:cut], 9)
        assert s is None or s.records < 4
