"""``kctl produce --spark``: the load workers run as Spark tasks of one barrier stage.

How this works
--------------
The driver splits the schedule exactly as a local run does (load/run.py
``worker_specs``): one ``WorkerSpec`` per task. The tasks form a barrier
stage, so they start together or not at all; each one

1. agrees on the common start with the others (``allGather`` of their clocks:
   the latest plus ``START_DELAY_S``, room for metadata and connections),
2. runs the same ``Worker`` loop a local worker process runs
   (kctl/load/worker.py), reporting into a ``TaskReports`` collector instead of
   a multiprocessing queue,
3. returns every report it made, ``(worker, index, WorkerInterval)``: encoded
   interval histograms and cumulative counters, the final one with the
   acknowledged ranges when ``--verify`` is on.

Start skew: every task also returns a ``TaskStart`` (when Spark launched it, the common
start it agreed on, and when its schedule's first interval actually began, all wall
clock) and the summary gets a ``spark`` section: how far apart the tasks launched and
began, and each task's lateness against the agreed start (docs/produce-summary.md).

Live intervals: the collector also posts each report, as it is made, to a
small TCP listener on the driver (``ReportListener``); the driver feeds them to
``RunStats`` while the job runs, so plain interval lines appear as in a local
run. The reports a task returns are the record of truth: at the end the driver
adds those it has not seen live (a task that could not reach the listener still
counts in full). Every report is added once, in order per worker, so the
summary JSON and the .hlog are made by the same ``RunStats`` merge (HdrHistogram
add, never averaged percentiles) as a local run.

A task whose worker fails raises ``TaskError``: the job fails, Spark kills the
other tasks of the stage, and the run fails with that task's error (no partial
result). Ctrl-C cancels the job group; the summary covers the reports received
so far and the result is marked interrupted.
"""

from __future__ import annotations

import pickle
import queue
import socket
import struct
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from kctl.errors import KctlError
from kctl.load.run import LoadResult, LoadSpec, worker_specs
from kctl.load.worker import Worker, WorkerSpec
from kctl.spark.session import TaskError, check_barrier_slots, run_job, spark_session
from kctl.stats.aggregate import RunStats
from kctl.stats.hlog import IntervalLogWriter
from kctl.stats.report import WorkerFailed, WorkerInterval
from kctl.stats.summary import SparkStarts, TaskStartFigures

#: Tasks start this long after the last of them is ready (producer metadata, connections).
START_DELAY_S = 1.0
_LEN = struct.Struct(">I")

# -- in the task ---------------------------------------------------------------------------------


class TaskReports:
    """The worker's ``reports`` queue inside a task: keeps every report and, when a
    driver listener is given, posts each one there as well (best effort)."""

    def __init__(self, worker: int, listener: tuple[str, int] | None) -> None:
        self.worker = worker
        self.items: list[tuple[int, int, WorkerInterval | WorkerFailed]] = []
        self._sock: socket.socket | None = None
        if listener is not None:
            try:
                self._sock = socket.create_connection(listener, timeout=2.0)
            except OSError:
                self._sock = None

    def put(self, msg: WorkerInterval | WorkerFailed) -> None:
        item = (self.worker, len(self.items), msg)
        self.items.append(item)
        if self._sock is not None:
            data = pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
            try:
                self._sock.sendall(_LEN.pack(len(data)) + data)
            except OSError:
                self.close()

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None


@dataclass(frozen=True, slots=True)
class TaskStart:
    """When one load task started, wall clock ns: ``launched`` (Spark ran it), ``agreed``
    (the common start the tasks computed together), ``began`` (its schedule's first
    interval began; later than ``agreed`` by the task's lateness)."""

    worker: int
    host: str
    launched_wall_ns: int
    agreed_wall_ns: int
    began_wall_ns: int

    @property
    def late_ns(self) -> int:
        return self.began_wall_ns - self.agreed_wall_ns


#: The report index a task's ``TaskStart`` travels under (reports count from 0).
TASK_START = -1


def agree_start(start_delay_s: float) -> int:
    """The common start (wall ns) of all tasks of the barrier stage."""
    from pyspark import BarrierTaskContext
    stamps = BarrierTaskContext.get().allGather(str(time.time_ns()))
    return max(int(s) for s in stamps) + int(start_delay_s * 1e9)


