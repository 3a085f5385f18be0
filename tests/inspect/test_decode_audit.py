"""``kctl decode`` against what tshark shows (the s5 audit): topic ids named, fields of the
frame's version only, summary lines per version, control records, exact max latency, the
no-traffic line, unknown --api keys, the consumer protocol decoded."""

from __future__ import annotations

import json
import uuid

from typer.testing import CliRunner

from kctl.cli import app
from kctl.errors import ConfigError
from kctl.inspect.report import frame_json
from kctl.inspect.session import decode_frame_bytes
from kctl.protocol.frames import frame
from kctl.protocol.messages import encode_request, encode_response, request_class, response_class
from kctl.protocol.records import build_batch
from kctl.protocol.schema import API_BY_KEY
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


# ---------------------------------------------------------------------------
# -v and --json show the fields of the frame's version only





def _fill(top: type, version: int):
    def build(scls: type, fields):
        kw = {}
        for f in fields:
            if f.type == "records" and version in f.versions:
                kw[f.py_name] = b""     # its default (null) is not allowed in every version
            if f.struct is None or version not in f.versions or version in f.tagged_versions:
                continue
            sub = build(top._struct_classes[f.struct], f.fields)
            kw[f.py_name] = [sub] if f.is_array else sub
        return scls(**kw)
    return build(top, top._spec.fields)


def _outside_version(obj, fields, version: int, path: str = "body") -> list[str]:
    """JSON keys of ``obj`` that are not fields of ``version``, and fields of ``version``
    (not tagged) that are missing."""
    bad = []
    by_name = {f.py_name: f for f in fields}
    for k, v in obj.items():
        if k == "unknown_tagged_fields":
            continue
        f = by_name.get(k)
        if f is None or version not in f.versions:
            bad.append(f"{path}.{k}")
            continue
        if f.fields is not None:
            for i, x in enumerate(v if isinstance(v, list) else [v]):
                if isinstance(x, dict):
                    bad += _outside_version(x, f.fields, version, f"{path}.{k}[{i}]")
    for f in fields:
        if version in f.versions and version not in f.tagged_versions and f.py_name not in obj:
            bad.append(f"{path}.{f.py_name} missing")
    return bad


def test_json_shows_exactly_the_fields_of_the_frames_version():
    """Every API, every version, request and response: encoded with its nested structs
    filled, decoded as kctl decode does, and --json's body holds the version's fields only."""
    checked = 0
    for key, api in sorted(API_BY_KEY.items()):
        req_cls, resp_cls = request_class(key), response_class(key)
        for v in sorted(api.request.valid_versions):
            rq = decode_frame_bytes(encode_request(key, v, 7, "cli", _fill(req_cls, v)), size_prefix=False)
            assert rq.error is None, (api.name, v, rq.error)
            bad = _outside_version(frame_json(rq)["body"], req_cls._spec.fields, v)
            assert not bad, (api.name, "request", v, bad)
            rs = decode_frame_bytes(encode_response(key, v, 7, _fill(resp_cls, v)), size_prefix=False, api_key=key,
                                    api_version=v)
            assert rs.error is None, (api.name, v, rs.error)
            bad = _outside_version(frame_json(rs)["body"], resp_cls._spec.fields, v)
            assert not bad, (api.name, "response", v, bad)
            checked += 1
    assert checked > 300


def test_audited_frames_show_no_field_of_another_version():
    """The audit's examples (tshark shows none of these fields)."""
    def resp_body(key, v, body):
        return frame_json(decode_frame_bytes(encode_response(key, v, 1, body), size_prefix=False, api_key=key,
                                             api_version=v))["body"]

    def req_body(key, v, body):
        return frame_json(decode_frame_bytes(encode_request(key, v, 1, "c", body), size_prefix=False))["body"]

    assert "group_id" not in req_body(9, 9, request_class(9)(groups=[request_class(9).OffsetFetchRequestGroup(group_id="g")]))
    ct = resp_body(19, 4, response_class(19)(topics=[response_class(19).CreatableTopicResult(name="t")]))
    assert "topic_id" not in ct["topics"][0] and "num_partitions" not in ct["topics"][0]
    assert "producer_id" not in resp_body(26, 1, response_class(26)())
    pr = resp_body(0, 5, ProduceResp(responses=[ProduceResp.TopicProduceResponse(
        name="t", partition_responses=[ProduceResp.PartitionProduceResponse(index=0)])]))
    p0 = pr["responses"][0]["partition_responses"][0]
    assert "record_errors" not in p0 and "current_leader" not in p0 and "node_endpoints" not in pr
    fr = req_body(1, 7, Fetch())
    assert "replica_state" not in fr and "cluster_id" not in fr
    assert "timeout_ms" not in req_body(2, 2, request_class(2)())
    assert "protocol_type" not in resp_body(14, 3, response_class(14)())
    # A tagged field is shown when sent (not its default).
    f15 = req_body(1, 15, Fetch(replica_state=Fetch.ReplicaState(replica_id=3, replica_epoch=1)))
    assert f15["replica_state"] == {"replica_id": 3, "replica_epoch": 1}
    assert "cluster_id" not in f15 and "replica_id" not in f15


