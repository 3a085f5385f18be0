"""Percentiles of an HdrHistogram, ranked as Java's HdrHistogram ranks them.

Every percentile kctl prints or writes (produce/consume summaries and interval lines, the
live views, e2e, bench tables and charts, ``kctl report``, ``kctl decode``/``inspect``
summaries, ``kctl analyze``'s nearest rank) comes from here, so a Kafka engineer reading
kctl's ``.hlog`` with Java's ``HistogramLogProcessor`` or ``HistogramLogReader`` gets the
very figures kctl printed.

The rule (Java ``AbstractHistogram.getValueAtPercentile``, HdrHistogram 2.1.10 and later),
with the percentile in percent and every step in IEEE doubles, in this order::

    requested = min(max(nextafter(percentile, -inf), 0.0), 100.0)
    count_at  = max(1, ceil(requested * total_count / 100.0))
    value     = highest equivalent value of the first bucket whose running count >= count_at
                (the LOWEST equivalent value when percentile == 0.0)

The one-ulp nudge keeps ``ceil`` from overrunning into the next record when the product is
a whole number plus rounding error. Python's ``hdrh`` rounds half up instead
(``int(p/100 * n + 0.5)``): p99 of 5999 values is the 5939th for hdrh, the 5940th for Java.
kafka-producer-perf-test's ``sorted[(int)(n * p)]`` is the ceil rank too.

Request latencies of a capture (``kctl decode --summary``, ``kctl inspect``'s summary,
``kctl analyze``) follow one rule, so the three give the same figures for the same traffic:
a latency is recorded as whole microseconds rounded UP (``latency_us``: 1 µs to 1 h) in
an HdrHistogram of 3 significant digits; a percentile is the highest equivalent value of
the bucket of its rank's latency (Java's ``getValueAtPercentile``), capped at the largest
latency measured, exact (``bucket_latency_ms``). Rounding up makes the cap the only thing
between a bucket value and its latency: the top rank's figure is the largest latency
itself, so ``p100 == max`` (one sample: every percentile is it). decode and inspect get
there through their histograms (``capped_percentiles``); analyze ranks the exact latencies
in Spark SQL and turns each rank's latency into the same figure with ``bucket_latency_ms``.

This module imports only ``hdrh``: ``kctl decode``/``inspect`` use it without loading the
engine (kctl.stats would).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable

from hdrh.histogram import HdrHistogram

__all__ = ["LATENCY_MAX_US", "bucket_latency_ms", "count_at_percentile", "latency_histogram", "latency_us",
           "requested_percentile", "value_at_percentile", "values_at_counts", "values_at_percentiles"]

#: A capture's request latencies: whole µs from 1 µs to an hour, 3 significant digits.
LATENCY_MAX_US = 3_600 * 1_000_000


def latency_histogram() -> HdrHistogram:
    """An empty histogram of request latencies (µs, 3 significant digits)."""
    return HdrHistogram(1, LATENCY_MAX_US, 3)


def latency_us(latency_ns: int) -> int:
    """What a latency histogram records for ``latency_ns``: microseconds rounded up (the
    bucket's highest value is then never below the latency), within 1 µs .. 1 h."""
    return min(max(1, -(-latency_ns // 1000)), LATENCY_MAX_US)


@functools.cache
def _latency_shape() -> HdrHistogram:
    return latency_histogram()


def bucket_latency_ms(latency_ns: int, max_ns: int) -> float:
    """The figure (ms) a latency histogram gives for the rank ``latency_ns`` holds: the
    highest equivalent value of ``latency_us``'s bucket, capped at the largest latency
    measured, ``max_ns``; the same float ``capped_percentiles(..., unit_ns=1_000_000)``
    gives. ``kctl analyze`` applies it to the exact latency of each percentile's rank."""
    highest = _latency_shape().get_highest_equivalent_value(latency_us(latency_ns))
    return min(highest / 1000, max_ns / 1_000_000)


def requested_percentile(percentile: float) -> float:
    """Java's ``requestedPercentile``: ``percentile`` (in percent) one ulp lower, within
    [0, 100]. ``kctl analyze`` hands it to Spark SQL as a double literal and computes the
    rank there as ``count_at_percentile`` does."""
    return min(max(math.nextafter(percentile, -math.inf), 0.0), 100.0)


def count_at_percentile(percentile: float, total_count: int) -> int:
    """The 1-based rank (in ascending order) of the value Java's HdrHistogram reports for
    ``percentile`` (in percent) of ``total_count`` values: at least 1."""
    return max(1, math.ceil(requested_percentile(percentile) * total_count / 100.0))


def values_at_counts(h: HdrHistogram, counts: Iterable[int], *, highest: bool = True) -> dict[int, int]:
    """Rank -> the value of the ``rank``-th smallest recorded value (1-based), as the
    highest (or, ``highest=False``, the lowest) equivalent value of its bucket; one walk of
    the counts array for all ranks. A rank above the total count reads the last bucket.
    Empty histogram: 0 each."""
    wanted = sorted(set(counts))
    out: dict[int, int] = {}
    if not h.get_total_count() or not wanted:
        return dict.fromkeys(wanted, 0)
    last = h.get_counts_array_index(h.get_max_value())
    edge = h.get_highest_equivalent_value if highest else h.get_lowest_equivalent_value
    value_at = h.get_value_from_index
    seen = 0
    j = 0
    index = 0
    for index, c in enumerate(h.counts[: last + 1]):
        if not c:
            continue
        seen += c
        while j < len(wanted) and seen >= wanted[j]:
            out[wanted[j]] = edge(value_at(index))
            j += 1
        if j == len(wanted):
            return out
    for rank in wanted[j:]:    # beyond the total count (a caller's rounding): the last bucket
        out[rank] = edge(value_at(index))
    return out


def values_at_percentiles(h: HdrHistogram | None, percentiles: Iterable[float]) -> dict[float, int]:
    """Percentile (in percent) -> value in the histogram's unit, as Java's
    ``getValueAtPercentile`` returns it; one walk of the counts for all percentiles.
    No histogram, or an empty one: 0 each."""
    percentiles = list(percentiles)
    if h is None or not h.get_total_count():
        return dict.fromkeys(percentiles, 0)
    n = h.get_total_count()
    ranks = {p: count_at_percentile(p, n) for p in percentiles}
    top = values_at_counts(h, ranks.values())
    out = {p: top[ranks[p]] for p in percentiles}
    if 0.0 in ranks:   # Java: the lowest equivalent value of the first recorded bucket
        out[0.0] = values_at_counts(h, (ranks[0.0],), highest=False)[ranks[0.0]]
    return out


def value_at_percentile(h: HdrHistogram | None, percentile: float) -> int:
    """One percentile (in percent), as Java's ``getValueAtPercentile``."""
    return values_at_percentiles(h, (percentile,))[percentile]
