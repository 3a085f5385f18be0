"""The e2e clock (stats/e2e.py): ns resolution, negatives counted and kept signed (never
clamped), the recorder's bucket arithmetic against hdrh's own record_value, the run-tag
filter, and the .hlog's microsecond form."""

from __future__ import annotations

import random
import struct

import pytest

from kctl.protocol.identity import IDENTITY
from kctl.stats.e2e import (E2E, E2E_NEGATIVE, E2eRecorder, new_e2e_histogram, signed_figures,
                            to_microseconds)

NOW = 1_800_000_000_000_000_000     # a wall clock in ns


def test_recorder_buckets_match_hdrhistogram():
    rng = random.Random(7)
    values = [rng.choice((rng.randrange(1, 5000), rng.randrange(1, 10**9), rng.randrange(1, 3 * 10**12)))
              for _ in range(5000)]
    rec = E2eRecorder()
    rec.record_many(NOW, [NOW - v for v in values])
    got = rec.interval()[E2E]
    oracle = new_e2e_histogram()
    for v in values:
        oracle.record_value(v)
    assert list(got.counts) == list(oracle.counts)
    assert (got.get_total_count(), got.get_min_value(), got.get_max_value()) == \
        (oracle.get_total_count(), oracle.get_min_value(), oracle.get_max_value())


def test_nanosecond_resolution():
    rec = E2eRecorder()
    rec.record_many(NOW, [NOW - 1234] * 10)         # 1.234 µs, exact below 2 µs
    f = signed_figures(rec.interval()[E2E], None)
    assert f.p50_ms == f.max_ms == pytest.approx(0.001234, abs=1e-9)
    assert f.negative == 0 and f.min_ms == pytest.approx(0.001234, abs=1e-9)


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


def test_hlog_form_is_microseconds():
    h = new_e2e_histogram()
    h.record_value(2_500_000, 3)       # 2.5 ms
    h.record_value(700, 1)             # 0.7 µs: at least 1 µs in the log
    us = to_microseconds(h)
    assert us.get_total_count() == 4
    assert us.get_max_value() == pytest.approx(2500, rel=1e-3)
    assert us.get_min_value() == 1
