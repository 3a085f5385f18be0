"""The e2e clock (stats/e2e.py): µs resolution (the .hlog's unit), negatives counted and
kept signed (never clamped), the recorder's bucket arithmetic against hdrh's own
record_value, the run-tag filter, and the signed figures' percentile rule (Java HdrHistogram's rank)."""

from __future__ import annotations

import random
import struct

import pytest

from kctl.percentiles import count_at_percentile
from kctl.protocol.identity import IDENTITY
from kctl.stats.e2e import E2E, E2E_NEGATIVE, E2eRecorder, new_e2e_histogram, signed_figures
from kctl.stats.latency import PERCENTILES

NOW = 1_800_000_000_000_000_000     # a wall clock in ns


def test_recorder_buckets_match_hdrhistogram():
    rng = random.Random(7)
    values = [rng.choice((rng.randrange(0, 5000), rng.randrange(1, 10**9), rng.randrange(1, 3 * 10**12)))
              for _ in range(5000)]       # ns
    rec = E2eRecorder()
    rec.record_many(NOW, [NOW - v for v in values])
    got = rec.interval()[E2E]
    oracle = new_e2e_histogram()
    for v in values:
        oracle.record_value(v // 1000)    # whole µs
    assert list(got.counts) == list(oracle.counts)
    assert (got.get_total_count(), got.get_min_value(), got.get_max_value()) == \
        (oracle.get_total_count(), oracle.get_min_value(), oracle.get_max_value())


def test_microsecond_resolution_truncated_toward_zero():
    rec = E2eRecorder()
    rec.record_many(NOW, [NOW - 1_234_567] * 10)    # 1.234567 ms: 1234 µs, exact below 2 ms
    f = signed_figures(rec.interval()[E2E], None)
    assert f.p50_ms == f.max_ms == f.min_ms == 1.234
    assert f.negative == 0
    rec.record_many(NOW, [NOW - 999, NOW + 999, NOW + 1000])   # +-999 ns are 0 µs; -1 µs is negative
    h = rec.interval()
    assert h[E2E].get_total_count() == 2 and h[E2E].get_max_value() == 0
    assert h[E2E_NEGATIVE].get_total_count() == 1 and h[E2E_NEGATIVE].get_max_value() == 1
    assert rec.negative == 1


def test_negatives_are_counted_and_kept_signed():
    rec = E2eRecorder()
    rec.record_many(NOW, [NOW + 5_000_000] * 10 + [NOW - 3_000_000] * 90)   # 10 at -5 ms, 90 at +3 ms
    h = rec.interval()
    assert rec.negative == 10 and rec.recorded == 100
    f = signed_figures(h[E2E], h[E2E_NEGATIVE])
    assert f.count == 100 and f.negative == 10
    assert f.min_ms == pytest.approx(-5.0, rel=1e-3)       # the smallest value, negative
    assert f.p50_ms == pytest.approx(3.0, rel=1e-3) and f.max_ms == pytest.approx(3.0, rel=1e-3)
    assert f.mean_ms == pytest.approx((90 * 3.0 - 10 * 5.0) / 100, rel=1e-3)
    # Mostly negative: the median itself is below zero (not clamped to 0).
    rec.record_many(NOW, [NOW + 2_000_000] * 60 + [NOW - 1_000_000] * 40)
    h = rec.interval()
    f = signed_figures(h[E2E], h[E2E_NEGATIVE])
    assert f.p50_ms == pytest.approx(-2.0, rel=1e-3) and f.negative == 60
    assert f.p99_ms == pytest.approx(1.0, rel=1e-3)


def test_only_the_runs_records_with_a_run_tag():
    ids = b"".join(IDENTITY.pack(tag, 0, i, NOW - 1_000_000 * (i + 1))
                   for i, tag in enumerate([b"RUN1", b"RUN2", b"RUN1", b"RUN1"]))
    rec = E2eRecorder()
    assert rec.record_identities(NOW, ids, 4, run_tag=b"RUN1") == 3
    assert rec.record_identities(NOW, ids, 4) == 4
    h = rec.interval()[E2E]
    assert h.get_total_count() == 7
    assert struct.calcsize(">4sIQq") == IDENTITY.size == 24


def test_signed_figures_use_javas_rank_rule():
    """With negatives, the k-th smallest signed value for k = Java HdrHistogram's rank
    (kctl/percentiles.py: ceil of the percentile nudged one ulp down, times n / 100);
    without, the same rank over the histogram of values >= 0."""
    rng = random.Random(3)
    for n in (1, 3, 7, 13, 1000, 1001, 4567, 5999):
        values = [rng.randrange(-5_000_000, 50_000_000) for _ in range(n)]   # ns
        rec = E2eRecorder()
        rec.record_many(NOW, [NOW - v for v in values])
        h = rec.interval()
        f = signed_figures(h[E2E], h[E2E_NEGATIVE])
        # The oracle: every value's bucket edge (as the histograms hold them), sorted.
        signed = sorted(
            [h[E2E].get_highest_equivalent_value(int(v) // 1000) for v in values if v > -1000]
            + [-h[E2E_NEGATIVE].get_lowest_equivalent_value(-int(v) // 1000) for v in values if v <= -1000])
        for key, pc in PERCENTILES:
            assert getattr(f, f"{key}_ms") == signed[count_at_percentile(pc, n) - 1] / 1e3, (n, key)
        pos_only = new_e2e_histogram()
        for v in values:
            pos_only.record_value(abs(v) // 1000)
        g = signed_figures(pos_only, None)
        edges = sorted(pos_only.get_highest_equivalent_value(abs(v) // 1000) for v in values)
        for key, pc in PERCENTILES:
            assert getattr(g, f"{key}_ms") == edges[count_at_percentile(pc, n) - 1] / 1e3, (n, key)