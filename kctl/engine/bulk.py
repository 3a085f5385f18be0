"""What the load path hands ``Producer.send_bulk``: a pool of records to cycle
through, and the shape every record shares.

How this works
--------------
A load run pre-generates its records (the hot path must not build bytes per
record): ``RecordPool`` holds the values, and the keys when the run has keys,
side by side. ``send_bulk(topic, pool, start, count)`` takes records
``start, start+1, ...`` of the pool, wrapping at its end.

Keyed pools are laid out once per topic and partition count
(``KeyLayout``): each distinct key's partition is computed once (murmur2,
through the partitioner), and the pool's positions are grouped per partition,
with the matching values and keys, in position order. A slice of the pool
then becomes, per partition, one bisect for its first and last position and
three C-level slices: no Python step per record.

A value may be None, a null value (Kafka's tombstone; ``kctl replay``'s null
cells): such a pool says so (``null_values``), has no common ``value_size``,
and the producer builds its batches with a template that writes value length
-1 for them (``BatchTemplate(null_values=True)``); pools without nulls never
pay for that.

``RecordShape`` is what every record of a bulk send carries besides key and
value (constant headers, and the ``kctl`` identity header's run tag and
worker); the producer keeps one ``BatchTemplate`` per shape.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kctl.protocol.identity import IdentityStamp
from kctl.protocol.records import Header

__all__ = ["KeyGroup", "KeyLayout", "RecordPool", "RecordShape"]


@dataclass(frozen=True, slots=True, eq=False)
class RecordPool:
    """Pre-generated records: ``values[i]`` with ``keys[i]`` (no keys: None).
    ``value_size``: every value has this length (None when sizes vary or a value
    is null); it lets batches be laid out without checking each length.
    ``null_values``: some value is None, a null value. Compared by identity: the
    producer caches layouts per pool object."""

    values: tuple[bytes | None, ...]
    keys: tuple[bytes | None, ...] | None = None
    value_size: int | None = None
    max_key_size: int = field(init=False)
    null_values: bool = field(init=False)

    def __post_init__(self) -> None:
        if not self.values:
            raise ValueError("a record pool needs at least one value")
        if self.keys is not None and len(self.keys) != len(self.values):
            raise ValueError(f"{len(self.keys)} keys for {len(self.values)} values")
        nulls = None in self.values
        if nulls and self.value_size is not None:
            raise ValueError("a pool with null values has no common value size")
        object.__setattr__(self, "null_values", nulls)
        object.__setattr__(self, "max_key_size",
                           max((len(k) for k in self.keys if k is not None), default=-1)
                           if self.keys is not None else -1)

    def __len__(self) -> int:
        return len(self.values)

    @classmethod
    def of(cls, values: Sequence[bytes | None],
           keys: Sequence[bytes | None] | None = None) -> RecordPool:
        sizes = {-1 if v is None else len(v) for v in values}
        return cls(tuple(values), tuple(keys) if keys is not None else None,
                   sizes.pop() if len(sizes) == 1 and -1 not in sizes else None)

    @property
    def longest_value(self) -> int:
        """The longest value's length (a null counts 0)."""
        if self.value_size is not None:
            return self.value_size
        return max((len(v) for v in self.values if v is not None), default=0)


@dataclass(frozen=True, slots=True)
class RecordShape:
    """Headers on every record and, with ``identity``, the ``kctl`` header after them."""

    headers: tuple[Header, ...] = ()
    identity: IdentityStamp | None = None


@dataclass(frozen=True, slots=True)
class KeyGroup:
    """The pool positions whose key maps to one partition, with their values and keys."""

    partition: int                     # -1: records without a key (placed by stickiness)
    positions: tuple[int, ...]
    values: tuple[bytes | None, ...]
    keys: tuple[bytes | None, ...]


@dataclass(frozen=True, slots=True)
class KeyLayout:
    """A keyed pool grouped by partition for ``num_partitions`` partitions."""

    pool: RecordPool
    num_partitions: int
    groups: tuple[KeyGroup, ...]

    @classmethod
    def of(cls, pool: RecordPool, num_partitions: int,
           partition_for: Callable[[bytes], int]) -> KeyLayout:
        """``partition_for(key)`` is asked once per distinct key."""
        assert pool.keys is not None
        by_key: dict[bytes, int] = {}
        grouped: dict[int, list[int]] = {}
        for i, k in enumerate(pool.keys):
            if k is None:
                p = -1
            else:
                p = by_key.get(k, -2)
                if p == -2:
                    p = by_key[k] = partition_for(k)
            grouped.setdefault(p, []).append(i)
        values, keys = pool.values, pool.keys
        groups = tuple(KeyGroup(p, tuple(pos), tuple(values[i] for i in pos), tuple(keys[i] for i in pos))
                       for p, pos in sorted(grouped.items()))
        return cls(pool, num_partitions, groups)
