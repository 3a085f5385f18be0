"""Rich tables for ``kctl bench`` and ``kctl report``: the comparison and the gate.

``comparison_table``: one row per cell, one column per figure of ``METRICS``; each figure
is the median over repetitions with its min–max below it; the best cell per column is
bold green and starred. ``gate_table``: every gated check, or only the regressions.
Nothing here computes a statistic: the figures come from kctl/bench/results.py and gate.py.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table
from rich.text import Text

from kctl.bench.gate import Check, GateResult
from kctl.bench.max_rate import SHORTFALL, MaxRateResult
from kctl.bench.results import METRIC_BY_KEY, METRICS, BenchResults, CellResult, Stat, best_cells

__all__ = ["comparison_table", "gate_table", "interrupted_line", "max_rate_line", "max_rate_table",
           "run_line"]


def _fig(key: str, v: float) -> str:
    return METRIC_BY_KEY[key].fmt.format(v)


def comparison_table(cells: Sequence[CellResult], *, title: str = "kctl bench") -> Table:
    best = best_cells(cells)
    counts = sorted({len(c.reps) for c in cells})
    if len(counts) > 1:   # kctl report of runs with different repetitions: say each
        over = "over " + ", ".join(f"{c.label}: {len(c.reps)}" for c in cells) + " repetition(s)"
    else:
        over = f"over {counts[0] if counts else 0} repetition(s)"
    t = Table(title=f"{title}: median (min–max) {over}; * best per column",
              title_justify="left", show_lines=True)
    t.add_column("cell", no_wrap=True)
    # The e2e columns only when some cell consumed (kctl bench --consume).
    shown = [m for m in METRICS if not m.key.startswith("e2e_") or any(c.has(m.key) for c in cells)]
    for m in shown:
        t.add_column(m.label, justify="right", no_wrap=True)
    for cell in cells:
        row: list[Text | str] = [cell.label]
        for m in shown:
            if not cell.has(m.key):
                row.append(Text("n/a", style="dim"))
                continue
            s = cell.stat(m.key)
            is_best = best.get(m.key) == cell.name
            head = _fig(m.key, s.median) + ("*" if is_best else "")
            text = Text(head, style="bold green" if is_best else "")
            if len(cell.reps) > 1:
                text.append(f"\n{_fig(m.key, s.min)}–{_fig(m.key, s.max)}", style="dim")
            row.append(text)
        t.add_row(*row)
    return t


def _stat(key: str, s: Stat) -> str:
    return f"{_fig(key, s.median)} ({_fig(key, s.min)}–{_fig(key, s.max)})"


def gate_table(result: GateResult, *, only_regressions: bool = False) -> Table:
    checks: Sequence[Check] = result.regressions if only_regressions else result.checks
    title = ("regressions beyond --max-regression (bound plus the repetitions' spread)"
             if only_regressions else "regression gate")
    t = Table(title=title, title_justify="left")
    for col, just in (("cell", "left"), ("metric", "left"), ("baseline", "right"), ("now", "right"),
                      ("change", "right"), ("allowed", "right"), ("", "left")):
        t.add_column(col, justify=just, no_wrap=True)
    for c in checks:
        verdict = Text("REGRESSED", style="bold red") if c.regressed else Text("ok", style="green")
        t.add_row(c.cell, c.metric, _stat(c.metric, c.baseline), _stat(c.metric, c.current),
                  f"{c.change_pct:+.1f}%", f"{'-' if METRIC_BY_KEY[c.metric].better > 0 else '+'}"
                  f"{c.allowed_pct:.1f}%", verdict)
    return t


def interrupted_line(results: BenchResults, gated: bool) -> str:
    """What a bench stopped by Ctrl-C or SIGTERM measured, and what it left out."""
    stop = results.interrupted
    assert stop is not None
    parts = [f"interrupted: {len(results.order)} run(s) completed"
             + (" and are in the table and the results" if results.order else "")]
    if stop.cut_short is not None:
        rep, cell = stop.cut_short.split("/", 1)
        parts.append(f"repetition {rep} of cell {cell} was cut short and is left out")
    if stop.not_run:
        parts.append(f"{len(stop.not_run)} run(s) never started")
    if gated:
        parts.append("the regression gate was not judged")
    return "; ".join(parts)


def run_line(label: str, repetition: int, metrics: dict[str, float]) -> str:
    return (f"  repetition {repetition} {label}: {metrics.get('records_per_s', 0):,.0f} records/s, "
            f"{metrics.get('mb_per_s', 0):.2f} MB/s, p50 {metrics.get('p50_ms', 0):.2f} ms, "
            f"p99 {metrics.get('p99_ms', 0):.2f} ms, max {metrics.get('max_ms', 0):.2f} ms"
            + (f"; e2e p50 {metrics['e2e_p50_ms']:.2f} ms, p99 {metrics['e2e_p99_ms']:.2f} ms"
               if "e2e_p99_ms" in metrics else ""))


def max_rate_table(result: MaxRateResult) -> Table:
    """``--find-max-rate``: one row per step in the order run, a bar of the achieved rate
    (the chart in the terminal), and the verdict with its reason."""
    t = Table(title="kctl bench --find-max-rate: " + ", ".join(s.text() for s in result.slos)
              + f" (a step more than {SHORTFALL:.0%} off its target fails)", title_justify="left")
    for col, just in (("step", "right"), ("target/s", "right"), ("achieved/s", "right")):
        t.add_column(col, justify=just, no_wrap=True)
    for slo in result.slos:
        t.add_column(f"{slo.clock} {slo.percentile} ms", justify="right", no_wrap=True)
    t.add_column("achieved", no_wrap=True)
    t.add_column("verdict")
    top = max((max(s.target_rate, s.achieved_rate) for s in result.steps), default=1.0) or 1.0
    for s in result.steps:
        width = round(24 * s.achieved_rate / top)
        bar = Text("█" * width, style="green" if s.passed else "red")
        verdict = Text("pass", style="green") if s.passed else Text(f"FAIL: {s.reason}", style="red")
        t.add_row(str(s.step), f"{s.target_rate:,.0f}", f"{s.achieved_rate:,.0f}",
                  *("n/a" if f is None else f"{f:,.2f}" for f in s.figures), bar, verdict)
    return t


def max_rate_line(result: MaxRateResult) -> str:
    """The answer, last on stdout."""
    slo = ", ".join(s.text() for s in result.slos)
    if result.found_rate is None:
        return f"max rate: none found ({slo}): {result.note or 'no step passed'}"
    bracket = (f" (failed at {result.failed_rate:,.0f}/s)" if result.failed_rate is not None else "")
    tail = ("" if result.converged and not result.interrupted
            else f"; {result.note}" if result.interrupted else f"; not converged: {result.note}")
    return f"max rate: {result.found_rate:,.0f} records/s within {slo}{bracket}, {len(result.steps)} steps{tail}"
