"""The proxy's hand-written peeks agree with the generic codec on every Produce version
(conventions rule 7), and never raise on bytes that do not read."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from kctl.inspect.peek import produce_acks, produce_answer, produce_summary, request_head
from kctl.inspect.processor import _errors_in
from kctl.protocol import messages, schema
from kctl.protocol.compression import Compression
from kctl.protocol.error_codes import error_for
from kctl.protocol.records import Record, build_batch, build_message_set

PRODUCE = 0
REQ = messages.message_class("ProduceRequest")
RESP = messages.message_class("ProduceResponse")


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


def _response(version: int, codes: list[list[int]], *, leader: bool = False, endpoints: bool = False) -> bytes:
    topics = []
    for t, parts in enumerate(codes):
        ps = [RESP.PartitionProduceResponse(
                  index=p, error_code=c, base_offset=100 * p, log_append_time_ms=-1, log_start_offset=0,
                  record_errors=[RESP.BatchIndexAndErrorMessage(batch_index=1, batch_index_error_message="bad")]
                  if c and version >= 8 else [],
                  error_message="why" if c and version >= 8 else None,
                  current_leader=RESP.LeaderIdAndEpoch(leader_id=2, leader_epoch=5) if leader and c else
                  RESP.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1))
              for p, c in enumerate(parts)]
        topics.append(RESP.TopicProduceResponse(name=f"topic-{t}", topic_id=uuid.UUID(int=t + 1),
                                                partition_responses=ps))
    body = RESP(responses=topics, throttle_time_ms=7 if version >= 1 else 0,
                node_endpoints=[RESP.NodeEndpoint(node_id=2, host="b2", port=9092, rack=None)]
                if endpoints else [])
    return messages.encode_response(PRODUCE, version, 77, body)


def test_every_produce_response_version_reads_like_the_generic_decoder():
    codes = [[0, 6, 0], [0], [], [75, 0, 19]]
    for version in sorted(schema.API_BY_KEY[PRODUCE].response.valid_versions):
        frame = _response(version, codes)
        body = messages.decode_response(frame, PRODUCE, version).body
        answer = produce_answer(frame, version)
        assert answer is not None, version
        errors, throttle = answer
        assert [error_for(c).name for c in errors] == _errors_in(PRODUCE, body)
        assert throttle == body.throttle_time_ms
        assert produce_answer(memoryview(frame), version) == answer
        # Leader hints (KIP-951, tagged) are for the decoder, which the proxy rewrites.
        if version >= 10:
            assert produce_answer(_response(version, codes, leader=True), version) is None
            assert produce_answer(_response(version, codes, endpoints=True), version) is None
        assert produce_answer(frame + b"\0", version) is None
        for cut in range(len(frame)):
            assert produce_answer(frame[:cut], version) is None, (version, cut)
