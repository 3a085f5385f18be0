"""Each fault the proxy injects, observed by real clients against the embedded broker."""

import json
import subprocess
import sys
import time

import pytest

from kctl.config import ProducerConfig
from kctl.engine import admin
from kctl.engine.blocking_client import BlockingClient
from kctl.engine.producer import Producer
from kctl.errors import BrokerUnavailableError
from kctl.inspect.faults import ErrorRewrite, FaultPlan
from kctl.inspect.proxy import InspectorProxy
from kctl.stats.summary import RunSummary

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
    # At least the smallest delay; at most about the largest delay stacked over the
    # requests in flight (responses keep their order, so one waits for those ahead of
    # it), with room for the whole-machine stalls of 100-400 ms seen on CI machines.
    assert 1_000 <= latency[50.0] and latency[99.0] <= 1_000_000


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


def test_error_rewrite_then_off_producer_retries(broker, tmp_path):
    """The rewritten answers reach the producer, which retries; the proxy counts their errors
    per (API, error) as kctl decode --summary counts them on the capture's client leg."""
    from typer.testing import CliRunner

    from kctl.cli import app
    from kctl.commands.inspect import summary_json
    topic = _topic(broker, "fault-errors")
    plan = FaultPlan(error=ErrorRewrite("NOT_LEADER_OR_FOLLOWER", 1.0, limit=4), seed=3)
    path = tmp_path / "errors.pcapng"
    with InspectorProxy([broker.bootstrap], faults=plan, capture=path) as proxy, \
            _producer(proxy.bootstrap, **{"enable.idempotence": "true"}) as p:
        handles = _send_all(p, topic, 120)
        m = p.metrics.snapshot()
    snap = proxy.snapshot()
    assert all(h.done and h.error is None for h in handles)
    assert m.errors_by_name.get("NOT_LEADER_OR_FOLLOWER", 0) >= 4 and m.retries >= 4
    assert snap.errors[("Produce", "NOT_LEADER_OR_FOLLOWER")] >= 4 and snap.faults["errors_injected"] >= 4
    decoded = CliRunner().invoke(app, ["decode", str(path), "--summary", "--json"])
    assert decoded.exit_code == 0, decoded.output
    d = json.loads(decoded.stdout)
    js = summary_json(snap)
    assert d["errors_by_api"] == js["errors_by_api"] and d["errors"] == js["errors"]
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


def test_responses_counted_are_the_responses_the_clients_had(broker, tmp_path):
    """Drops with delays, so responses wait behind one that is cut: a response cut or
    lost behind the cut is a fault (dropped, undelivered), never a response; what the
    proxy counts is what a decode of its own client leg finds delivered."""
    from kctl.inspect.session import DecodedFrame, decode_files
    topic = _topic(broker, "fault-drop-count")
    plan = FaultPlan(drop_rate=0.2, drop_apis=("Produce",), delay_ms=(0, 20), seed=5)
    path = tmp_path / "drop.pcapng"
    events = []
    with InspectorProxy([broker.bootstrap], faults=plan, capture=path, on_frame=events.append) as proxy, \
            _producer(proxy.bootstrap, **{"enable.idempotence": "true", "reconnect.backoff.ms": 10,
                                          "max.in.flight.requests.per.connection": 5}) as p:
        handles = _send_all(p, topic, 300, poll_every=5)
        port = proxy.listeners[0][1]
    snap = proxy.snapshot()
    assert all(h.done and h.error is None for h in handles)
    delivered = [f for f in decode_files([path], {port}, interfaces={0}, decode_records=False)
                 if isinstance(f, DecodedFrame) and f.direction == "response"]
    assert snap.faults["dropped"] >= 2
    assert snap.responses == len(delivered)
    assert snap.apis["Produce"].responses == sum(f.api_name == "Produce" for f in delivered)
    # Every response read from the broker is delivered, dropped or undelivered; its event
    # (--show frames) comes once, with a latency only when the client had it.
    responses = [e for e in events if e.direction == "response"]
    assert sum(e.latency_ns is not None for e in responses) == snap.responses
    assert sum(e.latency_ns is None for e in responses) == snap.faults["dropped"]


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



# -- lost records: acknowledged, never written ---------------------------------------------------

def _stored(broker, topic, partitions, expect=None):
    """partition -> {value: offset}, as the broker has it (``expect``: records to wait for
    in each partition, when acks=0 writes may still be on their way)."""
    with BlockingClient(broker.bootstrap) as c:
        return {p: {r.value: r.offset for b in admin.read_partition(c, topic, p, expect=expect)
                    for r in b.records}
                for p in range(partitions)}