def run_worker_task(spec: WorkerSpec, listener: tuple[str, int] | None,
                    start_delay_s: float = START_DELAY_S) -> list[tuple[int, int, Any]]:
    """One barrier task: the worker loop at the agreed start; returns its reports and,
    last, its ``TaskStart``."""
    launched = time.time_ns()
    start = agree_start(start_delay_s)
    spec = replace(spec, start_wall_ns=start)
    reports = TaskReports(spec.worker, listener)
    try:
        Worker(spec, reports, threading.Event()).run()
    except KctlError as e:
        raise TaskError(f"task {spec.worker} failed: {e}") from None
    except BaseException as e:  # noqa: BLE001 - the task's own error must reach the driver
        raise TaskError(f"task {spec.worker} failed: {type(e).__name__}: {e} "
                        f"{traceback.format_exc(limit=3)}") from None
    finally:
        reports.close()
    began = next((m.start_wall_ns for _, _, m in reports.items if isinstance(m, WorkerInterval)),
                 start)
    return reports.items + [(spec.worker, TASK_START,
                             TaskStart(spec.worker, socket.gethostname(), launched, start, began))]


def start_summary(starts: list[TaskStart]) -> SparkStarts:
    """The summary's ``spark`` section: how together the tasks started."""
    starts = sorted(starts, key=lambda t: t.worker)
    first_launch = min(t.launched_wall_ns for t in starts)
    return SparkStarts(
        tasks=len(starts),
        hosts=len({t.host for t in starts}),
        launch_spread_ms=round((max(t.launched_wall_ns for t in starts) - first_launch) / 1e6, 3),
        start_skew_ms=round((max(t.began_wall_ns for t in starts)
                             - min(t.began_wall_ns for t in starts)) / 1e6, 3),
        max_late_ms=round(max(t.late_ns for t in starts) / 1e6, 3),
        per_task=tuple(TaskStartFigures(t.worker, t.host,
                                        round((t.launched_wall_ns - first_launch) / 1e6, 3),
                                        round(t.late_ns / 1e6, 3)) for t in starts))


def _load_partition(specs: list[WorkerSpec], listener: tuple[str, int] | None,
                    start_delay_s: float) -> Callable[[int, Iterable[Any]], Iterator[Any]]:
    def run(index: int, _items: Iterable[Any]) -> Iterator[Any]:
        yield from run_worker_task(specs[index], listener, start_delay_s)
    return run


# -- on the driver --------------------------------------------------------------------------------


class ReportListener:
    """A TCP listener on the driver that receives tasks' reports as they are made."""

    def __init__(self, bind_host: str, advertised_host: str) -> None:
        self._server = socket.create_server((bind_host, 0))
        self.address = (advertised_host, self._server.getsockname()[1])
        self.messages: queue.Queue = queue.Queue()
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="kctl-spark-reports", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        with conn:
            f = conn.makefile("rb")
            while True:
                head = f.read(_LEN.size)
                if len(head) < _LEN.size:
                    return
                data = f.read(_LEN.unpack(head)[0])
                try:
                    self.messages.put(pickle.loads(data))
                except Exception:  # noqa: BLE001 - a damaged live report; the final result has it
                    return

    def close(self) -> None:
        self._closed = True
        self._server.close()


class ReportMerger:
    """Adds each ``(worker, index, report)`` to ``RunStats`` once, in order per worker."""

    def __init__(self, stats: RunStats, on_round: Callable[[RunStats, int], None] | None) -> None:
        self.stats = stats
        self.on_round = on_round
        self.next_index: dict[int, int] = {}
        self.acked: dict[int, dict[int, list[tuple[int, int, int]]]] = {}
        self.failures: dict[int, str] = {}

    def add(self, worker: int, index: int, msg: Any) -> None:
        if index < self.next_index.get(worker, 0):
            return                      # already seen live
        self.next_index[worker] = index + 1
        closed = self.stats.add(msg)
        if isinstance(msg, WorkerFailed):
            self.failures[worker] = msg.error
        elif msg.final and msg.acked_runs is not None:
            self.acked[worker] = msg.acked_runs
        if closed and self.on_round is not None:
            self.on_round(self.stats, closed)


class SparkLoadRun:
    """``LoadRun``'s interface (``run()`` -> ``LoadResult``, ``stats``) on Spark tasks."""

    def __init__(self, spec: LoadSpec, *, config_for_summary: dict[str, Any],
                 hdr_out: str | None = None,
                 on_round: Callable[[RunStats, int], None] | None = None,
                 master: str | None = None, live: bool = True,
                 start_delay_s: float = START_DELAY_S,
                 on_start: Callable[[Any], None] | None = None) -> None:
        if spec.num_records is None and spec.duration_s is None:
            raise KctlError("give --num-records or --duration")
        self.spec = spec
        self.config_for_summary = config_for_summary
        self.hdr_out = hdr_out
        self.on_round = on_round
        self.master = master
        self.on_start = on_start
        self.live = live
        self.start_delay_s = start_delay_s
        self.stats: RunStats | None = None
        self.reports: list[tuple[int, int, Any]] = []   # every (worker, index, report) returned

    def worker_specs(self) -> list[WorkerSpec]:
        return worker_specs(self.spec)

    def run(self) -> LoadResult:
        spark = spark_session(self.master)
        check_barrier_slots(spark, self.spec.workers)
        specs = self.worker_specs()
        sc = spark.sparkContext

        def job(listener: tuple[str, int] | None) -> list:
            rdd = sc.parallelize(range(len(specs)), len(specs)).barrier()
            fn = _load_partition(specs, listener, self.start_delay_s)
            self.reports = rdd.mapPartitionsWithIndex(fn).collect()
            return self.reports

        return run_reports_job(spark, self.spec, job, config_for_summary=self.config_for_summary,
                               hdr_out=self.hdr_out, on_round=self.on_round, live=self.live,
                               owner=self, description=f"kctl produce ({len(specs)} tasks)")


