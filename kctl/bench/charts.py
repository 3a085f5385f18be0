"""Charts of bench and report results: PNG through matplotlib (Agg), one self-contained
HTML page through plotly (its JavaScript inlined, so the page opens offline).

Two charts, the same in both forms:

* percentile distribution: latency (ms) against percentile, the percentile axis on a
  log scale of ``1 / (1 - p)`` so 90, 99, 99.9, 99.99 % are evenly spaced (as
  HdrHistogram's plotter draws it); one curve per cell, from the cell's histogram merged
  over repetitions (intended clock; the send clock in max-throughput mode);
* over time: throughput (records/s) and p99 (ms) per interval, one line per cell and
  repetition (a cell's repetitions share its colour; the first repetition is solid, later
  ones dashed), seconds from the end of the warm-up.

Every chart names the latency clock it plots (``clock_of``): the intended clock (from
each record's place on the schedule), the send clock for runs without a schedule, or
"as logged" for a foreign interval log. The percentile axis ends where the data ends.
The HTML page also lists the workload and each cell's producer settings.

matplotlib and plotly are the ``kctl[bench]`` extra; they are imported here only.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kctl.bench.max_rate import MaxRateResult
from kctl.bench.results import METRICS, CellResult
from kctl.errors import ConfigError
from kctl.percentiles import values_at_percentiles

__all__ = ["clock_of", "percentile_curve", "write_charts", "write_html", "write_max_rate_chart", "write_pngs"]

_TICKS = (0.0, 90.0, 99.0, 99.9, 99.99, 99.999, 99.9999)
_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
            "#7f7f7f", "#bcbd22", "#17becf")


def _colour(i: int) -> str:
    return _COLOURS[i % len(_COLOURS)]


def percentile_curve(cell: CellResult) -> list[tuple[float, float]]:
    """``[(1/(1-p), ms)]`` for the cell: from its histogram, else its summary's percentiles."""
    h = cell.latency_histogram()
    if h is None:
        return [(1.0 / (1.0 - p / 100.0), ms) for p, ms in cell.percentile_points]
    n = h.get_total_count()
    # Up to the percentile where one record remains: beyond that the curve is just max.
    ps = [0.0]
    p = 0.0
    while (100.0 - p) / 100.0 * n > 1 and p < 99.9999:
        # 20 points per decade of the tail.
        p = 100.0 - (100.0 - p) * 10 ** (-1 / 20)
        ps.append(p)
    values = values_at_percentiles(h, ps)    # one walk of the counts for every point
    out = [(1.0 / (1.0 - q / 100.0), values[q] / 1000.0) for q in ps]
    out.append((1.0 / (1.0 - min(p, 99.9999) / 100.0) * 1.0001, h.get_max_value() / 1000.0))
    return out


def _tick_label(p: float) -> str:
    return f"{p:g}%"


def clock_of(cell: CellResult) -> str:
    """The latency clock a cell's curve and p99 line plot."""
    if any(r.summary is not None and r.summary.run.max_throughput for r in cell.reps):
        return "send clock"
    if cell.hlog and cell.reps[0].summary is None and "send" not in cell.histograms:
        return "as logged"
    return "intended clock"


def _clocks_text(cells: Sequence[CellResult]) -> str:
    clocks = list(dict.fromkeys(clock_of(c) for c in cells))
    return clocks[0] if len(clocks) == 1 else "clock per cell in the legend"


def _legend(cell: CellResult, cells: Sequence[CellResult]) -> str:
    many = len({clock_of(c) for c in cells}) > 1
    return f"{cell.label} ({clock_of(cell)})" if many else cell.label


def _x_end(cells: Sequence[CellResult]) -> float:
    """Where the percentile axis ends: the last point of any curve."""
    ends = [pts[-1][0] for pts in (percentile_curve(c) for c in cells) if pts]
    return max(ends) if ends else 1.0 / (1.0 - _TICKS[-1] / 100.0)


def _ticks_upto(end: float) -> list[float]:
    return [p for p in _TICKS if 1.0 / (1.0 - p / 100.0) <= end * 1.0001] or [0.0]


