"""The producer engine under injected faults, through kctl's fault proxy in front of
the embedded broker. In every case each record resolves exactly once, as acked or as
failed with a reason, within delivery.timeout.ms; acked records are read back once
and in order."""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict

import pytest

from kctl.broker import EmbeddedBroker
from kctl.config import ProducerConfig
from kctl.engine import admin
from kctl.engine.blocking_client import BlockingClient
from kctl.engine.producer import Producer
from kctl.inspect.faults import ErrorRewrite, FaultPlan
from kctl.inspect.proxy import InspectorProxy

pytestmark = pytest.mark.broker

_topic_seq = iter(range(10**6))


def new_topic(broker, partitions=3):
    name = f"faults-{next(_topic_seq)}"
    with BlockingClient(broker.bootstrap) as c:
        admin.create_topics(c, [name], partitions=partitions)
    return name


def config(bootstrap, **props):
    base = {"bootstrap.servers": bootstrap, "linger.ms": "1", "batch.size": "2048",
            "delivery.timeout.ms": "20000", "request.timeout.ms": "3000",
            "retry.backoff.ms": "20", "retry.backoff.max.ms": "200",
            "reconnect.backoff.ms": "20", "reconnect.backoff.max.ms": "200"}
    base.update(props)
    return ProducerConfig.from_properties(base)


def send_all(producer, topic, n, started=None):
    calls = Counter()
    handles = []
    for i in range(n):
        h = producer.send(topic, f"v{i:06d}".encode() * 4, key=f"k{i % 11}".encode(),
                          callback=lambda h, i=i: calls.update([i]))
        handles.append(h)
    return handles, calls


def check_resolved_once(handles, calls, started_s, delivery_timeout_s):
    assert all(h.done for h in handles)
    assert set(calls) == set(range(len(handles))) and max(calls.values()) == 1, \
        "every record's callback runs exactly once"
    assert time.monotonic() - started_s <= delivery_timeout_s + 5
    for h in handles:
        # Failed records have no offset. An acknowledged one has its offset, or -1 when
        # the broker answered DUPLICATE_SEQUENCE_NUMBER: the retry was already written.
        assert h.error is None or h.offset == -1


def check_read_back(broker, topic, handles, partitions=3):
    acked = defaultdict(list)
    for i, h in enumerate(handles):
        if h.error is None:
            acked[h.partition].append(i)
    with BlockingClient(broker.bootstrap) as c:
        for part in range(partitions):
            sent_order = acked.get(part, [])
            got = [r for b in admin.read_partition(c, topic, part, expect=len(sent_order))
                   for r in b.records]
            values = [r.value for r in got]
            assert len(values) == len(set(values)), f"duplicates in partition {part}"
            stored_order = [int(v[1:7]) for v in values if v.startswith(b"v")]
            # Once and in order: the acked records are all there, in send order.
            wanted = set(sent_order)
            assert [i for i in stored_order if i in wanted] == sent_order
            by_index = {int(r.value[1:7]): r.offset for r in got}
            for i in sent_order:
                if handles[i].offset >= 0:
                    assert by_index[i] == handles[i].offset


def test_connection_dropped_mid_response_with_five_in_flight_idempotent(broker):
    topic = new_topic(broker)
    plan = FaultPlan(drop_rate=0.2, drop_apis=("Produce",), seed=7)
    with InspectorProxy([broker.bootstrap], faults=plan) as proxy:
        cfg = config(proxy.bootstrap, **{"enable.idempotence": "true", "acks": "all",
                                         "max.in.flight.requests.per.connection": "5"})
        started = time.monotonic()
        with Producer(cfg) as p:
            handles, calls = send_all(p, topic, 600)
            assert p.flush(30)
            assert p.metrics.errors_by_name.get("NETWORK_EXCEPTION", 0) > 0, "faults happened"
        assert proxy.snapshot().faults.get("dropped", 0) > 0
    check_resolved_once(handles, calls, started, 20)
    assert [h.error for h in handles if h.error] == []
    check_read_back(broker, topic, handles)


def test_injected_retriable_errors_are_retried(broker):
    topic = new_topic(broker)
    plan = FaultPlan(error=ErrorRewrite("NOT_LEADER_OR_FOLLOWER", rate=1.0, apis=("Produce",), limit=5))
    with InspectorProxy([broker.bootstrap], faults=plan) as proxy:
        started = time.monotonic()
        with Producer(config(proxy.bootstrap, acks="all")) as p:
            handles, calls = send_all(p, topic, 300)
            assert p.flush(30)
            assert p.metrics.errors_by_name["NOT_LEADER_OR_FOLLOWER"] >= 5
            assert p.metrics.retries >= 5
    check_resolved_once(handles, calls, started, 20)
    assert [h.error for h in handles if h.error] == []
    check_read_back(broker, topic, handles)


