"""kctl bench: compare producer settings over a matrix, gate CI on regressions
(thin: options -> kctl.bench -> render)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from kctl.bench.charts import write_charts
from kctl.bench.gate import DEFAULT_MAX_REGRESSION, parse_bounds
from kctl.bench.results import best_cells
from kctl.bench.runner import BenchRunner
from kctl.bench.workload import Workload, load_workload, parse_matrix_option
from kctl.commands._gate import run_gate
from kctl.config import parse_assignment
from kctl.errors import ConfigError
from kctl.quantities import parse_duration, parse_rate, parse_warmup
from kctl.ui.bench_view import comparison_table, run_line
from kctl.ui.console import stderr_console, stdout_console


def bench(
    workload_file: Optional[Path] = typer.Argument(None, help="Workload TOML with tables [workload], [properties], [matrix]; options below override it."),
    matrix: list[str] = typer.Option([], "--matrix", help="A producer property and its values, e.g. 'acks=1,all' (repeatable)."),
    properties: list[str] = typer.Option([], "-X", help="Producer property name=value for every cell (repeatable)."),
    bootstrap_server: Optional[str] = typer.Option(None, "-b", "--bootstrap-server", help="Brokers. None: start the embedded broker."),
    topic: Optional[str] = typer.Option(None, "-t", "--topic", help="Topic prefix: each cell produces to <topic>-<cell>."),
    partitions: Optional[int] = typer.Option(None, "--partitions", help="Partitions of each cell's topic."),
    record_size: Optional[int] = typer.Option(None, "--record-size", help="Value size in bytes."),
    payload: Optional[str] = typer.Option(None, "--payload", help="random | text | zeros."),
    keys: Optional[str] = typer.Option(None, "--keys", help="none | seq | random:N | file:F."),
    rate: Optional[str] = typer.Option(None, "--rate", help="Records/s over all workers (5000, 5k), or max (the default)."),
    duration: Optional[str] = typer.Option(None, "--duration", help="Length of each measured repetition: 500ms, 10s, 1m30s (default 10s)."),
    warmup: Optional[str] = typer.Option(None, "--warmup", help="Warm-up before each repetition, not counted (default 2s)."),
    repetitions: Optional[int] = typer.Option(None, "--repetitions", help="Repetitions per cell, interleaved (default 3)."),
    workers: Optional[int] = typer.Option(None, "--workers", help="Worker processes per run (default: CPU cores)."),
    consume: bool = typer.Option(False, "--consume", help="Also consume every run (kctl produce --consume): the e2e clock (consumed - intended send time) in the table, results and logs."),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Write results.json, hlog/<cell>.hlog, PNG charts and report.html here."),
    baseline: Optional[Path] = typer.Option(None, "--baseline", help="results.json of an earlier run: fail on a regression."),
    max_regression: str = typer.Option(DEFAULT_MAX_REGRESSION, "--max-regression", help="Bounds per metric beyond the repetitions' spread: N%, Nms or N%+Nms."),
    junit_xml: Optional[Path] = typer.Option(None, "--junit-xml", help="Write the gate's checks as JUnit XML (with --baseline)."),
    quiet: bool = typer.Option(False, "--quiet", help="Print only the table (and the gate)."),
) -> None:
    """Run a workload under every combination of producer settings and compare them."""
    t0 = time.monotonic()
    base = load_workload(workload_file) if workload_file else Workload()
    extra = tuple((s.name, str(s.value)) for s in (parse_assignment(x, "-X") for x in properties))
    cli_matrix = tuple(parse_matrix_option(m) for m in matrix)
    if cli_matrix:
        names = {k for k, _ in cli_matrix}
        merged_matrix = tuple(kv for kv in base.matrix if kv[0] not in names) + cli_matrix
    else:
        merged_matrix = None
    if duration is not None:
        parse_duration(duration, "--duration")
    if warmup is not None:
        parse_warmup(warmup, "--warmup")
    workload = base.with_overrides(
        bootstrap=bootstrap_server, topic=topic, partitions=partitions, record_size=record_size,
        payload=payload, keys=keys, rate=parse_rate(rate, "--rate") if rate is not None else None, duration=duration, warmup=warmup,
        repetitions=repetitions, workers=workers, matrix=merged_matrix, consume=consume or None,
        properties=(base.properties + extra) if extra else None)
    if junit_xml and not baseline:
        raise ConfigError("--junit-xml reports the regression gate: give --baseline too")
    parse_bounds(max_regression)
    if baseline is not None and not baseline.exists():
        raise ConfigError(f"--baseline {baseline}: no such file")
    if out_dir is not None and out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"--out {out_dir} exists and is not a directory")

    out = stdout_console()
    err = stderr_console()

    def on_event(message: str) -> None:
        if not quiet:
            err.print(message, highlight=False)

    def on_run(cell, repetition, rep) -> None:
        if not quiet:
            err.print(run_line(cell.label, repetition, rep.metrics), highlight=False)

    runner = BenchRunner(workload, out_dir, on_event=on_event, on_run=on_run)
    cells = runner.cells
    on_event(f"{len(cells)} cell(s) x {workload.repetitions} repetition(s), interleaved; "
             f"{workload.duration} each after {workload.warmup or 'no'} warm-up")
    results = runner.run()
    out.print(comparison_table(results.cells))
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        results.write(out_dir / "results.json")
        paths = write_charts(results.cells, out_dir, best=best_cells(results.cells),
                             workload={**results.workload, "environment": results.environment})
        on_event(f"wrote {out_dir / 'results.json'}, {len(results.cells)} interval log(s) in "
                 f"{out_dir / 'hlog'}, " + ", ".join(str(p) for p in paths))
    if baseline is not None:
        ok = run_gate(results.cells, baseline, max_regression, junit_xml, out,
                      elapsed_s=time.monotonic() - t0)
        if not ok:
            raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("bench")(bench)
