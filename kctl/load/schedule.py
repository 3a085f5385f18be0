"""The open-loop send schedule: when each record is meant to be sent.

How this works: a run at R records/s across W workers gives each worker R/W
records/s, with worker w's records offset by w/R seconds so that, together,
the workers' records are evenly spaced at 1/R. Record i of a worker is meant
to go at ``start_ns + phase_ns + i * interval_ns``. The schedule never adapts
to how fast records actually go (that is what makes it open-loop): a stalled
producer falls behind, its backlog is sent as fast as the engine allows, and
the delay shows up as latency measured from these intended times instead of
disappearing (coordinated omission). Nothing here reads a clock.

Max-throughput mode (rate 0) has no intended times: ``due()`` says "as many as
you like" and latency is measured from the actual send.
"""

from __future__ import annotations

from dataclasses import dataclass

NS_PER_S = 1_000_000_000


@dataclass(frozen=True, slots=True)
class Schedule:
    rate: float                 # this worker's records/s; 0 = as fast as possible
    start_ns: int               # monotonic time of the run's start (this process's clock)
    phase_ns: int = 0           # this worker's offset within the run's spacing
    num_records: int | None = None     # this worker's share; None = bounded by duration
    duration_ns: int | None = None

    @property
    def paced(self) -> bool:
        return self.rate > 0

    @property
    def interval_ns(self) -> int:
        return round(NS_PER_S / self.rate) if self.rate > 0 else 0

    @property
    def total(self) -> int | None:
        """Records this worker will send, when known in advance."""
        by_time = None
        if self.duration_ns is not None and self.rate > 0:
            # Records whose intended time falls inside the run.
            span = self.duration_ns - self.phase_ns
            by_time = 0 if span <= 0 else -(-span // self.interval_ns)
        if self.num_records is None:
            return by_time
        return self.num_records if by_time is None else min(self.num_records, by_time)

    @property
    def end_ns(self) -> int | None:
        """The end of this worker's window (paced): when its next record would be due
        after the last, never past the run's duration. None: no window (max
        throughput, or no bound)."""
        total = self.total
        if not self.paced or total is None:
            return None
        end = self.start_ns + self.phase_ns + total * self.interval_ns
        if self.duration_ns is not None:
            end = min(end, self.start_ns + self.duration_ns)
        return end

    def intended_ns(self, i: int) -> int:
        return self.start_ns + self.phase_ns + i * self.interval_ns

    def due(self, now_ns: int) -> int:
        """How many records (from the first) are due by ``now_ns``; capped by the total.
        Unpaced: the total (or a very large number when unbounded)."""
        total = self.total
        if not self.paced:
            return total if total is not None else 1 << 62
        elapsed = now_ns - self.start_ns - self.phase_ns
        n = 0 if elapsed < 0 else elapsed // self.interval_ns + 1
        return n if total is None else min(n, total)

    def next_due_ns(self, sent: int) -> int:
        """When record number ``sent`` is due (the wake-up time when caught up)."""
        return self.intended_ns(sent) if self.paced else self.start_ns

    def over(self, sent: int, now_ns: int) -> bool:
        """True when this worker has nothing left to send."""
        total = self.total
        if total is not None and sent >= total:
            return True
        return (not self.paced and self.duration_ns is not None
                and now_ns >= self.start_ns + self.duration_ns)


def window_ns(rate: float, *, num_records: int | None, duration_ns: int | None) -> int | None:
    """The whole run's schedule window (paced): ``num_records / rate`` or the duration,
    whichever is shorter; rates are measured over it. None in max-throughput mode."""
    if rate <= 0:
        return None
    by_count = round(num_records * NS_PER_S / rate) if num_records is not None else None
    if by_count is None:
        return duration_ns
    return by_count if duration_ns is None else min(by_count, duration_ns)


def split(rate: float, workers: int, start_ns: int, *, num_records: int | None,
          duration_ns: int | None) -> list[Schedule]:
    """One schedule per worker: the rate and the record count shared out evenly,
    each worker's records phase-shifted so the merged stream is evenly spaced."""
    if workers < 1:
        raise ValueError("at least one worker")
    per_rate = rate / workers if rate > 0 else 0.0
    gap = round(NS_PER_S / rate) if rate > 0 else 0
    out = []
    for w in range(workers):
        share = None
        if num_records is not None:
            share = num_records // workers + (1 if w < num_records % workers else 0)
        out.append(Schedule(per_rate, start_ns, w * gap, share, duration_ns))
    return out
