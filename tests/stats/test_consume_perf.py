"""kafka-consumer-perf-test's closing arithmetic (ConsumerPerformance.main's final stats)
on fixed inputs: start before subscribing, fetch.time.ms = elapsed - rebalance.time.ms,
MB.sec / nMsg.sec over the elapsed time, fetch.* over fetch.time.ms."""

from __future__ import annotations

import pytest

from kctl.stats.consume_perf import PerfTestTimes, perf_test_figures
from kctl.stats.consume_summary import ConsumeSummary
from kctl.ui.consume_view import perf_test_lines


def test_columns_add_up_and_rates_use_their_own_spans():
    # 25 s from start to end, 23 s of it joining: 2 s fetching 40000 records of 100 bytes.
    f = perf_test_figures(40_000, 4_000_000, PerfTestTimes(1_000_000, 1_025_000, 23_000))
    mb = 4_000_000 / 2**20
    assert (f.start_ms, f.end_ms, f.rebalance_ms, f.fetch_ms) == (1_000_000, 1_025_000, 23_000, 2_000)
    assert f.end_ms - f.start_ms - f.rebalance_ms == f.fetch_ms
    assert f.mb == pytest.approx(mb)
    assert f.mb_per_s == pytest.approx(mb / 25.0) and f.records_per_s == pytest.approx(1600.0)
    assert f.fetch_mb_per_s == pytest.approx(mb / 2.0) and f.fetch_records_per_s == pytest.approx(20_000.0)


def test_no_rebalance_gives_equal_rates_and_a_zero_span_gives_zero_rates():
    f = perf_test_figures(500, 50_000, PerfTestTimes(10_000, 12_000, 0))
    assert f.fetch_ms == 2_000 and f.mb_per_s == f.fetch_mb_per_s and f.records_per_s == f.fetch_records_per_s == 250.0
    z = perf_test_figures(0, 0, PerfTestTimes(10_000, 10_000, 0))
    assert (z.fetch_ms, z.mb_per_s, z.records_per_s, z.fetch_mb_per_s) == (0, 0.0, 0.0, 0.0)
    # A rebalance time beyond the span (clock granularity) is clamped: fetch.time.ms never < 0.
    c = perf_test_figures(10, 1_000, PerfTestTimes(10_000, 10_050, 60))
    assert (c.rebalance_ms, c.fetch_ms, c.fetch_records_per_s) == (50, 0, 0.0)


def test_values_line_prints_the_figures_in_perf_tests_formats():
    doc = {"schema": "kctl.consume.summary/1", "run": {"id": "abc", "start": "", "end": "", "start_unix_ms": 1_767_225_603_000,
                   "end_unix_ms": 1_767_225_605_000, "duration_s": 2.0, "measured_s": 2.0, "consumers": 2,
                   "mode": "group", "intervals": 2, "caught_up": False},
           "counts": {"records": 40_000, "key_value_bytes": 4_000_000}}
    s = ConsumeSummary.from_json(doc)
    _, values = perf_test_lines(s, PerfTestTimes(1_767_225_580_000, 1_767_225_605_000, 23_000))
    cols = [x.strip() for x in values.split(",")]
    assert cols[2:] == ["3.8147", "0.1526", "40000", "1600.0000", "23000", "2000", "1.9073", "20000.0000"]
    assert cols[0].endswith(":40:000") and cols[1].endswith(":05:000")   # the perf-test start, the end
    _, plain = perf_test_lines(s)    # no perf-test clock: the measured run, no rebalance
    assert [x.strip() for x in plain.split(",")][6:8] == ["0", "2000"]


def test_with_a_warmup_the_perf_test_window_is_the_measured_one():
    """--warmup leaves the warm-up's records out of the counts: the perf-test line's time
    starts at the warm-up's end too (not before subscribing), so its rates are the
    measured window's records over the measured window's time."""
    from kctl.engine.consumer_metrics import ConsumerMetricsSnapshot
    from kctl.load.consume_run import ConsumeResult
    from kctl.stats.consume_aggregate import ConsumeStats
    from kctl.stats.consume_report import ConsumerInterval

    sec = 1_000_000_000
    t0 = 1_800_000_000 * sec

    def interval(k: int, records: int, *, warmup: bool, final: bool = False) -> ConsumerInterval:
        m = ConsumerMetricsSnapshot(records_consumed=records, key_value_bytes=100 * records)
        return ConsumerInterval(0, t0 + k * sec, t0 + (k + 1) * sec, {}, m, warmup=warmup, final=final)

    st = ConsumeStats(consumers=1, start_wall_ns=t0)
    st.add(interval(0, 5000, warmup=True))             # 2 s of warm-up, 9000 records
    st.add(interval(1, 9000, warmup=True))
    st.add(interval(2, 10_000, warmup=False))          # then 2 s measured, 2000 records
    st.add(interval(3, 11_000, warmup=False, final=True))
    summary = st.summary()
    result = ConsumeResult(summary, {}, {}, False, st, setup_wall_ns=t0 - 3 * sec, rejoin_ns=0,
                           warmup_ns=2 * sec)
    times = result.perf_test_times()
    assert times.start_ms == (t0 + 2 * sec) // 1_000_000    # the warm-up's end, not set-up
    assert times.end_ms == (t0 + 4 * sec) // 1_000_000 and times.rebalance_ms == 0
    f = perf_test_figures(summary.counts.records, summary.counts.key_value_bytes, times)
    assert f.records == 2000 and f.records_per_s == 1000.0 == summary.rates.records_per_s
    assert f.fetch_ms == 2000 and f.fetch_records_per_s == 1000.0
    # Without a warm-up: Java's window, from before subscribing (joining = rebalance time).
    plain = ConsumeResult(summary, {}, {}, False, st, setup_wall_ns=t0 - 3 * sec).perf_test_times()
    assert plain.start_ms == (t0 - 3 * sec) // 1_000_000 and plain.rebalance_ms == 3000
