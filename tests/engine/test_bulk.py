"""Producer.send_bulk stepped with a fake clock and a fake network: the producer places
the load path's records itself (round-robin, murmur2 per key, KIP-794 uniform sticky,
KIP-480 sticky), adaptive partitioning (KIP-794) and partitioner.availability.timeout.ms,
and the identity header each record carries."""

from __future__ import annotations

from collections import Counter, defaultdict

from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from kctl.engine.bulk import RecordPool, RecordShape
from kctl.engine.partitioner import partition_for_key
from kctl.protocol.identity import IdentityStamp, find_identity, run_tag
from kctl.protocol.records import decode_batches

from .test_sender import Harness, produce_body

STAMP = IdentityStamp(run_tag("0123456789ab"), 7)
SHAPE = RecordShape(identity=STAMP)


def drain(h: Harness, rounds: int = 100) -> None:
    """Steps and answers every Produce request until nothing is left."""
    for _ in range(rounds):
        h.step(ms=5)
        pending = h.net.pending("Produce")
        for r in pending:
            h.net.respond(r, produce_body(r))
        if not pending and not h.producer.accumulator.incomplete_count:
            return
    raise AssertionError("records left unsent")


def records_by_partition(h: Harness) -> dict[int, list]:
    """partition -> [(key, value, identity)] in offset order, from what went on the wire."""
    out: dict[int, list] = defaultdict(list)
    for r in h.net.requests("Produce"):
        body = h.net.wire_bodies[r.correlation_id]
        for t in body.topic_data:
            for p in t.partition_data:
                for rec in decode_batches(p.records).records:
                    out[p.index].append((rec.key, rec.value, find_identity(rec.headers)))
    return out


def harness(partitions: int = 6, **props: str) -> Harness:
    h = Harness(partitions=partitions, **{"enable.idempotence": "false", "acks": "1",
                                          "linger.ms": "0", **props})
    h.start()
    return h


def test_round_robin_bulk_spreads_every_record_in_turn():
    """Java's RoundRobinPartitioner: record i to available partition (counter + i) % n."""
    h = harness(**{"partitioner.class": "org.apache.kafka.clients.producer.RoundRobinPartitioner"})
    pool = RecordPool.of([b"v%03d" % i for i in range(60)])
    h.producer.send_bulk("t", pool, 0, 60, shape=SHAPE, intended_first_ns=10**9,
                         intended_step_ns=1000, first_seq=100)
    h.producer.send_bulk("t", pool, 0, 9, shape=SHAPE, first_seq=160)
    drain(h)
    got = records_by_partition(h)
    assert {p: len(v) for p, v in got.items()} == {0: 12, 1: 12, 2: 12, 3: 11, 4: 11, 5: 11}
    for p, recs in got.items():
        assert [v for _, v, _ in recs[:10]] == [b"v%03d" % i for i in range(p, 60, 6)]
        # Sequences: the order of appending, each partition's share one run.
        seqs = [ident.sequence for _, _, ident in recs[:10]]
        assert seqs == list(range(seqs[0], seqs[0] + 10))
        # Intended times: each record's own place on the schedule (every 6th).
        times = [ident.intended_ns for _, _, ident in recs[:10]]
        assert [b - a for a, b in zip(times, times[1:])] == [6000] * 9
    all_seqs = sorted(ident.sequence for recs in got.values() for _, _, ident in recs)
    assert all_seqs == list(range(100, 169))


def test_keyed_bulk_puts_every_key_on_its_murmur2_partition():
    h = harness()
    keys = [b"key-%03d" % (i * 7 % 37) for i in range(500)]
    pool = RecordPool.of([b"x" * 20] * 500, keys)
    h.producer.send_bulk("t", pool, 450, 120, shape=SHAPE, intended_first_ns=5 * 10**9,
                         intended_step_ns=100, first_seq=0)   # wraps at the pool's end
    drain(h)
    got = records_by_partition(h)
    n = 0
    first_intended = {}
    for p, recs in got.items():
        for key, _, ident in recs:
            # kctl's murmur2, and kafka-python's as an independent oracle
            assert p == partition_for_key(key, 6) == (kafka_python_murmur2(key) & 0x7FFFFFFF) % 6
            first_intended[ident.sequence] = ident.intended_ns
            n += 1
        seqs = [ident.sequence for _, _, ident in recs]
        assert seqs == sorted(seqs)
    assert n == 120 and sorted(first_intended) == list(range(120))
    # Each record keeps its own intended time: 120 distinct times 100 ns apart.
    times = sorted(first_intended.values())
    assert [b - a for a, b in zip(times, times[1:])] == [100] * 119


