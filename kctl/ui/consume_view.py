"""Rich renderables and plain lines for ``kctl consume`` (and the consume side of
``kctl produce --consume``).

``ConsumeDashboardView`` pulls a fresh ``ConsumeDashboard`` (stats/consume_aggregate.py)
on every refresh; ``plain_line`` is one line per interval when stdout is not a terminal;
``summary_renderable`` shows a ``ConsumeSummary``; ``perf_test_lines`` are
kafka-consumer-perf-test's closing header and values line. ``e2e_row`` is the e2e line
the produce dashboard adds. Nothing here computes a statistic.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.table import Table
from rich.text import Text

from kctl.stats.consume_aggregate import ConsumeDashboard
from kctl.stats.consume_perf import PerfTestTimes, perf_test_figures
from kctl.stats.consume_report import ClockOffset
from kctl.stats.consume_summary import ConsumeSummary
from kctl.stats.latency import LatencyFigures

__all__ = ["ConsumeDashboardView", "clock_text", "e2e_cells", "perf_test_lines", "plain_line",
           "summary_renderable"]

E2E_HELP = "consume time - intended send time (identity header), in µs as the .hlog; negatives counted, never clamped"


def _ms(v: float) -> str:
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def e2e_cells(f: LatencyFigures) -> list[str]:
    return [_ms(f.p50_ms), _ms(f.p90_ms), _ms(f.p99_ms), _ms(f.p999_ms), _ms(f.p9999_ms), _ms(f.max_ms),
            _ms(f.mean_ms)]


def clock_text(clock: ClockOffset | None) -> str:
    if clock is None:
        return "clock offset: not measured (producer host unknown; give --clock-peer)"
    if clock.samples == 0:
        return f"clock offset: 0 ({clock.method})"
    return (f"clock offset: {clock.offset_ns / 1e6:+.3f} ms +/- {clock.error_ns / 1e6:.3f} ms "
            f"(producer host - consumer host; {clock.method})")


class ConsumeDashboardView:
    def __init__(self, state_fn: Callable[[], ConsumeDashboard], *, title: str = "kctl consume") -> None:
        self.state_fn = state_fn
        self.title = title

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        s = self.state_fn()
        head = Text.assemble((self.title, "bold"), f"  elapsed {s.elapsed_s:.1f} s",
                             f"  consumers {s.consumers_running}/{s.consumers}",
                             f"  rebalances {s.rebalances}")
        if s.warmup:
            head.append("  warming up (not counted)", style="yellow")
        if s.consumers_failed:
            head.append(f"  {len(s.consumers_failed)} consumer(s) failed: "
                        + "; ".join(f"#{c} {e.splitlines()[0]}" for c, e in s.consumers_failed), style="red")
        yield head
        t = Table(title="throughput", title_justify="left")
        for col in ("", "last interval", "cumulative"):
            t.add_column(col, justify="left" if not col else "right")
        t.add_row("records/s", f"{s.interval_rate:,.0f}", f"{s.cumulative_rate:,.0f}")
        t.add_row("MB/s (keys+values)", f"{s.interval_mb_per_s:.2f}", "")
        t.add_row("fetch responses/s", f"{s.interval_fetch_per_s:,.1f}", "")
        t.add_row("records/response", f"{s.interval_records_per_fetch:,.1f}", "")
        t.add_row("records", "", f"{s.records:,} ({s.matched:,} with an identity)")
        yield t
        yield latency_table(s.interval_e2e, s.cumulative_e2e)
        lag = Table(title=f"lag: {s.lag_total:,} records", title_justify="left")
        lag.add_column("partition")
        lag.add_column("lag", justify="right")
        for name, n in list(s.lag_by_partition.items())[:16]:
            lag.add_row(name, f"{n:,}")
        yield lag
        yield Text(clock_text(s.clock))


def latency_table(interval: LatencyFigures, cumulative: LatencyFigures) -> Table:
    t = Table(title="e2e latency (ms): last interval, then cumulative", title_justify="left",
              caption=E2E_HELP, caption_justify="left")
    t.add_column("clock", no_wrap=True)
    for col in ("last p50", "last p99", "last max", "p50", "p90", "p99", "p99.9", "p99.99", "max", "mean",
                "count", "negative"):
        t.add_column(col, justify="right")
    t.add_row("e2e", _ms(interval.p50_ms), _ms(interval.p99_ms), _ms(interval.max_ms),
              *e2e_cells(cumulative), f"{cumulative.count:,}", f"{cumulative.negative or 0:,}")
    return t


def plain_line(s: ConsumeDashboard) -> str:
    """One line per interval::

        52000 records consumed, 52000.0 records/sec (4.96 MB/sec), 9.1 fetch responses/s, 5714.3 records/response;
        e2e p50 3.1 p99 12.0 max 40.1 ms (0 negative); lag 120; t=5.0s
    """
    e = s.interval_e2e
    line = (f"{s.interval_records} records consumed, {s.interval_rate:.1f} records/sec "
            f"({s.interval_mb_per_s:.2f} MB/sec), {s.interval_fetch_per_s:.1f} fetch responses/s, "
            f"{s.interval_records_per_fetch:.1f} records/response; e2e p50 {e.p50_ms:.1f} p99 {e.p99_ms:.1f} "
            f"max {e.max_ms:.1f} ms ({e.negative or 0} negative); lag {s.lag_total}; t={s.elapsed_s:.1f}s")
    if s.warmup:
        line += " (warm-up)"
    if s.consumers_failed:
        line += f"; {len(s.consumers_failed)} consumer(s) failed"
    return line


def summary_renderable(summary: ConsumeSummary) -> Group:
    run, c, r = summary.run, summary.counts, summary.rates
    head = Table(title=f"kctl consume  run {run.id}", title_justify="left", show_header=False)
    head.add_column()
    head.add_column(justify="right")
    head.add_row("duration", f"{run.duration_s:.1f} s ({run.measured_s:.1f} s measured)")
    head.add_row("consumers", f"{run.consumers} ({run.mode})" + (f", {len(run.consumers_failed)} failed"
                                                                  if run.consumers_failed else ""))
    head.add_row("records", f"{c.records:,} ({c.matched:,} with a kctl identity, {c.unidentified:,} without)")
    head.add_row("rate", f"{r.records_per_s:,.1f} records/s, {r.mb_per_s:.2f} MB/s (keys+values), "
                         f"{r.wire_mb_per_s:.2f} MB/s of batches")
    head.add_row("fetches", f"{c.fetch_requests:,} requests ({r.fetch_requests_per_s:,.1f}/s), "
                            f"{r.records_per_fetch:,.1f} records per answer")
    unknown = (f" (partial: partition(s) {', '.join(map(str, summary.lag_unknown))} unknown)"
               if summary.lag_unknown else "")
    head.add_row("lag", f"{summary.lag_final:,} at the end{unknown}, {summary.lag_max:,} at most")
    if c.rebalances or run.mode == "group":
        head.add_row("group", f"{c.rebalances} rebalance(s), {c.commits} commit(s), "
                              f"{c.commit_failures} failed")
    if c.reauthentications:
        head.add_row("SASL re-authentications", f"{c.reauthentications:,} (KIP-368, whole run)")
    if summary.backlog is not None:
        b = summary.backlog
        head.add_row("backlog", f"{b.records:,} records drained in {b.drain_s:.2f} s "
                                f"({b.records_per_s:,.0f} records/s)" if b.drained else
                     f"{b.records:,} records NOT drained within {b.drain_s:.1f} s")
    lat = summary.latency.get("e2e")
    parts: list[Any] = [head]
    if lat is not None:
        t = Table(title="e2e latency (ms)", title_justify="left", caption=E2E_HELP, caption_justify="left")
        t.add_column("clock")
        for k in ("p50", "p90", "p99", "p99.9", "p99.99", "max", "mean", "count", "negative", "min"):
            t.add_column(k, justify="right")
        t.add_row("e2e", *e2e_cells(lat), f"{lat.count:,}", f"{lat.negative or 0:,}", _ms(lat.min_ms or 0.0))
        parts.append(t)
    parts.append(Text(clock_text(summary.clock)))
    if summary.errors_by_name:
        parts.append(Text("errors: " + ", ".join(f"{k} x{v}" for k, v in summary.errors_by_name.items()),
                          style="red"))
    for cid, err in run.consumers_failed:
        parts.append(Text(f"consumer {cid} failed: {err}", style="red"))
    return Group(*parts)


def _perf_time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S:") + f"{ms % 1000:03d}"


def perf_test_lines(summary: ConsumeSummary, times: PerfTestTimes | None = None) -> tuple[str, str]:
    """kafka-consumer-perf-test's closing header and values (its column names and formats;
    arithmetic in stats/consume_perf.py). ``times``: the run's perf-test clock (start before
    the consumers subscribe, rebalance time); without, the measured run with no rebalance."""
    run, c = summary.run, summary.counts
    if times is None:
        times = PerfTestTimes(run.start_unix_ms, run.end_unix_ms, 0)
    f = perf_test_figures(c.records, c.key_value_bytes, times)
    header = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
              "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
    values = (f"{_perf_time(f.start_ms)}, {_perf_time(f.end_ms)}, {f.mb:.4f}, {f.mb_per_s:.4f}, "
              f"{f.records}, {f.records_per_s:.4f}, {f.rebalance_ms}, {f.fetch_ms}, "
              f"{f.fetch_mb_per_s:.4f}, {f.fetch_records_per_s:.4f}")
    return header, values
