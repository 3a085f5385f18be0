"""RecordAccumulator decisions stepped with a fake clock: linger, fullness, backoff,
draining limits and fairness, expiry, muting, memory exhaustion, bulk appends."""

import pytest

from kctl.config import ProducerConfig
from kctl.engine.accumulator import RecordAccumulator
from kctl.engine.batch import BatchState, IllegalBatchTransition, RecordHandle, TopicPartition
from kctl.engine.buffer_pool import BufferPool
from kctl.engine.clock import NS_PER_MS, FakeClock
from kctl.protocol.batch_builder import BatchTemplate
from kctl.protocol.records import decode_batches

T0 = 1_000 * NS_PER_MS


class Cluster:
    def __init__(self, leaders):
        self.leaders = leaders

    def leader_for(self, tp):
        return self.leaders.get(tp)

    def partition_count(self, topic):
        return sum(1 for tp in self.leaders if tp.topic == topic) or None

    def by_node(self):
        out = {}
        for tp, node in sorted(self.leaders.items()):
            out.setdefault(node, []).append(tp)
        return out


def make(**props):
    cfg = ProducerConfig.from_properties({"enable.idempotence": "false", "acks": "1", **props})
    pool = BufferPool(cfg.buffer_pool.buffer_memory, cfg.buffer_pool.batch_size)
    return RecordAccumulator(cfg.accumulator, pool), pool


TP0, TP1, TP2 = (TopicPartition("t", i) for i in range(3))


def test_not_ready_until_linger_passes():
    acc, _ = make(**{"linger.ms": "10"})
    cluster = Cluster({TP0: 1})
    acc.append(TP0, 0, None, b"x" * 10, (), T0)
    check = acc.ready(cluster, T0 + 5 * NS_PER_MS)
    assert check.ready_nodes == frozenset()
    assert check.next_ready_check_ns == T0 + 10 * NS_PER_MS
    assert acc.ready(cluster, T0 + 10 * NS_PER_MS).ready_nodes == {1}


def test_full_batch_is_ready_before_linger():
    acc, _ = make(**{"linger.ms": "1000", "batch.size": "1024"})
    cluster = Cluster({TP0: 1})
    for i in range(20):
        acc.append(TP0, 0, None, b"x" * 100, (), T0)
    assert acc.ready(cluster, T0).ready_nodes == {1}


def test_unknown_leader_is_reported():
    acc, _ = make()
    acc.append(TP0, 0, None, b"x", (), T0)
    check = acc.ready(Cluster({}), T0 + 10**12)
    assert check.unknown_leader_topics == {"t"} and not check.ready_nodes


def test_drain_takes_one_batch_per_partition_within_max_request_size():
    acc, _ = make(**{"linger.ms": "0", "batch.size": "1000", "max.request.size": "2500"})
    cluster = Cluster({TP0: 1, TP1: 1, TP2: 1})
    for tp in (TP0, TP1, TP2):
        for _ in range(25):
            acc.append(tp, 0, None, b"y" * 100, (), T0)
    drained = acc.drain(cluster.by_node(), [1], 2500, T0)
    batches = drained[1]
    assert len({b.tp for b in batches}) == len(batches) == 2
    assert all(b.state is BatchState.CLOSED for b in batches)
    # The next drain starts where this one stopped (fairness).
    again = acc.drain(cluster.by_node(), [1], 2500, T0)[1]
    assert again[0].tp == TP2


def test_retry_waits_for_backoff_and_goes_first():
    acc, _ = make(**{"linger.ms": "0", "retry.backoff.ms": "100", "retry.backoff.max.ms": "1000"})
    cluster = Cluster({TP0: 1})
    acc.append(TP0, 0, None, b"a", (), T0)
    (batch,) = acc.drain(cluster.by_node(), [1], 10**6, T0)[1]
    batch.transition(BatchState.IN_FLIGHT)
    batch.attempts = 1
    batch.transition(BatchState.RETRY)
    acc.append(TP0, 0, None, b"b", (), T0)
    acc.reenqueue(batch, T0 + NS_PER_MS)
    check = acc.ready(cluster, T0 + 50 * NS_PER_MS)
    assert not check.ready_nodes and check.next_ready_check_ns == T0 + 101 * NS_PER_MS
    assert acc.drain(cluster.by_node(), [1], 10**6, T0 + 101 * NS_PER_MS)[1] == [batch]


