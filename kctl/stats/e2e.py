"""The fourth clock, ``e2e``: consume time minus the record's intended send time.

How this works
--------------
Every record a kctl load run writes carries its intended send time in its ``kctl``
identity header (ns since the Unix epoch, protocol/identity.py): its time on the
open-loop schedule, so a stalled producer shows up here as it does on the intended
clock (coordinated omission is not hidden). A consumer takes the moment it handed a
batch out (``ConsumedBatch.consumed_ns``, monotonic, turned into Unix epoch ns with the
consumer's clock offset taken once at start) and records, for every record,

    e2e = consume time - intended send time          (taken in nanoseconds)

Unit: the difference is taken in ns and recorded in whole MICROseconds (truncated toward
zero), into histograms of the producer clocks' layout (``new_histogram``: 1 µs .. 1 hour,
3 significant digits, so a value is known to the µs below 2 ms and to 0.1 % above).
The printed figures, the summary and the ``.hlog`` all come from these same histograms,
so an HdrHistogram tool reading the log (tag ``e2e``) gets exactly the printed
percentiles and max (Java HdrHistogram's percentile rule, kctl/percentiles.py: the highest
equivalent value of the value at rank max(1, ceil(p/100 * count)), p nudged down one ulp),
as for the producer's clocks.
OpenMessaging Benchmark's figure, by contrast, comes from millisecond record timestamps.

Negative values happen when producer and consumer clocks differ (two hosts): they are
never clamped. A negative value's magnitude goes into a second histogram
(``e2e_negative``); a value above -1 µs is 0. Figures are then computed over the signed
values (``signed_figures``: the k-th smallest of all values, negatives first, with the
same rank rule) and say how many were negative (``LatencyFigures.negative``) and the
smallest (``min_ms``). The clock offset between the hosts is estimated and reported
separately (load/clock_sync.py).

Cost: one ``struct`` unpack per batch (the identities' columns) and about 0.2 µs per
record in the loop below (no object per record); a batch whose identities were not
scannable goes record by record through ``record``.

In the ``.hlog`` the tags are ``e2e`` and, when there are negatives, ``e2e_negative``
(magnitudes), in microseconds like the other clocks: one log has one unit.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

from hdrh.histogram import HdrHistogram

from kctl.percentiles import count_at_percentile, values_at_counts
from kctl.stats.latency import (
    _HALF,  # the counts-index arithmetic of HistogramSink's layout
    _HALF_MAG,
    _SUB_BITS,
    _SUB_MASK,
    HIGHEST_US,
    PERCENTILES,
    HistogramSink,
    LatencyFigures,
    encode_histogram,
    histogram_mean,
    new_histogram,
)

__all__ = ["E2E", "E2E_CLOCKS", "E2E_NEGATIVE", "E2eRecorder", "new_e2e_histogram", "signed_figures"]

E2E = "e2e"
E2E_NEGATIVE = "e2e_negative"
E2E_CLOCKS = (E2E, E2E_NEGATIVE)
_COLUMNS: dict[int, struct.Struct] = {}


def new_e2e_histogram() -> HdrHistogram:
    """An empty e2e histogram: the producer clocks' layout (µs, 1 µs .. 1 hour, 3 digits)."""
    return new_histogram()


