"""The inspector proxy against the embedded broker: clients stay behind it, frames are seen,
statistics add up, virtual brokers look like a cluster, and the capture reads in tshark."""

import shutil
import subprocess
import threading
import time
from collections import Counter

import pytest

from kctl.config import ProducerConfig
from kctl.engine import admin
from kctl.engine.blocking_client import BlockingClient
from kctl.engine.producer import Producer
from kctl.inspect.proxy import InspectorProxy
from kctl.protocol import messages

pytestmark = pytest.mark.broker


def _topic(broker, name, partitions=3):
    with BlockingClient(broker.bootstrap) as c:
        admin.create_topics(c, [name], partitions=partitions)
    return name


def _read_values(broker, topic, partitions):
    with BlockingClient(broker.bootstrap) as c:
        return [r.value for p in range(partitions)
                for b in admin.read_partition(c, topic, p) for r in b.records]


def _produce(bootstrap, topic, n, **props):
    cfg = ProducerConfig.from_properties({"bootstrap.servers": bootstrap, "linger.ms": 2, **props})
    with Producer(cfg) as producer:
        handles = [producer.send(topic, f"{topic}-{i}".encode(), key=f"k{i}".encode())
                   for i in range(n)]
        assert producer.flush(20)
        return handles, producer.metrics.snapshot()


def test_broker_addresses_are_rewritten_to_the_proxy(broker):
    with InspectorProxy([broker.bootstrap]) as proxy, BlockingClient(proxy.bootstrap) as c:
        md = admin.fetch_metadata(c)
        assert [b.address for b in md.brokers] == [proxy.bootstrap]
        fc = messages.message_class("FindCoordinatorRequest")
        old = c.request(fc(key="g", key_type=0), version=3)
        assert f"{old.host}:{old.port}" == proxy.bootstrap
        new = c.request(fc(key_type=0, coordinator_keys=["g"]), version=4)
        assert [f"{x.host}:{x.port}" for x in new.coordinators] == [proxy.bootstrap]
        # DescribeCluster is not in kctl's client table (client_versions): name the version.
        dc = c.request(messages.message_class("DescribeClusterRequest")(), version=0)
        assert [f"{b.host}:{b.port}" for b in dc.brokers] == [proxy.bootstrap]
        assert proxy.listener_info[0].upstream == tuple(broker.bootstrap.rsplit(":", 1)[0:1]) + (
            int(broker.bootstrap.rsplit(":", 1)[1]),)


def test_kctl_producer_through_the_proxy(broker):
    topic = _topic(broker, "proxy-kctl")
    events = []
    with InspectorProxy([broker.bootstrap], on_frame=events.append) as proxy:
        handles, metrics = _produce(proxy.bootstrap, topic, 200)
        snap = proxy.snapshot()
    assert all(h.done and h.error is None for h in handles)
    assert sorted(_read_values(broker, topic, 3)) == sorted(f"{topic}-{i}".encode() for i in range(200))
    produce = snap.apis["Produce"]
    assert produce.requests == produce.responses == metrics.requests_sent > 0
    assert produce.latency_us[50.0] > 0 and produce.latency_max_us >= produce.latency_us[99.0]
    assert snap.connections_total >= 1 and snap.errors == {} and snap.decode_errors == 0
    reqs = [e for e in events if e.direction == "request"]
    resps = [e for e in events if e.direction == "response"]
    assert Counter(e.api_name for e in reqs) == Counter(e.api_name for e in resps)
    assert {(e.connection_id, e.correlation_id) for e in reqs} == \
           {(e.connection_id, e.correlation_id) for e in resps}
    assert all(e.body is not None for e in events)


def test_kafka_python_producer_and_consumer_through_the_proxy(broker):
    kafka = pytest.importorskip("kafka")
    topic = _topic(broker, "proxy-kafka-python", partitions=2)
    with InspectorProxy([broker.bootstrap]) as proxy:
        producer = kafka.KafkaProducer(bootstrap_servers=proxy.bootstrap, linger_ms=2)
        futures = [producer.send(topic, f"kp-{i}".encode()) for i in range(60)]
        producer.flush(10)
        assert all(f.get(5).offset >= 0 for f in futures)
        producer.close()
        consumer = kafka.KafkaConsumer(bootstrap_servers=proxy.bootstrap,
                                       auto_offset_reset="earliest", consumer_timeout_ms=5000)
        consumer.assign([kafka.TopicPartition(topic, p) for p in range(2)])
        got = []
        for message in consumer:
            got.append(message.value)
            if len(got) == 60:
                break
        consumer.close()
        snap = proxy.snapshot()
    assert sorted(got) == sorted(f"kp-{i}".encode() for i in range(60))
    assert {"Produce", "Fetch", "Metadata", "ApiVersions"} <= set(snap.apis)


