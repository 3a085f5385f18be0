"""kctl/percentiles.py: Java HdrHistogram's percentile rank (AbstractHistogram.getValueAtPercentile),
against hand-computed cases where Python hdrh's round-half-up rank differs."""

from __future__ import annotations

import random

from hdrh.histogram import HdrHistogram

from kctl.percentiles import count_at_percentile, value_at_percentile, values_at_counts, values_at_percentiles


def _histogram(values) -> HdrHistogram:
    h = HdrHistogram(1, 3_600_000_000, 3)
    for v in values:
        h.record_value(v)
    return h


def test_rank_is_the_ceil_of_the_nudged_percentile():
    # 99.9% of 13994 = 13980.006: Java takes the 13981st value (hdrh rounds to the 13980th).
    assert count_at_percentile(99.9, 13994) == 13981
    # 99% of 5999 = 5939.01: the 5940th (hdrh: 5939th).
    assert count_at_percentile(99.0, 5999) == 5940
    # 99.9 * 41000 / 100 is 40959.00000000001 in doubles: the one-ulp nudge keeps it 40959.
    assert count_at_percentile(99.9, 41000) == 40959
    assert count_at_percentile(50.0, 10) == 5 and count_at_percentile(50.0, 11) == 6
    # At least the first value; 100% is the last.
    assert count_at_percentile(0.0, 10) == 1 and count_at_percentile(99.99, 1) == 1
    assert count_at_percentile(100.0, 10) == 10 and count_at_percentile(150.0, 10) == 10


def _with_tail(n: int, tail: int, first: int) -> HdrHistogram:
    """n values: n - tail of 1 µs, then first, first + 1, ... (1 µs buckets below 2048)."""
    h = HdrHistogram(1, 3_600_000_000, 3)
    h.record_value(1, n - tail)
    for v in range(first, first + tail):
        h.record_value(v)
    return h


def test_values_where_the_rules_differ():
    h = _with_tail(5999, 100, 1001)              # rank 5940 is the 41st of the tail
    assert value_at_percentile(h, 99.0) == 1041
    assert h.get_value_at_percentile(99.0) == 1040     # Python hdrh's rank, 5939
    h = _with_tail(13994, 20, 101)               # rank 13981 is the 7th of the tail
    assert value_at_percentile(h, 99.9) == 107
    assert h.get_value_at_percentile(99.9) == 106


def test_zero_is_the_lowest_and_hundred_the_highest_equivalent_value():
    h = _histogram([3000, 3001, 9000, 9005])           # 3000..3001 share a 2 µs bucket; 9000..9007 one of 8
    assert value_at_percentile(h, 0.0) == 3000          # lowest equivalent value of the first
    assert value_at_percentile(h, 25.0) == 3001         # highest equivalent value of the same bucket
    assert value_at_percentile(h, 100.0) == 9007 == h.get_max_value()


def test_one_value():
    h = _histogram([12345])
    assert value_at_percentile(h, 0.0) == h.get_lowest_equivalent_value(12345) == 12344
    for p in (50.0, 99.9, 100.0):
        assert value_at_percentile(h, p) == h.get_highest_equivalent_value(12345) == 12351


def test_empty_or_missing_histogram_reads_zero():
    assert values_at_percentiles(None, (50.0, 99.0)) == {50.0: 0, 99.0: 0}
    assert values_at_percentiles(_histogram([]), (99.0,)) == {99.0: 0}


def test_one_walk_answers_many_percentiles_as_each_alone():
    rng = random.Random(7)
    for n in (1, 2, 999, 5999, 20011):
        values = [int(rng.lognormvariate(8, 1.5)) + 1 for _ in range(n)]
        h = _histogram(values)
        ps = [0.0, 1.0, 25.0, 50.0, 90.0, 95.0, 99.0, 99.9, 99.99, 100.0]
        together = values_at_percentiles(h, ps)
        edges = sorted(h.get_highest_equivalent_value(v) for v in values)   # the oracle: sorted
        for p in ps:
            assert together[p] == value_at_percentile(h, p)
            if p:
                assert together[p] == edges[count_at_percentile(p, n) - 1], (n, p)
        low = values_at_counts(h, [1, n], highest=False)
        assert low[1] == h.get_lowest_equivalent_value(min(values))


def test_a_capture_latency_rank_reads_the_same_from_a_histogram_and_exactly():
    """One rule for decode/inspect (histogram of rounded-up µs, capped at the exact max)
    and analyze (exact latencies ranked, then ``bucket_latency_ms``): the same float for
    every percentile, and the top rank is the max itself."""
    from kctl.inspect.summary import PERCENTILES, capped_percentiles
    from kctl.percentiles import bucket_latency_ms, latency_histogram, latency_us
    rng = random.Random(7)
    for n in (1, 2, 7, 101, 5999):
        lat = sorted(rng.choice((rng.randrange(1, 5_000), rng.randrange(1_000, 50_000_000),
                                 rng.randrange(1_000_000, 40_000_000_000))) for _ in range(n))
        h = latency_histogram()
        for x in lat:
            h.record_value(latency_us(x))
        top = lat[-1]
        from_hist = capped_percentiles(h, PERCENTILES, top, unit_ns=1_000_000)
        exact = {p: bucket_latency_ms(lat[count_at_percentile(p, n) - 1], top) for p in PERCENTILES}
        assert from_hist == exact, n
        assert exact[100.0] == top / 1e6


def test_one_latency_is_every_percentile_and_the_max():
    """One CreateTopics of 2.0779 ms: p50 = p100 = max = 2.0779 (before: whole µs rounded
    down put it in the 2076-2077 µs bucket, p50 2.077 beside a max of 2.078)."""
    from kctl.inspect.summary import ApiStats
    a = ApiStats()
    a.record_latency(2_077_900)
    lat = a.to_dict()["latency_ms"]
    assert lat["p50"] == lat["p99"] == lat["p100"] == lat["max"] == 2.0779 == lat["mean"]