def _missing(sent, stored):
    """The (value, handle) pairs acknowledged to the client but not in the topic."""
    return [(v, h) for v, h in sent if v not in stored[h.partition]]


def test_lost_batch_is_acked_but_never_written(broker):
    topic = _topic(broker, "fault-lost", partitions=2)
    plan = FaultPlan(lose_rate=1.0, lose_limit=1, seed=21)
    rounds = []   # per round, per partition: [(value, handle)]
    with InspectorProxy([broker.bootstrap], faults=plan) as proxy, \
            _producer(proxy.bootstrap, **{"enable.idempotence": "false", "acks": "1",
                                          "linger.ms": 50}) as p:
        for r in range(4):
            # A round: one batch of 5 per partition, drained into one request by the flush.
            rounds.append([[(v, p.send(topic, v, partition=part))
                            for v in (f"r{r}-p{part}-{i}".encode() for i in range(5))]
                           for part in range(2)])
            assert p.flush(30)
        snap = proxy.snapshot()
    sent = [x for rd in rounds for batch in rd for x in batch]
    assert all(h.done and h.error is None for _, h in sent)          # the client saw no trouble
    assert (snap.faults["lost"], snap.faults["lost_records"], snap.faults["forged"]) == (1, 5, 1)
    stored = _stored(broker, topic, 2)
    missing = _missing(sent, stored)
    # Round 0 teaches the proxy each partition's next offset (5); round 1 loses one batch.
    lost_part = missing[0][1].partition
    assert missing == rounds[1][lost_part]
    # Its forged offsets are the ones the broker then gave the partition's next batch.
    assert [h.offset for _, h in rounds[1][lost_part]] == [5, 6, 7, 8, 9]
    assert [h.offset for _, h in rounds[2][lost_part]] == [5, 6, 7, 8, 9]
    assert [stored[lost_part][v] for v, _ in rounds[2][lost_part]] == [5, 6, 7, 8, 9]
    other = 1 - lost_part
    assert [h.offset for _, h in rounds[1][other]] == [5, 6, 7, 8, 9]


@pytest.mark.parametrize("acks", ["1", "0"])
def test_lost_whole_requests_keep_their_place_in_line(broker, acks):
    """One partition, many small batches in flight: a request whose only batch is lost is
    answered by the proxy (acks=1) in its turn among the broker's answers, or dropped (acks=0)."""
    topic = _topic(broker, f"fault-lost-whole-{acks}", partitions=1)
    plan = FaultPlan(lose_rate=0.3, lose_limit=4, seed=5)
    with InspectorProxy([broker.bootstrap], faults=plan) as proxy, \
            _producer(proxy.bootstrap, **{"enable.idempotence": "false", "acks": acks, "linger.ms": 0,
                                          "batch.size": 200,
                                          "max.in.flight.requests.per.connection": 5}) as p:
        sent = []
        for i in range(300):
            v = f"{topic}-{i:04}".encode()
            sent.append((v, p.send(topic, v, partition=0)))
            if i % 10 == 0:
                p.poll(0.002)
        assert p.flush(30)
        snap = proxy.snapshot()
        # acks=0: "acknowledged" once written to the proxy; wait for the rest to land.
        stored = _stored(broker, topic, 1, expect=300 - snap.faults["lost_records"])
    assert all(h.done and h.error is None for _, h in sent)
    assert snap.faults["lost"] == 4 and snap.faults.get("forged", 0) == (4 if acks == "1" else 0)
    missing = _missing(sent, stored)
    assert len(missing) == snap.faults["lost_records"] > 0
    if acks == "1":
        assert all(h.offset >= 0 for _, h in missing)


