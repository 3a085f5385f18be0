"""Real captures of three independent clients talking to the embedded broker.

tcpdump records kafka-python, aiokafka and confluent-kafka (librdkafka) while they
produce with every codec each can do, with idempotence and transactions where the
client and Tansu allow, run a consumer group through a rebalance, and make admin
calls. For each capture:

- every frame decodes: no ``decode_error``/``unknown_api``/``unmatched`` mark, no
  gap or framing notice, every record set decodes;
- ``kctl decode --summary --json`` counts, per topic/partition, exactly the records
  the client says it delivered;
- kio, an independently generated decoder, reads every frame whose API/version it
  knows from the same bytes and agrees with kctl field by field (header and body);
- kafka-python's record code reads every Produce record set and agrees with kctl's
  records (offset, timestamp, key, value, headers, producer id, sequence,
  transactional flag);
- the APIs the scenario is about are on the wire (so the checks above are not
  vacuous).

Client limits, found and kept here: aiokafka is not idempotent in these captures
because Tansu answers its InitProducerId v0 with error -1 (UNKNOWN_SERVER_ERROR);
the aiokafka capture keeps that exchange and checks it decodes. Transactions and
the group rebalance are driven by confluent-kafka (and a kafka-python transaction).
librdkafka 2.16 answers ``describe_cluster`` with Metadata (not DescribeCluster) and,
since Tansu advertises it, ``describe_consumer_groups`` with ConsumerGroupDescribe
(KIP-848) rather than DescribeGroups; it also sends GetTelemetrySubscriptions (KIP-714).
Tansu supports the whole transactional exchange and the classic group protocol here.
"""

from __future__ import annotations

import asyncio
import os
import time
import types
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.inspect.live_capture import (
    Decoded, assert_every_frame_decodes, cli_summary, decode_keeping_bytes, produced_counts,
    tcpdump_on_lo,
)
from tests.inspect.oracles import kafka_python_records, kctl_records, kio_check, kio_knows
from tests.protocol.kafka_python_shims import all_codecs, snappy_shim, xxhash_shim  # noqa: F401

pytestmark = [pytest.mark.broker, pytest.mark.slow]

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
PER_PARTITION = {0: 12, 1: 8}


@dataclass
class Capture:
    client: str
    path: Path
    port: int
    delivered: Counter                       # (topic, partition) -> records acked
    topics: set[str]
    expect_apis: set[str]                    # APIs the scenario must have put on the wire
    facts: dict = field(default_factory=dict)
    decoded: Decoded | None = None


def _run_id() -> str:
    return f"{os.getpid()}-{time.monotonic_ns() % 10**6}"


# ---------------------------------------------------------------------------
# the clients


def _kafka_python(broker, path: Path) -> Capture:
    pytest.importorskip("kafka")
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka import codec as kcodec

    from tests.protocol.kafka_python_shims import _Xxh32
    import cramjam
    run = _run_id()
    topics = {c: f"kp-{c}-{run}" for c in CODECS}
    txn_topic = f"kp-txn-{run}"
    delivered: Counter = Counter()
    with pytest.MonkeyPatch.context() as mp, tcpdump_on_lo(path, broker.port):
        # kafka-python reads python-snappy and xxhash, not installed: back them with cramjam
        # and kctl's XXH32 (as tests/protocol/kafka_python_shims.py does).
        mp.setattr(kcodec, "snappy", types.SimpleNamespace(
            compress=lambda b: bytes(cramjam.snappy.compress_raw(bytes(b))),
            decompress=lambda b: bytes(cramjam.snappy.decompress_raw(bytes(b)))))
        mp.setattr(kcodec, "xxhash", types.SimpleNamespace(xxh32=_Xxh32))
        for codec, topic in topics.items():
            # kafka-python 3 is idempotent by default; say so anyway.
            p = KafkaProducer(bootstrap_servers=broker.bootstrap, client_id=f"kp-{codec}",
                              compression_type=None if codec == "none" else codec,
                              enable_idempotence=True, acks="all", linger_ms=5)
            futs = [p.send(topic, key=b"k%d" % i, value=b"v%d-" % i * 7, partition=part,
                           headers=[("h", b"%d" % i)])
                    for part, n in PER_PARTITION.items() for i in range(n)]
            p.flush(timeout=20)
            for f in futs:
                md = f.get(timeout=20)
                delivered[(md.topic, md.partition)] += 1
            p.close(timeout=5)
        tp = KafkaProducer(bootstrap_servers=broker.bootstrap, client_id="kp-txn",
                           transactional_id=f"kp-txn-{run}", linger_ms=5)
        tp.init_transactions()
        tp.begin_transaction()
        futs = [tp.send(txn_topic, value=b"t%d" % i, partition=0) for i in range(10)]
        tp.commit_transaction()
        for f in futs:
            md = f.get(timeout=20)
            delivered[(md.topic, md.partition)] += 1
        tp.close(timeout=5)
        c = KafkaConsumer(bootstrap_servers=broker.bootstrap, client_id="kp-cons",
                          auto_offset_reset="earliest", enable_auto_commit=False,
                          consumer_timeout_ms=1000, fetch_max_wait_ms=100)
        c.assign([TopicPartition(t, part) for t in topics.values() for part in PER_PARTITION])
        consumed = Counter((m.topic, m.partition) for m in c)
        c.close()
    assert consumed == Counter({k: v for k, v in delivered.items() if k[0] != txn_topic})
    return Capture("kafka-python", path, broker.port, delivered, {*topics.values(), txn_topic},
                   {"Produce", "Fetch", "InitProducerId", "AddPartitionsToTxn", "EndTxn",
                    "FindCoordinator", "Metadata", "ApiVersions"})


