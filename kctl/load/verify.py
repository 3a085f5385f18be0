"""``--verify``: read the produced range back and account for every acknowledged record.

How this works: workers report the ranges they had acknowledged, per
partition, as runs of ``(offset, count, first_seq)``. The verifier reads each
partition from the lowest acknowledged offset to the end of the highest run
and identifies each record by its ``kctl-run``, ``kctl-worker`` and
``kctl-seq`` headers. Per worker it keeps one byte per sequence number (how
many times it was expected, how many times it was found), so memory is one
byte per record, not an object. It reports:

- lost: acknowledged but not found;
- duplicated: found more than once (each extra copy counts);
- reordered: within a partition, a worker's record that follows one of that
  worker's later records (sequence numbers must rise with offsets);
- misplaced: found, but not at the offset its acknowledgement gave.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kctl.engine import admin
from kctl.engine.blocking_client import BlockingClient


@dataclass(frozen=True)
class VerifyResult:
    expected: int
    found: int
    lost: int
    duplicated: int
    reordered: int
    misplaced: int
    lost_examples: tuple[tuple[int, int], ...] = ()        # (worker, seq)
    duplicate_examples: tuple[tuple[int, int], ...] = ()
    partitions: dict[int, dict[str, int]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.reordered or self.misplaced)

    def to_dict(self) -> dict:
        return {"ok": self.ok, "expected": self.expected, "found": self.found, "lost": self.lost,
                "duplicated": self.duplicated, "reordered": self.reordered,
                "misplaced": self.misplaced,
                "lost_examples": [list(x) for x in self.lost_examples],
                "duplicate_examples": [list(x) for x in self.duplicate_examples],
                "partitions": {str(k): v for k, v in self.partitions.items()}}


class _Tally:
    """Per worker: expected and found counts per sequence number, one byte each."""

    def __init__(self) -> None:
        self.expected: dict[int, bytearray] = {}
        self.found: dict[int, bytearray] = {}

    @staticmethod
    def _bump(table: dict[int, bytearray], worker: int, seq: int) -> int:
        arr = table.get(worker)
        if arr is None:
            arr = table[worker] = bytearray()
        if seq >= len(arr):
            arr.extend(bytes(max(seq + 1 - len(arr), len(arr) // 2)))
        if arr[seq] < 255:
            arr[seq] += 1
        return arr[seq]

    def expect(self, worker: int, seq: int) -> None:
        self._bump(self.expected, worker, seq)

    def find(self, worker: int, seq: int) -> int:
        return self._bump(self.found, worker, seq)


def _identity(headers, run_id: bytes) -> tuple[int, int] | None:
    run = worker = seq = None
    for h in headers:
        if h.key == "kctl-run":
            run = h.value
        elif h.key == "kctl-worker":
            worker = h.value
        elif h.key == "kctl-seq":
            seq = h.value
    if run != run_id or worker is None or seq is None or len(seq) != 8:
        return None
    try:
        return int(worker), int.from_bytes(seq, "big")
    except ValueError:
        return None


def _expected_at(placed: list[tuple[int, int, int, int]], starts: list[int],
                 offset: int) -> tuple[int, int] | None:
    i = bisect.bisect_right(starts, offset) - 1
    if i < 0:
        return None
    run_offset, count, worker, first_seq = placed[i]
    return (worker, first_seq + offset - run_offset) if offset < run_offset + count else None


def verify(client: BlockingClient, topic: str, run_id: str,
           acked: Mapping[int, Mapping[int, Iterable[tuple[int, int, int]]]],
           *, max_examples: int = 10) -> VerifyResult:
    """``acked``: worker -> partition -> runs of (offset, count, first_seq)."""
    tally = _Tally()
    # partition -> runs sorted by offset: (offset, count, worker, first_seq)
    where: dict[int, list[tuple[int, int, int, int]]] = {}
    ranges: dict[int, tuple[int, int]] = {}
    expected = 0
    for worker, parts in acked.items():
        for partition, runs in parts.items():
            placed = where.setdefault(partition, [])
            for offset, count, first_seq in runs:
                for i in range(count):
                    tally.expect(worker, first_seq + i)
                expected += count
                if offset < 0:
                    continue  # acknowledged without an offset: found anywhere is fine
                lo, hi = ranges.get(partition, (offset, offset + count))
                ranges[partition] = (min(lo, offset), max(hi, offset + count))
                placed.append((offset, count, worker, first_seq))
    for placed in where.values():
        placed.sort()
    rid = run_id.encode()
    found = duplicated = reordered = misplaced = 0
    dup_examples: list[tuple[int, int]] = []
    per_partition: dict[int, dict[str, int]] = {}
    for partition, (lo, hi) in sorted(ranges.items()):
        batches = admin.read_partition(client, topic, partition, start=lo, expect=hi - lo)
        last_seq: dict[int, int] = {}
        p_found = p_reordered = 0
        placed = where.get(partition, [])
        starts = [run[0] for run in placed]
        for b in batches:
            for r in b.records:
                if r.offset < lo or r.offset >= hi:
                    continue
                ident = _identity(r.headers, rid)
                if ident is None:
                    continue
                worker, seq = ident
                n = tally.find(worker, seq)
                found += 1
                p_found += 1
                if n > 1:
                    duplicated += 1
                    if len(dup_examples) < max_examples:
                        dup_examples.append(ident)
                if seq < last_seq.get(worker, -1):
                    reordered += 1
                    p_reordered += 1
                last_seq[worker] = max(seq, last_seq.get(worker, -1))
                want = _expected_at(placed, starts, r.offset)
                if want is not None and want != ident:
                    misplaced += 1
        per_partition[partition] = {"expected": hi - lo, "found": p_found, "reordered": p_reordered}
    lost = 0
    lost_examples: list[tuple[int, int]] = []
    for worker, exp in tally.expected.items():
        got = tally.found.get(worker, bytearray())
        for seq, e in enumerate(exp):
            if e and (seq >= len(got) or got[seq] == 0):
                lost += 1
                if len(lost_examples) < max_examples:
                    lost_examples.append((worker, seq))
    return VerifyResult(expected, found, lost, duplicated, reordered, misplaced,
                        tuple(lost_examples), tuple(dup_examples), per_partition)
