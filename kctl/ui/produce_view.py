"""Rich renderables and plain lines for ``kctl produce``.

``ProduceDashboard`` is a plain object with ``__rich_console__`` that pulls a fresh
``DashboardState`` (kctl/stats/aggregate.py) from a callable on every refresh, so it
can be handed to ``rich.live.Live(ProduceDashboard(lambda: stats.snapshot(time.time_ns())))``
as is. ``plain_line`` is the non-terminal form: one kafka-producer-perf-test-style line
per interval. ``summary_renderable`` / ``summary_line`` (kafka-producer-perf-test's closing
line, exactly) and ``clock_line`` show the ``RunSummary`` at the end.

Nothing here computes a statistic: the figures come ready from the stats layer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from kctl.engine.transactions import TRANSACTION_ABORTED, TRANSACTION_NOT_COMMITTED
from kctl.stats.aggregate import DashboardState
from kctl.stats.consume_aggregate import ConsumeDashboard
from kctl.stats.latency import CLOCKS, LatencyFigures
from kctl.stats.summary import RunSummary, VerifyResult
from kctl.ui.consume_view import clock_text
from kctl.ui.units import human_bytes

__all__ = ["ProduceDashboard", "clock_line", "plain_line", "summary_line", "summary_renderable"]

_CLOCK_HELP = {
    "intended": "ack - intended send time (schedule)",
    "send": "ack - handed to the engine",
    "request": "ack - request written",
    "e2e": "consumed - intended send time",
}


def _ms(v: float) -> str:
    if v >= 1000:
        return f"{v:,.0f}"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def _rate(v: float | None) -> str:
    return "max" if v is None else f"{v:,.0f}"


def _counts(d: Mapping[str, int], limit: int = 4) -> str:
    items = sorted(d.items(), key=lambda kv: (-kv[1], kv[0]))
    text = ", ".join(f"{k} {v:,}" for k, v in items[:limit])
    if len(items) > limit:
        text += f", +{len(items) - limit} more"
    return text


class ProduceDashboard:
    """The live view. ``state_fn`` returns the current ``DashboardState``; ``consume_fn``
    (``kctl produce --consume``) the consume side's ``ConsumeDashboard``, or None until
    the consumers have begun."""

    def __init__(self, state_fn: Callable[[], DashboardState], *, title: str = "kctl produce",
                 consume_fn: Callable[[], ConsumeDashboard | None] | None = None) -> None:
        self.state_fn = state_fn
        self.title = title
        self.consume_fn = consume_fn

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        s = self.state_fn()
        c = self.consume_fn() if self.consume_fn is not None else None
        yield self._head(s)
        if s.progress is not None:
            yield self._progress(s, options.max_width)
        yield self._throughput(s)
        yield self._latency(s, c)
        if c is not None:
            yield Text(f"consumers {c.consumers_running}/{c.consumers}: {c.interval_rate:,.0f} records/s, "
                       f"{c.records:,} read, lag {c.lag_total:,}; {clock_text(c.clock)}")
        yield self._engine(s)

    # -- parts --------------------------------------------------------------------------------------
    def _head(self, s: DashboardState) -> Text:
        t = Text.assemble((self.title, "bold"), f"  elapsed {s.elapsed_s:.1f} s",
                          f"  interval {s.intervals}",
                          f"  workers {s.workers_running}/{s.workers}"
                          + (f" ({s.workers_reason})" if s.workers_reason else ""))
        if s.warmup:
            t.append("  warming up (not counted)", style="yellow")
        if s.workers_failed:
            t.append(f"  {len(s.workers_failed)} worker(s) failed: ", style="red")
            t.append("; ".join(f"#{w} {e.splitlines()[0] if e else ''}" for w, e in s.workers_failed),
                     style="red")
        return t

    def _progress(self, s: DashboardState, width: int) -> Table:
        grid = Table.grid(padding=(0, 1))
        grid.add_column(width=max(10, min(60, width - 12)))
        grid.add_column(justify="right")
        grid.add_row(ProgressBar(total=1.0, completed=s.progress or 0.0),
                     f"{100 * (s.progress or 0.0):.0f}%")
        return grid

    def _throughput(self, s: DashboardState) -> Table:
        t = Table(title="throughput", title_justify="left", expand=False)
        for col in ("", "target", "last interval", "cumulative"):
            t.add_column(col, justify="left" if not col else "right")
        target = s.target_rate
        achieved = f"{s.interval_rate:,.0f}"
        if target and s.interval_rate < 0.95 * target and not s.warmup and s.intervals:
            achieved = f"[yellow]{achieved}[/]"
        t.add_row("records/s", _rate(target), achieved, f"{s.cumulative_rate:,.0f}")
        t.add_row("MB/s (values)", "", f"{s.interval_mb_per_s:.2f}", f"{s.cumulative_mb_per_s:.2f}")
        t.add_row("wire MB/s", "", f"{s.interval_wire_mb_per_s:.2f}", f"{s.cumulative_wire_mb_per_s:.2f}")
        t.add_row("records", "", f"{s.interval_acked:,} acked",
                  f"{s.records_acked:,} acked / {s.records_sent:,} sent / {s.records_failed:,} failed")
        return t

    def _latency(self, s: DashboardState, c: ConsumeDashboard | None = None) -> Table:
        t = Table(title="latency (ms): last interval, then cumulative", title_justify="left")
        t.add_column("clock", no_wrap=True)
        for col in ("p50", "p99", "max"):
            t.add_column(f"last {col}", justify="right")
        for col in ("p50", "p90", "p99", "p99.9", "p99.99", "max", "mean"):
            t.add_column(col, justify="right")
        t.add_column("count", justify="right")
        consume = c
        for clock in CLOCKS:
            i = s.interval_latency.get(clock)
            c = s.cumulative_latency.get(clock)
            if i is None or c is None:
                continue
            name = clock
            if clock == "intended" and s.intended_from_send:
                name = "intended*"
                t.caption = "* no schedule (max throughput): intended shows the send clock"
                t.caption_justify = "left"
            t.add_row(name, _ms(i.p50_ms), _ms(i.p99_ms), _ms(i.max_ms),
                      *self._cum(c), f"{c.count:,}")
        if consume is not None:
            i, f = consume.interval_e2e, consume.cumulative_e2e
            neg = f" ({f.negative:,} < 0)" if f.negative else ""
            t.add_row("e2e", _ms(i.p50_ms), _ms(i.p99_ms), _ms(i.max_ms), *self._cum(f), f"{f.count:,}{neg}")
        return t

    @staticmethod
    def _cum(c: LatencyFigures) -> list[str]:
        return [_ms(c.p50_ms), _ms(c.p90_ms), _ms(c.p99_ms), _ms(c.p999_ms), _ms(c.p9999_ms),
                _ms(c.max_ms), _ms(c.mean_ms)]

    def _engine(self, s: DashboardState) -> Group:
        grid = Table.grid(padding=(0, 3))
        grid.add_column(vertical="top")
        grid.add_column(vertical="top")

        b = Table(title="producer (last interval)", title_justify="left", show_header=False)
        b.add_column(no_wrap=True)
        b.add_column(justify="right", no_wrap=True)
        b.add_row("records/batch", f"{s.records_per_batch:.1f}")
        b.add_row("batch fill", f"{100 * s.batch_fill:.0f}%")
        b.add_row("accumulator time", f"{s.queue_time_ms:.2f} ms")
        used_pct = 100 * s.buffer_used / s.buffer_total if s.buffer_total else 0.0
        b.add_row("buffer pool now", f"{human_bytes(s.buffer_used)} / {human_bytes(s.buffer_total)} ({used_pct:.0f}%)")
        b.add_row("throttled", f"{s.throttle_time_ms:,} ms in {s.throttled_requests:,} requests")
        b.add_row("retries", f"{s.retries:,} ({s.splits:,} splits)")
        if s.transactional:
            b.add_row("transactions (since start)", f"{s.transactions_committed:,} committed, "
                      f"{s.transactions_aborted:,} aborted")
            b.add_row("commit p50/p99 (since start)", f"{_ms(s.commit_latency.p50_ms)} / {_ms(s.commit_latency.p99_ms)} ms")

        n = Table(title="brokers", title_justify="left")
        n.add_column("node", no_wrap=True)
        n.add_column("in flight now", justify="right", no_wrap=True)
        n.add_column("acked (cumulative)", justify="right", no_wrap=True)
        for node in sorted(set(s.in_flight_by_node) | set(s.records_by_node)):
            n.add_row(str(node), str(s.in_flight_by_node.get(node, 0)), f"{s.records_by_node.get(node, 0):,}")
        grid.add_row(b, n)
        if not s.errors_by_name and not s.failed_by_error:
            return Group(grid, Text("errors: none"))
        return Group(grid, _error_table(s.errors_by_name, s.failed_by_error,
                                        title="errors (since start, warm-up included)"))


def _error_table(seen: Mapping[str, int], failed: Mapping[str, int], *, title: str = "errors") -> Table:
    e = Table(title=title, title_justify="left")
    e.add_column("error", no_wrap=True)
    e.add_column("batches (retries too)", justify="right")
    e.add_column("records failed", justify="right")
    for name in sorted(set(seen) | set(failed)):
        e.add_row(Text(name, style="red"), f"{seen.get(name, 0):,}", f"{failed.get(name, 0):,}")
    return e


def plain_line(s: DashboardState, consume: ConsumeDashboard | None = None) -> str:
    """One line per interval, shaped like kafka-producer-perf-test's, on kctl's clocks::

        24691 records acked, 24691.2 records/sec (2.35 MB/sec), 3.2 ms avg latency,
        45.0 ms max latency. intended p50 2.9 p99 12.0 p99.9 40.1 ms; send p99 10.0 ms;
        request p99 4.0 ms; target 25000/s; t=5.0s

    (one line; the avg/max latency and percentiles are the intended clock's, or the send
    clock's in max-throughput mode). Counts are records ACKED in the interval. A stopped
    run's last interval, cut short by the stop, ends ``(partial: stopped)``: the lines
    still add up to the summary's count.
    """
    lead = "send" if s.intended_from_send else "intended"
    f = s.interval_latency.get(lead)
    parts = [f"{s.interval_acked} records acked, {s.interval_rate:.1f} records/sec "
             f"({s.interval_mb_per_s:.2f} MB/sec)"]
    if f is not None:
        parts[0] += f", {f.mean_ms:.1f} ms avg latency, {f.max_ms:.1f} ms max latency."
        parts.append(f" {lead} p50 {f.p50_ms:.1f} p99 {f.p99_ms:.1f} p99.9 {f.p999_ms:.1f} ms")
    else:
        parts[0] += "."
    for clock in CLOCKS:
        if clock == lead or (clock == "intended" and s.intended_from_send):
            continue
        g = s.interval_latency.get(clock)
        if g is not None:
            parts.append(f"; {clock} p99 {g.p99_ms:.1f} ms")
    if consume is not None:
        e = consume.interval_e2e
        parts.append(f"; e2e p50 {e.p50_ms:.1f} p99 {e.p99_ms:.1f} ms ({e.negative or 0} negative), "
                     f"lag {consume.lag_total}")
    if s.target_rate is not None:
        parts.append(f"; target {s.target_rate:.0f}/s")
    if s.errors_by_name:
        parts.append(f"; errors since start {_counts(s.errors_by_name)}")
    if s.records_failed:
        parts.append(f"; {s.records_failed} failed")
    if s.workers_failed:
        parts.append(f"; {len(s.workers_failed)} worker(s) failed")
    parts.append(f"; t={s.elapsed_s:.1f}s")
    if s.warmup:
        parts.append(" (warm-up)")
    if s.interrupted and s.last_round:
        parts.append(" (partial: stopped)")    # the stopped run's last, short interval
    return "".join(parts)


def _clock_of(summary: RunSummary) -> str:
    return "send" if summary.run.max_throughput else "intended"


def no_verdict_line(unaccounted: int, *, spark: bool) -> str:
    """After a stop that could not wait for every verdict: a Spark job cancelled before its
    tasks' final reports (kctl/spark/load.py), or, in a local run, a worker process ended
    after its stop grace without its final report (kctl/load/run.py)."""
    why = ("the Spark job was cancelled before its tasks made their final reports" if spark
           else "a worker was ended after the stop grace before it made its final report")
    return f"{unaccounted} scheduled record(s) have no verdict in the summary: {why}"


def spark_start_line(summary: RunSummary) -> str | None:
    """How together the Spark tasks of a distributed run started (None for a local run)."""
    sp = summary.spark
    if sp is None:
        return None
    return (f"spark: {sp.tasks} tasks on {sp.hosts} host{'s' if sp.hosts != 1 else ''}; start skew "
            f"{sp.start_skew_ms:.1f} ms (the schedules' first intervals; the latest task "
            f"{sp.max_late_ms:.1f} ms after the agreed start); launched within "
            f"{sp.launch_spread_ms:.0f} ms")


def clock_line(summary: RunSummary) -> str:
    """Which clock the closing line's latencies come from, on a line of its own."""
    clock = _clock_of(summary)
    why = ("no schedule (as fast as possible), so latency runs from when each record was handed "
           "to the producer" if clock == "send" else
           "latency runs from each record's intended send time on the schedule, so stalls count")
    return f"latency clock: {clock}: {why}"


def summary_line(summary: RunSummary) -> str:
    """kafka-producer-perf-test's closing line, in its exact shape and number formats
    (``%d records sent, %f records/sec (%.2f MB/sec), %.2f ms avg latency, %.2f ms max
    latency, %d ms 50th, %d ms 95th, %d ms 99th, %d ms 99.9th.``), from the summary.
    MB/sec is value bytes in MiB/s, as perf-test's. perf-test's percentiles are whole
    milliseconds (it measures them so); kctl's exact figures are in the summary. With a
    warm-up the figures leave it out, and the line says ``steady state`` as perf-test's
    ``--warmup-records`` line does."""
    counts, rates = summary.counts, summary.rates
    lat = summary.latency[_clock_of(summary)]
    steady = " steady state" if (summary.config.get("warmup_records")
                                 or summary.config.get("warmup_s")
                                 or summary.run.warmup.intervals) else ""
    line = (f"{counts.acked}{steady} records sent, {rates.records_per_s:f} records/sec "
            f"({rates.mb_per_s:.2f} MB/sec), {lat.mean_ms:.2f} ms avg latency, "
            f"{lat.max_ms:.2f} ms max latency, {int(lat.p50_ms)} ms 50th, "
            f"{int(lat.p95_ms)} ms 95th, {int(lat.p99_ms)} ms 99th, "
            f"{int(lat.p999_ms)} ms 99.9th.")
    return line


def verify_line(v: VerifyResult, *, acks: int) -> str:
    """``--verify``'s line (kctl produce, kctl replay): the records it expected, what it found
    of them and how they went wrong. acks=0 acknowledges no offset: the records sent."""
    what = "sent (acks=0)" if acks == 0 else "acknowledged"
    aborted = f", {v.aborted} in aborted transactions (left out)" if v.aborted else ""
    written = (f"; {v.written_unacked} record(s) reported failed or abandoned were written "
               "(in the log all the same)") if v.written_unacked else ""
    return (f"verify: {v.expected} {what}, {v.found} found, {v.lost} lost, "
            f"{v.duplicated} duplicated, {v.reordered} reordered, {v.misplaced} misplaced{aborted}{written}")


def summary_renderable(summary: RunSummary) -> Group:
    """The end-of-run summary as Rich tables."""
    run, counts, rates = summary.run, summary.counts, summary.rates
    head = Table(title=f"kctl produce  run {run.id}", title_justify="left", show_header=False)
    head.add_column()
    head.add_column(justify="right")
    head.add_row("duration", f"{run.duration_s:.1f} s ({run.measured_s:.1f} s measured)")
    head.add_row("workers", f"{run.workers}" + (f" ({len(run.workers_failed)} failed)"
                                                 if run.workers_failed else "")
                 + (f": {run.workers_reason}" if run.workers_reason else ""))
    if run.interrupted:
        head.add_row(Text("interrupted", style="bold red"),
                     Text("Ctrl-C cut the run short: the figures cover what ran", style="red"))
    wu = run.warmup
    head.add_row("records (whole run)", f"{counts.scheduled:,} scheduled: {counts.acked + wu.records_acked:,} "
                 f"acked, {counts.failed + wu.records_failed:,} failed, "
                 f"{counts.abandoned:,} abandoned ({counts.sent + wu.records_sent:,} sent)")
    if wu.intervals:
        head.add_row("records (measured)", f"{counts.acked:,} acked, {counts.failed:,} failed "
                     f"({counts.sent:,} sent)")
    for reason, n in counts.abandoned_by_reason.items():
        head.add_row("abandoned", f"{n:,}: {reason}")
    head.add_row("rate", f"{rates.records_per_s:,.1f} records/s (target {_rate(rates.target_records_per_s)})")
    head.add_row("throughput", f"{rates.mb_per_s:.2f} MB/s of values, {rates.wire_mb_per_s:.2f} MB/s on the wire")
    if wu.intervals:
        head.add_row("warm-up (excluded)", f"{wu.intervals} intervals, {wu.records_acked:,} records acked")
    b = summary.batching
    measured = " (measured)" if wu.intervals else ""
    head.add_row(f"records/batch{measured}", f"{b.records_per_batch:.1f}")
    head.add_row(f"batch fill{measured}", f"{100 * b.batch_fill:.0f}%")
    if b.compression_rate_avg is not None:
        head.add_row(f"compression rate{measured}",
                     f"{b.compression_rate_avg:.3f} (compressed / uncompressed, per batch)")
    head.add_row(f"throttled{measured}", f"{summary.throttle.time_ms:,} ms in {summary.throttle.requests:,} requests")
    head.add_row(f"retries{measured}", f"{summary.retries:,} ({summary.batching.splits:,} splits)")
    if summary.counts.reauthentications:
        head.add_row("SASL re-authentications", f"{summary.counts.reauthentications:,} (KIP-368, whole run)")
    txn = summary.transactions
    if txn is not None:
        head.add_row("transactions", f"{txn.committed:,} committed, {txn.aborted:,} aborted")
        # How the figures above count a transaction's records (engine/transactions.py).
        never = sum(counts.failed_by_error.get(k, 0) for k in (TRANSACTION_ABORTED, TRANSACTION_NOT_COMMITTED))
        head.add_row("transaction records", "acked at their transaction's commit (latency: their "
                     f"acknowledgement's); {never:,} acknowledged in transactions that never "
                     "committed are failed, in no acked figure")
        if txn.commit_latency is not None and txn.commit_latency.count:
            c = txn.commit_latency
            head.add_row("commit latency", f"p50 {_ms(c.p50_ms)} / p99 {_ms(c.p99_ms)} / "
                         f"max {_ms(c.max_ms)} ms ({c.count:,} commits)")

    lat = Table(title="latency (ms)", title_justify="left")
    lat.add_column("clock", no_wrap=True)
    keys = ("p50_ms", "p90_ms", "p99_ms", "p999_ms", "p9999_ms", "max_ms", "mean_ms")
    for k in ("p50", "p90", "p99", "p99.9", "p99.99", "max", "mean", "count"):
        lat.add_column(k, justify="right")
    for clock, fig in summary.latency.items():
        name = clock
        if clock == "intended" and run.max_throughput:
            name = "intended*"
            lat.caption = "* no schedule (max throughput): intended shows the send clock"
            lat.caption_justify = "left"
        count = f"{fig.count:,}" + (f" ({fig.negative:,} < 0)" if fig.negative else "")
        lat.add_row(name, *(_ms(getattr(fig, k)) for k in keys), count)

    parts: list[Any] = [head, lat]
    if summary.consume is not None:
        cs = summary.consume
        parts.append(Text(f"consumers: {cs.run.consumers}, {cs.counts.records:,} records read "
                          f"({cs.rates.records_per_s:,.0f}/s), lag {cs.lag_final:,} at the end; "
                          f"{clock_text(cs.clock)}"))
    errors = summary.errors_by_name
    failed = counts.failed_by_error
    if errors or failed:
        parts.append(_error_table(errors, failed))
    if summary.brokers:
        n = Table(title="brokers" + (" (measured)" if run.warmup.intervals else ""), title_justify="left")
        n.add_column("node")
        n.add_column("records acked", justify="right")
        for row in summary.brokers:
            n.add_row(str(row.node_id), f"{row.records_acked:,}")
        parts.append(n)
    for w in run.workers_failed:
        parts.append(Text(f"worker {w.worker} failed: {w.error}", style="red"))
    return Group(*parts)
