"""A load run: starts the worker processes, merges their reports, stops them.

How this works: ``LoadRun.run()`` splits the schedule across ``workers``
processes (spawned, each with its own engine), then reads their reports from
one queue and feeds them to ``RunStats`` (stats/aggregate.py), calling
``on_round`` after each merged interval so the caller can render. It never
renders itself. That bookkeeping (and ``on_start``, where a dashboard starts)
runs in its own thread at a lower CPU priority than the workers
(load/priority.py), so it never holds up a due record; the main thread waits
for it and keeps Ctrl-C. Ctrl-C (KeyboardInterrupt in the parent) sets the shared stop
event: workers end their schedule, give in-flight records ``stop_grace_s``,
and still send their final reports, so the summary and the histograms are
written. A second stop (``PARENT_STOPS.again``, load/stop.py, or a second
KeyboardInterrupt) sets ``hurry``: the workers abandon what is still in flight
at once (with the reason) and report, and the summary is written all the same.
A worker that fails fails the run with its error (no silent partial result);
the others are stopped.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kctl.config import ProducerConfig
from kctl.errors import KctlError
from kctl.load.payload import KeySpec, PayloadPool
from kctl.load.priority import yield_to_load
from kctl.load.schedule import split, window_ns
from kctl.load.stop import PARENT_STOPS, STOP_GRACE_S, stops_held
from kctl.load.worker import StartGate, WorkerSpec, run_worker
from kctl.stats.aggregate import RunStats
from kctl.stats.hlog import IntervalLogWriter
from kctl.stats.summary import RunSummary
from kctl.stats.report import WorkerFailed, WorkerInterval, WorkerReady

#: Workers start together this long after the last one said it is ready.
START_MARGIN_S = 0.2
#: How long workers may take to start (spawn, imports, metadata, connections).
READY_TIMEOUT_S = 120.0
#: After a second stop, how long the workers' final reports are waited for (they no longer
#: wait for verdicts); a worker still running then is killed, its records without verdict.
AFTER_SECOND_STOP_S = 3.0


@dataclass(frozen=True)
class LoadSpec:
    """A whole run, typed (it crosses to worker processes and Spark tasks as is)."""

    topic: str
    producer: ProducerConfig
    rate: float = 0.0
    num_records: int | None = None
    duration_s: float | None = None
    warmup_records: int = 0
    warmup_s: float = 0.0
    payload: PayloadPool = field(default_factory=lambda: PayloadPool((b"x" * 100,), 100))
    keys: KeySpec = field(default_factory=lambda: KeySpec("none"))
    extra_headers: int = 0
    id_headers: bool = True
    workers: int = 1
    workers_reason: str = "--workers"
    interval_s: float = 1.0
    verify: bool = False
    collect_acked: bool = False     # acked runs in the final reports without --verify (consume targets)
    stop_grace_s: float = STOP_GRACE_S
    seed: int = 0
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    transaction_duration_ms: int | None = None   # commit every N ms (transactional.id set)
    spin_ms: float = 0.0            # paced: poll, not sleep, this long before each due record

    @property
    def duration_ns(self) -> int | None:
        return int(self.duration_s * 1e9) if self.duration_s is not None else None

    @property
    def spin_ns(self) -> int:
        return round(self.spin_ms * 1_000_000)

    def worker_producer(self, worker: int) -> ProducerConfig:
        """Worker ``worker``'s producer: with several workers, each transactional one has
        its own ``transactional.id`` (``<id>-<worker>``): one id shared would fence the others.
        Without a ``client.id`` each worker names itself ``kctl-producer-<worker>`` in its
        request headers (as the Java client sends ``producer-<n>``: quotas, broker logs and
        capture tools tell clients apart by it); one set, even empty, is sent as it is (Java's
        ``ProducerConfig.maybeOverrideClientId`` names the producer only when it is not set)."""
        changes: dict[str, str] = {}
        tid = self.producer.transactional_id
        if tid is not None and self.workers > 1:
            changes["transactional.id"] = f"{tid}-{worker}"
        if "client.id" not in self.producer.explicit:
            changes["client.id"] = f"kctl-producer-{worker}"
        return self.producer.with_properties(changes) if changes else self.producer


def warmup_records_each(spec: LoadSpec) -> int:
    """``--warmup N`` records: each worker's share (its first sequences)."""
    return -(-spec.warmup_records // spec.workers) if spec.warmup_records else 0


def worker_specs(spec: LoadSpec) -> list[WorkerSpec]:
    """Each worker's share of the run (its schedule, records, warm-up), as it crosses to
    the worker's process or Spark task."""
    duration_ns = spec.duration_ns
    schedules = split(spec.rate, spec.workers, 0, num_records=spec.num_records,
                      duration_ns=duration_ns)
    warm_each = warmup_records_each(spec)
    return [WorkerSpec(
        worker=w, run_id=spec.run_id, topic=spec.topic, producer=spec.worker_producer(w),
        schedule_rate=sched.rate, schedule_phase_ns=sched.phase_ns,
        num_records=sched.num_records, duration_ns=duration_ns, start_wall_ns=0,
        warmup_records=warm_each, warmup_ns=int(spec.warmup_s * 1e9),
        payload=spec.payload, keys=spec.keys, extra_headers=spec.extra_headers,
        id_headers=spec.id_headers, interval_s=spec.interval_s,
        stop_grace_s=spec.stop_grace_s, seed=spec.seed, verify=spec.verify or spec.collect_acked,
        transaction_duration_ms=spec.transaction_duration_ms, spin_ns=spec.spin_ns)
        for w, sched in enumerate(schedules)]


def run_stats(spec: LoadSpec, start_wall_ns: int, *, config: dict[str, Any],
              hdr_out: str | None) -> RunStats:
    """The merge of a run's reports, local workers' or Spark tasks' (kctl/spark/load.py)
    alike, with its .hlog when ``hdr_out`` is given. ``start_wall_ns`` is the workers'
    agreed start, where every schedule begins, not when the first of them began (a late
    worker's records are still due from it); a paced run's measured span is then the
    schedule's window from there (``RunStats`` ``window_s``), so a late start does not
    shorten the span and overstate the rate."""
    hlog = IntervalLogWriter.open(hdr_out, start_wall_ns) if hdr_out else None
    return RunStats(
        workers=spec.workers, start_wall_ns=start_wall_ns, target_rate=spec.rate or None,
        config=config, run_id=spec.run_id, duration_s=spec.duration_s,
        num_records=spec.num_records, hlog=hlog, workers_reason=spec.workers_reason,
        transactional=spec.transaction_duration_ms is not None,
        window_s=_seconds(window_ns(spec.rate, num_records=spec.num_records,
                                    duration_ns=spec.duration_ns)))


@dataclass
class LoadResult:
    summary: RunSummary
    acked_runs: dict[int, dict[int, list[tuple[int, int, int]]]]   # worker -> partition -> runs
    interrupted: bool
    failures: dict[int, str]


class LoadRun:
    def __init__(self, spec: LoadSpec, *, config_for_summary: dict[str, Any],
                 hdr_out: str | None = None,
                 on_round: Callable[[RunStats, int], None] | None = None,
                 on_start: Callable[[LoadRun], None] | None = None,
                 close_hlog: bool = True) -> None:
        """``close_hlog=False``: the caller closes ``stats.hlog`` (more lines follow: the
        consumers' e2e of ``kctl produce --consume``)."""
        if spec.workers < 1:
            raise KctlError("--workers must be at least 1")
        if spec.num_records is None and spec.duration_s is None:
            raise KctlError("give --num-records or --duration")
        self.spec = spec
        self.config_for_summary = config_for_summary
        self.hdr_out = hdr_out
        self.on_round = on_round
        self.on_start = on_start
        self.close_hlog = close_hlog
        self.stats: RunStats | None = None

    def run(self) -> LoadResult:
        spec = self.spec
        ctx = mp.get_context("spawn")
        reports = ctx.Queue()
        stop = ctx.Event()
        hurry = ctx.Event()     # a second stop: the workers' wait for verdicts ends at once
        gate = StartGate(ctx.Event(), ctx.Value("q", 0))
        procs = []
        try:
            # A stop is delivered once every worker is spawned (and reaches a worker once
            # its handler is set: load/stop.py).
            with stops_held(children=True):
                for ws in worker_specs(spec):
                    proc = ctx.Process(target=run_worker, args=(ws, reports, stop, gate, hurry),
                                       name=f"kctl-worker-{ws.worker}", daemon=True)
                    proc.start()
                    procs.append(proc)
            early = self._await_ready(reports, procs)
        except BaseException:
            # Stopped (or failed) before the start: no worker has sent a record yet, so
            # one that is still starting up after a few seconds in all is killed.
            stop.set()
            deadline = time.monotonic() + 5
            for p in procs:
                p.join(timeout=max(0.0, deadline - time.monotonic()))
                if p.is_alive():
                    p.kill()
            raise
        start_wall = time.time_ns() + int(START_MARGIN_S * 1e9)
        gate.start_wall_ns.value = start_wall
        gate.go.set()
        self.stats = stats = run_stats(spec, start_wall, config=self.config_for_summary,
                                       hdr_out=self.hdr_out)
        hlog = stats.hlog
        collector = _Collector(self, reports, procs, stop, early)
        thread = threading.Thread(target=collector.run, name="kctl-load-reports", daemon=True)
        thread.start()
        hurried = False
        # Waited on through collector.done, not Thread.join: a KeyboardInterrupt inside join
        # (Python 3.11) can mark a thread that still runs as stopped, and the stop's wait
        # would then end at once (its reports, and a second stop, missed).
        done = collector.done
        try:
            try:
                while not done.wait(0.2):
                    pass
            except KeyboardInterrupt:
                stats.interrupted = True        # the rounds still to come say so
                collector.interrupted.set()
                stop.set()
                try:
                    while not done.wait(0.2) and not PARENT_STOPS.again.is_set():
                        pass
                except KeyboardInterrupt:
                    pass                        # a second stop where no handler takes it
                if not done.is_set():
                    # A second stop: the workers stop waiting for verdicts (what is in
                    # flight is abandoned, with the reason) and send their final reports.
                    hurried = True
                    hurry.set()
                    done.wait(AFTER_SECOND_STOP_S)
                    collector.give_up.set()
                    done.wait(1)
        finally:
            stop.set()
            for p in procs:
                p.join(timeout=AFTER_SECOND_STOP_S if hurried else spec.stop_grace_s + 5)
                if p.is_alive():
                    # A worker that missed the stop and its grace: SIGTERM would only
                    # stop it again (load/stop.py), so it is killed.
                    p.kill()
                    p.join(timeout=2)
        if collector.error is not None:
            raise collector.error
        interrupted = collector.interrupted.is_set()
        stats.interrupted = interrupted
        stats.finish(self.on_round)     # rounds of workers that never made a final report
        summary = stats.summary()
        if hlog is not None and self.close_hlog:
            hlog.close()
        return LoadResult(summary, collector.acked, interrupted, collector.failures)

    def _await_ready(self, reports, procs) -> list:
        """Waits until every worker is ready; a worker that fails first fails the run.
        Returns messages that are not readiness (none, normally)."""
        ready: set[int] = set()
        other = []
        deadline = time.monotonic() + READY_TIMEOUT_S
        while len(ready) < len(procs):
            if time.monotonic() > deadline:
                raise KctlError(f"workers not ready after {READY_TIMEOUT_S:g} s")
            try:
                msg = reports.get(timeout=0.2)
            except queue.Empty:
                for i, p in enumerate(procs):
                    if not p.is_alive() and i not in ready and reports.empty():
                        raise KctlError(f"worker {i} exited with code {p.exitcode} before starting")
                continue
            if isinstance(msg, WorkerReady):
                ready.add(msg.worker)
            elif isinstance(msg, WorkerFailed):
                raise KctlError(f"worker {msg.worker} failed: {msg.error.splitlines()[0]}")
            else:
                other.append(msg)
        return other

def _seconds(ns: int | None) -> float | None:
    return None if ns is None else ns / 1e9


class _Collector:
    """The parent's bookkeeping, in its own thread at a lower CPU priority than the
    workers (load/priority.py): ``on_start`` (the dashboard starts here, and its
    refresher inherits the priority), then every report into ``RunStats`` and
    ``on_round``, until each worker has sent its final report or failed. The main
    thread keeps Ctrl-C: ``interrupted`` makes this drain what the workers still
    send after the stop; ``give_up`` (a short while after a second stop) ends that wait."""

    def __init__(self, run: LoadRun, reports: Any, procs: list, stop: Any, early: list) -> None:
        self.run_ = run
        self.reports = reports
        self.procs = procs
        self.stop = stop
        self.early = early
        self.acked: dict[int, dict[int, list[tuple[int, int, int]]]] = {}
        self.failures: dict[int, str] = {}
        self.finished: set[int] = set()
        self.interrupted = threading.Event()
        self.give_up = threading.Event()
        self.done = threading.Event()       # set when this thread's work has ended
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        finally:
            self.done.set()

    def _run(self) -> None:
        try:
            yield_to_load()
            run = self.run_
            if run.on_start is not None:
                run.on_start(run)
            for msg in self.early:
                self._take(msg)
            self._collect()
        except BaseException as e:  # noqa: BLE001 - raised again by LoadRun.run
            self.error = e
            self.stop.set()

    def _collect(self) -> None:
        workers = len(self.procs)
        deadline = None
        while len(self.finished) < workers and not self.give_up.is_set():
            if self.interrupted.is_set() and deadline is None:
                deadline = time.monotonic() + self.run_.spec.stop_grace_s + 10
            if deadline is not None and time.monotonic() > deadline:
                return
            try:
                msg = self.reports.get(timeout=0.2)
            except queue.Empty:
                if self.interrupted.is_set():
                    continue
                dead = [i for i, p in enumerate(self.procs) if not p.is_alive() and i not in self.finished]
                for i in dead:
                    # Let a report already in the queue arrive before calling it lost.
                    time.sleep(0.2)
                    if i in self.finished or not self.reports.empty():
                        continue
                    self._take(WorkerFailed(i, f"worker {i} exited with code {self.procs[i].exitcode} "
                                               "without a report"))
                continue
            self._take(msg)

    def _take(self, msg: WorkerInterval | WorkerFailed) -> None:
        run = self.run_
        assert run.stats is not None
        run.stats.add(msg, run.on_round)      # a plain line per round it closes
        if isinstance(msg, WorkerFailed):
            self.failures[msg.worker] = msg.error
            self.finished.add(msg.worker)
            self.stop.set()
        elif isinstance(msg, WorkerInterval) and msg.final:
            self.finished.add(msg.worker)
            if msg.acked_runs is not None:
                self.acked[msg.worker] = msg.acked_runs
        # After a stop too: the workers' final reports close the last (partial) rounds, one
        # line each (above), and the lines add up to the summary.