def test_virtual_brokers_look_like_a_cluster(broker):
    topic = _topic(broker, "proxy-virtual", partitions=6)
    with InspectorProxy([broker.bootstrap], virtual_brokers=3) as proxy:
        assert len(proxy.listeners) == 3 and len({p for _, p in proxy.listeners}) == 3
        assert [info.node_id for info in proxy.listener_info] == [1, 2, 3]
        with BlockingClient(proxy.bootstrap) as c:
            md = admin.fetch_metadata(c, [topic])
        assert [(b.node_id, b.port) for b in md.brokers] == \
               [(i + 1, port) for i, (_, port) in enumerate(proxy.listeners)]
        assert [p.leader for p in md.topics[topic].partitions] == [1, 2, 3, 1, 2, 3]
        handles, metrics = _produce(proxy.bootstrap, topic, 300)
        snap = proxy.snapshot()
    assert all(h.done and h.error is None for h in handles)
    assert set(metrics.records_by_node) == {1, 2, 3}
    assert sum(metrics.records_by_node.values()) == 300
    assert sorted(_read_values(broker, topic, 6)) == sorted(f"{topic}-{i}".encode() for i in range(300))
    assert snap.connections_total >= 4   # bootstrap + one per virtual node


def test_live_snapshot_shows_in_flight_requests(broker):
    from kctl.inspect.faults import FaultPlan
    with InspectorProxy([broker.bootstrap]) as proxy, BlockingClient(proxy.bootstrap) as c:
        proxy.set_faults(FaultPlan(delay_ms=400, delay_apis=("Metadata",)))
        before = proxy.snapshot()
        t = threading.Thread(target=admin.fetch_metadata, args=(c,))
        t.start()
        deadline = time.monotonic() + 2
        while proxy.snapshot().in_flight == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        during = proxy.snapshot()
        t.join()
        # The proxy thread counts the delivery just after its send() returns.
        while (after := proxy.snapshot()).in_flight and time.monotonic() < deadline:
            time.sleep(0.01)
    assert during.in_flight == 1 and [c.in_flight for c in during.connections] == [1]
    assert after.in_flight == 0
    rates = after.rates_since(before)
    assert 0.5 < rates["Metadata"][0] < 3 and rates["Metadata"][1] > 0    # 1 request in ~0.4 s


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed")
def test_capture_has_the_frames_tshark_finds(broker, tmp_path):
    topic = _topic(broker, "proxy-capture")
    path = tmp_path / "proxy.pcapng"
    events = []
    with InspectorProxy([broker.bootstrap], capture=path, on_frame=events.append) as proxy:
        _produce(proxy.bootstrap, topic, 50)
        with BlockingClient(proxy.bootstrap) as c:
            admin.fetch_metadata(c, [topic])
        listen_port = proxy.listeners[0][1]
    upstream_port = int(broker.bootstrap.rsplit(":", 1)[1])
    run = subprocess.run(
        ["tshark", "-r", str(path), "-d", f"tcp.port=={listen_port},kafka",
         "-d", f"tcp.port=={upstream_port},kafka", "-Y", "kafka",
         "-T", "fields", "-e", "tcp.srcport", "-e", "tcp.dstport", "-e", "kafka.correlation_id",
         "-E", "occurrence=a", "-E", "aggregator=,"],
        capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    seen = Counter()
    for line in run.stdout.splitlines():
        src, dst, corrs = line.split("\t")
        leg = "client" if listen_port in (int(src), int(dst)) else "upstream"
        direction = "request" if int(dst) in (listen_port, upstream_port) else "response"
        for corr in corrs.split(","):
            seen[(leg, direction, int(corr))] += 1
    ours = Counter((e.direction, e.correlation_id) for e in events)
    for leg in ("client", "upstream"):
        theirs = Counter({(d, c): n for (lg, d, c), n in seen.items() if lg == leg})
        assert theirs == ours, leg
    assert sum(ours.values()) == len(events) > 10
    # kctl's own capture reader finds the same frames, decoded, on both legs.
    from kctl.inspect.session import DecodedFrame, decode_files
    frames = [f for f in decode_files([path], {listen_port, upstream_port})
              if isinstance(f, DecodedFrame)]
    for port in (listen_port, upstream_port):
        leg = Counter((f.direction, f.correlation_id) for f in frames if f.conn.broker.port == port)
        assert leg == ours, port
    assert all(f.error is None and f.body is not None for f in frames)


def test_unreachable_upstream_resets_the_client():
    from kctl.broker import free_port
    from kctl.errors import BrokerUnavailableError
    with InspectorProxy([("127.0.0.1", free_port())]) as proxy:
        with pytest.raises(BrokerUnavailableError):
            BlockingClient(proxy.bootstrap, timeout_s=2).connect()
        assert proxy.snapshot().faults["upstream_unreachable"] == 1
        assert proxy.loop_error is None
