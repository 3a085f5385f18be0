"""The produce dashboard and plain lines render the stats layer's figures."""

from __future__ import annotations

import re
from io import StringIO

from rich.console import Console
from rich.live import Live

from kctl.stats.aggregate import RunStats
from kctl.ui.produce_view import (ProduceDashboard, clock_line, no_verdict_line, plain_line, summary_line,
                                  summary_renderable)
from tests.stats.conftest import S, T0, metrics, report


def _stats(target: float | None = 2000) -> RunStats:
    st = RunStats(workers=2, start_wall_ns=T0, target_rate=target, duration_s=10, run_id="abc123")
    m = metrics(records_acked=1500, records_sent=1600, batches_sent=20, batches_acked=15,
                batch_fill_total=10.0, queue_time_ns_total=40_000_000, bytes_sent=4 * 1024 * 1024,
                value_bytes_acked=3 * 1024 * 1024,
                errors_by_name={"NOT_LEADER_OR_FOLLOWER": 3}, failed_by_error={"REQUEST_TIMED_OUT": 7},
                records_failed=7, throttle_time_ms=120, throttled_requests=4, retries=3,
                records_by_node={1: 1000, 2: 500})
    st.add(report(0, 0, m, latencies_ms=(4.0, 40.0), count=750, in_flight={1: 3, 2: 2},
                  buffer_available=16 * 1024 * 1024, buffer_total=32 * 1024 * 1024))
    st.add(report(1, 0, metrics(records_acked=500, records_sent=500, batches_acked=5, batches_sent=5),
                  latencies_ms=(5.0,), count=500, in_flight={1: 1},
                  buffer_available=32 * 1024 * 1024, buffer_total=32 * 1024 * 1024))
    return st


def _render(renderable, width: int = 120) -> str:
    out = StringIO()
    Console(file=out, width=width, force_terminal=False, color_system=None).print(renderable)
    return out.getvalue()


def test_dashboard_shows_key_figures() -> None:
    st = _stats()
    calls = []

    def state():
        calls.append(1)
        return st.snapshot(T0 + 5 * S)

    text = _render(ProduceDashboard(state))
    assert calls                                     # pulled fresh state
    for needle in ("kctl produce", "elapsed 5.0 s", "workers 2/2", "50%",
                   "records/s", "2,000", "2,000",    # target, achieved (2000 acked over 1 s)
                   "MB/s", "3.00", "intended", "send", "request",
                   "records/batch", "100.0",         # 2000 acked / 20 batches
                   "batch fill", "45%",              # 10.0 over 25 - 3 retries = 22 batches first sent
                   "buffer pool", "16.0 MiB / 64.0 MiB",
                   "throttled", "120 ms in 4 requests", "retries",
                   "NOT_LEADER_OR_FOLLOWER", "REQUEST_TIMED_OUT"):
        assert needle in text, (needle, text)
    # brokers: node 1 has 3 + 1 requests in flight, 1000 records acked
    assert re.search(r"1\s+│?\s*4\s+│?\s*1,000", text), text
    # latency p99 of the intended clock (40 ms for a quarter of the records... p99 = 40)
    assert "40.0" in text


def test_dashboard_in_live() -> None:
    st = _stats()
    out = StringIO()
    console = Console(file=out, width=120, force_terminal=True)
    with Live(ProduceDashboard(lambda: st.snapshot(T0 + 2 * S)), console=console,
              auto_refresh=False) as live:
        live.refresh()
    assert "latency" in out.getvalue()


def test_dashboard_max_throughput_and_warmup() -> None:
    st = RunStats(workers=1, start_wall_ns=T0)
    st.add(report(0, 0, metrics(records_acked=10), latencies_ms=(1.0,), count=10, warmup=True))
    text = _render(ProduceDashboard(lambda: st.snapshot(T0 + S)))
    assert "intended*" in text and "intended shows the send clock" in text
    assert "warming up" in text
    assert "max" in text                              # target column


def test_plain_line_format() -> None:
    line = plain_line(_stats().snapshot(T0 + 5 * S))
    assert "\n" not in line
    assert re.match(r"^2000 records acked, 2000\.0 records/sec \(3\.00 MB/sec\), "
                    r"\d+\.\d ms avg latency, \d+\.\d ms max latency\. intended p50 [\d.]+ p99 [\d.]+ "
                    r"p99\.9 [\d.]+ ms; send p99 [\d.]+ ms; request p99 [\d.]+ ms; target 2000/s; "
                    r"errors since start NOT_LEADER_OR_FOLLOWER 3; 7 failed; t=5\.0s$", line), line


def test_plain_line_max_throughput() -> None:
    line = plain_line(_stats(target=None).snapshot(T0 + 5 * S))
    assert " send p50 " in line and "intended" not in line and "target" not in line


def test_summary_rendering() -> None:
    s = _stats().summary()
    text = _render(summary_renderable(s))
    for needle in ("run abc123", "2,000 acked", "records/s", "latency (ms)", "p99.99",
                   "intended", "REQUEST_TIMED_OUT", "brokers"):
        assert needle in text, needle
    # kafka-producer-perf-test's printf: %d, %f, %.2f, %.2f, %.2f, %d, %d, %d, %d.
    line = summary_line(s)
    assert re.fullmatch(r"2000 records sent, \d+\.\d{6} records/sec \(\d+\.\d\d MB/sec\), \d+\.\d\d ms avg "
                        r"latency, \d+\.\d\d ms max latency, \d+ ms 50th, \d+ ms 95th, \d+ ms 99th, "
                        r"\d+ ms 99\.9th\.", line), line
    assert clock_line(s).startswith("latency clock: intended: ")


