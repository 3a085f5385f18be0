"""``--verify`` from the consumer side: what the consumers handed out, checked.

Two cases:

- the run knows what was acknowledged (``kctl produce --consume``, ``kctl consume
  --backlog``): the consumers' runs of (offset, producer worker, sequence) go through
  the same accounting as ``kctl produce --verify`` (load/verify.py's ``Verification``):
  lost, duplicated, reordered and misplaced, exactly as produce's verify reports them;
- ``kctl consume --verify`` on a topic someone else wrote: there are no
  acknowledgements to compare with, only the identities. Each producer worker's
  sequence numbers are dense from where its records start, so per (run, worker) the
  records between the first and the last sequence seen are expected: a sequence never
  seen is lost, one seen twice duplicated, one that goes back within a partition
  reordered (misplaced needs acknowledged offsets and is 0).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from kctl.load.verify import Verification
from kctl.protocol.identity import IDENTITY, ScannedBatch
from kctl.stats.consume_report import SeenRun
from kctl.stats.summary import VerifyResult

__all__ = ["verify_against_acks", "verify_sequences"]


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


def verify_sequences(seen: Mapping[int, list[SeenRun]], *, max_examples: int = 10) -> VerifyResult:
    started = time.monotonic()
    found: dict[tuple[bytes, int], bytearray] = {}
    lowest: dict[tuple[bytes, int], int] = {}
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
    for key, arr in found.items():
        lo = lowest[key]
        span = arr[lo:]
        expected += len(span)
        missing = span.count(0)
        lost += missing
        if missing and len(lost_examples) < max_examples:
            lost_examples.extend((key[1], lo + i) for i, x in enumerate(span) if not x)
            del lost_examples[max_examples:]
    return VerifyResult(expected, total, lost, duplicated, reordered, 0, tuple(lost_examples),
                        tuple(dup_examples), per_partition, time.monotonic() - started)
