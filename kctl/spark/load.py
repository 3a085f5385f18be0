"""``kctl produce --spark``: the load workers run as Spark tasks of one barrier stage.

How this works
--------------
The driver splits the schedule exactly as a local run does (load/run.py
``worker_specs``): one ``WorkerSpec`` per task. The tasks form a barrier
stage, so they start together or not at all; each one

1. agrees on the common start with the others (``allGather`` of their clocks:
   the latest plus ``START_DELAY_S``, room for metadata and connections) and tells
   the driver (``AgreedStart``): it is the run's start, as the common start of a
   local run is, and the driver's ``RunStats`` is made by the same
   ``load.run.run_stats`` (a paced run's span is its schedule's window from that
   start, however late a task began),
2. runs the same ``Worker`` loop a local worker process runs
   (kctl/load/worker.py), reporting into a ``TaskReports`` collector instead of
   a multiprocessing queue,
3. returns every report it made, ``(worker, index, WorkerInterval)``: encoded
   interval histograms and cumulative counters, the final one with the
   acknowledged ranges when ``--verify`` is on.

Start skew: every task also returns a ``TaskStart`` (when Spark launched it, the common
start it agreed on, and when its schedule's first interval actually began, all wall
clock) and the summary gets a ``spark`` section: how far apart the tasks launched and
began, and each task's lateness against the agreed start (docs/produce-summary.md). A
task that never returns (its job cancelled after a stop) keeps what its live reports
said: its ``AgreedStart`` carries its host and launch time, and its first interval report
when it began.

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
result).

A stop (Ctrl-C, SIGTERM: ``KeyboardInterrupt`` on the driver) takes the path a local
worker's stop takes: the driver writes ``STOP`` on every task's report connection (a
task that connects later is told at once), each task's worker ends its schedule as a
local worker does on its stop event (records due but never handed over abandoned with
their reason, in-flight ones given ``stop_grace_s``, then abandoned) and makes its final
report, and the tasks return as usual. The driver waits for the job up to
``stop_grace_s + STOP_MARGIN_S``; the returned reports are then the record of truth, so
scheduled = acked + failed + abandoned holds as in a local run. Only a job still running
then (a task that never reached the listener, or slots that never came), or a second
stop, is cancelled: the summary then covers the reports received, and the records the
cancelled tasks had in flight have no verdict (``RunSummary.unaccounted``). A terminal's
Ctrl-C does not reach the tasks themselves: pyspark's daemon puts Spark's Python workers
in a process group of their own, and the JVM ignores SIGINT.
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
from kctl.load.run import LoadResult, LoadSpec, run_stats, worker_specs
from kctl.load.worker import Worker, WorkerSpec
from kctl.load.worker_count import WorkerCount
from kctl.spark.session import (JobInterrupted, TaskError, check_barrier_slots, run_job,
                                spark_session)
from kctl.stats.aggregate import RunStats
from kctl.stats.report import WorkerFailed, WorkerInterval
from kctl.stats.summary import SparkStarts, TaskStartFigures

#: Tasks start this long after the last of them is ready (producer metadata, connections).
START_DELAY_S = 1.0
#: After the stop grace of the tasks' workers, how much longer the driver waits for the
#: stopped job to end before cancelling it (a local run's parent waits as long).
STOP_MARGIN_S = 10.0
#: What the driver writes on a task's report connection to stop its worker.
STOP = b"S"
_LEN = struct.Struct(">I")

# -- in the task ---------------------------------------------------------------------------------


class TaskReports:
    """The worker's ``reports`` queue inside a task: keeps every report and, when a
    driver listener is given, posts each one there as well (best effort). The same
    connection carries the driver's ``STOP``, which sets ``stop`` (the worker's stop
    event)."""

    def __init__(self, worker: int, listener: tuple[str, int] | None) -> None:
        self.worker = worker
        self.items: list[tuple[int, int, WorkerInterval | WorkerFailed]] = []
        self.stop = threading.Event()
        self._sock: socket.socket | None = None
        if listener is not None:
            try:
                self._sock = socket.create_connection(listener, timeout=2.0)
            except OSError:
                self._sock = None
        if self._sock is not None:
            threading.Thread(target=self._await_stop, args=(self._sock,),
                             name="kctl-task-stop", daemon=True).start()

    def _await_stop(self, sock: socket.socket) -> None:
        """Until the driver's ``STOP`` (then the stop event is set) or the connection ends."""
        while True:
            try:
                data = sock.recv(1)
            except TimeoutError:
                continue
            except OSError:
                return
            if data == STOP:
                self.stop.set()
            if not data or data == STOP:
                return

    def put(self, msg: WorkerInterval | WorkerFailed) -> None:
        item = (self.worker, len(self.items), msg)
        self.items.append(item)
        self.post(item)

    def post(self, item: tuple[int, int, Any]) -> None:
        """Sends ``item`` to the driver's listener (best effort)."""
        if self._sock is not None:
            data = pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
            try:
                self._sock.sendall(_LEN.pack(len(data)) + data)
            except OSError:
                self.close()

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)      # wakes the stop reader too
            except OSError:
                pass
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