def test_responses_delayed_beyond_request_timeout(broker):
    topic = new_topic(broker)
    with InspectorProxy([broker.bootstrap], faults=FaultPlan(delay_ms=1500, delay_apis=("Produce",))) as proxy:
        cfg = config(proxy.bootstrap, **{"request.timeout.ms": "500", "delivery.timeout.ms": "4000",
                                         "linger.ms": "0", "enable.idempotence": "true"})
        started = time.monotonic()
        with Producer(cfg) as p:
            handles, calls = send_all(p, topic, 20)
            time.sleep(0)
            p.poll(1.2)
            proxy.set_faults(None)      # the broker recovers; retries go through
            assert p.flush(10)
            assert p.network.metrics.request_timeouts_total > 0
    check_resolved_once(handles, calls, started, 4)
    assert [h.error for h in handles if h.error] == []
    check_read_back(broker, topic, handles)


def test_delivery_timeout_fails_records_with_a_reason(broker):
    topic = new_topic(broker)
    with InspectorProxy([broker.bootstrap], faults=FaultPlan(blackhole=True)) as proxy:
        cfg = config(proxy.bootstrap, **{"request.timeout.ms": "300", "delivery.timeout.ms": "1500",
                                         "linger.ms": "0", "max.block.ms": "3000"})
        with Producer(cfg) as p:
            proxy.set_faults(None)
            p.partitions_for(topic)
            proxy.set_faults(FaultPlan(blackhole=True))
            started = time.monotonic()
            handles, calls = send_all(p, topic, 10)
            assert p.flush(10)
    check_resolved_once(handles, calls, started, 1.5)
    assert {h.error for h in handles} == {"DELIVERY_TIMEOUT"}


def test_throttled_broker_is_not_sent_to_while_muted(broker):
    topic = new_topic(broker, partitions=1)
    arrivals: list[tuple[str, int, int]] = []
    lock = threading.Lock()

    def on_frame(ev):
        if ev.api_name == "Produce":
            with lock:
                arrivals.append((ev.direction, ev.ts_ns, ev.connection_id))

    plan = FaultPlan(throttle_ms=200, throttle_apis=("Produce",))
    with InspectorProxy([broker.bootstrap], faults=plan, on_frame=on_frame) as proxy:
        # One request in flight, so every request after a throttled response was
        # decided after the client read that response.
        with Producer(config(proxy.bootstrap, **{"linger.ms": "0", "acks": "1",
                                                 "enable.idempotence": "false",
                                                 "max.in.flight.requests.per.connection": "1"})) as p:
            for i in range(6):
                p.send(topic, b"x" * 10)
                p.poll(0.05)
            assert p.flush(10)
            assert p.metrics.throttled_requests >= 1 and p.metrics.throttle_time_ms >= 200
    # After a response carrying throttle_time_ms=200 leaves the proxy, the next Produce
    # request on that connection arrives no sooner than 200 ms later (5 ms tolerance).
    events = sorted(arrivals, key=lambda e: e[1])
    checked = 0
    for i, (direction, ts, conn) in enumerate(events):
        if direction != "response":
            continue
        nxt = next((e for e in events[i + 1:] if e[0] == "request" and e[2] == conn), None)
        if nxt is not None:
            assert nxt[1] - ts >= 195_000_000, "a request went out while the broker was muted"
            checked += 1
    assert checked >= 1


def test_message_too_large_splits_and_delivers(broker):
    topic = new_topic(broker)
    plan = FaultPlan(error=ErrorRewrite("MESSAGE_TOO_LARGE", rate=1.0, apis=("Produce",), limit=2))
    with InspectorProxy([broker.bootstrap], faults=plan) as proxy:
        started = time.monotonic()
        with Producer(config(proxy.bootstrap, **{"linger.ms": "20", "batch.size": "16384",
                                                 "enable.idempotence": "true"})) as p:
            handles, calls = send_all(p, topic, 200)
            assert p.flush(20)
            assert p.metrics.splits >= 1
    check_resolved_once(handles, calls, started, 20)
    assert [h.error for h in handles if h.error] == []
    check_read_back(broker, topic, handles)


