"""The producer engine against the embedded broker: acks 0/1/all x every codec x
idempotence on/off, 1 and 12 partitions. Every acknowledged record is read back
once, in order per partition, with its key, value and headers."""

import itertools

import pytest

from kctl.config import ProducerConfig
from kctl.engine import admin
from kctl.engine.blocking_client import BlockingClient
from kctl.engine.producer import Producer

pytestmark = pytest.mark.broker

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
CASES = [(acks, codec, idem) for acks, codec, idem in itertools.product(
    ["0", "1", "all"], CODECS, [True, False]) if not (idem and acks != "all")]
N = 400


@pytest.fixture(scope="module")
def admin_client(broker):
    with BlockingClient(broker.bootstrap) as c:
        yield c


def produce(broker, topic, *, acks, codec, idem, n=N, **extra):
    cfg = ProducerConfig.from_properties({
        "bootstrap.servers": broker.bootstrap, "acks": acks, "compression.type": codec,
        "enable.idempotence": str(idem).lower(), "linger.ms": "2", "batch.size": "4096", **extra})
    with Producer(cfg) as p:
        handles = [p.send(topic, f"value-{i}".encode() * (1 + i % 4), key=f"k{i % 37}".encode(),
                          headers=[("n", str(i).encode())]) for i in range(n)]
        assert p.flush(30)
        metrics = p.metrics.snapshot()
    return handles, metrics


def read_back(client, topic, partitions, expected):
    out = {}
    for part in range(partitions):
        out[part] = [r for b in admin.read_partition(client, topic, part, expect=expected.get(part, 0))
                     for r in b.records]
    return out


@pytest.mark.parametrize("partitions", [1, 12])
@pytest.mark.parametrize("acks,codec,idem", CASES,
                         ids=[f"acks{a}-{c}-{'idem' if i else 'plain'}" for a, c, i in CASES])
def test_every_acknowledged_record_once_and_in_order(broker, admin_client, acks, codec, idem,
                                                     partitions):
    topic = f"live-{acks}-{codec}-{int(idem)}-{partitions}"
    admin.create_topics(admin_client, [topic], partitions=partitions)
    handles, metrics = produce(broker, topic, acks=acks, codec=codec, idem=idem)
    assert all(h.done for h in handles)
    assert [h.error for h in handles if h.error] == []
    assert metrics.records_acked == N and metrics.records_failed == 0
    per_part = {}
    for i, h in enumerate(handles):
        per_part.setdefault(h.partition, []).append(i)
    stored = read_back(admin_client, topic, partitions, {p: len(v) for p, v in per_part.items()})
    for part, indices in per_part.items():
        got = stored[part]
        # Once and in send order per partition (keys hash to fixed partitions).
        assert [int(dict((h.key, h.value) for h in r.headers)["n"]) for r in got] == indices
        for i, r in zip(indices, got):
            assert r.key == f"k{i % 37}".encode()
            assert r.value == f"value-{i}".encode() * (1 + i % 4)
            if acks != "0":
                assert handles[i].offset == r.offset
        if got and codec != "none":
            assert all(b.compression.name.lower() == codec for b in
                       admin.read_partition(admin_client, topic, part, expect=len(indices)))
    # Keyed records land where the Java client would put them (murmur2).
    from kctl.engine.partitioner import partition_for_key
    for i, h in enumerate(handles):
        assert h.partition == partition_for_key(f"k{i % 37}".encode(), partitions)


def test_idempotent_batches_carry_producer_id_and_sequences(broker, admin_client):
    topic = "live-idempotent-sequences"
    admin.create_topics(admin_client, [topic], partitions=1)
    handles, _ = produce(broker, topic, acks="all", codec="none", idem=True, n=300)
    batches = admin.read_partition(admin_client, topic, 0, expect=300)
    assert {b.producer_id for b in batches} != {-1}
    seqs = [(b.base_sequence, len(b.records)) for b in batches]
    expected = 0
    for seq, count in seqs:
        assert seq == expected
        expected += count


def test_unknown_topic_fails_clearly_after_max_block_ms(broker):
    cfg = ProducerConfig.from_properties({"bootstrap.servers": broker.bootstrap,
                                          "max.block.ms": "500"})
    with Producer(cfg) as p:
        with pytest.raises(Exception, match="not present in metadata after 500 ms"):
            p.send("no-such-topic-here", b"x")


def test_unreachable_bootstrap_fails_clearly(broker):
    from kctl.broker import free_port
    cfg = ProducerConfig.from_properties({"bootstrap.servers": f"127.0.0.1:{free_port()}",
                                          "max.block.ms": "500"})
    with Producer(cfg) as p:
        with pytest.raises(Exception, match="max.block.ms"):
            p.send("t", b"x")
