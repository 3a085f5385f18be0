"""Latency recording for the three clocks, per append slice with a count.

How this works
--------------
Every acknowledged batch carries its append slices (``AppendSlice(count, appended_ns,
intended_first_ns, intended_step_ns)``, see ``kctl/engine/batch.py``). A worker calls
``LatencyRecorder.record_batch(ack_ns, sent_ns, batch.slices)`` once per acked batch;
the cost is at most ``groups + 1`` counts-array increments per slice plus one per batch,
never a Python step per record (the hot-path budget in design.md): about 13 µs for a
150-record batch of 3 slices, 0.09 µs per record.

The clocks (all end at ``ack_ns``, the moment the response was read):

``intended``  minus the record's intended send time on the open-loop schedule. The
              records of a slice were meant to go at ``first + i*step`` (i = 0..count-1),
              so their latencies form an arithmetic range (a slice that holds one
              partition's share of a keyed slice lists its records' schedule
              positions instead; its groups are then placed at the midpoint of their
              first and last record, within the same bound of the slice's span). The range is recorded as at
              most ``groups`` (default 8) contiguous groups, each at its midpoint with
              its count: every record's value is off by at most
              ``step * (ceil(count/groups) - 1) / 2 <= step * count / (2*groups)``
              (about 1/16 of the slice's span with 8 groups), and the group's count is
              exact. A slice with ``intended_first_ns < 0`` has no schedule
              (max-throughput mode, or the general ``send()`` path): nothing is recorded
              for it on this clock.
``send``      minus ``appended_ns``, the moment kctl handed the records to the engine.
``request``   minus ``sent_ns``, the moment the request carrying the batch (its last
              attempt) was written to the socket; skipped when ``sent_ns < 0``.

Values are integer MICROseconds, clamped to [1 µs, 1 hour]; a value above an hour is
recorded as one hour and counted in ``LatencyRecorder.clamped``. Histograms track 1 µs
.. 1 hour with 3 significant digits (a value is known to 0.1 %).

Only acknowledged batches are recorded: a failed record has no latency.

Histograms travel between processes as hdrh's compressed, base64 V2 encoding
(``encode_histogram`` / ``decode_histogram``), the same payload the interval log uses.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hdrh.histogram import HdrHistogram

from kctl.engine.batch import AppendSlice
from kctl.percentiles import values_at_percentiles

__all__ = [
    "CLOCKS", "HIGHEST_US", "HistogramSink", "INTENDED_GROUPS", "LOWEST_US", "PERCENTILES",
    "SIGNIFICANT_DIGITS",
    "LatencyFigures", "LatencyRecorder", "decode_histogram", "encode_histogram",
    "histogram_mean", "new_histogram",
]

#: The clocks, in the order they are shown and logged.
CLOCKS = ("intended", "send", "request")

LOWEST_US = 1
HIGHEST_US = 3_600_000_000       # one hour
SIGNIFICANT_DIGITS = 3
#: Groups an intended-time range of one slice is recorded as (error bound: see module doc).
INTENDED_GROUPS = 8

#: Percentiles reported in summaries and dashboards: (key suffix, percentile).
PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p95", 95.0), ("p99", 99.0), ("p999", 99.9),
               ("p9999", 99.99))


def new_histogram() -> HdrHistogram:
    """An empty histogram of kctl's layout (µs, 1 µs .. 1 hour, 3 digits)."""
    return HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)


def encode_histogram(h: HdrHistogram) -> bytes:
    """hdrh's compressed base64 encoding (ASCII bytes), as in an ``.hlog`` line."""
    return h.encode()


def decode_histogram(data: bytes | str) -> HdrHistogram:
    return HdrHistogram.decode(data)