# ---------------------------------------------------------------------------
# summary lines read fields where the frame's version keeps them

def _request_line(key: int, version: int, body) -> str:
    from kctl.inspect.report import gist
    return gist(decode_frame_bytes(encode_request(key, version, 1, "c", body), size_prefix=False))


def test_request_lines_name_groups_and_transactions_in_every_version():
    OffsetFetch = request_class(9)
    assert _request_line(9, 7, OffsetFetch(group_id="g")) == "group=g"
    assert _request_line(9, 9, OffsetFetch(groups=[OffsetFetch.OffsetFetchRequestGroup(group_id="g")])) == "group=g"
    many = OffsetFetch(groups=[OffsetFetch.OffsetFetchRequestGroup(group_id=f"g{i}") for i in range(5)])
    assert _request_line(9, 8, many) == "group=g0,g1,g2 +2 more"
    assert _request_line(69, 0, request_class(69)(group_ids=["a", "b"])) == "group=a,b"
    assert _request_line(15, 5, request_class(15)(groups=["a"])) == "group=a"
    assert _request_line(42, 2, request_class(42)(groups_names=["a"])) == "group=a"
    AddParts = request_class(24)
    assert _request_line(24, 3, AddParts(v3_and_below_transactional_id="tx")) == "txn=tx"
    assert _request_line(24, 4, AddParts(transactions=[AddParts.AddPartitionsToTxnTransaction(
        transactional_id="tx")])) == "txn=tx"
    assert _request_line(28, 3, request_class(28)(transactional_id="tx", group_id="g")) == "txn=tx group=g"
    FindCoord = request_class(10)
    assert _request_line(10, 2, FindCoord(key="g")) == "group=g"
    assert _request_line(10, 4, FindCoord(key_type=1, coordinator_keys=["tx"])) == "txn=tx"
    Meta = request_class(3)
    assert _request_line(3, 0, Meta(topics=[])) == "all topics"
    assert _request_line(3, 1, Meta(topics=[])) == "no topics"
    assert _request_line(3, 1, Meta(topics=None)) == "all topics"


def test_topic_filter_reads_name_lists_and_topic_name_fields(tmp_path):
    from kctl.inspect.report import topics_of
    f = decode_frame_bytes(encode_request(20, 4, 1, "c", request_class(20)(topic_names=["gone"])), size_prefix=False)
    assert topics_of(f) == {"gone"}
    DT = request_class(20)
    f = decode_frame_bytes(encode_request(20, 6, 1, "c", DT(topics=[DT.DeleteTopicState(name="gone")])), size_prefix=False)
    assert topics_of(f) == {"gone"}
    f = decode_frame_bytes(encode_request(68, 0, 1, "c", request_class(68)(
        group_id="g", subscribed_topic_names=["a", "b"])), size_prefix=False)
    assert topics_of(f) == {"a", "b"}


# ---------------------------------------------------------------------------
# --records leaves transaction markers out

def test_records_leave_out_transaction_markers(tmp_path):
    from kctl.protocol.records import ControlRecordType, control_record
    data = build_batch(records(2), producer_id=5, producer_epoch=0, base_sequence=0,
                       is_transactional=True)
    marker = build_batch([control_record(ControlRecordType.COMMIT, offset=2, timestamp=1)],
                         base_offset=2, producer_id=5, producer_epoch=0, is_transactional=True,
                         is_control=True)
    c = cb.Conversation()
    c.send(frame(encode_request(1, 11, 1, "c", Fetch(topics=[Fetch.FetchTopic(
        topic="tx", partitions=[Fetch.FetchPartition(partition=0)])]))))
    c.reply(frame(encode_response(1, 11, 1, FetchResp(responses=[FetchResp.FetchableTopicResponse(
        topic="tx", partitions=[FetchResp.PartitionData(partition_index=0, records=data + marker)])]))))
    p = _write(tmp_path, c)
    assert _decode(str(p), "--records") == ["tx 0 0 k0 value-0", "tx 0 1 k1 value-1"]
    assert [json.loads(x)["offset"] for x in _decode(str(p), "--records", "--json")] == [0, 1]
    # The frame views and --summary still count the marker, as the batch headers do.
    assert "2b 3r" in _decode(str(p), "--api", "Fetch")[1]


