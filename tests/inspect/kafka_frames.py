"""Kafka frames for the inspect tests, built with kctl's (separately tested) protocol encoder."""

from __future__ import annotations

from kctl.protocol.frames import frame
from kctl.protocol.messages import encode_request, encode_response, request_class, response_class
from kctl.protocol.records import Compression, Record, build_batch

ProduceRequest = request_class(0)
ProduceResponse = response_class(0)
MetadataRequest = request_class(3)
MetadataResponse = response_class(3)


def records(n: int, start: int = 0) -> list[Record]:
    return [Record(offset=i, timestamp=1_700_000_000_000 + i, key=b"k%d" % (start + i),
                   value=b"value-%d" % (start + i)) for i in range(n)]


def produce_request(corr: int, topic: str = "t", parts: dict[int, int] | None = None, *,
                    version: int = 9, codec: int = Compression.NONE, client_id: str = "cli",
                    pad: int = 0) -> bytes:
    """A framed Produce request: ``parts`` maps partition -> record count."""
    parts = parts if parts is not None else {0: 3}
    pdata = [ProduceRequest.PartitionProduceData(
        index=p, records=build_batch(records(n) if not pad else
                                     [Record(i, 0, None, b"x" * pad) for i in range(n)],
                                     compression=codec))
             for p, n in parts.items()]
    body = ProduceRequest(acks=-1, timeout_ms=1000,
                          topic_data=[ProduceRequest.TopicProduceData(name=topic, partition_data=pdata)])
    return frame(encode_request(0, version, corr, client_id, body))


def produce_response(corr: int, topic: str = "t", parts: tuple[int, ...] = (0,), *,
                     version: int = 9, error_code: int = 0, throttle_ms: int = 0) -> bytes:
    body = ProduceResponse(throttle_time_ms=throttle_ms, responses=[ProduceResponse.TopicProduceResponse(
        name=topic, partition_responses=[ProduceResponse.PartitionProduceResponse(
            index=p, error_code=error_code, base_offset=10) for p in parts])])
    return frame(encode_response(0, version, corr, body))


def metadata_request(corr: int, topics: tuple[str, ...] = ("t",), version: int = 12,
                     client_id: str = "cli") -> bytes:
    body = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics])
    return frame(encode_request(3, version, corr, client_id, body))


def metadata_response(corr: int, version: int = 12) -> bytes:
    body = MetadataResponse(brokers=[MetadataResponse.MetadataResponseBroker(node_id=1, host="h", port=9092)],
                            topics=[MetadataResponse.MetadataResponseTopic(name="t", error_code=3)])
    return frame(encode_response(3, version, corr, body))
