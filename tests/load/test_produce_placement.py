"""`kctl produce` end to end, read back with kafka-python (an independent client): every
partitioner places records as the Java client does, on keyless and keyed runs alike, and
every record carries exactly the one 24-byte ``kctl`` identity header."""

from __future__ import annotations

import json
import struct
import time
from collections import Counter

import pytest

from kctl.stats.summary import RunSummary

from .test_produce_cli import kctl

pytestmark = pytest.mark.broker

PARTITIONS = 6


def read_back(broker, topic: str, expect: int) -> list:
    """Every record of ``topic`` through kafka-python's consumer."""
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, client_id="placement-check",
                      auto_offset_reset="earliest", enable_auto_commit=False,
                      consumer_timeout_ms=2000, fetch_max_wait_ms=100)
    c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    out = []
    deadline = time.monotonic() + 30
    for m in c:
        out.append(m)
        if len(out) >= expect or time.monotonic() > deadline:
            break
    c.close()
    return out


def produce(broker, tmp_path, topic: str, *args: str) -> RunSummary:
    out = tmp_path / f"{topic}.json"
    kctl("produce", "-b", broker.bootstrap, "-t", topic, "--partitions", str(PARTITIONS),
         "--workers", "1", "--quiet", "--json-out", str(out), *args)
    return RunSummary.from_json(json.loads(out.read_text()))


@pytest.mark.parametrize("name", ["org.apache.kafka.clients.producer.RoundRobinPartitioner",
                                  "round_robin"])
def test_round_robin_spreads_records_evenly(broker, tmp_path, name):
    topic = f"place-rr-{len(name)}"
    s = produce(broker, tmp_path, topic, "--num-records", "6000", "-X", f"partitioner.class={name}",
                "--keys", "random:50")         # keys are ignored by round-robin
    assert {p.partition: p.records_acked for p in s.partitions} == {p: 1000 for p in range(6)}
    got = Counter(m.partition for m in read_back(broker, topic, 6000))
    assert got == {p: 1000 for p in range(6)}


STICKY = "org.apache.kafka.clients.producer.UniformStickyPartitioner"


@pytest.mark.parametrize(("partitioner", "keys"), [
    ("default", False),       # KIP-794's built-in partitioner, keyless records
    (STICKY, True),           # UniformStickyPartitioner: keys ignored
    ("sticky", True),         # kctl's short name for it
    ("murmur2", False),       # the pre-3.3 DefaultPartitioner: KIP-480 sticky for keyless records
])
def test_sticky_partitioners_fill_batches(broker, tmp_path, partitioner, keys):
    """Whole batches to one partition at a time, spread over all partitions; the sticky
    partitioners that ignore keys put one key on several partitions."""
    topic = f"place-sticky-{partitioner[-8:].lower()}"
    extra = ("--keys", "random:50") if keys else ()
    s = produce(broker, tmp_path, topic, "--num-records", "60000", "-X", "linger.ms=50",
                "-X", "acks=1", "-X", f"partitioner.class={partitioner}", *extra)
    assert s.counts.acked == 60000
    assert s.batching.batch_fill > 0.9, s.batching
    assert len(s.partitions) == 6
    records = read_back(broker, topic, 60000)
    got = Counter(m.partition for m in records)
    assert sum(got.values()) == 60000 and len(got) == 6
    if keys:
        partitions_of_key: dict[bytes, set[int]] = {}
        for m in records:
            partitions_of_key.setdefault(m.key, set()).add(m.partition)
        assert len(partitions_of_key) == 50
        assert all(len(ps) > 1 for ps in partitions_of_key.values())


@pytest.mark.parametrize("partitioner", ["default", "org.apache.kafka.clients.producer.internals.DefaultPartitioner"])
def test_a_key_always_lands_on_its_murmur2_partition(broker, tmp_path, partitioner):
    from kafka.partitioner.default import murmur2
    topic = f"place-keys-{len(partitioner)}"
    s = produce(broker, tmp_path, topic, "--num-records", "5000", "--keys", "random:200",
                "-X", f"partitioner.class={partitioner}", "--verify")
    assert s.verify is not None and s.verify.ok and s.counts.acked == 5000
    records = read_back(broker, topic, 5000)
    assert len(records) == 5000
    keys = {m.key for m in records}
    assert 150 < len(keys) <= 200
    for m in records:
        assert m.partition == (murmur2(m.key) & 0x7FFFFFFF) % PARTITIONS, m.key


def test_record_size_is_the_value_and_one_kctl_header_identifies_it(broker, tmp_path):
    topic = "place-identity"
    before = time.time_ns()
    s = produce(broker, tmp_path, topic, "--num-records", "300", "--record-size", "100",
                "--rate", "1000")
    after = time.time_ns()
    records = read_back(broker, topic, 300)
    assert len(records) == 300
    tag = bytes.fromhex(s.run.id[:8])
    seqs = []
    for m in records:
        assert len(m.value) == 100
        assert [k for k, _ in m.headers] == ["kctl"]
        value = m.headers[0][1]
        assert len(value) == 24
        run_tag, worker, seq, intended_ns = struct.unpack(">4sIQq", value)
        assert run_tag == tag and worker == 0
        assert before - 10**9 <= intended_ns <= after
        seqs.append((seq, intended_ns))
    seqs.sort()
    assert [q for q, _ in seqs] == list(range(300))
    # At 1000 records/s the intended times are the schedule's: 1 ms apart, in order.
    gaps = [b - a for (_, a), (_, b) in zip(seqs, seqs[1:])]
    assert all(abs(g - 1_000_000) < 1000 for g in gaps), gaps[:5]
