"""Transactions against the embedded broker: commit and abort markers, what a
read_committed consumer sees, fencing, and a transactional ``kctl produce --verify``
read back by kafka-python with ``isolation.level=read_committed``."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest

from kctl.config import ProducerConfig
from kctl.engine import admin
from kctl.engine.blocking_client import BlockingClient
from kctl.engine.producer import Producer, ProducerFatalError, TransactionAbortableError
from kctl.protocol import requests
from kctl.protocol.identity import find_identity
from kctl.protocol.records import Header

pytestmark = pytest.mark.broker

ABORT, COMMIT = 0, 1   # ControlRecordType
_topics = iter(range(10**6))

#: What the embedded broker lacks, found by test_read_committed_consumer_skips_aborted_records.
TANSU_NO_ABORTED_INDEX = (
    "Tansu answers Fetch at isolation_level=1 (read_committed) with an empty aborted_transactions "
    "list (and last_stable_offset = high watermark), so no consumer can leave an aborted "
    "transaction's records out; the markers kctl's transactions leave in the log are checked "
    "instead (test_commit_and_abort_leave_markers_a_read_committed_reader_honours)")


def new_topic(broker, partitions=2):
    name = f"txn-{next(_topics)}"
    with BlockingClient(broker.bootstrap) as c:
        admin.create_topics(c, [name], partitions=partitions)
    return name


def producer(broker, tid, **props):
    return Producer(ProducerConfig.from_properties(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": tid, "linger.ms": "2", **props}))


def three_transactions(broker, topic, tid):
    """Commits c0..c5, writes and aborts a0..a5, commits d0..d3 (both partitions)."""
    with producer(broker, tid) as p:
        p.init_transactions()
        for prefix, n, commit in (("c", 6, True), ("a", 6, False), ("d", 4, True)):
            p.begin_transaction()
            handles = [p.send(topic, f"{prefix}{i}".encode(), partition=i % 2) for i in range(n)]
            assert p.flush(10) and all(h.error is None for h in handles)
            if commit:
                p.commit_transaction()
            else:
                p.abort_transaction()
        m = p.metrics
        assert (m.transactions_committed, m.transactions_aborted) == (2, 1)


def read_committed_view(batches):
    """What a read_committed reader keeps of a partition's log, from the log alone: a
    producer's transactional records count once its COMMIT marker follows, and are
    dropped when its ABORT marker does (the broker's aborted-transaction index says
    the same)."""
    open_txn: dict[int, list[bytes]] = {}
    kept: list[bytes] = []
    markers = []
    for b in batches:
        if b.is_control:
            markers.append(b.control_type)
            records = open_txn.pop(b.producer_id, [])
            if b.control_type == COMMIT:
                kept.extend(records)
        elif b.is_transactional:
            open_txn.setdefault(b.producer_id, []).extend(r.value for r in b.records)
        else:
            kept.extend(r.value for r in b.records)
    assert not open_txn, "every transaction ended with a marker"
    return kept, markers


def test_commit_and_abort_leave_markers_a_read_committed_reader_honours(broker):
    topic = new_topic(broker)
    three_transactions(broker, topic, "markers")
    with BlockingClient(broker.bootstrap) as c:
        for part in (0, 1):
            batches = admin.read_partition(c, topic, part)
            assert all(b.is_transactional for b in batches)
            kept, markers = read_committed_view(batches)
            assert markers == [COMMIT, ABORT, COMMIT]
            expected = [f"c{i}".encode() for i in range(part, 6, 2)] + \
                       [f"d{i}".encode() for i in range(part, 4, 2)]
            assert kept == expected


def test_read_committed_consumer_skips_aborted_records(broker):
    """kafka-python with isolation_level=read_committed sees exactly the committed records."""
    kafka = pytest.importorskip("kafka")
    topic = new_topic(broker)
    three_transactions(broker, topic, "consumer")
    consumer = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap, isolation_level="read_committed",
                                   auto_offset_reset="earliest", enable_auto_commit=False,
                                   consumer_timeout_ms=3000)
    try:
        consumer.assign([kafka.TopicPartition(topic, 0), kafka.TopicPartition(topic, 1)])
        seen = sorted(m.value for m in consumer)
    finally:
        consumer.close()
    committed = sorted([f"c{i}".encode() for i in range(6)] + [f"d{i}".encode() for i in range(4)])
    if seen != committed and any(v.startswith(b"a") for v in seen):
        with BlockingClient(broker.bootstrap) as c:
            version = c.version_for(admin._FETCH())
            ids = {topic: admin._topic_id(c, topic)} if requests.names_topics_by_id(version) else None
            out = requests.fetch(version, [requests.FetchPartition(topic, 0, 0, 1 << 20)], max_bytes=1 << 20,
                                 max_wait_ms=100, isolation_level=requests.READ_COMMITTED, topic_ids=ids)
            p = c.request(out.body, version=out.version).responses[0].partitions[0]
        if not p.aborted_transactions:
            pytest.skip(TANSU_NO_ABORTED_INDEX)
    assert seen == committed


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(broker):
    """TransactionManagerTest's fencing: InitProducerId by a newer producer with the
    same transactional.id bumps the epoch; the older one is fenced (fatal)."""
    topic = new_topic(broker)
    with producer(broker, "fence") as old:
        old.init_transactions()
        old.begin_transaction()
        old.send(topic, b"old", partition=0)
        with producer(broker, "fence") as new:
            new.init_transactions()
            assert new.idempotence.producer_epoch > old.idempotence.producer_epoch
            with pytest.raises((ProducerFatalError, TransactionAbortableError)) as e:
                old.commit_transaction(5)
            if isinstance(e.value, TransactionAbortableError):
                pytest.fail(f"the older producer was not fenced: {e.value}")
            assert old.fatal_error is not None


def test_transactional_produce_verify_read_back_read_committed(broker, tmp_path):
    """``kctl produce --transaction-duration-ms --verify``: every acknowledged record is
    there once, the run committed its transactions, and kafka-python reading with
    read_committed sees exactly the acknowledged records."""
    kafka = pytest.importorskip("kafka")
    out = tmp_path / "s.json"
    topic = f"txn-cli-{next(_topics)}"
    r = subprocess.run([sys.executable, "-m", "kctl", "produce", "-b", broker.bootstrap, "-t", topic,
                        "--partitions", "2", "--workers", "2", "--rate", "1000", "--duration", "2s",
                        "--transaction-duration-ms", "300", "--verify", "--quiet",
                        "--json-out", str(out)], capture_output=True, text=True, timeout=90)
    assert r.returncode == 0, r.stderr
    s = json.loads(out.read_text())
    assert s["verify"]["ok"] and s["counts"]["acked"] == s["counts"]["scheduled"] == 2000
    t = s["transactions"]
    assert t["committed"] >= 2 * 6 and t["aborted"] == 0 and t["commit_latency"]["count"] == t["committed"]
    assert s["config"]["producer"]["transactional.id"] == "performance-producer-default-transactional-id"
    consumer = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap, isolation_level="read_committed",
                                   auto_offset_reset="earliest", enable_auto_commit=False,
                                   consumer_timeout_ms=3000)
    try:
        consumer.assign([kafka.TopicPartition(topic, 0), kafka.TopicPartition(topic, 1)])
        ids = Counter()
        for m in consumer:
            ident = find_identity(Header(k, v) for k, v in m.headers)
            ids[(ident.worker, ident.sequence)] += 1
    finally:
        consumer.close()
    assert len(ids) == 2000 and max(ids.values()) == 1


@pytest.mark.parametrize("error", ["TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED"])
def test_init_transactions_refused_for_authorization_can_be_asked_again(broker, error):
    """``--inject-error NAME@InitProducerId`` on the first InitProducerId answer: as Java's
    (trunk) InitProducerIdHandler and Sender, the refusal is not fatal; init_transactions
    raises it, the producer is back to UNINITIALIZED, and a second init_transactions gets
    a producer id: the transaction then commits."""
    from kctl.engine.transactions import TransactionState
    from kctl.errors import KctlError
    from kctl.inspect.faults import ErrorRewrite, FaultPlan
    from kctl.inspect.proxy import InspectorProxy

    topic = new_topic(broker)
    plan = FaultPlan(error=ErrorRewrite(error, 1.0, ("InitProducerId",), limit=1), seed=1)
    with InspectorProxy([broker.bootstrap], faults=plan) as proxy:
        with Producer(ProducerConfig.from_properties(
                {"bootstrap.servers": proxy.bootstrap, "transactional.id": f"auth-{error}",
                 "linger.ms": "2"})) as p:
            with pytest.raises(KctlError, match=error) as refused:
                p.init_transactions(10)
            assert not isinstance(refused.value, ProducerFatalError | TransactionAbortableError)
            assert p.transactions.state is TransactionState.UNINITIALIZED and p.fatal_error is None
            p.init_transactions(10)
            p.begin_transaction()
            handles = [p.send(topic, b"v%d" % i, partition=i % 2) for i in range(4)]
            p.commit_transaction(10)
        assert proxy.snapshot().faults.get("errors_injected") == 1
    assert all(h.error is None for h in handles)
    assert (p.metrics.records_acked, p.metrics.transactions_committed) == (4, 1)