# ---------------------------------------------------------------------------
# max latency: the largest measured, not an HdrHistogram bucket value

def test_summary_max_is_the_largest_latency_measured(tmp_path):
    c = cb.Conversation()
    for corr, wait_ns in ((1, 3_155_000), (2, 23_030_849_123)):
        c.send(frame(encode_request(3, 12, corr, "c", Metadata(topics=None))))
        c.ts += wait_ns - 1000      # the reply's segment comes 1 µs after this
        c.reply(frame(encode_response(3, 12, corr, MetadataResp())))
    p = _write(tmp_path, c)
    lines = _decode(str(p))
    assert "23030.849ms" in lines[-1]
    lat = json.loads(_decode(str(p), "--summary", "--json")[0])["apis"]["Metadata"]["latency_ms"]
    assert lat["max"] == 23030.849123
    assert lat["p100"] == lat["max"]     # bucket values, capped at the largest measured
    assert lat["p50"] == 3.155           # the 3.155 ms sample's bucket (below the max: as it is)
    row = next(x for x in _decode(str(p), "--summary") if "Metadata" in x)
    assert row.rstrip(" │").endswith("23030.849")     # the "max ms" column


def test_inspect_stats_max_is_the_largest_latency_measured():
    from kctl.inspect.proxy_stats import ProxyStats, merge_reports
    one, two = ProxyStats(0), ProxyStats(1)
    one.on_response(1, "JoinGroup", 100, 3_155_000, 0, ())
    two.on_response(2, "JoinGroup", 100, 23_030_849_123, 0, ())
    snap = merge_reports([one.report(0), two.report(0)], 0)
    assert snap.apis["JoinGroup"].latency_max_us == 23_030_849.123
    # Bucket values, never above the largest measured (the bucket's highest is 23035.903 ms).
    assert snap.apis["JoinGroup"].latency_us[99.9] == 23_030_849.123


# ---------------------------------------------------------------------------
# no Kafka traffic: say what --port auto found

def _no_traffic(tmp_path, segs, *args):
    p = tmp_path / "x.pcap"
    p.write_bytes(cb.capture(segs) if segs else cb.pcap([], nano=True))
    r = runner.invoke(app, ["decode", str(p), *args])
    assert r.exit_code == 1 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1
    return p, r.stderr.strip()


def test_no_tcp_at_all_says_so(tmp_path):
    p, err = _no_traffic(tmp_path, [])
    assert err == f"kctl decode: no TCP traffic at all in {p} (nothing for --port auto to find)"
    p, err = _no_traffic(tmp_path, [], "--port", "9093")
    assert err == f"kctl decode: no TCP traffic at all in {p}"


def test_auto_finding_nothing_does_not_claim_a_port_was_asked(tmp_path):
    ssh = cb.Conversation(cport=50001, bport=22, handshake=False)
    ssh.send(b"SSH-2.0-OpenSSH_9.6\r\n")
    ssh.reply(b"SSH-2.0-OpenSSH_9.3\r\n")
    p, err = _no_traffic(tmp_path, ssh.segs)
    assert err.startswith(f"kctl decode: no Kafka traffic found in {p}: --port auto found no "
                          "connection carrying Kafka requests, and port 9092")
    assert "22 (42 B)" in err and "--port" in err


def test_no_kafka_traffic_line_names_where_the_ports_came_from():
    from collections import Counter
    from kctl.inspect.traffic import no_kafka_traffic
    seen = Counter({8080: 2000})
    given = no_kafka_traffic("decode", ["a.pcap"], {9093}, auto=False, auto_found=False, seen=seen)
    assert given.startswith("kctl decode: no Kafka traffic found in a.pcap on port 9093; TCP ports seen")
    found = no_kafka_traffic("analyze", ["a.pcap"], {19092}, auto=True, auto_found=True, seen=seen)
    assert found.startswith("kctl analyze: no Kafka traffic found in a.pcap on port 19092 (found by --port auto);")
    assert "8080 (2.0 kB)" in found


def test_an_unknown_api_key_number_is_refused_as_an_unknown_name_is(tmp_path):
    p = _topic_id_capture(tmp_path)
    for bad in ("99", "Bogus", "-1"):
        r = runner.invoke(app, ["decode", str(p), "--api", bad])
        assert isinstance(r.exception, ConfigError) and r.stdout == "", bad
        assert f"--api '{bad}'" in str(r.exception), bad
    assert len(_decode(str(p), "--api", "1")) == 2


