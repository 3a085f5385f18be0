"""LatencyRecorder: per-slice recording with counts, the intended-range error bound."""

from __future__ import annotations

import pickle

import pytest

from kctl.engine.batch import AppendSlice
from kctl.stats.latency import (
    CLOCKS,
    HIGHEST_US,
    LatencyFigures,
    LatencyRecorder,
    decode_histogram,
    encode_histogram,
    histogram_mean,
    new_histogram,
)

MS = 1_000_000


def values(h) -> dict[int, int]:
    """Recorded values (lowest equivalent) -> counts."""
    return {h.get_lowest_equivalent_value(it.value_iterated_to): it.count_at_value_iterated_to
            for it in h.get_recorded_iterator()}


def test_send_and_request_exact_counts() -> None:
    rec = LatencyRecorder()
    slices = [AppendSlice(100, 10 * MS, -1, 0), AppendSlice(50, 12 * MS, -1, 0)]
    rec.record_batch(ack_ns=20 * MS, sent_ns=15 * MS, slices=slices)
    h = rec.interval()
    assert h["send"].get_total_count() == 150
    assert h["send"].get_count_at_value(10_000) == 100    # 10 ms
    assert h["send"].get_count_at_value(8_000) == 50
    assert h["request"].get_total_count() == 150
    assert h["request"].get_count_at_value(5_000) == 150
    # no schedule: nothing on the intended clock
    assert h["intended"].get_total_count() == 0
    # interval() reset the recorder
    assert all(x.get_total_count() == 0 for x in rec.interval().values())


def test_request_skipped_without_sent_time() -> None:
    rec = LatencyRecorder()
    rec.record_batch(5 * MS, -1, [AppendSlice(3, 1 * MS, -1, 0)])
    h = rec.interval()
    assert h["request"].get_total_count() == 0
    assert h["send"].get_total_count() == 3


def test_intended_range_counts_and_error_bound() -> None:
    rec = LatencyRecorder(groups=8)
    count, step = 1000, 20_000          # 1000 records meant 20 µs apart (50k/s)
    first = 0
    ack = first + 100 * MS
    rec.record_batch(ack, ack - MS, [AppendSlice(count, 50 * MS, first, step)])
    h = rec.interval()["intended"]
    assert h.get_total_count() == count
    vals = values(h)
    assert len(vals) == 8 and set(vals.values()) == {125}
    # every record's exact latency is within the bound of its group's recorded value
    bound_us = step * count / (2 * 8) / 1000          # 1.25 ms
    exact = sorted((ack - (first + i * step)) / 1000 for i in range(count))
    recorded = sorted(v for v, n in vals.items() for _ in range(n))
    for e, r in zip(exact, recorded):
        assert abs(e - r) <= bound_us + h.get_highest_equivalent_value(int(e)) - h.get_lowest_equivalent_value(int(e)) + 1
    # the mean is kept (groups at their midpoints)
    assert histogram_mean(h) == pytest.approx(sum(exact) / count, rel=1e-3)


def test_intended_small_slice_is_exact() -> None:
    rec = LatencyRecorder(groups=8)
    rec.record_batch(10 * MS, 9 * MS, [AppendSlice(4, 5 * MS, 1 * MS, MS)])
    h = rec.interval()["intended"]
    # 4 records <= 8 groups: one group each, exact
    assert values(h) == {9000: 1, 8000: 1, 7000: 1, 6000: 1}


def test_intended_zero_span_one_value() -> None:
    rec = LatencyRecorder()
    rec.record_batch(10 * MS, -1, [AppendSlice(500, 5 * MS, 2 * MS, 0)])
    assert values(rec.interval()["intended"]) == {8000: 500}


def test_clamping() -> None:
    rec = LatencyRecorder()
    # ack before the intended time (ahead of schedule) -> 1 µs; beyond an hour -> one hour
    rec.record_batch(1 * MS, -1, [AppendSlice(2, 0, 5 * MS, 0)])
    rec.record_batch(2 * 3600 * 1000 * MS, -1, [AppendSlice(1, 0, -1, 0)])
    h = rec.interval()
    assert h["intended"].get_count_at_value(1) == 2
    assert h["send"].get_max_value() >= HIGHEST_US
    assert rec.clamped == 1


def test_encode_decode_roundtrip_and_pickle() -> None:
    rec = LatencyRecorder()
    rec.record_batch(30 * MS, 20 * MS, [AppendSlice(10, 1 * MS, 0, 100_000)])
    enc = rec.encode_interval()
    assert set(enc) == set(CLOCKS) and all(isinstance(b, bytes) for b in enc.values())
    enc = pickle.loads(pickle.dumps(enc))
    h = decode_histogram(enc["intended"])
    assert h.get_total_count() == 10
    assert LatencyFigures.from_histogram(h).count == 10
    # empty histograms survive too
    assert decode_histogram(encode_histogram(new_histogram())).get_total_count() == 0


def test_figures() -> None:
    h = new_histogram()
    for v in range(1, 1001):
        h.record_value(v * 1000)           # 1..1000 ms
    f = LatencyFigures.from_histogram(h)
    assert f.count == 1000
    assert f.p50_ms == pytest.approx(500, rel=1e-3)
    assert f.p99_ms == pytest.approx(990, rel=1e-3)
    assert f.max_ms == pytest.approx(1000, rel=1e-3)
    assert f.mean_ms == pytest.approx(500.5, rel=1e-3)
    assert histogram_mean(h) == pytest.approx(h.get_mean_value())
    assert LatencyFigures.from_histogram(new_histogram()).count == 0


def test_inline_index_matches_hdrh_record_value() -> None:
    import random

    rng = random.Random(7)
    vals = [1, 2, 1023, 1024, 2047, 2048, 2049, 4095, 4096, 10**6, HIGHEST_US - 1, HIGHEST_US]
    vals += [rng.randint(1, HIGHEST_US) for _ in range(3000)]
    vals += [int(10 ** rng.uniform(0, 9.5)) for _ in range(3000)]
    rec = LatencyRecorder()
    ref = new_histogram()
    for i, v in enumerate(vals):
        v = min(v, HIGHEST_US)
        c = i % 5 + 1
        rec.record_batch(v * 1000, -1, [AppendSlice(c, 0, -1, 0)])
        ref.record_value(v, c)
    h = rec.interval()["send"]
    assert list(h.counts) == list(ref.counts)
    assert (h.get_total_count(), h.get_min_value(), h.get_max_value()) == \
        (ref.get_total_count(), ref.get_min_value(), ref.get_max_value())
    assert encode_histogram(h) == encode_histogram(ref)


def test_stats_layer_never_renders() -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", "import sys, kctl.stats; "
                          "print(sorted(m for m in ('rich', 'typer') if m in sys.modules))"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