def _aiokafka(broker, path: Path) -> Capture:
    pytest.importorskip("aiokafka")
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.errors import KafkaError
    run = _run_id()
    topics = {c: f"aio-{c}-{run}" for c in CODECS}   # aiokafka does every codec through cramjam
    delivered: Counter = Counter()
    facts: dict = {}

    async def main() -> Counter:
        for codec, topic in topics.items():
            # Not idempotent: Tansu refuses aiokafka's InitProducerId v0 (see below).
            p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, client_id=f"aio-{codec}",
                                 compression_type=None if codec == "none" else codec,
                                 enable_idempotence=False, acks="all", linger_ms=5)
            await p.start()
            try:
                futs = [await p.send(topic, key=b"k%d" % i, value=b"v%d-" % i * 7,
                                     partition=part, headers=[("h", b"%d" % i)])
                        for part, n in PER_PARTITION.items() for i in range(n)]
                for md in await asyncio.gather(*futs):
                    delivered[(md.topic, md.partition)] += 1
            finally:
                await p.stop()
        # The limitation itself, on the wire: the idempotent producer's InitProducerId.
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, client_id="aio-idem",
                             enable_idempotence=True, request_timeout_ms=3000)
        try:
            await asyncio.wait_for(p.start(), 5)
            facts["idempotent_start"] = "ok"
        except (KafkaError, asyncio.TimeoutError) as e:
            facts["idempotent_start"] = repr(e)
        finally:
            await p.stop()
        c = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, client_id="aio-cons",
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             fetch_max_wait_ms=100)
        await c.start()
        try:
            c.assign([TopicPartition(t, part) for t in topics.values() for part in PER_PARTITION])
            consumed: Counter = Counter()
            deadline = time.monotonic() + 10
            while sum(consumed.values()) < sum(delivered.values()) and time.monotonic() < deadline:
                for tp, msgs in (await c.getmany(timeout_ms=200)).items():
                    consumed[(tp.topic, tp.partition)] += len(msgs)
        finally:
            await c.stop()
        return consumed

    with tcpdump_on_lo(path, broker.port):
        consumed = asyncio.run(main())
    assert consumed == delivered
    return Capture("aiokafka", path, broker.port, delivered, set(topics.values()),
                   {"Produce", "Fetch", "Metadata", "ApiVersions", "InitProducerId"}, facts)