def _listener_for(spark: Any) -> ReportListener | None:
    """A listener on the address the executors already reach the driver at
    (``spark.driver.host``; bound on ``spark.driver.bindAddress`` when that is set)."""
    conf = spark.sparkContext.getConf()
    host = conf.get("spark.driver.host", None) or socket.gethostname()
    try:
        return ReportListener(conf.get("spark.driver.bindAddress", None) or host, host)
    except OSError:
        return None


def run_reports_job(spark: Any, spec: LoadSpec, job: Callable[[tuple[str, int] | None], list], *,
                    config_for_summary: dict[str, Any], hdr_out: str | None,
                    on_round: Callable[[RunStats, int], None] | None, live: bool, owner: Any,
                    description: str) -> LoadResult:
    """Runs a job whose tasks return ``(worker, index, report)`` items and merges them
    with ``RunStats`` (shared by ``produce --spark`` and ``replay``)."""
    listener = _listener_for(spark) if live else None
    state: dict[str, Any] = {"stats": None, "merger": None, "hlog": None}
    pending: list[tuple[int, int, Any]] = []

    def ensure_stats(start_wall_ns: int) -> ReportMerger:
        if state["merger"] is None:
            hlog = IntervalLogWriter.open(hdr_out, start_wall_ns) if hdr_out else None
            stats = RunStats(workers=spec.workers, start_wall_ns=start_wall_ns,
                             target_rate=spec.rate or None, config=config_for_summary,
                             run_id=spec.run_id, duration_s=spec.duration_s,
                             num_records=spec.num_records, hlog=hlog,
                             workers_reason=spec.workers_reason,
                             transactional=spec.transaction_duration_ms is not None)
            state.update(stats=stats, hlog=hlog, merger=ReportMerger(stats, on_round))
            owner.stats = stats
            if getattr(owner, "on_start", None) is not None:
                owner.on_start(owner)   # e.g. the live dashboard, now that there are stats
        return state["merger"]

    starts: list[TaskStart] = []

    def feed(items: Iterable[tuple[int, int, Any]]) -> None:
        for worker, index, msg in items:
            if index == TASK_START:
                starts.append(msg)
                continue
            if state["merger"] is None:
                if not isinstance(msg, WorkerInterval):
                    pending.append((worker, index, msg))
                    continue
                ensure_stats(msg.start_wall_ns)
                for p in pending:
                    state["merger"].add(*p)
                pending.clear()
            state["merger"].add(worker, index, msg)

    def drain_live() -> None:
        if listener is None:
            return
        items = []
        while True:
            try:
                items.append(listener.messages.get_nowait())
            except queue.Empty:
                break
        feed(items)

    interrupted = False
    try:
        results = run_job(spark, lambda: job(listener.address if listener else None),
                          description=description, on_wait=drain_live)
        time.sleep(0.05)
        drain_live()
        # The returned reports are the record of truth: add what did not arrive live.
        feed(sorted(results, key=lambda r: (r[0], r[1])))
    except KeyboardInterrupt:
        interrupted = True
        drain_live()
    except BaseException:
        if state["hlog"] is not None:
            state["hlog"].close()
        raise
    finally:
        if listener is not None:
            listener.close()
    merger = ensure_stats(time.time_ns()) if state["merger"] is None else state["merger"]
    stats = merger.stats
    stats.interrupted = interrupted
    stats.finish()
    summary = stats.summary()
    if starts:
        summary = summary.with_spark(start_summary(starts))
    if state["hlog"] is not None:
        state["hlog"].close()
    return LoadResult(summary, merger.acked, interrupted, merger.failures)


def spark_run_factory(master: str | None, *, explicit_tasks: bool = True) -> Callable[..., SparkLoadRun]:
    """What ``kctl produce --spark`` hands to ``kctl.load.produce.execute``. Without
    an explicit task count, one task per available slot."""
    from kctl.spark.session import available_slots

    def make(spec: LoadSpec, **kwargs: Any) -> SparkLoadRun:
        if not explicit_tasks:
            spec = replace(spec, workers=available_slots(spark_session(master)),
                           workers_reason="one Spark task per available slot")
        return SparkLoadRun(spec, master=master, **kwargs)
    return make