def _mpl():
    try:
        import matplotlib
    except ImportError:
        raise ConfigError("charts need matplotlib and plotly: pip install 'kctl[bench]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def write_pngs(cells: Sequence[CellResult], out_dir: str | Path, *, title: str = "kctl bench") -> list[Path]:
    """``percentiles.png`` and ``timeline.png`` in ``out_dir``; returns their paths."""
    plt = _mpl()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []

    fig, ax = plt.subplots(figsize=(10, 6), dpi=100)
    for i, cell in enumerate(cells):
        pts = percentile_curve(cell)
        if pts:
            ax.plot([x for x, _ in pts], [y for _, y in pts], label=_legend(cell, cells), color=_colour(i),
                    linewidth=2)
    ax.set_xscale("log")
    end = _x_end(cells)
    ticks = _ticks_upto(end)
    ax.set_xlim(1.0, end)
    ax.set_xticks([1.0 / (1.0 - p / 100.0) for p in ticks])
    ax.set_xticklabels([_tick_label(p) for p in ticks])
    ax.set_xlabel("percentile")
    ax.set_ylabel(f"latency (ms), {_clocks_text(cells)}")
    ax.set_title(f"{title}: latency by percentile ({_clocks_text(cells)})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper left", fontsize="small")
    fig.tight_layout()
    paths.append(out / "percentiles.png")
    fig.savefig(paths[-1])
    plt.close(fig)

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), dpi=100, sharex=True)
    for i, cell in enumerate(cells):
        for j, rep in enumerate(cell.reps):
            t = [row["t_s"] for row in rep.timeline]
            label = _legend(cell, cells) if j == 0 else None
            style = "-" if j == 0 else "--"
            top.plot(t, [row["records_per_s"] for row in rep.timeline], style, color=_colour(i),
                     label=label, marker=".")
            bottom.plot(t, [row["p99_ms"] for row in rep.timeline], style, color=_colour(i),
                        marker=".")
    from matplotlib.lines import Line2D
    top.set_ylabel("records/s")
    top.set_title(f"{title}: throughput and p99 over time (one line per repetition)")
    top.grid(True, alpha=0.3)
    handles, labels = top.get_legend_handles_labels()
    handles += [Line2D([], [], color="black", linestyle="-"), Line2D([], [], color="black", linestyle="--")]
    labels += ["solid: first repetition", "dashed: later repetitions"]
    top.legend(handles, labels, loc="lower right", fontsize="small")
    bottom.set_ylabel(f"p99 (ms), {_clocks_text(cells)}")
    bottom.set_xlabel("seconds since the measurement started")
    bottom.grid(True, alpha=0.3)
    fig.tight_layout()
    paths.append(out / "timeline.png")
    fig.savefig(paths[-1])
    plt.close(fig)
    return paths


def _plotly():
    try:
        import plotly.graph_objects as go
        import plotly.io as pio
        from plotly.subplots import make_subplots
    except ImportError:
        raise ConfigError("charts need matplotlib and plotly: pip install 'kctl[bench]'") from None
    return go, pio, make_subplots


def _table_html(cells: Sequence[CellResult], best: dict[str, str | None]) -> str:
    head = "".join(f"<th>{html.escape(m.label)}</th>" for m in METRICS)
    rows = []
    for cell in cells:
        tds = []
        for m in METRICS:
            if not cell.has(m.key):
                tds.append("<td>n/a</td>")
                continue
            s = cell.stat(m.key)
            mark = " class='best'" if best.get(m.key) == cell.name else ""
            tds.append(f"<td{mark}>{m.fmt.format(s.median)}<br><small>{m.fmt.format(s.min)}–"
                       f"{m.fmt.format(s.max)}</small></td>")
        rows.append(f"<tr><th>{html.escape(cell.label)}</th>{''.join(tds)}</tr>")
    return (f"<table><thead><tr><th>cell</th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
            "<p><small>median over repetitions, min–max below; best per column in bold green; "
            "svc = service time (from hand-over to the engine), the others from the intended "
            "send time</small></p>")


def _settings_html(cells: Sequence[CellResult], workload: Mapping[str, Any] | None) -> str:
    """The workload (bench's, when known) and every cell's producer settings."""
    parts = []
    if workload:
        rows = "".join(f"<tr><th>{html.escape(str(k))}</th><td style='text-align:left'>"
                       f"{html.escape(json.dumps(v) if isinstance(v, dict | list) else str(v))}</td></tr>"
                       for k, v in workload.items() if v not in (None, {}, []))
        parts.append(f"<h3>Workload</h3><table>{rows}</table>")
    rows = "".join(f"<tr><th>{html.escape(c.label)}</th><td style='text-align:left'>"
                   f"{html.escape(', '.join(f'{k}={v}' for k, v in c.properties.items()) or 'defaults')}"
                   f" <small>({clock_of(c)})</small></td></tr>" for c in cells)
    parts.append(f"<h3>Producer settings per cell</h3><table>{rows}</table>")
    return "".join(parts)


