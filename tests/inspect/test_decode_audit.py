"""``kctl decode`` against what tshark shows: topic ids named, fields of the frame's version
only, summary lines per version, control records, exact max latency, the no-traffic line."""

from __future__ import annotations

import json
import uuid

from typer.testing import CliRunner

from kctl.cli import app
from kctl.protocol.frames import frame
from kctl.protocol.messages import encode_request, encode_response, request_class, response_class
from kctl.protocol.records import build_batch
from tests.inspect import capture_builder as cb
from tests.inspect.kafka_frames import records

runner = CliRunner()
TOPIC_ID = uuid.UUID("01a21021-185f-7e22-9e19-cd4d0c7fa242")
Metadata, MetadataResp = request_class(3), response_class(3)
Fetch, FetchResp = request_class(1), response_class(1)
Produce, ProduceResp = request_class(0), response_class(0)


def _write(tmp_path, conv: cb.Conversation, name: str = "c.pcap"):
    conv.close()
    p = tmp_path / name
    p.write_bytes(cb.capture(conv.segs))
    return p


def _decode(*args: str) -> list:
    r = runner.invoke(app, ["decode", *args])
    assert r.exit_code == 0, r.output
    return r.stdout.splitlines()


def _topic_id_capture(tmp_path):
    c = cb.Conversation()
    c.send(frame(encode_request(3, 12, 1, "cli", Metadata(topics=[
        Metadata.MetadataRequestTopic(name="orders")]))))
    c.reply(frame(encode_response(3, 12, 1, MetadataResp(
        brokers=[MetadataResp.MetadataResponseBroker(node_id=1, host="h", port=9092)],
        topics=[MetadataResp.MetadataResponseTopic(name="orders", topic_id=TOPIC_ID, partitions=[
            MetadataResp.MetadataResponsePartition(partition_index=0, leader_id=1)])]))))
    c.send(frame(encode_request(1, 16, 2, "cli", Fetch(max_wait_ms=500, topics=[
        Fetch.FetchTopic(topic_id=TOPIC_ID, partitions=[Fetch.FetchPartition(partition=0, fetch_offset=7)])]))))
    c.reply(frame(encode_response(1, 16, 2, FetchResp(responses=[FetchResp.FetchableTopicResponse(
        topic_id=TOPIC_ID, partitions=[FetchResp.PartitionData(partition_index=0, records=build_batch(records(2)))])]))))
    c.send(frame(encode_request(0, 13, 3, "cli", Produce(acks=-1, timeout_ms=1000, topic_data=[
        Produce.TopicProduceData(topic_id=TOPIC_ID, partition_data=[
            Produce.PartitionProduceData(index=0, records=build_batch(records(1)))])]))))
    c.reply(frame(encode_response(0, 13, 3, ProduceResp(responses=[ProduceResp.TopicProduceResponse(
        topic_id=TOPIC_ID, partition_responses=[ProduceResp.PartitionProduceResponse(index=0, base_offset=9)])]))))
    return _write(tmp_path, c)


def test_requests_naming_topics_by_id_show_and_filter_by_name(tmp_path):
    p = _topic_id_capture(tmp_path)
    lines = _decode(str(p))
    fetch_req = next(x for x in lines if "req  Fetch v16" in x)
    assert "orders/0@7" in fetch_req and str(TOPIC_ID) not in fetch_req
    produce_resp = next(x for x in lines if "resp Produce v13" in x)
    assert "orders/0@9" in produce_resp and str(TOPIC_ID) not in produce_resp
    # -t filters requests that name the topic by id, not only responses.
    only = _decode(str(p), "-t", "orders", "--api", "Fetch")
    assert [x.split()[4] for x in only] == ["req", "resp"]
    both = _decode(str(p), "-t", "orders", "--api", "Produce")
    assert [x.split()[4] for x in both] == ["req", "resp"]
    assert _decode(str(p), "-t", "other", "--api", "Fetch") == []
    objs = [json.loads(x) for x in _decode(str(p), "--json", "--api", "Fetch")]
    assert all(o["topic_names"] == {str(TOPIC_ID): "orders"} for o in objs)
