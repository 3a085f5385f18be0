"""Round trips for every message and version in the schema, headers, errors, fuzzing."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kctl.errors import DecodeError, EncodeError
from kctl.protocol import messages, schema
from tests.protocol.message_strategies import message_strategy

ALL = sorted(schema.MESSAGES)
_FAST = settings(max_examples=4, deadline=None, derandomize=True,
                 suppress_health_check=list(HealthCheck))


@pytest.mark.parametrize("name", ALL)
@_FAST
@given(data=st.data())
def test_round_trip_every_version(name: str, data: st.DataObject) -> None:
    cls = messages.message_class(name)
    for version in sorted(cls._spec.valid_versions):
        msg = data.draw(message_strategy(cls, version), label=f"v{version}")
        wire = messages.encode(msg, version)
        back = messages.decode(cls, version, wire)
        assert back == msg, f"{name} v{version}"
        assert messages.encode(back, version) == wire, f"{name} v{version}"


@pytest.mark.parametrize("name", ALL)
def test_defaults_round_trip(name: str) -> None:
    cls = messages.message_class(name)
    for version in sorted(cls._spec.valid_versions):
        wire = messages.encode(cls(), version)
        assert messages.decode(cls, version, wire) == cls()


def test_api_table_covers_kafka_4() -> None:
    assert schema.API_BY_NAME["Produce"].min_version == 0       # pre-KIP-896, from the 2024 tree
    assert schema.API_BY_NAME["Produce"].max_version >= 13
    assert schema.API_BY_NAME["Fetch"].max_version >= 18
    assert schema.API_BY_NAME["ApiVersions"].max_version >= 4
    for name in ("StreamsGroupHeartbeat", "StreamsGroupDescribe", "AlterShareGroupOffsets",
                 "DeleteShareGroupOffsets", "DescribeShareGroupOffsets"):
        assert name in schema.API_BY_NAME
    assert schema.API_BY_NAME["ShareFetch"].max_version >= 2
    assert messages.request_class(0) is messages.ProduceRequest
    assert messages.response_class(1) is messages.message_class("FetchResponse")


def test_produce_request_fields_and_names() -> None:
    P = messages.ProduceRequest
    msg = P(acks=-1, timeout_ms=30000, topic_data=[
        P.TopicProduceData(name="t", partition_data=[
            P.PartitionProduceData(index=3, records=b"\x00" * 5)])])
    for v in (0, 3, 9, 12):
        assert messages.decode(P, v, messages.encode(msg, v)) == msg
    assert "topic_data" in repr(msg)
    j = messages.to_jsonable(msg)
    assert j["topic_data"][0]["partition_data"][0]["records"] == {"$base64": "AAAAAAA="}


def test_unsupported_field_raises() -> None:
    P = messages.ProduceRequest
    with pytest.raises(EncodeError, match="transactional_id.*version 2"):
        messages.encode(P(transactional_id="tx"), 2)
    # Ignorable fields are silently dropped, like Kafka's generator does.
    msg = P(topic_data=[P.TopicProduceData(name="t", topic_id=uuid.uuid4())])
    messages.encode(msg, 12)
    with pytest.raises(EncodeError, match="no version 99"):
        messages.encode(P(), 99)


def test_out_of_range_and_null_raise_encode_error() -> None:
    P = messages.ProduceRequest
    with pytest.raises(EncodeError, match="acks"):
        messages.encode(P(acks=1 << 20), 9)
    with pytest.raises(EncodeError, match="null"):
        messages.encode(P(topic_data=None), 9)


def test_unknown_tagged_fields_are_kept() -> None:
    M = messages.MetadataRequest
    msg = M(topics=None, unknown_tagged_fields={7: b"abc", 99: b""})
    wire = messages.encode(msg, 12)
    back = messages.decode(M, 12, wire)
    assert back.unknown_tagged_fields == {7: b"abc", 99: b""}
    assert messages.encode(back, 12) == wire


def test_known_tagged_field_decodes_typed() -> None:
    F = messages.FetchRequest
    msg = F(cluster_id="c1", replica_state=F.ReplicaState(replica_id=5, replica_epoch=9))
    back = messages.decode(F, 15, messages.encode(msg, 15))
    assert back.cluster_id == "c1" and back.replica_state.replica_id == 5


def test_trailing_bytes_and_truncation_name_the_place() -> None:
    P = messages.ProduceRequest
    msg = P(topic_data=[P.TopicProduceData(name="t", partition_data=[
        P.PartitionProduceData(index=1, records=b"x" * 10),
        P.PartitionProduceData(index=2, records=b"y" * 10)])])
    wire = messages.encode(msg, 8)
    with pytest.raises(DecodeError, match="trailing"):
        messages.decode(P, 8, wire + b"\x00")
    with pytest.raises(DecodeError) as e:
        messages.decode(P, 8, wire[:-3])
    assert e.value.field == "topic_data[0].partition_data[1].records"
    assert e.value.offset == len(wire) - 14
    # Absolute offsets when the body starts inside a larger buffer.
    with pytest.raises(DecodeError) as e2:
        messages.decode(P, 8, b"\xff" * 7 + wire[:-3], offset=7)
    assert e2.value.offset == e.value.offset + 7


def test_request_header_versions() -> None:
    assert schema.request_header_version(0, 8) == 1
    assert schema.request_header_version(0, 9) == 2
    assert schema.request_header_version(7, 0) == 0   # ControlledShutdown v0
    assert schema.request_header_version(7, 1) == 1
    assert schema.response_header_version(0, 9) == 1
    assert schema.response_header_version(0, 8) == 0
    for v in range(5):                                # ApiVersions: always v0
        assert schema.response_header_version(18, v) == 0
    assert schema.API_BY_NAME["ApiVersions"].response_header_version(3) == 0


def test_encode_decode_request_frames() -> None:
    body = messages.ApiVersionsRequest(client_software_name="kctl", client_software_version="0.1")
    wire = messages.encode_request(18, 3, 42, "me", body)
    # header v2: api key, version, correlation id, client id (int16 length, not compact), tags
    assert wire[:8] == b"\x00\x12\x00\x03\x00\x00\x00\x2a"
    assert wire[8:12] == b"\x00\x02me"
    req = messages.decode_request(wire)
    assert req.header == messages.RequestHeader(18, 3, 42, "me", {})
    assert req.body == body
    assert messages.peek_correlation_id(wire, request=True) == 42

    resp = messages.ApiVersionsResponse(api_keys=[
        messages.ApiVersionsResponse.ApiVersion(api_key=0, min_version=3, max_version=13)])
    rwire = messages.encode_response(18, 3, 42, resp)
    assert rwire[:5] == b"\x00\x00\x00\x2a\x00"  # header v0: no tag section after the id
    out = messages.decode_response(rwire, 18, 3)
    assert out.header == messages.ResponseHeader(correlation_id=42)
    assert out.body == resp
    assert messages.peek_correlation_id(rwire) == 42

    cs = messages.encode_request(7, 0, 5, None, messages.message_class("ControlledShutdownRequest")(broker_id=1))
    assert len(cs) == 8 + 4 and messages.decode_request(cs).body.broker_id == 1

    fwire = messages.encode_response(0, 9, 7, messages.ProduceResponse())
    assert messages.decode_response(fwire, 0, 9).header.correlation_id == 7


def test_decode_request_rejects_unknown_api() -> None:
    with pytest.raises(DecodeError, match="unknown API key"):
        messages.decode_request(b"\x7f\x00\x00\x00\x00\x00\x00\x01")
    with pytest.raises(DecodeError, match="no version"):
        messages.decode_request(b"\x00\x00\x00\x63\x00\x00\x00\x01")


_FUZZ_TARGETS = [(n, v) for n in ("ProduceRequest", "FetchResponse", "MetadataResponse",
                                  "ApiVersionsResponse", "JoinGroupRequest", "ShareFetchResponse")
                 for v in sorted(schema.MESSAGES[n].valid_versions)]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(target=st.sampled_from(_FUZZ_TARGETS), data=st.binary(max_size=200))
def test_garbage_decodes_or_raises_decode_error(target: tuple[str, int], data: bytes) -> None:
    cls = messages.message_class(target[0])
    try:
        messages.decode(cls, target[1], data)
    except DecodeError:
        pass


@settings(max_examples=200, deadline=None, derandomize=True)
@given(data=st.binary(max_size=120))
def test_garbage_frames_decode_or_raise_decode_error(data: bytes) -> None:
    for fn in (lambda: messages.decode_request(data),
               lambda: messages.decode_response(data, 3, 12),
               lambda: messages.decode_response(data, 0, 7)):
        try:
            fn()
        except DecodeError:
            pass


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_truncated_valid_messages_raise_decode_error(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(["ProduceRequest", "FetchResponse", "MetadataResponse"]))
    cls = messages.message_class(name)
    version = data.draw(st.sampled_from(sorted(cls._spec.valid_versions)))
    wire = messages.encode(data.draw(message_strategy(cls, version)), version)
    cut = data.draw(st.integers(0, max(0, len(wire) - 1)))
    if cut == len(wire):
        return
    with pytest.raises(DecodeError):
        messages.decode(cls, version, wire[:cut])
