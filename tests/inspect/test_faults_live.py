"""Each fault the proxy injects, observed by real clients against the embedded broker."""

import time

import pytest

from kctl.config import ProducerConfig
from kctl.engine import admin
from kctl.engine.blocking_client import BlockingClient
from kctl.engine.producer import Producer
from kctl.errors import BrokerUnavailableError
from kctl.inspect.faults import ErrorRewrite, FaultPlan
from kctl.inspect.proxy import InspectorProxy

pytestmark = pytest.mark.broker


def _topic(broker, name, partitions=3):
    with BlockingClient(broker.bootstrap) as c:
        admin.create_topics(c, [name], partitions=partitions)
    return name


def _read_values(broker, topic, partitions):
    with BlockingClient(broker.bootstrap) as c:
        return [r.value for p in range(partitions)
                for b in admin.read_partition(c, topic, p) for r in b.records]


def _producer(bootstrap, **props):
    return Producer(ProducerConfig.from_properties(
        {"bootstrap.servers": bootstrap, "linger.ms": 2, "retry.backoff.ms": 20, **props}))


def _send_all(producer, topic, n, *, poll_every=25):
    handles = []
    for i in range(n):
        handles.append(producer.send(topic, f"{topic}-{i}".encode(), key=f"k{i}".encode()))
        if i % poll_every == 0:
            producer.poll(0.005)     # keep several requests in flight while sending
    assert producer.flush(30)
    return handles


def test_delay_is_measurable(broker):
    plan = FaultPlan(delay_ms=150, delay_apis=("Metadata",), seed=1)
    with InspectorProxy([broker.bootstrap], faults=plan) as proxy, BlockingClient(proxy.bootstrap) as c:
        started = time.monotonic()
        admin.fetch_metadata(c)
        took = time.monotonic() - started
        snap = proxy.snapshot()
    assert 0.15 <= took < 1.0
    assert snap.apis["Metadata"].latency_us[50.0] >= 150_000
    assert snap.apis["ApiVersions"].latency_max_us < 150_000   # other APIs are not delayed
    assert snap.faults["delayed"] == 1


def test_delay_range_keeps_order(broker):
    topic = _topic(broker, "fault-delay-range")
    plan = FaultPlan(delay_ms=(1, 40), seed=7)
    with InspectorProxy([broker.bootstrap], faults=plan) as proxy, \
            _producer(proxy.bootstrap, **{"max.in.flight.requests.per.connection": 5}) as p:
        handles = _send_all(p, topic, 200, poll_every=10)
        latency = proxy.snapshot().apis["Produce"].latency_us
    assert all(h.error is None for h in handles)
    assert 1_000 <= latency[50.0] and latency[99.0] <= 200_000


def test_throttle_is_seen_by_the_client(broker):
    topic = _topic(broker, "fault-throttle")
    with InspectorProxy([broker.bootstrap], faults=FaultPlan(throttle_ms=30)) as proxy, \
            _producer(proxy.bootstrap) as p:
        handles = _send_all(p, topic, 50)
        m = p.metrics.snapshot()
        snap = proxy.snapshot()
    assert all(h.error is None for h in handles)
    assert m.throttle_time_ms > 0 and m.throttled_requests > 0
    assert snap.apis["Produce"].throttled == snap.apis["Produce"].responses
    assert snap.apis["Produce"].throttle_ms_max == 30


def test_error_rewrite_then_off_producer_retries(broker):
    topic = _topic(broker, "fault-errors")
    plan = FaultPlan(error=ErrorRewrite("NOT_LEADER_OR_FOLLOWER", 1.0, limit=4), seed=3)
    with InspectorProxy([broker.bootstrap], faults=plan) as proxy, \
            _producer(proxy.bootstrap, **{"enable.idempotence": "true"}) as p:
        handles = _send_all(p, topic, 120)
        m = p.metrics.snapshot()
        snap = proxy.snapshot()
    assert all(h.done and h.error is None for h in handles)
    assert m.errors_by_name.get("NOT_LEADER_OR_FOLLOWER", 0) >= 4 and m.retries >= 4
    assert snap.errors["NOT_LEADER_OR_FOLLOWER"] >= 4 and snap.faults["errors_injected"] >= 4
    values = _read_values(broker, topic, 3)
    assert sorted(values) == sorted(f"{topic}-{i}".encode() for i in range(120))   # no duplicates


def test_dropped_responses_resolve_each_record_exactly_once(broker):
    topic = _topic(broker, "fault-drop")
    plan = FaultPlan(drop_rate=0.3, drop_apis=("Produce",), seed=11)
    resolved = []
    with InspectorProxy([broker.bootstrap], faults=plan) as proxy, \
            _producer(proxy.bootstrap, **{"enable.idempotence": "true",
                                          "reconnect.backoff.ms": 10}) as p:
        handles = _send_all(p, topic, 400)
        for h in handles:
            h.add_callback(resolved.append)
        m = p.metrics.snapshot()
        snap = proxy.snapshot()
    assert snap.faults["dropped"] >= 2 and snap.connections_total >= 3
    assert all(h.done and h.error is None for h in handles)
    assert len(resolved) == len({id(h) for h in resolved}) == 400
    assert m.retries >= 2 and m.records_acked == 400
    values = _read_values(broker, topic, 3)
    assert sorted(values) == sorted(f"{topic}-{i}".encode() for i in range(400))


def test_tiny_segments_still_decode(broker, tmp_path):
    topic = _topic(broker, "fault-tiny")
    events = []
    plan = FaultPlan(tiny_segments=3)
    with InspectorProxy([broker.bootstrap], faults=plan, capture=tmp_path / "tiny.pcapng",
                        on_frame=events.append) as proxy:
        with BlockingClient(proxy.bootstrap) as c:
            md = admin.fetch_metadata(c, [topic])
        with _producer(proxy.bootstrap) as p:
            handles = _send_all(p, topic, 30)
        listen_port = proxy.listeners[0][1]
        snap = proxy.snapshot()
    assert md.brokers[0].port == listen_port and len(md.topics[topic].partitions) == 3
    assert all(h.error is None for h in handles)
    assert snap.faults["tiny_segments"] == sum(e.direction == "response" for e in events)
    from tests.inspect.test_capture_writer import _packets
    to_client = [p for p in _packets(tmp_path / "tiny.pcapng") if p[1] == listen_port and p[6]]
    assert to_client and max(len(p[6]) for p in to_client) <= 3


def test_blackhole_makes_request_timeout_fire(broker):
    topic = _topic(broker, "fault-blackhole")
    with InspectorProxy([broker.bootstrap]) as proxy:
        with _producer(proxy.bootstrap, **{"request.timeout.ms": 400, "delivery.timeout.ms": 1500,
                                           "linger.ms": 0}) as p:
            p.partitions_for(topic)
            proxy.set_faults(FaultPlan(blackhole=True))
            started = time.monotonic()
            handles = [p.send(topic, b"lost", partition=0) for _ in range(5)]
            p.flush(10)
            took = time.monotonic() - started
            timeouts = p.network.metrics.request_timeouts_total
        assert timeouts >= 1
        assert {h.error for h in handles} == {"DELIVERY_TIMEOUT"} and 1.0 < took < 5
        with pytest.raises(BrokerUnavailableError):
            BlockingClient(proxy.bootstrap, timeout_s=0.3).connect()   # ApiVersions unanswered
        assert proxy.snapshot().faults["swallowed"] >= 2