def _sticks(h: Harness) -> list[tuple[int, int]]:
    """(partition, records) runs in append (sequence) order."""
    by_seq = sorted((ident.sequence, p) for p, recs in records_by_partition(h).items()
                    for _, _, ident in recs)
    runs: list[list[int]] = []
    for _, p in by_seq:
        if runs and runs[-1][0] == p:
            runs[-1][1] += 1
        else:
            runs.append([p, 1])
    return [(p, c) for p, c in runs]


def test_uniform_sticky_switches_between_batch_size_and_twice_that():
    """KIP-794 (Java's RecordAccumulatorTest.testUniformBuiltInPartitioner): the sticky
    partition takes batch.size bytes, more while its last batch is not full, never
    more than twice batch.size; the bulk path reports appends as per-record ones would."""
    h = harness(**{"batch.size": "1000", "linger.ms": "100"})
    pt = h.producer.partitioner
    sticks: list[list[int]] = [[-1, 0]]            # (partition, bytes) per stick
    record_bytes = []
    original = pt.on_append

    def on_append(topic, partition, appended_bytes, enable_switch=True):
        if sticks[-1][0] < 0:
            sticks[-1][0] = partition
        assert partition == sticks[-1][0]
        sticks[-1][1] += appended_bytes
        original(topic, partition, appended_bytes, enable_switch)
        if pt.sticky_bytes_left(topic) == (1000, 2000):    # it switched
            sticks.append([-1, 0])

    pt.on_append = on_append
    pool = RecordPool.of([b"z" * 60] * 100)
    for i in range(10):
        h.producer.send_bulk("t", pool, 0, 100, shape=SHAPE, first_seq=i * 100)
    drain(h)
    rb = h.producer._template_for(SHAPE, pool)[1]
    record_bytes.append(rb)
    done = [b for _, b in sticks[:-1]]
    assert len(done) > 5
    assert all(1000 <= b < 2000 + rb for b in done), done
    assert sum(b for _, b in sticks) == 1000 * rb
    assert len({p for p, _ in sticks if p >= 0}) > 1


def test_send_sticks_as_the_bulk_path_does():
    """``send()`` reports appended bytes to the partitioner in one go below batch.size
    and record by record after it: the same switches as per-record reports."""
    h = harness(**{"batch.size": "1000", "linger.ms": "100"})
    pt = h.producer.partitioner
    sticks: list[list[int]] = [[-1, 0]]
    original = pt.on_append

    def on_append(topic, partition, appended_bytes, enable_switch=True):
        if sticks[-1][0] < 0:
            sticks[-1][0] = partition
        assert partition == sticks[-1][0]
        sticks[-1][1] += appended_bytes
        original(topic, partition, appended_bytes, enable_switch)
        if pt.sticky_bytes_left(topic) == (1000, 2000):
            sticks.append([-1, 0])

    pt.on_append = on_append
    for i in range(600):
        h.producer.send("t", b"s" * 60)
        if i % 50 == 0:
            drain(h)
    drain(h)
    done = [b for _, b in sticks[:-1]]
    assert len(done) > 10 and all(1000 <= b < 2000 + 60 for b in done), done