def write_html(cells: Sequence[CellResult], path: str | Path, *, title: str = "kctl bench",
               best: dict[str, str | None] | None = None,
               workload: Mapping[str, Any] | None = None) -> Path:
    """One self-contained page: the comparison table and both charts (plotly JS inlined)."""
    go, pio, make_subplots = _plotly()
    fig1 = go.Figure()
    for i, cell in enumerate(cells):
        pts = percentile_curve(cell)
        fig1.add_trace(go.Scatter(x=[x for x, _ in pts], y=[y for _, y in pts], mode="lines",
                                  name=_legend(cell, cells), line={"color": _colour(i), "width": 2}))
    import math
    ticks = _ticks_upto(_x_end(cells))
    fig1.update_xaxes(type="log", title="percentile", range=[0.0, math.log10(_x_end(cells))],
                      tickvals=[1.0 / (1.0 - p / 100.0) for p in ticks],
                      ticktext=[_tick_label(p) for p in ticks])
    fig1.update_yaxes(title=f"latency (ms), {_clocks_text(cells)}")
    fig1.update_layout(title=f"latency by percentile ({_clocks_text(cells)})", height=500)

    fig2 = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08)
    for i, cell in enumerate(cells):
        for j, rep in enumerate(cell.reps):
            t = [row["t_s"] for row in rep.timeline]
            common = {"mode": "lines+markers", "legendgroup": cell.name,
                      "line": {"color": _colour(i), "dash": "solid" if j == 0 else "dash"}}
            fig2.add_trace(go.Scatter(x=t, y=[r["records_per_s"] for r in rep.timeline],
                                      name=f"{cell.label} #{rep.repetition}", **common), row=1, col=1)
            fig2.add_trace(go.Scatter(x=t, y=[r["p99_ms"] for r in rep.timeline], showlegend=False,
                                      name=f"{cell.label} #{rep.repetition}", **common), row=2, col=1)
    fig2.update_yaxes(title="records/s", row=1, col=1)
    fig2.update_yaxes(title=f"p99 (ms), {_clocks_text(cells)}", row=2, col=1)
    fig2.update_xaxes(title="seconds since the measurement started", row=2, col=1)
    fig2.update_layout(title="throughput and p99 over time (legend: cell #repetition; solid: first "
                             "repetition, dashed: later ones)", height=650)

    div1 = pio.to_html(fig1, full_html=False, include_plotlyjs=True, div_id="percentiles")
    div2 = pio.to_html(fig2, full_html=False, include_plotlyjs=False, div_id="timeline")
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:1.5em}} table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #ccc;padding:3px 6px;text-align:right}} td.best{{font-weight:bold;color:#070}}</style>
</head><body>
<h1>{html.escape(title)}</h1>
{_table_html(cells, best or {})}
<h2>Workload and settings</h2>
{_settings_html(cells, workload)}
<h2>Latency by percentile</h2>
{div1}
<h2>Throughput and p99 over time</h2>
{div2}
</body></html>
"""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(page, encoding="utf-8")
    return p


def write_charts(cells: Sequence[CellResult], out_dir: str | Path, *, title: str = "kctl bench",
                 best: dict[str, str | None] | None = None,
                 workload: Mapping[str, Any] | None = None) -> list[Path]:
    """Both PNGs and ``report.html`` in ``out_dir``."""
    paths = write_pngs(cells, out_dir, title=title)
    paths.append(write_html(cells, Path(out_dir) / "report.html", title=title, best=best,
                            workload=workload))
    return paths


def write_max_rate_chart(result: MaxRateResult, out_dir: str | Path) -> Path:
    """``max-rate.png``: per step, target and achieved rate (top) and each bound's figure
    against its bound (bottom); failed steps are red crosses, the rate found a line."""
    plt = _mpl()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    steps = result.steps
    xs = [s.step for s in steps]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), dpi=100, sharex=True)
    top.plot(xs, [s.target_rate for s in steps], "o--", color="#7f7f7f", label="target")
    for s in steps:
        top.plot([s.step], [s.achieved_rate], "o" if s.passed else "x", markersize=9,
                 color="#2ca02c" if s.passed else "#d62728")
    if result.found_rate is not None:
        top.axhline(result.found_rate, color="#2ca02c", linewidth=1,
                    label=f"found {result.found_rate:,.0f} records/s")
    top.plot([], [], "o", color="#2ca02c", label="achieved (passed)")
    top.plot([], [], "x", color="#d62728", label="achieved (failed)")
    top.set_ylabel("records/s")
    top.set_title("kctl bench --find-max-rate: " + ", ".join(s.text() for s in result.slos))
    top.grid(True, alpha=0.3)
    top.legend(loc="upper left", fontsize="small")
    for i, slo in enumerate(result.slos):
        ys = [s.figures[i] for s in steps]
        bottom.plot([x for x, y in zip(xs, ys, strict=True) if y is not None], [y for y in ys if y is not None],
                    "o-", color=_colour(i), label=f"{slo.clock} {slo.percentile}")
        bottom.axhline(slo.bound_ms, color=_colour(i), linestyle=":", label=f"bound {slo.bound_ms:g} ms")
    bottom.set_yscale("log")
    bottom.set_ylabel("latency (ms)")
    bottom.set_xlabel("step")
    from matplotlib.ticker import MaxNLocator
    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    bottom.grid(True, which="both", alpha=0.3)
    bottom.legend(loc="upper left", fontsize="small")
    fig.tight_layout()
    path = out / "max-rate.png"
    fig.savefig(path)
    plt.close(fig)
    return path