def histogram_mean(h: HdrHistogram) -> float:
    """Mean of the recorded values (each at the middle of its equivalent range, as
    HdrHistogram's own mean). hdrh's ``get_mean_value`` walks an iterator object per
    value (about 0.1 s for a busy histogram); this walks the counts array once."""
    n = h.get_total_count()
    if not n:
        return 0.0
    last = h.get_counts_array_index(h.get_max_value())
    counts = h.counts[: last + 1]
    total = 0
    value_at = h.get_value_from_index
    highest = h.get_highest_equivalent_value
    for i, c in enumerate(counts):
        if c:
            v = value_at(i)
            total += c * ((v + highest(v) + 1) // 2)
    return total / n


@dataclass(frozen=True, slots=True)
class LatencyFigures:
    """One clock's figures, in milliseconds (``count`` records).

    ``negative`` and ``min_ms`` are set only for a clock whose values can be negative
    (``e2e``: consume time minus intended send time across two clocks, stats/e2e.py):
    how many values were below zero, and the smallest (signed) value. Its percentiles
    are then over the signed values."""

    p50_ms: float
    p90_ms: float
    p95_ms: float       # kafka-producer-perf-test's closing line reports the 95th
    p99_ms: float
    p999_ms: float
    p9999_ms: float
    max_ms: float
    mean_ms: float
    count: int
    negative: int | None = None
    min_ms: float | None = None

    @classmethod
    def from_histogram(cls, h: HdrHistogram | None) -> LatencyFigures:
        """From a histogram in µs (every clock's, e2e's too): percentiles ranked as Java's
        HdrHistogram ranks them (kctl/percentiles.py), so a reader of the .hlog gets the
        same figures."""
        if h is None or not h.get_total_count():
            return EMPTY_FIGURES
        per_ms = 1000
        pct = values_at_percentiles(h, [p for _, p in PERCENTILES])
        vals = [pct[p] / per_ms for _, p in PERCENTILES]
        return cls(*vals, max_ms=h.get_max_value() / per_ms,
                   mean_ms=histogram_mean(h) / per_ms, count=h.get_total_count())

    @classmethod
    def from_dict(cls, d: dict[str, float | int]) -> LatencyFigures:
        negative = d.get("negative")
        min_ms = d.get("min_ms")
        return cls(**{k: float(d.get(k, 0.0)) for k in _FLOAT_FIELDS},
                   count=int(d.get("count", 0)),
                   negative=int(negative) if negative is not None else None,
                   min_ms=float(min_ms) if min_ms is not None else None)

    def to_dict(self) -> dict[str, float | int]:
        out: dict[str, float | int] = {
            "p50_ms": self.p50_ms, "p90_ms": self.p90_ms, "p95_ms": self.p95_ms,
            "p99_ms": self.p99_ms, "p999_ms": self.p999_ms, "p9999_ms": self.p9999_ms,
            "max_ms": self.max_ms, "mean_ms": round(self.mean_ms, 3), "count": self.count}
        if self.negative is not None:
            out["negative"] = self.negative
            out["min_ms"] = self.min_ms if self.min_ms is not None else 0.0
        return out

    def percentile_ms(self, key: str) -> float:
        """A figure by its summary key without ``_ms`` (``p99``, ``max``, ``mean``)."""
        return float(getattr(self, f"{key}_ms"))


#: LatencyFigures' millisecond fields, by name (from_dict reads them so, never by position).
_FLOAT_FIELDS = ("p50_ms", "p90_ms", "p95_ms", "p99_ms", "p999_ms", "p9999_ms", "max_ms", "mean_ms")

EMPTY_FIGURES = LatencyFigures(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0)


class HistogramSink:
    """One clock's interval histogram, recorded into directly (``h``: an empty histogram
    of unit magnitude 0 and 3 significant digits, values up to ``highest``; by default
    a latency clock's, in µs; stats/e2e.py records e2e into two of them).

    hdrh's ``record_value`` costs about 1 µs in Python (five method calls per value);
    this computes the counts index inline for kctl's fixed layout (unit magnitude 0,
    2048 sub-buckets: the same arithmetic as hdrh's ``_counts_index_for``) and keeps
    total/min/max on the side, handing them to the histogram in ``finish()``. A test
    checks it against ``record_value`` value for value.
    """

    __slots__ = ("h", "counts", "total", "lo", "hi")

    def __init__(self, h: HdrHistogram | None = None, highest: int = HIGHEST_US) -> None:
        self.h = new_histogram() if h is None else h
        if self.h.unit_magnitude != 0 or self.h.sub_bucket_half_count_magnitude != _HALF_MAG:
            raise AssertionError("histogram layout changed: update HistogramSink")
        self.counts = self.h.counts
        self.total = 0
        self.lo = highest + 1
        self.hi = -1

    def finish(self) -> HdrHistogram:
        h = self.h
        if self.total:
            h.total_count += self.total
            h.min_value = min(h.min_value, self.lo)
            h.max_value = max(h.max_value, self.hi)
        return h


_HALF_MAG = 10                      # log2(sub-bucket count / 2) for 3 significant digits
_SUB_MASK = (1 << (_HALF_MAG + 1)) - 1
_SUB_BITS = _HALF_MAG + 1
_HALF = 1 << _HALF_MAG


class LatencyRecorder:
    """The three clocks' histograms for the current interval, in one worker.

    Not thread-safe: it lives on the worker's engine thread, like the engine's counters.
    """

    __slots__ = ("groups", "clamped", "recorded", "_sinks")

    def __init__(self, groups: int = INTENDED_GROUPS) -> None:
        if groups < 1:
            raise ValueError("groups must be >= 1")
        self.groups = groups
        self.clamped = 0       # values above one hour, recorded as one hour (cumulative)
        self.recorded = 0      # records recorded on the send clock (cumulative)
        self._sinks = {c: HistogramSink() for c in CLOCKS}

    def record_batch(self, ack_ns: int, sent_ns: int, slices: Iterable[AppendSlice]) -> None:
        """Records every record of one acknowledged batch, per slice with counts.

        ``slices``: ``AppendSlice``s, or any tuples starting (count, appended_ns,
        intended_first_ns, intended_step_ns) (then the records are consecutive on
        the schedule)."""
        sinks = self._sinks
        send = sinks["send"]
        total = 0
        for s in slices:
            count = s[0]
            if count <= 0:
                continue
            total += count
            self._add(send, ack_ns - s[1], count)
            if s[2] >= 0:
                positions = s[5] if len(s) > 5 else None
                if positions is None:
                    self._record_range(sinks["intended"], ack_ns - s[2], s[3], count)
                elif type(positions) is range:
                    # Every k-th record of the schedule (one partition's share of a
                    # round-robin slice): still an arithmetic range.
                    first = s[2] + (positions.start - s[6]) * s[3]
                    self._record_range(sinks["intended"], ack_ns - first, s[3] * positions.step, count)
                else:
                    self._record_positions(sinks["intended"], ack_ns - s[2], s[3], positions, s[6])
        if total:
            self.recorded += total
            if sent_ns >= 0:
                # One request carried the whole batch: one value for all its records.
                self._add(sinks["request"], ack_ns - sent_ns, total)

    def _record_range(self, sink: HistogramSink, first_latency_ns: int, step_ns: int, count: int) -> None:
        # Record i has latency first_latency_ns - i*step_ns (later intended time, shorter wait).
        groups = self.groups if count > self.groups else count
        if step_ns * (count - 1) < 1000:      # the whole range fits in one microsecond
            groups = 1
        if groups == 1:
            self._add(sink, first_latency_ns - step_ns * (count - 1) // 2, count)
            return
        lo = 0
        add = self._add
        for g in range(1, groups + 1):
            hi = count * g // groups
            # midpoint of indices lo..hi-1 is (lo+hi-1)/2
            add(sink, first_latency_ns - step_ns * (lo + hi - 1) // 2, hi - lo)
            lo = hi

    def _record_positions(self, sink: HistogramSink, first_latency_ns: int, step_ns: int,
                          positions: Sequence[int], base: int) -> None:
        # Records at schedule positions k (less ``base``): latency first - k*step. As
        # ``_record_range``: at most ``groups`` groups of consecutive records, each at the
        # midpoint of its first and last record's latency, with its exact count.
        count = len(positions)
        groups = self.groups if count > self.groups else count
        lo = 0
        add = self._add
        for g in range(1, groups + 1):
            hi = count * g // groups
            mid2 = positions[lo] + positions[hi - 1] - 2 * base
            add(sink, first_latency_ns - step_ns * mid2 // 2, hi - lo)
            lo = hi

    def _add(self, sink: HistogramSink, ns: int, count: int) -> None:
        v = ns // 1000
        if v < LOWEST_US:
            v = LOWEST_US
        elif v > HIGHEST_US:
            self.clamped += 1
            v = HIGHEST_US
        b = (v | _SUB_MASK).bit_length() - _SUB_BITS
        sink.counts[((b + 1) << _HALF_MAG) + (v >> b) - _HALF] += count
        sink.total += count
        if v < sink.lo:
            sink.lo = v
        if v > sink.hi:
            sink.hi = v

    def interval(self) -> dict[str, HdrHistogram]:
        """This interval's histograms by clock; recording starts afresh."""
        out = {c: s.finish() for c, s in self._sinks.items()}
        self._sinks = {c: HistogramSink() for c in CLOCKS}
        return out

    def encode_interval(self) -> dict[str, bytes]:
        """``interval()``, encoded for ``WorkerInterval.histograms``."""
        return {c: encode_histogram(h) for c, h in self.interval().items()}
