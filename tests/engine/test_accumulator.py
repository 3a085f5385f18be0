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


# -- compression: batch.size counts Java's estimated written bytes (RecordAccumulatorTest) --

def _half_compressible(rng, n, size=100):
    """Values that lz4 compresses to about half: random bytes, then zeros."""
    return [rng.randbytes(size // 2) + bytes(size - size // 2) for _ in range(n)]


def _send_all(acc, cluster, now, *, split_above=None):
    """Drains every ready batch as the sender does on a first send (encode, then the
    ratio estimate learns from it), acks or splits it; returns (batches, splits)."""
    sent, splits = [], 0
    while True:
        ready = acc.ready(cluster, now).ready_nodes
        drained = acc.drain(cluster.by_node(), ready, 10**9, now).get(1, [])
        if not drained:
            return sent, splits
        for b in drained:
            b.encode(0)
            acc.batch_encoded(b)
            if split_above is not None and b.encoded_size > split_above and b.record_count > 1:
                acc.batch_too_large(b)
                acc.requeue_split(b.split(2, now))
                splits += 1
            else:
                sent.append((b.record_count, b.encoded_size))
            acc.deallocate(b)


def test_compressed_bulk_batches_fill_batch_size_once_the_estimate_settles():
    import random
    acc, pool = make(**{"compression.type": "lz4", "batch.size": "16384", "linger.ms": "10"})
    cluster = Cluster({TP0: 1})
    template = BatchTemplate(compression=acc.compression)
    values = _half_compressible(random.Random(1), 1000)
    rb = template.record_size(100)
    sent = []
    for _ in range(60):
        acc.append_bulk(TP0, values, rb, template, T0, 1_700_000_000_000, value_size=100)
        sent += _send_all(acc, cluster, T0)[0]
    sent += _send_all(acc, cluster, T0 + 20 * NS_PER_MS)[0]
    # The first batches are sized as if nothing compressed (estimate 1.0) ...
    first_records, first_size = sent[0]
    assert first_records * rb * 1.05 <= 16384 and first_size < 16384 * 0.6
    # ... then the estimate settles near the observed ratio and batches fill
    # batch.size on the wire, with about twice the records.
    settled = sent[-40:-1]
    mean_size = sum(s for _, s in settled) / len(settled)
    assert 0.85 * 16384 < mean_size <= 16384
    assert all(n > 1.7 * first_records for n, _ in settled)
    assert 0.45 < acc.estimator.estimation("t", acc.compression) < 0.6
    assert pool.available_memory == pool.total_memory


def test_compressed_single_sends_fill_batch_size_once_the_estimate_settles():
    import random
    acc, pool = make(**{"compression.type": "lz4", "batch.size": "16384", "linger.ms": "10"})
    cluster = Cluster({TP0: 1})
    sent = []
    for v in _half_compressible(random.Random(2), 60_000):
        acc.append(TP0, 0, None, v, (), T0)
        if acc._deque(TP0)[0].is_full():
            sent += _send_all(acc, cluster, T0)[0]
    settled = sent[-30:]
    _send_all(acc, cluster, T0 + 20 * NS_PER_MS)
    assert 0.85 * 16384 < sum(s for _, s in settled) / len(settled) <= 16384
    assert pool.available_memory == pool.total_memory


def test_without_compression_nothing_changes():
    acc, _ = make(**{"batch.size": "1024", "linger.ms": "10"})
    assert acc.written_factor("t") == 0.0
    for _ in range(20):
        acc.append(TP0, 0, None, b"x" * 100, (), T0)
    b = acc._deque(TP0)[0]
    # Header + the records' counted bytes, no estimate involved.
    assert b.estimated_bytes == 61 + b.record_count * 136
    assert b.record_count == (1024 - 61) // 136


def test_split_and_reenqueue_resets_the_estimate():
    # Java: splitAndReenqueue sets the estimate to max(1.0, the big batch's ratio).
    import random
    acc, _ = make(**{"compression.type": "gzip", "batch.size": "1024", "linger.ms": "0"})
    cluster = Cluster({TP0: 1})
    acc.estimator.set_estimation("t", acc.compression, 0.1)
    rng = random.Random(3)
    for _ in range(20):                              # incompressible: far worse than 0.1
        acc.append(TP0, 0, None, rng.randbytes(100), (), T0)
    (big,) = acc.drain(cluster.by_node(), [1], 10**9, T0)[1]
    big.encode(0)
    acc.batch_encoded(big)
    assert big.encoded_size > 1024 + 61        # what the broker refuses as too large
    acc.batch_too_large(big)
    assert acc.estimator.estimation("t", acc.compression) == max(1.0, big.observed_ratio)
    acc.requeue_split(big.split(2, T0))
    acc.deallocate(big)
    sent, _ = _send_all(acc, cluster, T0, split_above=1024 + 61)
    assert sum(n for n, _ in sent) == 20
    assert all(size <= 1024 + 61 for _, size in sent)


def test_split_frequency():
    # Java's testSplitFrequency: whatever the mix of well and badly compressing
    # records, fewer than 10% of the batches are split.
    import random
    rng = random.Random(4)
    cluster = Cluster({TP0: 1})
    for good_pct in (1, 25, 50, 75, 99):
        # A new producer's estimate per mix (Java resets its JVM-wide table; kctl's is
        # per producer).
        acc, _ = make(**{"compression.type": "gzip", "batch.size": "1024", "buffer.memory": "3072",
                         "linger.ms": "10"})
        batches = splits = 0
        for _ in range(1000):
            if rng.randrange(100) < good_pct:
                value = b"".join(rng.randrange(1000).to_bytes(4, "big") for _ in range(25))
            else:
                value = rng.randbytes(100)
            acc.append(TP0, 0, None, value, (), T0)
            sent, s = _send_all(acc, cluster, T0, split_above=1024 + 61)
            batches += len(sent) + s
            splits += s
        sent, s = _send_all(acc, cluster, T0 + 10 * NS_PER_MS, split_above=1024 + 61)
        batches += len(sent) + s
        splits += s
        assert splits / batches < 0.1, (good_pct, splits, batches)