def _confluent(broker, path: Path) -> Capture:
    ck = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
    run = _run_id()
    topics = {c: f"ck-{c}-{run}" for c in CODECS}
    txn_topic, doomed = f"ck-txn-{run}", f"ck-doomed-{run}"
    group = f"ck-group-{run}"
    delivered: Counter = Counter()
    facts: dict = {}

    def on_delivery(err, msg) -> None:
        if err is None:
            delivered[(msg.topic(), msg.partition())] += 1
        else:
            facts.setdefault("delivery_errors", []).append(str(err))

    quiet = {"bootstrap.servers": broker.bootstrap, "log_level": 3}
    with tcpdump_on_lo(path, broker.port):
        admin = AdminClient({**quiet, "client.id": "ck-admin"})
        new = [NewTopic(t, len(PER_PARTITION), 1) for t in (*topics.values(), txn_topic, doomed)]
        for f in admin.create_topics(new, operation_timeout=10).values():
            f.result(10)
        facts["created"], facts["doomed"] = sorted(t.topic for t in new), doomed
        (node,) = admin.describe_cluster().result(10).nodes
        for f in admin.describe_configs([ConfigResource("topic", topics["none"]),
                                         ConfigResource("broker", str(node.id))]).values():
            try:
                f.result(10)
            except ck.KafkaException as e:   # what Tansu says is on the wire either way
                facts.setdefault("describe_configs_errors", []).append(str(e))

        for codec, topic in topics.items():
            p = ck.Producer({**quiet, "client.id": f"ck-{codec}", "compression.type": codec,
                             "enable.idempotence": True, "linger.ms": 5})
            for part, n in PER_PARTITION.items():
                for i in range(n):
                    p.produce(topic, key=b"k%d" % i, value=b"v%d-" % i * 7, partition=part,
                              headers=[("h", b"%d" % i)], on_delivery=on_delivery)
            assert p.flush(20) == 0

        tp = ck.Producer({**quiet, "client.id": "ck-txn", "transactional.id": f"ck-txn-{run}",
                          "linger.ms": 5})
        tp.init_transactions(10)
        tp.begin_transaction()
        for i in range(10):
            tp.produce(txn_topic, value=b"c%d" % i, partition=i % 2, on_delivery=on_delivery)
        tp.commit_transaction(10)
        tp.begin_transaction()
        for i in range(5):
            tp.produce(txn_topic, value=b"a%d" % i, partition=0, on_delivery=on_delivery)
        tp.flush(10)             # delivered (acked) records, then the abort marks them aborted
        tp.abort_transaction(10)

        conf = {**quiet, "group.id": group, "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000, "heartbeat.interval.ms": 300,
                "isolation.level": "read_committed"}
        c1 = ck.Consumer({**conf, "client.id": "ck-c1"})
        c1.subscribe([topics["none"]])
        consumed = 0
        deadline = time.monotonic() + 15
        while consumed < sum(PER_PARTITION.values()) and time.monotonic() < deadline:
            m = c1.poll(0.1)
            if m is not None and m.error() is None:
                consumed += 1
        facts["c1_consumed"] = consumed
        c1.commit(asynchronous=False)
        c2 = ck.Consumer({**conf, "client.id": "ck-c2"})
        c2.subscribe([topics["none"]])
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not (c1.assignment() and c2.assignment()):
            c1.poll(0.05)
            c2.poll(0.05)
        facts["split"] = sorted(len(c.assignment()) for c in (c1, c2))
        c2.close()               # LeaveGroup
        c1.close()
        facts["groups"] = sorted(g.group_id for g in admin.list_consumer_groups().result(10).valid)
        (dg,) = admin.describe_consumer_groups([group]).values()
        facts["group_state"] = str(dg.result(10).state)
        for f in admin.delete_topics([doomed], operation_timeout=10).values():
            f.result(10)
        del p, tp, c1, c2, admin
    assert facts["c1_consumed"] == sum(PER_PARTITION.values())
    assert facts["split"] == [1, 1], facts
    assert group in facts["groups"]
    return Capture("confluent-kafka", path, broker.port, delivered, {*topics.values(), txn_topic},
                   {"Produce", "Fetch", "Metadata", "ApiVersions", "CreateTopics", "DeleteTopics",
                    "DescribeConfigs", "ListGroups", "ConsumerGroupDescribe",
                    "InitProducerId", "AddPartitionsToTxn", "EndTxn", "FindCoordinator",
                    "JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "OffsetCommit",
                    "OffsetFetch", "ListOffsets"}, facts)


def _capture(make, broker, tmp_path_factory) -> Capture:
    path = tmp_path_factory.mktemp("peers") / f"{make.__name__.strip('_')}.pcap"
    cap = make(broker, path)
    cap.decoded = decode_keeping_bytes(path, cap.port)
    return cap


@pytest.fixture(scope="module")
def kafka_python_capture(broker, tmp_path_factory) -> Capture:
    return _capture(_kafka_python, broker, tmp_path_factory)


@pytest.fixture(scope="module")
def aiokafka_capture(broker, tmp_path_factory) -> Capture:
    return _capture(_aiokafka, broker, tmp_path_factory)


@pytest.fixture(scope="module")
def confluent_capture(broker, tmp_path_factory) -> Capture:
    return _capture(_confluent, broker, tmp_path_factory)


@pytest.fixture(params=["kafka_python", "aiokafka", "confluent"])
def capture(request) -> Capture:
    return request.getfixturevalue(f"{request.param}_capture")


# ---------------------------------------------------------------------------
# what must hold for every capture


def test_every_frame_decodes(capture: Capture) -> None:
    assert_every_frame_decodes(capture.decoded)
    seen = {f.api_name for f in capture.decoded.frames}
    assert capture.expect_apis <= seen, capture.expect_apis - seen
    # Every request was answered (a consumer's last long poll may be cut off by close).
    reqs = {(f.conn, f.correlation_id) for f in capture.decoded.frames if f.direction == "request"}
    resps = {(f.conn, f.correlation_id) for f in capture.decoded.frames if f.direction == "response"}
    assert resps <= reqs and len(reqs - resps) <= 3