@dataclass(frozen=True, slots=True)
class AgreedStart:
    """The common start the tasks agreed on (wall ns): the run's start, from which every
    task's schedule runs (load/run.py ``run_stats``); with the task's host and when Spark
    launched it, so that a task that never returns (its job cancelled after a stop) still
    has its ``TaskStart`` on the driver (``known_start``)."""

    wall_ns: int
    host: str
    launched_wall_ns: int


#: The index an ``AgreedStart`` travels under, live before the task's first report and
#: first among the reports it returns, so the driver's ``RunStats`` starts there.
AGREED_START = -2


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
    # Connected before the start is agreed, so that a stop during the agreement is heard.
    reports = TaskReports(spec.worker, listener)
    try:
        start = agree_start(start_delay_s)
        agreed = (spec.worker, AGREED_START, AgreedStart(start, socket.gethostname(), launched))
        reports.post(agreed)
        spec = replace(spec, start_wall_ns=start)
        Worker(spec, reports, reports.stop).run()
    except KctlError as e:
        raise TaskError(f"task {spec.worker} failed: {e}") from None
    except BaseException as e:  # noqa: BLE001 - the task's own error must reach the driver
        raise TaskError(f"task {spec.worker} failed: {type(e).__name__}: {e} "
                        f"{traceback.format_exc(limit=3)}") from None
    finally:
        reports.close()
    began = next((m.start_wall_ns for _, _, m in reports.items if isinstance(m, WorkerInterval)),
                 start)
    return [agreed] + reports.items + [(spec.worker, TASK_START,
                                        TaskStart(spec.worker, socket.gethostname(), launched, start,
                                                  began))]


