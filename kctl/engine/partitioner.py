"""Partitioners: which partition a record goes to.

How this works
--------------
``Partitioner.partition(topic, key, num_partitions, available, explicit)`` picks
a partition from what metadata says about the topic: how many partitions it
has and which of them have a known leader (``available``, ascending). Nothing
here reads metadata, the clock or the accumulator; the producer passes facts in
and reports back through three hooks:

* ``on_append(topic, partition, appended_bytes, enable_switch)`` after a
  record that ``sticks(key, explicit)`` placed was appended. KIP-794 (the
  Java built-in partitioner since Kafka 3.3): the sticky partition switches
  once ``batch.size`` bytes went to it and ``enable_switch`` (the producer
  passes "every batch in that partition's deque is full", as Java's
  accumulator does, so a switch does not leave a fractional batch behind), or
  unconditionally at twice ``batch.size``.
* ``on_new_batch(topic, prev_partition)`` when appending would open a new
  batch on the sticky partition, for the ``murmur2`` kind only (KIP-480, the
  pre-3.3 DefaultPartitioner): the producer then asks ``partition`` again and
  appends there instead, like Java's ``abortOnNewBatch``.
* ``update_load_stats(topic, partition_ids, queue_sizes, num_partitions)``
  from the accumulator's readiness check, for adaptive partitioning
  (KIP-794): a new sticky partition is drawn with weight
  ``max queue + 1 - queue``, so partitions on slow brokers get less. Partitions
  left out of ``partition_ids`` (leader latency above
  ``partitioner.availability.timeout.ms``) are never drawn.

A switch is lazy: a hook only marks the topic's sticky partition as used up
and the next ``partition`` call draws a new one, with ``available`` at hand.

Keyed records go to ``to_positive(murmur2(key)) % num_partitions`` over all
partitions, available or not, so a key always lands on the same partition as
it does with the Java client (a record for a leaderless partition waits).

Randomness comes from an injectable ``random.Random``; only which partition
is drawn is random, never whether.
"""

from __future__ import annotations

import random
import struct
from bisect import bisect_right
from collections.abc import Sequence

from kctl.config import PartitionerConfig, PartitionerKind
from kctl.errors import InvalidPartitionError

MURMUR2_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF
_BLOCKS: dict[int, struct.Struct] = {}
KEY_HASH_CACHE_SIZE = 65536