def test_summary_counts_what_the_client_delivered(capture: Capture) -> None:
    summary = cli_summary(capture.path, capture.port)
    assert produced_counts(summary, capture.topics) == capture.delivered
    assert summary["frames"] == len(capture.decoded.frames)
    assert "DECODE_ERROR" not in summary["errors"] and not summary["marks"]


def test_bodies_agree_with_kio(capture: Capture) -> None:
    d = capture.decoded
    checked = Counter()
    for f, data in zip(d.frames, d.data):
        if kio_knows(f):
            kio_check(f, data)
            checked[f.api_name] += 1
    unknown = {(f.api_name, f.api_version) for f in d.frames if not kio_knows(f)}
    # kio 0.6.5 knows every API these clients used here, at the versions they chose.
    assert not unknown, unknown
    assert sum(checked.values()) == len(d.frames)


def test_records_agree_with_kafka_python(capture: Capture, all_codecs) -> None:  # noqa: F811
    d = capture.decoded
    sets = 0
    for f, data in zip(d.frames, d.data):
        if f.api_name != "Produce" or f.direction != "request":
            continue
        raw = {(t.name, p.index): p.records for t in f.body.topic_data for p in t.partition_data}
        for rs in f.record_sets:
            assert kctl_records(rs) == kafka_python_records(raw[(rs.topic, rs.partition)])
            sets += 1
    assert sets >= len(CODECS)


# ---------------------------------------------------------------------------
# per scenario


def _frames(capture: Capture, api: str, direction: str) -> list:
    return [f for f in capture.decoded.frames if f.api_name == api and f.direction == direction]


@pytest.mark.parametrize("client", ["kafka_python", "confluent"])
def test_idempotent_and_transactional_batches(client: str, request) -> None:
    # Not aiokafka: it is not idempotent against Tansu (InitProducerId v0 refused).
    capture = request.getfixturevalue(f"{client}_capture")
    produce = [rs for f in _frames(capture, "Produce", "request") for rs in f.record_sets]
    for rs in produce:
        for b in rs.batches:
            assert b.producer_id >= 0 and b.base_sequence >= 0, (rs.topic, b)
            assert b.is_transactional == ("-txn-" in rs.topic), (rs.topic, b)
    ends = [f.body.committed for f in _frames(capture, "EndTxn", "request")]
    assert ends == ([True] if capture.client == "kafka-python" else [True, False])
    answers = [f.body.error_code for f in _frames(capture, "EndTxn", "response")]
    assert answers == [0] * len(ends)


def test_aiokafka_idempotence_is_refused_on_the_wire(aiokafka_capture: Capture) -> None:
    capture = aiokafka_capture
    init = _frames(capture, "InitProducerId", "response")
    assert init and {f.api_version for f in init} == {0}
    assert {f.body.error_code for f in init} == {-1}, capture.facts
    assert capture.facts["idempotent_start"] != "ok"


def test_consumer_group_rebalance_on_the_wire(confluent_capture: Capture) -> None:
    capture = confluent_capture
    joins = _frames(capture, "JoinGroup", "response")
    assert len({f.body.member_id for f in joins if f.body.error_code == 0}) == 2
    # The second member's arrival makes the first one join again: a new generation.
    assert len({f.body.generation_id for f in joins if f.body.error_code == 0}) >= 2
    syncs = [f for f in _frames(capture, "SyncGroup", "response") if f.body.error_code == 0]
    assert len(syncs) >= 3 and all(f.body.assignment for f in syncs)
    leaves = _frames(capture, "LeaveGroup", "request")
    assert len(leaves) == 2


def test_admin_calls_on_the_wire(confluent_capture: Capture) -> None:
    capture = confluent_capture
    (create,) = _frames(capture, "CreateTopics", "response")
    assert sorted(t.name for t in create.body.topics) == capture.facts["created"]
    assert {t.error_code for t in create.body.topics} == {0}
    (delete,) = _frames(capture, "DeleteTopics", "response")
    assert [(r.name, r.error_code) for r in delete.body.responses] == [(capture.facts["doomed"], 0)]
    (configs,) = _frames(capture, "DescribeConfigs", "response")
    assert sorted(r.resource_type for r in configs.body.results) == [2, 4]   # topic, broker
    (groups,) = _frames(capture, "ListGroups", "response")
    assert any(g.group_id.startswith("ck-group-") for g in groups.body.groups)
