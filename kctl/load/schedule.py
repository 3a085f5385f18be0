"""The open-loop send schedule: when each record is meant to be sent.

How this works: a run at R records/s across W workers gives each worker R/W
records/s, with worker w's records offset by w/R seconds so that, together,
the workers' records are evenly spaced at 1/R. Record i of a worker is meant
to go at ``start_ns + phase_ns + i * interval_ns``. The schedule never adapts
to how fast records actually go (that is what makes it open-loop): a stalled
producer falls behind and catches up (below), and the delay shows up as
latency measured from these intended times instead of disappearing
(coordinated omission). Nothing here reads a clock.

How a late worker catches up (``CatchUp``): where records are due at least
``SPARSE_INTERVAL_NS`` apart (up to 1,000 records/s per worker), each goes out on
its own, and after a stall the backlog is not sent all at once: a worker hands
over at most ``ceil(rate x 10 ms) + 1`` records in any ``SMOOTH_WINDOW_NS``
(10.5 ms), so no 10 ms of its sends holds more than one record above the
schedule (at 1,000 records/s: 11, where the whole backlog at once after a 3 ms
stall puts 13 there). The backlog drains at that limit: about 5% above the rate
at 1,000 records/s, more at lower rates (one record per 10.5 ms is a larger
share of them); after a stall of 10 ms or more the first hand-overs fill the
limit at once, then one goes as each leaves the window. The worker polls
instead of sleeping while the limit holds a record back, so its wake-up
lateness does not slow the catch-up. The records stay late until the backlog
is gone, and that shows in their latency, measured from the intended times as
always. Denser schedules hand the records due so far over together (they share
batches anyway) and catch up at once.

At a stop (Ctrl-C, a fatal producer error) every record due by the worker's last
turn before it saw the stop counts as scheduled; those it never handed over (held
by the catch-up limit, or due since its last hand-over) are abandoned, with their
own reason (``unsent_at_stop``). The end of ``--duration`` is no stop: the
schedule's records are those due before it (``total``), and a late worker hands
them all over, at the catch-up limit, before it finishes.

Max-throughput mode (rate 0) has no intended times: ``due()`` says "as many as
you like" and latency is measured from the actual send.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

NS_PER_S = 1_000_000_000
#: Schedules whose records are due at least this far apart catch up smoothly.
SPARSE_INTERVAL_NS = 1_000_000
#: The window their sends are counted in: at most one above the schedule's count in it.
COUNTED_WINDOW_NS = 10_000_000
#: The window their hand-overs are limited in: the extra 0.5 ms absorbs the jitter
#: between hand-over and wire.
SMOOTH_WINDOW_NS = 10_500_000


@dataclass(frozen=True, slots=True)
class Schedule:
    """Record i is due at ``start_ns + phase_ns + floor(i x 1e9 / rate)`` ns, in integer
    arithmetic on the rate's exact value (``rate_ratio``): no float boundary, so a
    schedule over a duration D holds exactly the records whose time falls before D
    (rate x D of them when that is whole: 3000/s over 6 s is 18000, not 18001)."""

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
        """The spacing rounded to a nanosecond (a slice's records' intended times step by
        it; the schedule itself is ``intended_ns``)."""
        return round(NS_PER_S / self.rate) if self.rate > 0 else 0

    @property
    def rate_ratio(self) -> tuple[int, int]:
        """The rate as an exact ratio ``(num, den)`` of integers: record i is due
        ``i x 1e9 x den / num`` ns after the phase."""
        return rate_ratio(self.rate)

    @property
    def total(self) -> int | None:
        """Records this worker will send, when known in advance."""
        by_time = None
        if self.duration_ns is not None and self.rate > 0:
            # Records whose intended time falls inside the run: floor(i x 1e9 / rate) <
            # span, i.e. i < span x rate / 1e9.
            span = self.duration_ns - self.phase_ns
            num, den = self.rate_ratio
            by_time = 0 if span <= 0 else -(-span * num // (NS_PER_S * den))
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
        num, den = self.rate_ratio
        return self.start_ns + self.phase_ns + i * NS_PER_S * den // num

    def due(self, now_ns: int) -> int:
        """How many records (from the first) are due by ``now_ns``; capped by the total.
        Unpaced: the total (or a very large number when unbounded)."""
        total = self.total
        if not self.paced:
            return total if total is not None else 1 << 62
        elapsed = now_ns - self.start_ns - self.phase_ns
        # Record i is due when floor(i x 1e9 / rate) <= elapsed: i < (elapsed + 1) x rate / 1e9.
        num, den = self.rate_ratio
        n = 0 if elapsed < 0 else -(-(elapsed + 1) * num // (NS_PER_S * den))
        return n if total is None else min(n, total)

    def next_due_ns(self, sent: int) -> int:
        """When record number ``sent`` is due (the wake-up time when caught up)."""
        return self.intended_ns(sent) if self.paced else self.start_ns

    def catch_up(self) -> CatchUp | None:
        """The limit on this schedule's late records; None: overdue records go at once
        (unpaced, or records due closer together than ``SPARSE_INTERVAL_NS``)."""
        if not self.paced or self.interval_ns < SPARSE_INTERVAL_NS:
            return None
        on_schedule = math.ceil(self.rate * COUNTED_WINDOW_NS / NS_PER_S - 1e-9)
        return CatchUp(on_schedule + 1, SMOOTH_WINDOW_NS)

    def unsent_at_stop(self, handed: int, last_turn_ns: int) -> int:
        """At a stop (Ctrl-C, a fatal error): the records due by the worker's last turn
        before it saw the stop (``last_turn_ns``) that it never handed over (``handed``
        were): those the catch-up limit still held, or that came due since the last
        hand-over. They count as scheduled and abandoned, so every due record is
        counted. 0 unpaced (no record is ever due) and when the schedule ran out."""
        if not self.paced:
            return 0
        return max(0, self.due(last_turn_ns) - handed)

    def over(self, sent: int, now_ns: int) -> bool:
        """True when this worker has nothing left to send."""
        total = self.total
        if total is not None and sent >= total:
            return True
        return (not self.paced and self.duration_ns is not None
                and now_ns >= self.start_ns + self.duration_ns)


class CatchUp:
    """At most ``cap`` hand-overs in any ``window_ns``: the last ``cap`` hand-over
    times are kept, and the next may go once the oldest is ``window_ns`` old. The
    caller hands a record over as soon as it is allowed (polling meanwhile): each
    hand-over late by L makes the one ``cap`` after it allowed L later, so a loop
    that slept through the wait would fall behind once L exceeds the headroom
    (0.5 ms at 1,000 records/s)."""

    __slots__ = ("cap", "window_ns", "_recent")

    def __init__(self, cap: int, window_ns: int) -> None:
        if cap < 1 or window_ns <= 0:
            raise ValueError("a catch-up limit needs cap >= 1 and a positive window")
        self.cap = cap
        self.window_ns = window_ns
        self._recent: deque[int] = deque(maxlen=cap)

    @property
    def next_ok_ns(self) -> int:
        """The earliest time the next record may be handed over."""
        return self._recent[0] + self.window_ns if len(self._recent) == self.cap else 0

    def allowed(self, due: int, sent: int, now_ns: int) -> int:
        """How many of the ``due - sent`` overdue records may go at ``now_ns``: one or none."""
        return 1 if due > sent and now_ns >= self.next_ok_ns else 0

    def handed(self, now_ns: int) -> None:
        """A record was handed over at ``now_ns``."""
        self._recent.append(now_ns)


def window_ns(rate: float, *, num_records: int | None, duration_ns: int | None) -> int | None:
    """The whole run's schedule window (paced): ``num_records / rate`` or the duration,
    whichever is shorter; rates are measured over it. None in max-throughput mode."""
    if rate <= 0:
        return None
    by_count = round(num_records * NS_PER_S / rate) if num_records is not None else None
    if by_count is None:
        return duration_ns
    return by_count if duration_ns is None else min(by_count, duration_ns)


@lru_cache(maxsize=64)
def rate_ratio(rate: float) -> tuple[int, int]:
    """``rate`` (records/s) as an exact ratio of integers (a float's value is one)."""
    exact = Fraction(rate)
    return exact.numerator, exact.denominator


def scheduled_over(rate: float, duration_ns: int) -> int:
    """Records a run's schedule holds over ``duration_ns``: those at ``i / rate`` for i in
    [0, rate x D), in exact arithmetic (``ceil(rate x D)``)."""
    num, den = rate_ratio(rate)
    return -(-duration_ns * num // (NS_PER_S * den))


def split(rate: float, workers: int, start_ns: int, *, num_records: int | None,
          duration_ns: int | None) -> list[Schedule]:
    """One schedule per worker: the rate and the record count shared out evenly,
    each worker's records phase-shifted so the merged stream is evenly spaced
    (worker w's record i is the run's record w + i x workers, due at its time).
    Over a duration, each worker's share of the run's ``scheduled_over`` records is
    given as its record count, so the shares add up to the run's exactly (each worker's
    own rate is a rounded float)."""
    if workers < 1:
        raise ValueError("at least one worker")
    per_rate = rate / workers if rate > 0 else 0.0
    num, den = rate_ratio(rate) if rate > 0 else (0, 1)
    timed = scheduled_over(rate, duration_ns) if rate > 0 and duration_ns is not None else None
    out = []
    for w in range(workers):
        share = None
        if num_records is not None:
            share = num_records // workers + (1 if w < num_records % workers else 0)
        if timed is not None:
            # The run's records w, w + workers, ... below ``timed``.
            by_time = max(0, -(-(timed - w) // workers))
            share = by_time if share is None else min(share, by_time)
        # Floored: never after the exact time, so the worker's own count over the
        # duration never falls below the share it is given.
        phase = w * NS_PER_S * den // num if num else 0
        out.append(Schedule(per_rate, start_ns, phase, share, duration_ns))
    return out
