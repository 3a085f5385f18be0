"""kctl report: compare earlier runs (bench results.json, produce summary JSON, HdrHistogram
interval logs); no broker needed (thin: files -> kctl.bench.results -> render)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from kctl.bench.charts import write_charts
from kctl.bench.gate import DEFAULT_MAX_REGRESSION, parse_bounds
from kctl.bench.results import CellResult, best_cells, load_run
from kctl.commands._gate import load_baseline, run_gate
from kctl.errors import ConfigError
from kctl.commands._output import check_outputs
from kctl.ui.bench_view import comparison_table
from kctl.ui.console import stderr_console, stdout_console


def _run_name(path: Path) -> str:
    p = path if path.is_dir() else path.parent if path.name == "results.json" else path
    return p.name if p.is_dir() else p.stem


def run_names(paths: list[Path]) -> list[str]:
    """A distinct label per run: the file's stem (``s``), its name when two stems are the
    same (``s.json``, ``s.hlog``: a summary and the interval log of one run), its path
    when even those are."""
    names = [_run_name(p) for p in paths]
    for better in (lambda p: p.name, str):
        dupes = {n for n in names if names.count(n) > 1}
        names = [better(p) if n in dupes else n for p, n in zip(paths, names, strict=True)]
    return names


def report(
    runs: list[Path] = typer.Argument(..., help="results.json (or its directory), produce summary JSON, or .hlog files."),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Write the PNG charts and report.html here."),
    hlog_unit: str = typer.Option("us", "--hlog-unit", help="Unit of the values in .hlog files: ns, us (kctl's), ms, s."),
    baseline: Optional[Path] = typer.Option(None, "--baseline", help="Gate one RUN against this earlier run."),
    max_regression: Optional[str] = typer.Option(None, "--max-regression", help="With --baseline: bounds per metric beyond the repetitions' spread: N%, Nms or N%+Nms (default: " + DEFAULT_MAX_REGRESSION + ")."),
    junit_xml: Optional[Path] = typer.Option(None, "--junit-xml", help="Write the gate's checks as JUnit XML (with --baseline)."),
) -> None:
    """Compare earlier runs: the comparison table and the charts, no broker needed."""
    check_outputs(files={"--junit-xml": junit_xml}, dirs={"--out": out_dir})
    if max_regression is not None:
        parse_bounds(max_regression)
        if baseline is None:
            raise ConfigError("--max-regression bounds the regression gate: give --baseline too")
    max_regression = max_regression or DEFAULT_MAX_REGRESSION
    if baseline is not None:
        if len(runs) != 1:
            raise ConfigError("--baseline gates one run: give exactly one RUN")
    if junit_xml and baseline is None:
        raise ConfigError("--junit-xml reports the regression gate: give --baseline too")
    # A bad baseline fails before the table.
    gate_baseline = load_baseline(baseline) if baseline is not None else None
    cells: list[CellResult] = []
    for path, prefix in zip(runs, run_names(runs), strict=True):
        loaded = load_run(path, hlog_unit=hlog_unit, on_warning=lambda text: stderr_console().print(
            f"warning: {text}", highlight=False, markup=False))
        if len(runs) > 1:
            for c in loaded:
                # Names must differ too: the best-per-column marks and charts go by name.
                c.label = f"{prefix}: {c.label}" if c.label != _run_name(path) else prefix
                c.name = f"{prefix}/{c.name}"
        cells.extend(loaded)
    out = stdout_console()
    out.print(comparison_table(cells, title="kctl report"))
    if out_dir is not None:
        paths = write_charts(cells, out_dir, title="kctl report", best=best_cells(cells))
        stderr_console().print("wrote " + ", ".join(str(p) for p in paths), highlight=False)
    if gate_baseline is not None and not run_gate(cells, gate_baseline, max_regression, junit_xml, out):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("report")(report)