def test_each_row_and_panel_says_its_window_after_a_warm_up() -> None:
    """A warm-up round (20,000 records) then a measured one (60,000): the summary's records
    row is the whole run's throughout (it mixed whole-run acked with measured sent), the
    measured counts have their own row, and the live panels name their windows."""
    st = RunStats(workers=1, start_wall_ns=T0, target_rate=40_000, run_id="w1")
    st.add(report(0, 0, metrics(records_acked=20_000, records_sent=20_000, throttle_time_ms=1480,
                                throttled_requests=74, records_by_node={1: 20_000}),
                  warmup=True, records_scheduled=20_000))
    st.add(report(0, 1, metrics(records_acked=80_000, records_sent=80_000, throttle_time_ms=3100,
                                throttled_requests=155, records_by_node={1: 80_000}),
                  records_scheduled=80_000, final=True))
    live = _render(ProduceDashboard(lambda: st.snapshot(T0 + 2 * S)), width=160)
    assert "producer (last interval)" in live and "1,620 ms in 81 requests" in live, live
    assert "acked (cumulative)" in live and re.search(r"1\s+│?\s*0\s+│?\s*60,000", live), live
    assert "80,000" not in live
    text = _render(summary_renderable(st.summary()), width=160)
    assert "records (whole run)" in text and "80,000 scheduled: 80,000 acked, 0 failed, 0 abandoned (80,000 sent)" in text, text
    assert "records (measured)" in text and "60,000 acked, 0 failed (60,000 sent)" in text, text
    assert "throttled (measured)" in text and "brokers (measured)" in text


def _consume_state():
    from kctl.load.clock_sync import SAME_HOST
    from kctl.stats.consume_aggregate import ConsumeDashboard
    from kctl.stats.latency import LatencyFigures
    interval = LatencyFigures(12.5, 20.0, 22.0, 31.25, 35.0, 36.0, 37.5, 13.0, 900, negative=0, min_ms=1.0)
    cumulative = LatencyFigures(11.0, 19.0, 21.0, 29.0, 34.0, 36.0, 88.0, 12.0, 4_000, negative=3, min_ms=-0.2)
    return ConsumeDashboard(
        elapsed_s=5.0, warmup=False, interval_s=1.0, interval_records=900, interval_rate=900.0,
        interval_mb_per_s=0.09, interval_fetch_per_s=40.0, interval_records_per_fetch=22.5,
        cumulative_rate=800.0, records=4_000, matched=4_000, interval_e2e=interval, cumulative_e2e=cumulative,
        lag_total=17, lag_by_partition={"t-0": 17}, consumers=1, consumers_running=1, consumers_failed=(),
        rebalances=0, clock=SAME_HOST)


def test_dashboard_and_plain_line_show_the_e2e_clock_with_consume() -> None:
    """kctl produce --consume: e2e beside the other three clocks, negatives counted."""
    st = _stats()
    text = _render(ProduceDashboard(lambda: st.snapshot(T0 + 5 * S), consume_fn=_consume_state), width=160)
    row = next(line for line in text.splitlines() if line.lstrip("│ ").startswith("e2e"))
    for needle in ("12.5", "31.2", "37.5", "88.0", "4,000", "(3 < 0)"):
        assert needle in row, (needle, row)
    line = plain_line(st.snapshot(T0 + 5 * S), _consume_state())
    assert "e2e p50 12.5 p99 31.2 ms (0 negative), lag 17" in line


def test_summary_shows_the_compression_rate_only_with_compression() -> None:
    import dataclasses
    s = _stats().summary()
    assert "compression rate" not in _render(summary_renderable(s))
    s = dataclasses.replace(s, batching=dataclasses.replace(s.batching, compression_rate_avg=0.482))
    assert "compression rate" in _render(summary_renderable(s)) and "0.482" in _render(summary_renderable(s))


def test_records_without_a_verdict_are_explained_by_how_the_run_ran():
    """A local run stopped by SIGTERM said 'the Spark job was cancelled' (audit E)."""
    local = no_verdict_line(120, spark=False)
    assert "Spark" not in local and "worker was ended after the stop grace" in local
    assert "the Spark job was cancelled" in no_verdict_line(120, spark=True)


def test_a_transactional_summary_says_how_its_records_are_counted() -> None:
    """The summary says a transaction's records count as acked at its commit and how many
    acknowledged in transactions that never committed are failed instead."""
    import dataclasses

    from kctl.stats.latency import EMPTY_FIGURES
    from kctl.stats.summary import TransactionTotals
    s = _stats().summary()
    counts = dataclasses.replace(s.counts, failed_by_error={"TRANSACTION_ABORTED": 40,
                                                            "TRANSACTION_NOT_COMMITTED": 2})
    s = dataclasses.replace(s, counts=counts, transactions=TransactionTotals(5, 1, EMPTY_FIGURES))
    text = " ".join(_render(summary_renderable(s), width=200).split())
    assert "5 committed, 1 aborted" in text
    assert "acked at their transaction's commit" in text and "42 acknowledged in transactions that never" in text
    assert "transaction records" not in _render(summary_renderable(_stats().summary()))