# ---------------------------------------------------------------------------
# consumer protocol: JoinGroup subscriptions and SyncGroup assignments decoded

def _group_capture(tmp_path, protocol_type: str):
    from kctl.engine.assignors import Assignment, Subscription, encode_assignment, encode_subscription
    from kctl.engine.batch import TopicPartition
    Join, JoinResp = request_class(11), response_class(11)
    Sync, SyncResp = request_class(14), response_class(14)
    sub = encode_subscription(Subscription(("t1",), (TopicPartition("t1", 2),), 4, "r1", b"abc"))
    sub_v0 = encode_subscription(Subscription(("t1", "t2")), version=0)
    assignment = encode_assignment(Assignment((TopicPartition("t1", 0), TopicPartition("t1", 1))), version=0)
    c = cb.Conversation()
    c.send(frame(encode_request(11, 5, 1, "c", Join(group_id="g", member_id="m", protocol_type=protocol_type,
        protocols=[Join.JoinGroupRequestProtocol(name="range", metadata=sub),
                   Join.JoinGroupRequestProtocol(name="roundrobin", metadata=b"\x00")]))))
    c.reply(frame(encode_response(11, 5, 1, JoinResp(generation_id=1, protocol_name="range", leader="m",
        member_id="m", members=[JoinResp.JoinGroupResponseMember(member_id="m", metadata=sub_v0)]))))
    c.send(frame(encode_request(14, 3, 2, "c", Sync(group_id="g", generation_id=1, member_id="m",
        assignments=[Sync.SyncGroupRequestAssignment(member_id="m", assignment=assignment),
                     Sync.SyncGroupRequestAssignment(member_id="n", assignment=b"")]))))
    c.reply(frame(encode_response(14, 3, 2, SyncResp(assignment=assignment))))
    return _write(tmp_path, c)


def test_consumer_protocol_is_decoded_in_json_and_verbose(tmp_path):
    p = _group_capture(tmp_path, "consumer")
    objs = [json.loads(x) for x in _decode(str(p), "--json")]
    join_req, join_resp, sync_req, sync_resp = (o["consumer_protocol"] for o in objs)
    assert join_req[0] == {"field": "protocols[0].metadata", "protocol": "range", "version": 3,
                           "subscription": {"topics": ["t1"], "owned_partitions": [{"topic": "t1", "partitions": [2]}],
                                            "generation_id": 4, "rack_id": "r1", "user_data_bytes": 3}}
    assert join_req[1]["field"] == "protocols[1].metadata" and "decode_error" in join_req[1]
    assert join_resp == [{"field": "members[0].metadata", "member_id": "m", "version": 0,
                          "subscription": {"topics": ["t1", "t2"], "user_data_bytes": None}}]
    # SyncGroup v3 has no protocol_type: the group's JoinGroup said "consumer".
    expected = {"assigned_partitions": [{"topic": "t1", "partitions": [0, 1]}], "user_data_bytes": None}
    assert sync_req == [{"field": "assignments[0].assignment", "member_id": "m", "version": 0, "assignment": expected},
                        {"field": "assignments[1].assignment", "member_id": "n", "assignment": None}]
    assert sync_resp == [{"field": "assignment", "version": 0, "assignment": expected}]
    tree = "\n".join(_decode(str(p), "-v", "--api", "SyncGroup"))
    assert "assigned_partitions" in tree and "consumer_protocol" in tree


def test_other_group_protocols_stay_bytes(tmp_path):
    p = _group_capture(tmp_path, "connect")
    assert not any("consumer_protocol" in json.loads(x) for x in _decode(str(p), "--json"))


def test_an_empty_fetch_names_its_session_only_where_the_version_has_one():
    assert _request_line(1, 7, Fetch(session_id=5)) == "session=5"
    assert _request_line(1, 6, Fetch()) == "no partitions"


def test_a_sync_group_response_alone_says_its_protocol_type_from_v5():
    from kctl.engine.assignors import Assignment, encode_assignment
    from kctl.engine.batch import TopicPartition
    SyncResp = response_class(14)
    data = encode_assignment(Assignment((TopicPartition("t", 3),)))
    f = decode_frame_bytes(encode_response(14, 5, 1, SyncResp(protocol_type="consumer", assignment=data)), size_prefix=False,
                           api_key=14, api_version=5)
    assert frame_json(f)["consumer_protocol"][0]["assignment"]["assigned_partitions"] == [
        {"topic": "t", "partitions": [3]}]
    old = decode_frame_bytes(encode_response(14, 4, 1, SyncResp(assignment=data)), size_prefix=False, api_key=14, api_version=4)
    assert "consumer_protocol" not in frame_json(old)      # nothing says what the bytes are
