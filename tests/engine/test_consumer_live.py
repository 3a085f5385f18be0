"""The Consumer against the embedded broker: assign mode reads what was written, and a
consumer group rebalances when a second member joins (range and cooperative-sticky),
the two members then owning disjoint halves that cover the topic."""

from __future__ import annotations

import time
import uuid

import pytest

from kctl.consumer_config import ConsumerConfig
from kctl.engine import admin
from kctl.engine.batch import TopicPartition
from kctl.engine.blocking_client import BlockingClient
from kctl.engine.consumer import Consumer
from kctl.config import Setting
from kctl.protocol.records import Record, build_batch

pytestmark = pytest.mark.broker

PARTITIONS = 4


def _config(bootstrap: str, **props: str) -> ConsumerConfig:
    settings = [Setting("bootstrap.servers", bootstrap, "test")]
    settings += [Setting(k.replace("_", "."), v, "test") for k, v in props.items()]
    return ConsumerConfig.from_settings(settings)


def _topic(broker, records_per_partition: int = 0) -> str:
    name = f"live-{uuid.uuid4().hex[:8]}"
    with BlockingClient(broker.bootstrap) as client:
        admin.create_topics(client, [name], partitions=PARTITIONS)
        for p in range(PARTITIONS if records_per_partition else 0):
            batch = build_batch([Record(i, 1_700_000_000_000, None, f"{p}-{i}".encode())
                                 for i in range(records_per_partition)])
            admin.produce(client, name, p, batch)
    return name


def test_assign_mode_reads_every_partition_from_the_beginning(broker):
    topic = _topic(broker, 25)
    with Consumer(_config(broker.bootstrap, auto_offset_reset="earliest")) as c:
        c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        seen: dict[int, list[bytes]] = {}
        deadline = time.monotonic() + 20
        while sum(map(len, seen.values())) < 100 and time.monotonic() < deadline:
            for r in c.poll(0.2):
                seen.setdefault(r.partition, []).append(r.value)
    assert {p: len(v) for p, v in seen.items()} == {p: 25 for p in range(PARTITIONS)}
    for p, values in seen.items():
        assert values == [f"{p}-{i}".encode() for i in range(25)]   # in order per partition


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_second_member_joining_rebalances_the_group(broker, assignor):
    topic = _topic(broker)
    group = f"g-{uuid.uuid4().hex[:8]}"
    props = dict(group_id=group, partition_assignment_strategy=assignor, session_timeout_ms="10000",
                 heartbeat_interval_ms="300", max_poll_interval_ms="10000")
    a = Consumer(_config(broker.bootstrap, **props))
    b = Consumer(_config(broker.bootstrap, **props))
    try:
        a.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(a.assignment()) < PARTITIONS and time.monotonic() < deadline:
            a.poll(0.1)
        assert len(a.assignment()) == PARTITIONS          # alone, it owns everything
        first = a.metrics.rebalances
        b.subscribe([topic])
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            a.poll(0.05)
            b.poll(0.05)
            if len(a.assignment()) == len(b.assignment()) == PARTITIONS // 2:
                break
        owned_a, owned_b = set(a.assignment()), set(b.assignment())
        assert len(owned_a) == len(owned_b) == PARTITIONS // 2
        assert not owned_a & owned_b
        assert owned_a | owned_b == {TopicPartition(topic, p) for p in range(PARTITIONS)}
        assert a.metrics.rebalances > first                # the join made the first member rejoin
        assert b.metrics.rebalances >= 1
    finally:
        b.close(5)
        a.close(5)