class E2eRecorder:
    """e2e values of one consumer for the current interval (positive and negative sinks)."""

    __slots__ = ("negative", "clamped", "recorded", "_pos", "_neg")

    def __init__(self) -> None:
        self.negative = 0        # cumulative: values below zero
        self.clamped = 0         # cumulative: magnitudes above an hour, recorded as an hour
        self.recorded = 0        # cumulative
        self._pos = HistogramSink()
        self._neg = HistogramSink()

    def record_identities(self, consume_wall_ns: int, identities: bytes, count: int,
                          run_tag: bytes | None = None) -> int:
        """Every record of a batch's identities blob (``identity.IDENTITY`` layout); with
        ``run_tag``, only that run's records. Returns how many were recorded."""
        st = _COLUMNS.get(count)
        if st is None:
            st = _COLUMNS[count] = struct.Struct(">" + "4sIQq" * count)
        cols = st.unpack(identities)
        intended = cols[3::4]
        if run_tag is not None and cols[0::4].count(run_tag) != count:
            intended = tuple(t for tag, t in zip(cols[0::4], intended) if tag == run_tag)
        self.record_many(consume_wall_ns, intended)
        return len(intended)

    def record(self, consume_wall_ns: int, intended_ns: int) -> None:
        self.record_many(consume_wall_ns, (intended_ns,))

    def record_many(self, now: int, intended) -> None:
        """``now`` minus each intended send time (all Unix epoch ns), recorded in µs."""
        pos, neg = self._pos, self._neg
        pcounts, ncounts = pos.counts, neg.counts
        negative = clamped = 0
        for t in intended:
            v = now - t
            if v > -1000:               # truncated toward zero: -999 ns .. 999 ns is 0 µs
                v = v // 1000 if v > 0 else 0
                sink, counts = pos, pcounts
            else:
                v = -v // 1000
                negative += 1
                sink, counts = neg, ncounts
            if v > HIGHEST_US:
                v = HIGHEST_US
                clamped += 1
            b = (v | _SUB_MASK).bit_length() - _SUB_BITS
            counts[((b + 1) << _HALF_MAG) + (v >> b) - _HALF] += 1
            sink.total += 1
            if v < sink.lo:
                sink.lo = v
            if v > sink.hi:
                sink.hi = v
        self.negative += negative
        self.clamped += clamped
        self.recorded += len(intended)

    def interval(self) -> dict[str, HdrHistogram]:
        out = {E2E: self._pos.finish(), E2E_NEGATIVE: self._neg.finish()}
        self._pos, self._neg = HistogramSink(), HistogramSink()
        return out

    def encode_interval(self) -> dict[str, bytes]:
        return {c: encode_histogram(h) for c, h in self.interval().items()}


def signed_figures(pos: HdrHistogram | None, neg: HdrHistogram | None) -> LatencyFigures:
    """Figures over the signed values: ``pos`` holds the values >= 0, ``neg`` the
    magnitudes of the negative ones (both in µs). Without negatives these are exactly
    what an HdrHistogram reader computes from ``pos`` (``LatencyFigures.from_histogram``)."""
    p = pos.get_total_count() if pos is not None else 0
    q = neg.get_total_count() if neg is not None else 0
    n = p + q
    if not n:
        return LatencyFigures(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0, negative=0, min_ms=0.0)
    if not q:
        f = LatencyFigures.from_histogram(pos)
        return LatencyFigures(f.p50_ms, f.p90_ms, f.p95_ms, f.p99_ms, f.p999_ms, f.p9999_ms, f.max_ms,
                              f.mean_ms, f.count, negative=0, min_ms=pos.get_min_value() / 1e3)

    # Java's HdrHistogram rank over all n signed values; a rank among the negatives is the
    # (q - k + 1)-th smallest magnitude, negated (its bucket's lowest magnitude: the top of
    # its signed range), one among the rest the (k - q)-th value >= 0.
    ranks = [count_at_percentile(pc, n) for _, pc in PERCENTILES]
    low = values_at_counts(neg, [q - k + 1 for k in ranks if k <= q], highest=False)
    high = values_at_counts(pos, [k - q for k in ranks if k > q]) if p else {}
    vals = [-low[q - k + 1] / 1e3 if k <= q else high[k - q] / 1e3 for k in ranks]
    mean = ((histogram_mean(pos) * p if p else 0.0) - histogram_mean(neg) * q) / n / 1e3
    max_ms = pos.get_max_value() / 1e3 if p else -neg.get_min_value() / 1e3
    return LatencyFigures(*vals, max_ms=max_ms, mean_ms=mean, count=n, negative=q,
                          min_ms=-neg.get_max_value() / 1e3)


def merged(into: dict[str, HdrHistogram], hists: Mapping[str, HdrHistogram]) -> None:
    """Adds e2e histograms into ``into`` (creating them; empty ones skipped)."""
    for clock, h in hists.items():
        if not h.get_total_count():
            continue
        dest = into.get(clock)
        if dest is None:
            dest = into[clock] = new_e2e_histogram()
        dest.add(h)