def known_start(worker: int, agreed: AgreedStart, began_wall_ns: int | None) -> TaskStart:
    """A task's ``TaskStart`` as the driver knows it from its live reports (the task's own
    never came: its job was cancelled): its ``AgreedStart`` and the start of the first
    interval it reported (the agreed start when it reported none)."""
    return TaskStart(worker, agreed.host, agreed.launched_wall_ns, agreed.wall_ns,
                     agreed.wall_ns if began_wall_ns is None else began_wall_ns)


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
    """A TCP listener on the driver that receives tasks' reports as they are made, and
    tells the tasks to stop (``stop_tasks``) over the same connections."""

    def __init__(self, bind_host: str, advertised_host: str) -> None:
        self._server = socket.create_server((bind_host, 0))
        self.address = (advertised_host, self._server.getsockname()[1])
        self.messages: queue.Queue = queue.Queue()
        self._closed = False
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._stopping = False
        self._thread = threading.Thread(target=self._accept, name="kctl-spark-reports", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                self._conns.append(conn)
                if self._stopping:
                    _send_stop(conn)
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def stop_tasks(self) -> None:
        """Every task connected now, or that connects from now on, is told to stop."""
        with self._lock:
            self._stopping = True
            for conn in self._conns:
                _send_stop(conn)

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


def _send_stop(conn: socket.socket) -> None:
    try:
        conn.sendall(STOP)
    except OSError:
        pass                    # the task is gone already (its reports are in)


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
        self.stats.add(msg, self.on_round)    # a plain line per round it closes
        if isinstance(msg, WorkerFailed):
            self.failures[worker] = msg.error
        elif msg.final and msg.acked_runs is not None:
            self.acked[worker] = msg.acked_runs


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
    with ``RunStats`` (shared by ``produce --spark`` and ``replay``). ``live``: reports
    are merged as they arrive (interval lines); the listener is there either way, as
    the tasks' stop channel."""
    listener = _listener_for(spark)
    state: dict[str, Any] = {"stats": None, "merger": None, "hlog": None, "stopped": False}
    pending: list[tuple[int, int, Any]] = []

    def ensure_stats(start_wall_ns: int) -> ReportMerger:
        """The merge, made once: at the tasks' agreed start, as a local run's (the
        same ``run_stats``), and fed the reports that came before it."""
        if state["merger"] is None:
            stats = run_stats(spec, start_wall_ns, config=config_for_summary, hdr_out=hdr_out)
            stats.interrupted = state["stopped"]
            state.update(stats=stats, hlog=stats.hlog, merger=ReportMerger(stats, on_round))
            owner.stats = stats
            if getattr(owner, "on_start", None) is not None:
                owner.on_start(owner)   # e.g. the live dashboard, now that there are stats
            for p in pending:
                state["merger"].add(*p)
            pending.clear()
        return state["merger"]

    starts: dict[int, TaskStart] = {}           # the tasks' own, returned with their reports
    agreed: dict[int, AgreedStart] = {}
    first_interval: dict[int, tuple[int, int]] = {}    # worker -> (index, start wall ns)

    def feed(items: Iterable[tuple[int, int, Any]]) -> None:
        for worker, index, msg in items:
            if index == TASK_START:
                starts[worker] = msg
                continue
            if index == AGREED_START:
                agreed[worker] = msg
                ensure_stats(msg.wall_ns)   # every task agreed on the same start
                continue
            if isinstance(msg, WorkerInterval) and index < first_interval.get(worker, (index + 1,))[0]:
                first_interval[worker] = (index, msg.start_wall_ns)
            if state["merger"] is None:
                pending.append((worker, index, msg))    # a task's start comes before its reports
            else:
                state["merger"].add(worker, index, msg)

    def drain_live(always: bool = False) -> None:
        if listener is None or not (live or always):
            return
        items = []
        while True:
            try:
                items.append(listener.messages.get_nowait())
            except queue.Empty:
                break
        feed(items)

    def stop_tasks() -> None:
        # As in a local run, the rounds the final reports close are still printed, the
        # last one marked partial: the lines add up to the summary.
        state["stopped"] = True
        if state["merger"] is not None:
            state["merger"].stats.interrupted = True
        assert listener is not None
        listener.stop_tasks()

    def take_results(results: list[tuple[int, int, Any]]) -> None:
        time.sleep(0.05)
        drain_live()
        # The returned reports are the record of truth: add what did not arrive live.
        feed(sorted(results, key=lambda r: (r[0], r[1])))

    interrupted = False
    try:
        take_results(run_job(spark, lambda: job(listener.address if listener else None),
                             description=description, on_wait=drain_live,
                             on_stop=stop_tasks if listener is not None else None,
                             stop_wait_s=spec.stop_grace_s + STOP_MARGIN_S))
    except JobInterrupted as stop:
        interrupted = True
        if stop.completed:
            take_results(stop.value)    # the tasks stopped and made their final reports
        else:
            drain_live(always=True)     # cancelled: what the tasks reported live
    except KeyboardInterrupt:
        interrupted = True
        drain_live(always=True)
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
    stats.finish(merger.on_round)       # rounds of tasks that never made a final report
    summary = stats.summary()
    # What is known of each task's start: its own TaskStart, or for a task that never
    # returned (cancelled after a stop) what its live reports said.
    for worker, a in agreed.items():
        if worker not in starts:
            starts[worker] = known_start(worker, a, first_interval.get(worker, (0, None))[1])
    if starts:
        summary = summary.with_spark(start_summary(list(starts.values())))
    if state["hlog"] is not None:
        state["hlog"].close()
    return LoadResult(summary, merger.acked, interrupted, merger.failures)


def slot_tasks(master: str | None) -> WorkerCount:
    """The task count when none is given: one task per slot the cluster offers now."""
    from kctl.spark.session import available_slots
    return WorkerCount(available_slots(spark_session(master)), "one Spark task per available slot")


def spark_run_factory(master: str | None) -> Callable[..., SparkLoadRun]:
    """What ``kctl produce --spark`` hands to ``kctl.load.produce.execute``: one task
    per worker of the spec (the command decides how many, and says why: ``--tasks``,
    ``--workers`` or ``slot_tasks``)."""
    def make(spec: LoadSpec, **kwargs: Any) -> SparkLoadRun:
        return SparkLoadRun(spec, master=master, **kwargs)
    return make