@pytest.mark.parametrize("load", [
    ("--num-records", "2000", "--rate", "4000"),
    # max throughput with keys: the bulk path, records placed per key by murmur2
    ("--num-records", "20000", "--keys", "random:100"),
], ids=["rate", "max-throughput-keyed"])
def test_produce_verify_reports_the_lost_records(broker, tmp_path, load):
    """The point of the fault: ``kctl produce --verify`` through the proxy finds exactly
    the records the proxy threw away, though every one of them was acknowledged."""
    plan = FaultPlan(lose_rate=0.5, lose_limit=3, seed=2)
    out = tmp_path / "summary.json"
    topic = f"fault-lost-verify-{load[1]}"
    with InspectorProxy([broker.bootstrap], faults=plan) as proxy:
        run = subprocess.run(
            [sys.executable, "-m", "kctl", "produce", "--bootstrap-server", proxy.bootstrap,
             "-t", topic, "--partitions", "2", *load,
             "--workers", "1", "--verify", "--quiet", "--json-out", str(out),
             "-X", "enable.idempotence=false", "-X", "acks=1"],
            capture_output=True, text=True, timeout=120)
        faults = proxy.snapshot().faults
    assert faults["lost"] == 3, run.stderr
    s = RunSummary.from_json(json.loads(out.read_text()))
    checked = s.verify
    assert checked is not None and not checked.ok and run.returncode != 0
    assert checked.expected == int(load[1]) == s.counts.acked
    assert checked.lost == faults["lost_records"] > 0
    assert checked.found == checked.expected - checked.lost
    assert checked.duplicated == 0
    assert checked.lost_examples and all(w == 0 for w, _ in checked.lost_examples)


def test_lost_records_across_processor_processes_keep_one_limit(broker, tmp_path):
    """Two producer workers on two processors: the limit counts across processes (a shared
    budget), and --verify still finds exactly what was lost."""
    plan = FaultPlan(lose_rate=0.5, lose_limit=3, seed=4)
    out = tmp_path / "summary.json"
    with InspectorProxy([broker.bootstrap], faults=plan, processors=2) as proxy:
        run = subprocess.run(
            [sys.executable, "-m", "kctl", "produce", "--bootstrap-server", proxy.bootstrap,
             "-t", "fault-lost-processes", "--partitions", "2", "--num-records", "4000",
             "--rate", "8000", "--workers", "2", "--verify", "--quiet", "--json-out", str(out),
             "-X", "enable.idempotence=false", "-X", "acks=1"],
            capture_output=True, text=True, timeout=120)
        snap = proxy.snapshot()
    assert snap.faults["lost"] == 3, run.stderr
    checked = RunSummary.from_json(json.loads(out.read_text())).verify
    assert checked is not None and not checked.ok and checked.lost == snap.faults["lost_records"] > 0
    assert checked.duplicated == 0


def test_transactional_produce_retries_end_txn_through_injected_coordinator_errors(broker, tmp_path):
    """Audit H's gap: ``--inject-error COORDINATOR_LOAD_IN_PROGRESS@EndTxn`` on half the
    EndTxn answers. The transactional run still completes, every record gets a verdict,
    the records acknowledged are exactly the committed ones in the log (a COMMIT marker
    after them), and the proxy saw more EndTxn than transactions ended (the retries)."""
    from tests.engine.test_transactions_live import COMMIT, read_committed_view
    plan = FaultPlan(error=ErrorRewrite("COORDINATOR_LOAD_IN_PROGRESS", 0.5, ("EndTxn",)), seed=5)
    out = tmp_path / "summary.json"
    topic = _topic(broker, "fault-endtxn", partitions=2)
    with InspectorProxy([broker.bootstrap], faults=plan) as proxy:
        run = subprocess.run(
            [sys.executable, "-m", "kctl", "produce", "--bootstrap-server", proxy.bootstrap,
             "-t", topic, "--rate", "1000", "--duration", "2s", "--workers", "1",
             "--transaction-duration-ms", "200", "-X", "transactional.id=fault-endtxn",
             "--verify", "--quiet", "--json-out", str(out)],
            capture_output=True, text=True, timeout=120)
        snap = proxy.snapshot()
    assert run.returncode == 0, run.stderr
    s = json.loads(out.read_text())
    c, t = s["counts"], s["transactions"]
    assert c["acked"] + c["failed"] + c["abandoned"] == c["scheduled"] == 2000
    assert s["verify"]["ok"] and t["committed"] >= 5
    ended = t["committed"] + t["aborted"]
    assert snap.faults["errors_injected"] >= 1
    assert snap.errors[("EndTxn", "COORDINATOR_LOAD_IN_PROGRESS")] == snap.faults["errors_injected"]
    assert snap.apis["EndTxn"].responses == ended + snap.faults["errors_injected"]
    kept = 0
    commits = 0
    with BlockingClient(broker.bootstrap) as client:
        for part in (0, 1):
            values, markers = read_committed_view(admin.read_partition(client, topic, part))
            kept += len(values)
            commits += markers.count(COMMIT)
    assert kept == c["acked"]
    assert commits >= t["committed"]   # one marker per partition a transaction wrote to
