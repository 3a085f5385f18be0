import random
import warnings
from collections import Counter

import pytest
from hypothesis import given, settings, strategies as st

from kctl.config import PartitionerConfig, PartitionerKind
from kctl.engine.partitioner import Partitioner, murmur2, partition_for_key, to_positive
from kctl.errors import InvalidPartitionError

with warnings.catch_warnings():  # kafka-python's import warns about importlib.resources
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.partitioner.default import murmur2 as kafka_python_murmur2

# Outputs of the Java client's Utils.murmur2, as asserted by Kafka's own
# UtilsTest.testMurmur2 (clients/src/test/java/org/apache/kafka/common/utils).
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize("data,expected", sorted(JAVA_MURMUR2.items()))
def test_murmur2_matches_the_java_client(data, expected):
    assert murmur2(data) == expected


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_murmur2_matches_kafka_python(data):
    # kafka-python returns the same 32 bits unsigned.
    assert murmur2(data) & 0xFFFFFFFF == kafka_python_murmur2(data)
    assert -(2**31) <= murmur2(data) < 2**31


def test_murmur2_accepts_bytearray_and_memoryview():
    assert murmur2(bytearray(b"foobar")) == murmur2(memoryview(b"foobar")) == -790332482


def test_to_positive_is_a_mask_not_abs():
    assert to_positive(-(2**31)) == 0
    assert to_positive(-1) == 2**31 - 1
    assert to_positive(5) == 5


def test_partition_for_key_matches_java_formula():
    # Java: Utils.toPositive(Utils.murmur2(keyBytes)) % numPartitions
    assert partition_for_key(b"foobar", 7) == (-790332482 & 0x7FFFFFFF) % 7
    assert partition_for_key(b"abc", 3) == 479470107 % 3


def make(kind=PartitionerKind.DEFAULT, batch=100, ignore_keys=False, adaptive=True, seed=1):
    config = PartitionerConfig(
        kind=kind,
        ignore_keys=ignore_keys,
        adaptive_partitioning_enable=adaptive,
        availability_timeout_ms=0,
        sticky_batch_size=batch,
    )
    return Partitioner(config, random.Random(seed))


ALL = (0, 1, 2, 3, 4, 5)


def test_keyed_records_hash_over_all_partitions_even_unavailable_ones():
    p = make()
    for i in range(200):
        key = b"key-%d" % i
        assert p.partition("t", key, 6, available=(0,)) == partition_for_key(key, 6)
        assert not p.sticks(key)


def test_explicit_partition_passes_through_and_is_checked():
    p = make()
    assert p.partition("t", b"k", 6, ALL, explicit=4) == 4
    assert not p.sticks(None, explicit=4)
    with pytest.raises(InvalidPartitionError, match=r"partition 6 of topic 't' does not exist"):
        p.partition("t", None, 6, ALL, explicit=6)
    with pytest.raises(InvalidPartitionError):
        p.partition("t", None, 6, ALL, explicit=-1)


def test_keyless_records_stick_until_batch_size_bytes_then_switch():
    p = make(batch=100)
    first = p.partition("t", None, 6, ALL)
    for _ in range(9):
        p.on_append("t", first, 10)
        assert p.partition("t", None, 6, ALL) == first
    p.on_append("t", first, 10)  # 100 bytes: used up
    switches = []
    current = first
    for _ in range(300):
        nxt = p.partition("t", None, 6, ALL)
        if nxt != current:
            switches.append(nxt)
            current = nxt
        p.on_append("t", nxt, 100)
    assert set(switches) <= set(ALL)
    # Every available partition gets drawn over time.
    assert len(set(switches) | {first}) == 6


def test_sticky_switch_waits_for_full_batches_but_not_past_twice_batch_size():
    p = make(batch=100)
    first = p.partition("t", None, 6, ALL)
    p.on_append("t", first, 150, enable_switch=False)
    assert p.partition("t", None, 6, ALL) == first
    p.on_append("t", first, 49, enable_switch=False)
    assert p.partition("t", None, 6, ALL) == first
    p.on_append("t", first, 1, enable_switch=False)  # 200 = 2 x batch.size: switch regardless
    assert p._sticky["t"].used_up


def test_sticky_draws_only_available_partitions():
    p = make(batch=1)
    seen = set()
    for _ in range(200):
        part = p.partition("t", None, 6, available=(1, 4))
        seen.add(part)
        p.on_append("t", part, 1)
    assert seen == {1, 4}


def test_sticky_with_no_leader_known_draws_any_partition():
    p = make(batch=1)
    seen = set()
    for _ in range(300):
        part = p.partition("t", None, 3, available=())
        seen.add(part)
        p.on_append("t", part, 1)
    assert seen == {0, 1, 2}


