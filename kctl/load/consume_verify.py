"""``--verify`` from the consumer side: what the consumers handed out, checked.

Two cases:

- the run knows what was acknowledged (``kctl produce --consume``, ``kctl consume
  --backlog``): the consumers' runs of (offset, producer worker, sequence) go through
  the same accounting as ``kctl produce --verify`` (load/verify.py's ``Verification``):
  lost, duplicated, reordered and misplaced, exactly as produce's verify reports them;
- ``kctl consume --verify`` on a topic someone else wrote: there are no
  acknowledgements to compare with, only the identities. Each producer worker's
  sequence numbers are dense, and within one partition they rise with the offsets;
  but a worker spreads them over partitions, and the read may cover only part of each
  partition (``--from 1000``, ``--num-records``, a partition never fetched). So a
  sequence never seen is *lost* only where the read proves it is not in the log: in
  every partition of the topic, its place lies inside what was read, i.e. between two
  records of that worker read there, or before the first one when the partition was
  read from its log start (``--from beginning`` in assign mode), or after the last one
  when the partition was read up to its end offset (``ReadExtent``). Sequences whose
  place falls outside a read range are not expected (neither found nor lost); per
  worker, nothing below the lowest sequence read is expected (retention, or a run
  that started earlier). One seen twice is duplicated, one that goes back within a
  partition reordered (misplaced needs acknowledged offsets and is 0). A record a live
  producer still had in flight when its partition was read to the end, while a later
  record of the same worker was read elsewhere, counts as lost: stop a live run with
  ``--idle-timeout`` rather than ``--duration`` when that matters.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kctl.load.verify import Verification
from kctl.protocol.identity import IDENTITY, ScannedBatch
from kctl.stats.consume_report import SeenRun
from kctl.stats.summary import VerifyResult

__all__ = ["ReadExtent", "verify_against_acks", "verify_sequences"]


@dataclass(frozen=True, slots=True)
class ReadExtent:
    """How much of one partition the consumers read: from its log start (nothing before
    the read), up to its end offset at the end of the run (nothing after it)."""

    from_log_start: bool = False
    to_end: bool = False


WHOLE: ReadExtent = ReadExtent(True, True)


def _batches(runs: Iterable[SeenRun]) -> list[ScannedBatch]:
    out = []
    for offset, count, tag, worker, seq in runs:
        ids = b"".join(IDENTITY.pack(tag, worker, seq + i, 0) for i in range(count))
        out.append(ScannedBatch(offset, offset + count, ids))
    return out


def verify_against_acks(run_id: str, acked: Mapping[int, Mapping[int, Iterable[tuple[int, int, int]]]],
                        seen: Mapping[int, list[SeenRun]]) -> VerifyResult:
    started = time.monotonic()
    # The consumers started at each partition's end before the run: whatever of the run
    # they handed out counts for records acknowledged without an offset (acks=0).
    v = Verification(run_id, acked, since={p: 0 for parts in acked.values() for p in parts})
    for partition, runs in sorted(seen.items()):
        v.add(partition, _batches(sorted(runs)))
    return v.result(time.monotonic() - started)


def verify_sequences(seen: Mapping[int, list[SeenRun]], extents: Mapping[int, ReadExtent] | None = None, *,
                     max_examples: int = 10) -> VerifyResult:
    """``extents``: every partition of the topic with how much of it was read (a
    partition missing from it was not read at all); None: the partitions in ``seen``,
    each read whole."""
    started = time.monotonic()
    if extents is None:
        extents = {p: WHOLE for p in seen}
    found: dict[tuple[bytes, int], bytearray] = {}
    lowest: dict[tuple[bytes, int], int] = {}
    # per (run tag, worker), per partition: the lowest and highest sequence read there
    bounds: dict[tuple[bytes, int], dict[int, list[int]]] = {}
    per_partition: dict[int, dict[str, int]] = {}
    total = duplicated = reordered = 0
    dup_examples: list[tuple[int, int]] = []
    for partition, runs in sorted(seen.items()):
        stats = per_partition.setdefault(partition, {"expected": 0, "found": 0, "reordered": 0})
        last: dict[tuple[bytes, int], int] = {}
        for offset, count, tag, worker, seq in sorted(runs):
            key = (tag, worker)
            arr = found.setdefault(key, bytearray())
            if len(arr) < seq + count:
                arr.extend(bytes(seq + count - len(arr)))
            lowest[key] = min(lowest.get(key, seq), seq)
            b = bounds.setdefault(key, {}).setdefault(partition, [seq, seq + count - 1])
            b[0], b[1] = min(b[0], seq), max(b[1], seq + count - 1)
            seg = arr[seq:seq + count]
            if seg.count(0) == count:
                arr[seq:seq + count] = b"\x01" * count
            else:
                for s in range(seq, seq + count):
                    if arr[s]:
                        duplicated += 1
                        if len(dup_examples) < max_examples:
                            dup_examples.append((worker, s))
                    arr[s] = min(255, arr[s] + 1)
            if seq < last.get(key, -1):
                reordered += 1
                stats["reordered"] += 1
            last[key] = max(last.get(key, -1), seq + count - 1)
            total += count
            stats["found"] += count
            stats["expected"] += count
    expected = lost = 0
    lost_examples: list[tuple[int, int]] = []
    all_partitions = set(extents) | set(seen)
    for key, arr in found.items():
        lo, hi = _proven_range(bounds[key], extents, all_partitions, lowest[key], len(arr) - 1)
        span = arr[lo:hi + 1] if lo <= hi else b""
        missing = span.count(0)
        expected += len(arr) - arr.count(0) + missing
        lost += missing
        if missing and len(lost_examples) < max_examples:
            lost_examples.extend((key[1], lo + i) for i, x in enumerate(span) if not x)
            del lost_examples[max_examples:]
    return VerifyResult(expected, total, lost, duplicated, reordered, 0, tuple(lost_examples),
                        tuple(dup_examples), per_partition, time.monotonic() - started)


def _proven_range(bounds: Mapping[int, list[int]], extents: Mapping[int, ReadExtent], partitions: set[int],
                  lowest: int, highest: int) -> tuple[int, int]:
    """The sequences of one producer worker whose place lies inside the read in every
    partition (module docstring): an unseen one among them is in no partition's log."""
    lo, hi = lowest, highest
    for p in partitions:
        ext = extents.get(p, ReadExtent())
        b = bounds.get(p)
        if b is None:
            # None of this worker's records read here: only a partition read whole rules one out.
            if not (ext.from_log_start and ext.to_end):
                return 0, -1
            continue
        if not ext.from_log_start:
            lo = max(lo, b[0] + 1)
        if not ext.to_end:
            hi = min(hi, b[1] - 1)
    return lo, hi