def test_backoff_is_exponential_and_capped():
    acc, _ = make(**{"retry.backoff.ms": "100", "retry.backoff.max.ms": "350"})
    acc.append(TP0, 0, None, b"a", (), T0)
    b = acc._deque(TP0)[0]
    waits = []
    for attempts in range(1, 5):
        b.attempts = attempts
        waits.append(acc._backoff_ns(b) // NS_PER_MS)
    assert waits == [100, 200, 350, 350]


def test_expired_batches_leave_the_queue():
    acc, _ = make(**{"delivery.timeout.ms": "1000", "linger.ms": "0", "request.timeout.ms": "500"})
    acc.append(TP0, 0, None, b"a", (), T0)
    acc.append(TP1, 0, None, b"a", (), T0 + 600 * NS_PER_MS)
    expired = acc.expired_batches(T0 + 1000 * NS_PER_MS)
    assert [b.tp for b in expired] == [TP0]
    assert acc.queued_batches() == 1


def test_muted_partition_is_neither_ready_nor_drained():
    acc, _ = make(**{"linger.ms": "0"})
    cluster = Cluster({TP0: 1})
    acc.append(TP0, 0, None, b"a", (), T0)
    acc.mute(TP0)
    assert not acc.ready(cluster, T0).ready_nodes
    assert acc.drain(cluster.by_node(), [1], 10**6, T0) == {}
    acc.unmute(TP0)
    assert acc.ready(cluster, T0).ready_nodes == {1}


def test_exhausted_pool_stops_append_and_makes_batches_ready():
    acc, pool = make(**{"batch.size": "1024", "buffer.memory": "2048", "linger.ms": "1000"})
    cluster = Cluster({TP0: 1, TP1: 1, TP2: 1})
    assert acc.append(TP0, 0, None, b"a", (), T0).batch is not None
    assert acc.append(TP1, 0, None, b"a", (), T0).batch is not None
    res = acc.append(TP2, 0, None, b"a", (), T0)
    assert res.batch is None and res.needs_memory == 1024
    assert pool.available_memory == 0
    # Nobody waits yet: linger still applies.
    assert acc.ready(cluster, T0).ready_nodes == frozenset()
    # While the producer waits for memory, every batch is sendable (Java's "exhausted").
    seen = []

    def run_step(now_ns, deadline_ns):
        seen.append(acc.ready(cluster, now_ns).ready_nodes)
        for b in acc.drain(cluster.by_node(), [1], 10**6, now_ns).get(1, []):
            acc.deallocate(b)

    clock = FakeClock(now_ns=T0)
    buf = pool.allocate(1024, max_block_ms=100, clock=clock, run_step=run_step)
    assert len(buf) == 1024 and seen[0] == {1}


def test_batches_return_their_buffers():
    acc, pool = make(**{"batch.size": "1024", "buffer.memory": "4096", "linger.ms": "0"})
    cluster = Cluster({TP0: 1})
    acc.append(TP0, 0, None, b"a", (), T0)
    (b,) = acc.drain(cluster.by_node(), [1], 10**6, T0)[1]
    assert pool.available_memory == 3072
    acc.deallocate(b)
    assert pool.available_memory == 4096 and acc.incomplete_count == 0


def test_bulk_append_fills_batches_that_decode():
    acc, _ = make(**{"batch.size": "4096", "linger.ms": "0"})
    template = BatchTemplate()
    values = [bytes([i % 256]) * 100 for i in range(100)]
    record_bytes = 100 + 8
    res = acc.append_bulk(TP0, values, record_bytes, template, T0, 1_700_000_000_000,
                          value_size=100, intended_first_ns=T0, intended_step_ns=1000)
    assert res.appended == 100 and res.new_batches == 3
    cluster = Cluster({TP0: 1})
    got = []
    while (d := acc.drain(cluster.by_node(), [1], 10**6, T0)):
        got.extend(d[1])
    records = [r.value for b in got for r in decode_batches(b.encode(0)).records]
    assert records == values
    # Slices keep the schedule: the second batch's first intended time continues the first's.
    assert got[1].slices[0].intended_first_ns == T0 + got[0].record_count * 1000


def test_illegal_transition_is_loud():
    acc, _ = make()
    acc.append(TP0, 0, None, b"a", (), T0)
    b = acc._deque(TP0)[0]
    with pytest.raises(IllegalBatchTransition):
        b.transition(BatchState.ACKED)


def test_split_keeps_handles_and_order():
    acc, _ = make(**{"linger.ms": "0"})
    results = [acc.append(TP0, 0, None, bytes([i]), (), T0) for i in range(10)]
    handles = [RecordHandle(r.batch, r.index) for r in results]
    b = acc._deque(TP0)[0]
    parts = b.split(3, T0)
    assert [p.record_count for p in parts] == [3, 3, 4]
    assert sum((p.handles() for p in parts), []) == handles
    values = [r.value for p in parts for r in decode_batches(p.encode(0)).records]
    assert values == [bytes([i]) for i in range(10)]


def test_incomplete_records_counts_records_not_batches():
    """What a worker reports as abandoned when its flush times out: records, as
    docs/produce-summary.md says, not the batches holding them."""
    acc, _ = make(**{"linger.ms": "1000", "batch.size": "1024"})
    for i in range(25):                  # 100-byte values: several batches on TP0, one on TP1
        acc.append(TP0, 0, None, b"x" * 100, (), T0)
    acc.append(TP1, 0, None, b"y" * 100, (), T0)
    assert acc.incomplete_count >= 3 and acc.incomplete_records == 26
