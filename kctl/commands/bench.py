"""kctl bench: compare producer settings over a matrix, gate CI on regressions
(thin: options -> kctl.bench -> render)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional

import typer

from kctl.bench.charts import write_charts, write_max_rate_chart
from kctl.bench.gate import DEFAULT_MAX_REGRESSION, parse_bounds
from kctl.bench.results import best_cells
from kctl.bench.max_rate import parse_precision, parse_slo
from kctl.bench.runner import BenchRunner, find_max_rate
from kctl.bench.workload import Workload, load_workload, parse_matrix_option
from kctl.commands._gate import load_baseline, run_gate
from kctl.commands._stop import EXIT_INTERRUPTED
from kctl.config import parse_assignment
from kctl.errors import ConfigError
from kctl.commands._output import check_outputs
from kctl.quantities import parse_duration, parse_rate, parse_warmup
from kctl.ui.bench_view import (comparison_table, interrupted_line, max_rate_line, max_rate_table,
                                run_line)
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
    rate: Optional[str] = typer.Option(None, "--rate", help="Records/s over all workers (5000, 5k), or max (the default). With --find-max-rate: the search's first step (default 1000/s)."),
    duration: Optional[str] = typer.Option(None, "--duration", help="Length of each measured repetition: 500ms, 10s, 1m30s (default 10s)."),
    warmup: Optional[str] = typer.Option(None, "--warmup", help="Warm-up before each repetition, not counted (default 2s)."),
    repetitions: Optional[int] = typer.Option(None, "--repetitions", help="Repetitions per cell, interleaved (default 3)."),
    workers: Optional[int] = typer.Option(None, "--workers", help="Worker processes per run (default, as for kctl produce: cores - 1 when the broker is on this host, else one per core)."),
    consume: bool = typer.Option(False, "--consume", help="Also consume every run (kctl produce --consume): the e2e clock (consumed - intended send time) in the table, results and logs."),
    consumer_property: list[str] = typer.Option([], "--consumer-property", metavar="NAME=VALUE", help="Consumer property for --consume (or an e2e --slo): fetch.min.bytes, fetch.max.wait.ms (default 500), ... as in kctl produce (repeatable)."),
    no_id_headers: bool = typer.Option(False, "--no-id-headers", help="Do not add the 24-byte kctl identity header (run, worker, sequence, intended time) that every record carries otherwise, as in kctl produce (workload id_headers = false); not with --consume."),
    find_max_rate: bool = typer.Option(False, "--find-max-rate", help="Search for the highest --rate at which every --slo holds: bracketing search over fixed-rate steps (each --warmup then --duration, default 1s + 5s); a step more than 3% off its target rate fails."),
    slo: list[str] = typer.Option([], "--slo", help="A latency bound for --find-max-rate: [clock.]percentile<bound, e.g. 'p99<50ms' (intended clock), 'e2e.p99<100ms', 'request.p99.9<20ms' (repeatable: all must hold)."),
    max_steps: int = typer.Option(12, "--max-steps", help="--find-max-rate: most steps to run (at least 2: one to start from, one to bracket)."),
    precision: str = typer.Option("5%", "--precision", help="--find-max-rate: stop when the bracket is this narrow (relative to the rate found)."),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Write results.json, hlog/<cell>.hlog, PNG charts and report.html here."),
    baseline: Optional[Path] = typer.Option(None, "--baseline", help="results.json of an earlier run: fail on a regression."),
    max_regression: Optional[str] = typer.Option(None, "--max-regression", help="With --baseline: bounds per metric beyond the repetitions' spread: N%, Nms or N%+Nms (default: " + DEFAULT_MAX_REGRESSION + ")."),
    junit_xml: Optional[Path] = typer.Option(None, "--junit-xml", help="Write the gate's checks as JUnit XML (with --baseline)."),
    quiet: bool = typer.Option(False, "--quiet", help="Print only the table (and the gate)."),
) -> None:
    """Compare producer settings over a matrix, or find the highest rate within a latency bound.

    A workload runs under every combination of producer settings (cells, interleaved
    repetitions); with --find-max-rate --slo 'p99<50ms' a bracketing search over
    fixed-rate steps finds the highest rate at which every bound holds. Ctrl-C or SIGTERM
    ends the matrix: the table and --out hold the runs completed so far (the run under way
    is left out and named), exit 130."""
    t0 = time.monotonic()
    check_outputs(files={"--junit-xml": junit_xml}, dirs={"--out": out_dir})
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
        id_headers=False if no_id_headers else None,
        consumer_properties=tuple(consumer_property) or None,
        properties=(base.properties + extra) if extra else None)
    if junit_xml and not baseline:
        raise ConfigError("--junit-xml reports the regression gate: give --baseline too")
    if max_regression is not None:
        parse_bounds(max_regression)
        if baseline is None:
            raise ConfigError("--max-regression bounds the regression gate: give --baseline too")
    max_regression = max_regression or DEFAULT_MAX_REGRESSION
    # A bad baseline fails before the runs, not after them.
    gate_baseline = load_baseline(baseline) if baseline is not None else None

    out = stdout_console()
    err = stderr_console()

    def on_event(message: str) -> None:
        if not quiet:
            err.print(message, highlight=False)

    if slo and not find_max_rate:
        raise ConfigError("--slo goes with --find-max-rate")
    if find_max_rate:
        # A step's default length (1 s warm-up + 5 s) unless the command line or the
        # workload file gives one.
        _find_max_rate(workload, slo, rate=rate,
                       duration=duration or (base.duration if workload_file else None),
                       warmup=warmup or (base.warmup if workload_file else None), repetitions=repetitions,
                       max_steps=max_steps, precision=precision, out_dir=out_dir,
                       baseline=baseline, on_event=on_event)
        return

    def on_run(cell, repetition, rep) -> None:
        if not quiet:
            err.print(run_line(cell.label, repetition, rep.metrics), highlight=False)

    runner = BenchRunner(workload, out_dir, on_event=on_event, on_run=on_run)
    cells = runner.cells
    on_event(f"{len(cells)} cell(s) x {workload.repetitions} repetition(s), interleaved; "
             f"{workload.duration} each after {workload.warmup or 'no'} warm-up")
    results = runner.run()
    if results.cells:
        out.print(comparison_table(results.cells))
    if out_dir is not None and results.cells:
        out_dir.mkdir(parents=True, exist_ok=True)
        results.write(out_dir / "results.json")
        paths = write_charts(results.cells, out_dir, best=best_cells(results.cells),
                             workload={**results.workload, "environment": results.environment})
        on_event(f"wrote {out_dir / 'results.json'}, {len(results.cells)} interval log(s) in "
                 f"{out_dir / 'hlog'}, " + ", ".join(str(p) for p in paths))
    elif out_dir is not None and results.interrupted is not None:
        # Stopped before any run completed: results.json still says so (no cells, which
        # run was cut short, which never ran); there is nothing to chart.
        out_dir.mkdir(parents=True, exist_ok=True)
        results.write(out_dir / "results.json")
        on_event(f"wrote {out_dir / 'results.json'} (no run completed: no charts)")
    if results.interrupted is not None:
        # What the completed runs measured is written; the gate is not judged on part of a
        # matrix; the status says the bench was cut short (cli.py: 'kctl: interrupted').
        err.print(interrupted_line(results, baseline is not None), highlight=False)
        raise typer.Exit(EXIT_INTERRUPTED)
    if gate_baseline is not None:
        ok = run_gate(results.cells, gate_baseline, max_regression, junit_xml, out,
                      elapsed_s=time.monotonic() - t0)
        if not ok:
            raise typer.Exit(1)


def _find_max_rate(workload: Workload, slo_texts: list[str], *, rate: str | None, duration: str | None,
                   warmup: str | None, repetitions: int | None, max_steps: int, precision: str,
                   out_dir: Path | None, baseline: Path | None, on_event) -> None:
    if not slo_texts:
        raise ConfigError("--find-max-rate needs at least one --slo, e.g. --slo 'p99<50ms'")
    if repetitions is not None or baseline is not None:
        raise ConfigError("--find-max-rate runs one search: --repetitions and --baseline do not go with it")
    slos = [parse_slo(t) for t in slo_texts]
    fraction = parse_precision(precision)
    start = workload.rate or 1000.0
    if rate is not None and not workload.rate:
        raise ConfigError("--rate is the search's first step: give a number (5000), not max")
    workload = workload.with_overrides(duration=duration or "5s", warmup=warmup or "1s")
    out = stdout_console()
    result = find_max_rate(workload, slos, start_rate=start, max_steps=max_steps, precision=fraction,
                           on_event=on_event,
                           on_step=lambda s: on_event(f"  step {s.step}: {s.target_rate:,.0f}/s -> "
                                                      f"{s.achieved_rate:,.0f}/s achieved, "
                                                      + ("pass" if s.passed else f"FAIL: {s.reason}")))
    out.print(max_rate_table(result))
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "max-rate.json").write_text(json.dumps(result.to_json(), indent=1) + "\n")
        chart = write_max_rate_chart(result, out_dir)
        on_event(f"wrote {out_dir / 'max-rate.json'}, {chart}")
    print(max_rate_line(result), flush=True)
    if result.interrupted:
        raise typer.Exit(EXIT_INTERRUPTED)      # cli.py: 'kctl: interrupted'
    if result.found_rate is None:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("bench")(bench)