def test_topics_stick_independently():
    p = make(batch=100)
    a = p.partition("a", None, 50, range(50))
    b = p.partition("b", None, 50, range(50))
    p.on_append("a", a, 100)
    assert p.partition("b", None, 50, range(50)) == b


def test_ignore_keys_makes_keyed_records_sticky():
    p = make(ignore_keys=True)
    parts = {p.partition("t", b"key-%d" % i, 6, ALL) for i in range(50)}
    assert len(parts) == 1
    assert p.sticks(b"key")


def test_sticky_kind_ignores_keys_like_uniform_sticky_partitioner():
    p = make(kind=PartitionerKind.STICKY)
    assert len({p.partition("t", b"k%d" % i, 6, ALL) for i in range(50)}) == 1


def test_round_robin_cycles_available_partitions_ignoring_keys():
    p = make(kind=PartitionerKind.ROUND_ROBIN)
    got = [p.partition("t", b"same-key", 6, available=(0, 2, 5)) for _ in range(7)]
    assert got == [0, 2, 5, 0, 2, 5, 0]
    assert [p.partition("u", None, 3, available=()) for _ in range(4)] == [0, 1, 2, 0]
    assert not p.sticks(None)


def test_murmur2_kind_switches_on_new_batch_to_a_different_partition():
    p = make(kind=PartitionerKind.MURMUR2, batch=1)
    assert p.partition("t", b"foobar", 6, ALL) == partition_for_key(b"foobar", 6)
    first = p.partition("t", None, 6, ALL)
    p.on_append("t", first, 10_000)  # bytes do not matter for KIP-480
    assert p.partition("t", None, 6, ALL) == first
    for _ in range(50):
        p.on_new_batch("t", first)
        nxt = p.partition("t", None, 6, ALL)
        assert nxt != first
        first = nxt
    # A stale signal for a partition we already left does nothing.
    p.on_new_batch("t", (first + 1) % 6)
    assert p.partition("t", None, 6, ALL) == first
    # With one available partition there is nowhere else to go.
    p.on_new_batch("t", first)
    assert p.partition("t", None, 6, available=(3,)) == 3


def test_adaptive_partitioning_weights_by_inverse_queue_size():
    p = make(batch=1, seed=7)
    # Queues 0, 3, 1 -> weights 4, 1, 3 (Java's example in BuiltInPartitioner).
    p.update_load_stats("t", partition_ids=(0, 1, 2), queue_sizes=(0, 3, 1), num_partitions=3)
    assert p._load["t"].cumulative == [4, 5, 8]
    counts = Counter()
    for _ in range(8000):
        part = p.partition("t", None, 3, (0, 1, 2))
        counts[part] += 1
        p.on_append("t", part, 1)
    assert counts[0] > counts[2] > counts[1]
    assert abs(counts[1] / 8000 - 1 / 8) < 0.03


def test_adaptive_partitioning_never_draws_excluded_partitions():
    p = make(batch=1)
    p.update_load_stats("t", partition_ids=(2,), queue_sizes=(5,), num_partitions=4)
    for _ in range(50):
        part = p.partition("t", None, 4, (0, 1, 2, 3))
        assert part == 2
        p.on_append("t", part, 1)


def test_equal_queues_or_disabled_adaptive_fall_back_to_uniform():
    p = make()
    p.update_load_stats("t", (0, 1, 2), (2, 2, 2), num_partitions=3)
    assert "t" not in p._load
    off = make(adaptive=False)
    off.update_load_stats("t", (0, 1, 2), (0, 9, 9), num_partitions=3)
    assert "t" not in off._load
    p.update_load_stats("t", (0, 1, 2), (0, 9, 9), num_partitions=3)
    p.update_load_stats("t", None)
    assert "t" not in p._load


def test_seeded_random_makes_choices_repeatable():
    def run(seed):
        p = make(batch=1, seed=seed)
        out = []
        for _ in range(30):
            part = p.partition("t", None, 12, range(12))
            out.append(part)
            p.on_append("t", part, 1)
        return out

    assert run(3) == run(3)


def test_key_hash_cache_gives_the_same_answers_and_stays_bounded(monkeypatch):
    import kctl.engine.partitioner as module

    monkeypatch.setattr(module, "KEY_HASH_CACHE_SIZE", 8)
    p = make()
    keys = [b"k%d" % i for i in range(30)] * 2 + [bytearray(b"k1"), memoryview(b"k2")]
    for key in keys:
        assert p.partition("t", key, 7, ALL) == partition_for_key(bytes(key), 7)
    assert len(p._key_hashes) <= 8