def test_buffer_memory_exhausted_fails_those_records_and_the_producer_goes_on(broker):
    """Java's BufferExhaustedException: a send that waited max.block.ms for memory fails
    that record through its callback; the producer goes on and recovers with the broker
    (issue 12, item 2)."""
    topic = new_topic(broker)
    with InspectorProxy([broker.bootstrap]) as proxy:
        cfg = config(proxy.bootstrap, **{"buffer.memory": "8192", "batch.size": "2048",
                                         "max.block.ms": "400", "delivery.timeout.ms": "3000",
                                         "request.timeout.ms": "2000", "linger.ms": "0"})
        with Producer(cfg) as p:
            p.partitions_for(topic)
            proxy.set_faults(FaultPlan(blackhole=True))
            handles, calls = [], Counter()
            t0 = time.monotonic()
            while not any(h.error == "BUFFER_EXHAUSTED" for h in handles):
                assert time.monotonic() - t0 < 10, "memory never ran out"
                i = len(handles)
                handles.append(p.send(topic, b"y" * 500, partition=i % 3,
                                      callback=lambda h, i=i: calls.update([i])))
            waited = time.monotonic() - t0
            assert 0.35 <= waited < 5
            (failed,) = [h for h in handles if h.done]
            assert failed.error == "BUFFER_EXHAUSTED" and "max.block.ms" in failed.error_message
            assert calls[len(handles) - 1] == 1, "the callback ran for the failed record"
            proxy.set_faults(None)
            assert p.flush(10)
            later = p.send(topic, b"z", partition=0)
            assert p.flush(10) and later.error is None, "the producer recovered"
            m = p.metrics
            assert m.failed_by_error["BUFFER_EXHAUSTED"] == 1
            assert m.records_acked + m.records_failed == len(handles) + 1
    assert all(h.done for h in handles)


def test_one_upstream_as_three_brokers_drains_per_node_within_in_flight_limit(broker):
    topic = new_topic(broker, partitions=6)
    in_flight: Counter = Counter()
    peak: Counter = Counter()
    lock = threading.Lock()

    def on_frame(ev):
        if ev.api_name != "Produce":
            return
        with lock:
            if ev.direction == "request":
                in_flight[ev.connection_id] += 1
                peak[ev.connection_id] = max(peak[ev.connection_id], in_flight[ev.connection_id])
            else:
                in_flight[ev.connection_id] -= 1

    with InspectorProxy([broker.bootstrap], virtual_brokers=3, on_frame=on_frame,
                        faults=FaultPlan(delay_ms=(5, 30), delay_apis=("Produce",), seed=3)) as proxy:
        cfg = config(proxy.bootstrap, **{"max.in.flight.requests.per.connection": "2",
                                         "enable.idempotence": "true", "linger.ms": "0"})
        started = time.monotonic()
        with Producer(cfg) as p:
            handles, calls = send_all(p, topic, 600)
            assert p.flush(20)
            by_node = p.metrics.snapshot().records_by_node
    check_resolved_once(handles, calls, started, 20)
    assert set(by_node) == {1, 2, 3}, "every virtual broker led some partitions and got records"
    assert max(peak.values()) <= 2, "never more than max.in.flight requests per connection"
    check_read_back(broker, topic, handles, partitions=6)


def test_broker_stopped_and_restarted():
    """The broker dies with records in flight and comes back on the same port (Tansu
    keeps no log across a restart, so the topic is made again). Records resolve once:
    acked after the restart, or failed with a reason."""
    with EmbeddedBroker() as first:
        port = first.port
        topic = "restart-topic"
        with BlockingClient(first.bootstrap) as c:
            admin.create_topics(c, [topic], partitions=3)
        cfg = config(first.bootstrap, **{"delivery.timeout.ms": "15000", "request.timeout.ms": "1000",
                                         "enable.idempotence": "true"})
        p = Producer(cfg)
        started = time.monotonic()
        handles, calls = send_all(p, topic, 100)
        p.flush(10)
        first.stop()
        more, more_calls = send_all(p, topic, 100)
        p.poll(1.0)
        with EmbeddedBroker(port=port) as second:
            with BlockingClient(second.bootstrap) as c:
                admin.create_topics(c, [topic], partitions=3)
            assert p.flush(15)
            p.close()
            check_resolved_once(more, more_calls, started, 15)
            assert any(h.error is None for h in more), "records sent after the restart arrive"
            # The broker lost every producer's state: the first batch per partition after
            # the last acknowledged one fails (its fate is unknowable), the producer
            # starts over with a new id and the rest arrive. UNKNOWN_SERVER_ERROR is what
            # Tansu answers for a topic that is not there yet.
            for h in more:
                assert h.error is None or h.error in {
                    "DELIVERY_TIMEOUT", "OUT_OF_ORDER_SEQUENCE_NUMBER", "UNKNOWN_PRODUCER_ID",
                    "UNKNOWN_TOPIC_OR_PARTITION", "UNKNOWN_SERVER_ERROR"}
    check_resolved_once(handles, calls, started, 15)