def test_legacy_sticky_moves_when_a_batch_would_open():
    """KIP-480 (partitioner.class=murmur2, the pre-3.3 DefaultPartitioner): keyless
    records switch partition each time the sticky one would open a new batch."""
    h = harness(**{"batch.size": "1000", "partitioner.class": "murmur2", "linger.ms": "100"})
    pool = RecordPool.of([b"z" * 60] * 100)
    h.producer.send_bulk("t", pool, 0, 100, shape=SHAPE, first_seq=0)
    drain(h)
    sticks = _sticks(h)
    assert len(sticks) > 5
    assert all(p != q for (p, _), (q, _) in zip(sticks, sticks[1:]))
    batches = [len(decode_batches(part.records).batches[0].records)
               for r in h.net.requests("Produce")
               for t in h.net.wire_bodies[r.correlation_id].topic_data for part in t.partition_data]
    full = max(batches)
    assert Counter(batches) == {full: 100 // full, 100 % full: 1}   # one full batch per stick


def _adaptive_harness(**props: str) -> Harness:
    # Partitions 0 and 2 led by node 0, 1 and 3 by node 1.
    h = Harness(nodes=(0, 1), partitions=4, **{"enable.idempotence": "false", "acks": "1",
                                               "linger.ms": "0", "batch.size": "400", **props})
    h.start()
    return h


def _send_and_answer(h: Harness, rounds: int, down: int | None) -> Counter:
    """Keyless sends; node ``down`` never takes a request. Counts new batches per partition."""
    opened: Counter = Counter()
    pool = RecordPool.of([b"a" * 50] * 8)
    for i in range(rounds):
        before = {tp.partition: len(dq) for tp, dq in h.producer.accumulator._deques.items()}
        h.producer.send_bulk("t", pool, 0, 8, first_seq=i * 8)
        for tp, dq in h.producer.accumulator._deques.items():
            if len(dq) > before.get(tp.partition, 0):
                opened[tp.partition] += len(dq) - before.get(tp.partition, 0)
        h.clock.advance(ms=1)
        h.net.poll(0, h.clock.now_ns())
        h.producer.poll(0)      # one turn: the fake clock stands still
        for r in h.net.pending("Produce"):
            if r.node != down:
                h.net.respond(r, produce_body(r))
    return opened


def test_adaptive_partitioning_draws_less_from_long_queues():
    """KIP-794 adaptive partitioning (Java's RecordAccumulatorTest.testAdaptiveBuiltInPartitioner):
    once every partition has a queue, a new sticky partition is drawn with weight
    max queue + 1 - queue, so the partitions of a node that takes nothing get less."""
    h = _adaptive_harness()
    h.net.down.add(1)
    _send_and_answer(h, 40, down=1)                  # every partition gets a queue
    opened = _send_and_answer(h, 300, down=1)
    slow = opened[1] + opened[3]
    fast = opened[0] + opened[2]
    assert fast > 3 * slow, opened


def test_adaptive_partitioning_off_draws_uniformly():
    h = _adaptive_harness(**{"partitioner.adaptive.partitioning.enable": "false"})
    h.net.down.add(1)
    _send_and_answer(h, 40, down=1)
    opened = _send_and_answer(h, 300, down=1)
    slow = opened[1] + opened[3]
    fast = opened[0] + opened[2]
    assert slow > 0.6 * fast, opened


def test_partitions_of_an_unavailable_leader_are_not_drawn():
    """partitioner.availability.timeout.ms (Java's RecordAccumulatorTest.testAdaptiveBuiltInPartitioner,
    second half): a leader that has had data ready but could not take it for longer than
    the timeout has its partitions left out of the draw."""
    h = _adaptive_harness(**{"partitioner.availability.timeout.ms": "20"})
    _send_and_answer(h, 40, down=None)               # all partitions have queues
    h.net.down.add(1)
    _send_and_answer(h, 60, down=1)                  # node 1 unavailable for 60 ms > 20 ms
    opened = _send_and_answer(h, 200, down=1)
    assert opened[1] == opened[3] == 0 and opened[0] + opened[2] > 0, opened


def test_null_values_go_out_as_null_values():
    """A None in the pool is a null value on the wire (length -1: Kafka's tombstone),
    not empty bytes, keyed (null keys stay null keys) or not; empty bytes stay empty.
    The pool with nulls gets a template of its own, and counts no bytes for them."""
    values = [None if i % 3 == 0 else (b"" if i % 3 == 1 else b"v%d" % i) for i in range(90)]
    keys = [None if i % 4 == 0 else b"key-%d" % (i % 5) for i in range(90)]
    for pool in (RecordPool.of(values), RecordPool.of(values, keys)):
        assert pool.null_values and pool.value_size is None
        h = harness()
        h.producer.send_bulk("t", RecordPool.of([b"x" * 8] * 4), 0, 4, shape=SHAPE, first_seq=0)
        h.producer.send_bulk("t", pool, 0, 90, shape=SHAPE, first_seq=4)
        drain(h)
        got = Counter((k, v) for recs in records_by_partition(h).values() for k, v, _ in recs)
        assert got == Counter([(None, b"x" * 8)] * 4 + list(
            zip(pool.keys if pool.keys is not None else [None] * 90, values)))
        non_null = sum(len(v) for v in values if v is not None)
        assert h.producer.metrics.value_bytes_acked == 4 * 8 + non_null