def murmur2(data: bytes) -> int:
    """Java's ``org.apache.kafka.common.utils.Utils.murmur2``: 32-bit MurmurHash2,
    seed 0x9747b28c, four-byte blocks read little-endian, as a signed 32-bit int."""
    length = len(data)
    h = (MURMUR2_SEED ^ length) & _MASK
    n_blocks = length >> 2
    if n_blocks:
        unpack = _BLOCKS.get(n_blocks)
        if unpack is None:
            unpack = _BLOCKS[n_blocks] = struct.Struct(f"<{n_blocks}I")
        for k in unpack.unpack_from(data):
            k = (k * _M) & _MASK
            k ^= k >> 24
            h = ((h * _M) & _MASK) ^ ((k * _M) & _MASK)
    tail = length & 3
    if tail:
        base = length - tail
        if tail == 3:
            h ^= data[base + 2] << 16
        if tail >= 2:
            h ^= data[base + 1] << 8
        h = ((h ^ data[base]) * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Java's ``Utils.toPositive``: clear the sign bit (not ``abs``: MIN_VALUE maps to 0)."""
    return number & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition the Java client's default partitioner gives a keyed record."""
    return to_positive(murmur2(key)) % num_partitions


class _Sticky:
    """One topic's sticky partition and the bytes appended to it since it was drawn."""

    __slots__ = ("partition", "produced_bytes", "used_up")

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.produced_bytes = 0
        self.used_up = False


class _LoadStats:
    """KIP-794's cumulative frequency table over the partitions that may be drawn."""

    __slots__ = ("cumulative", "partition_ids")

    def __init__(self, cumulative: list[int], partition_ids: tuple[int, ...]) -> None:
        self.cumulative = cumulative
        self.partition_ids = partition_ids


class Partitioner:
    """One per producer; keeps per-topic sticky and round-robin state."""

    def __init__(self, config: PartitionerConfig, rng: random.Random | None = None) -> None:
        self.config = config
        self._kind = config.kind
        self._rng = rng if rng is not None else random.Random()
        # Keys count only for the built-in and legacy hash partitioners; ignore.keys
        # applies to the built-in one, as in Java (where it does not affect custom classes).
        if self._kind is PartitionerKind.DEFAULT:
            self._use_keys = not config.ignore_keys
        else:
            self._use_keys = self._kind is PartitionerKind.MURMUR2
        self._sticky_batch_size = config.sticky_batch_size
        self._sticky: dict[str, _Sticky] = {}
        self._load: dict[str, _LoadStats] = {}
        self._avoid: dict[str, int] = {}  # KIP-480: the partition that just got a new batch
        self._round_robin: dict[str, int] = {}
        # murmur2 costs about 0.4 us per 4 key bytes in CPython, more than the whole
        # per-record budget; load runs draw keys from a pool, so remember positive
        # hashes of recent keys (bytes only: they are immutable). Cleared when full.
        self._key_hashes: dict[bytes, int] = {}

    @property
    def kind(self) -> PartitionerKind:
        return self._kind

    @property
    def uses_keys(self) -> bool:
        """Whether a record's key decides its partition (murmur2)."""
        return self._use_keys and self._kind is not PartitionerKind.ROUND_ROBIN

    # -- choosing -------------------------------------------------------------

    def partition(
        self,
        topic: str,
        key: bytes | None,
        num_partitions: int,
        available: Sequence[int],
        explicit: int | None = None,
    ) -> int:
        """The partition for one record. ``available`` lists partitions with a known leader."""
        if explicit is not None:
            if not 0 <= explicit < num_partitions:
                raise InvalidPartitionError(
                    f"partition {explicit} of topic {topic!r} does not exist "
                    f"(it has {num_partitions}: 0..{num_partitions - 1})"
                )
            return explicit
        if num_partitions <= 0:
            raise InvalidPartitionError(f"topic {topic!r} has no partitions in metadata")
        if self._kind is PartitionerKind.ROUND_ROBIN:
            return self._next_round_robin(topic, num_partitions, available)
        if key is not None and self._use_keys:
            return self._key_hash(key) % num_partitions
        return self.sticky_partition(topic, num_partitions, available)

    def key_partition(self, key: bytes, num_partitions: int) -> int:
        """murmur2's partition for ``key`` (whatever the kind; ask ``uses_keys`` first)."""
        return self._key_hash(key) % num_partitions

    def _key_hash(self, key: bytes) -> int:
        cache = self._key_hashes
        hashed = cache.get(key) if type(key) is bytes else None
        if hashed is None:
            hashed = to_positive(murmur2(key))
            if type(key) is bytes:
                if len(cache) >= KEY_HASH_CACHE_SIZE:
                    cache.clear()
                cache[key] = hashed
        return hashed

    def sticks(self, key: bytes | None, explicit: int | None = None) -> bool:
        """Whether ``partition`` places this record by stickiness (so ``on_append`` applies)."""
        return (
            explicit is None
            and self._kind is not PartitionerKind.ROUND_ROBIN
            and (key is None or not self._use_keys)
        )

    def sticky_partition(self, topic: str, num_partitions: int, available: Sequence[int]) -> int:
        """The topic's current sticky partition, drawing a new one if it is used up.
        The bulk path calls this once per batch of keyless records."""
        state = self._sticky.get(topic)
        if state is None or state.used_up or state.partition >= num_partitions:
            state = _Sticky(self._draw(topic, num_partitions, available))
            self._sticky[topic] = state
        return state.partition

    def _draw(self, topic: str, num_partitions: int, available: Sequence[int]) -> int:
        rng = self._rng
        avoid = self._avoid.pop(topic, None)
        if avoid is not None:
            # KIP-480 (Java's StickyPartitionCache): a different available partition if there is one.
            if not available:
                return rng.randrange(num_partitions)
            if len(available) == 1:
                return available[0]
            while True:
                choice = available[rng.randrange(len(available))]
                if choice != avoid:
                    return choice
        stats = self._load.get(topic)
        if stats is not None and stats.partition_ids and max(stats.partition_ids) < num_partitions:
            # KIP-794 adaptive: the first cumulative weight strictly above a uniform draw.
            index = bisect_right(stats.cumulative, rng.randrange(stats.cumulative[-1]))
            return stats.partition_ids[index]
        if available:
            return available[rng.randrange(len(available))]
        return rng.randrange(num_partitions)  # no leader known anywhere: any partition

    def round_robin_start(self, topic: str, count: int) -> int:
        """The bulk form of ``round_robin``: the counter for the first of ``count``
        records (record i goes where the counter ``start + i`` points); advances it."""
        counter = self._round_robin.get(topic, 0)
        self._round_robin[topic] = (counter + count) & 0x7FFFFFFF
        return counter

    def sticky_bytes_left(self, topic: str) -> tuple[int, int]:
        """Bytes the current sticky partition takes before it may switch (KIP-794:
        ``batch.size``, when the last batch is full) and before it must (twice
        that); 0 or less when reached. The bulk path appends up to these marks,
        then reports through ``on_append``, so it switches where per-record
        appends would."""
        state = self._sticky.get(topic)
        produced = state.produced_bytes if state is not None and not state.used_up else 0
        size = self._sticky_batch_size
        return size - produced, 2 * size - produced

    def _next_round_robin(self, topic: str, num_partitions: int, available: Sequence[int]) -> int:
        counter = self._round_robin.get(topic, 0)
        self._round_robin[topic] = (counter + 1) & 0x7FFFFFFF
        if available:
            return available[counter % len(available)]
        return counter % num_partitions

    # -- feedback from the producer --------------------------------------------

    def on_append(self, topic: str, partition: int, appended_bytes: int, enable_switch: bool = True) -> None:
        """A sticky-placed record of ``appended_bytes`` went to ``partition`` (KIP-794)."""
        if self._kind not in (PartitionerKind.DEFAULT, PartitionerKind.STICKY):
            return
        state = self._sticky.get(topic)
        if state is None or state.partition != partition:
            return  # the sticky partition moved on meanwhile
        state.produced_bytes += appended_bytes
        produced = state.produced_bytes
        size = self._sticky_batch_size
        if (produced >= size and enable_switch) or produced >= 2 * size:
            state.used_up = True

    def on_new_batch(self, topic: str, prev_partition: int) -> None:
        """A new batch is about to open on ``prev_partition`` (KIP-480, ``murmur2`` kind):
        switch away from it; the producer re-partitions the record that triggered it."""
        if self._kind is not PartitionerKind.MURMUR2:
            return
        state = self._sticky.get(topic)
        if state is None or state.partition == prev_partition:
            if state is not None:
                state.used_up = True
            self._avoid[topic] = prev_partition

    def update_load_stats(
        self,
        topic: str,
        partition_ids: Sequence[int] | None,
        queue_sizes: Sequence[int] | None = None,
        num_partitions: int = 0,
    ) -> None:
        """Queue sizes (batches waiting) per drawable partition, from the accumulator.

        ``partition_ids`` leaves out partitions excluded by
        ``partitioner.availability.timeout.ms``; ``num_partitions`` is the topic's
        total. ``None`` clears the stats (uniform draws again). As in Java, equal
        queues over all partitions, or a one-partition topic, need no weighting.
        """
        if not self.config.adaptive_partitioning_enable:
            return
        if partition_ids is None or queue_sizes is None:
            self._load.pop(topic, None)
            return
        if len(partition_ids) != len(queue_sizes):
            raise ValueError("partition_ids and queue_sizes differ in length")
        length = len(partition_ids)
        if length < 1 or num_partitions < 2:
            self._load.pop(topic, None)
            return
        max_plus_1 = max(queue_sizes) + 1
        if length == num_partitions and min(queue_sizes) == max_plus_1 - 1:
            self._load.pop(topic, None)
            return
        cumulative = []
        running = 0
        for size in queue_sizes:
            running += max_plus_1 - size
            cumulative.append(running)
        self._load[topic] = _LoadStats(cumulative, tuple(partition_ids))

    def forget(self, topic: str) -> None:
        """Drop all state for a topic (it was deleted or the producer stopped using it)."""
        for table in (self._sticky, self._load, self._avoid, self._round_robin):
            table.pop(topic, None)
