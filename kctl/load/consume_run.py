"""A consume run: starts the consumer processes, merges their reports, stops them.

How this works: ``start()`` spawns ``consumers`` processes (each with its own engine;
in assign mode consumer i takes partitions i, i+n, ... of the topic, in group mode they
all subscribe) and waits until each stands at its start (``ConsumerReady``). ``begin()``
publishes the common start and reads reports from then on in a thread, feeding
``ConsumeStats`` (stats/consume_aggregate.py) and calling ``on_round``. ``set_targets()``
tells every consumer the offset to read each partition to (a backlog's end, or the
producers' acknowledged end); ``wait()`` returns once every consumer has finished
(its stop condition, or ``stop()``). A consumer that fails stops the run with its error.
A stopped consumer closes within its close bound (``close_bound_s``) and is killed only
after that and ``EXIT_MARGIN_S`` (``_stop_deadline``), so its final report, with a
commit on close that failed, arrives.
Each ``ConsumerReady`` carries when that consumer began to subscribe or assign, and each
report its time spent rejoining after the start: ``ConsumeResult.perf_test_times()`` is
kafka-consumer-perf-test's clock from them (start before subscribing, rebalance time).

``kctl consume`` runs start, begin and wait in a row (``run()``); ``kctl produce
--consume`` starts the consumers before the producers, begins them at the producers'
common start, and after the producers finish sets the targets and waits for the
consumers to read everything acknowledged (or for ``drain_timeout_s``).
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

from kctl.consumer_config import ConsumerConfig
from kctl.engine.consumer import close_bound_s
from kctl.errors import KctlError
from kctl.load.consume_worker import ConsumerGate, ConsumeWorkerSpec, StartPosition, Targets, run_consumer
from kctl.stats.consume_aggregate import ConsumeStats
from kctl.stats.consume_perf import PerfTestTimes
from kctl.stats.consume_report import ClockOffset, ConsumerFailed, ConsumerInterval, ConsumerReady, SeenRun
from kctl.stats.consume_summary import ConsumeSummary
from kctl.stats.hlog import IntervalLogWriter

__all__ = ["ConsumeResult", "ConsumeRun", "ConsumeSpec"]

READY_TIMEOUT_S = 120.0
START_MARGIN_S = 0.2
#: After a consumer's close bound: time for its final report and its exit before it is killed.
EXIT_MARGIN_S = 5.0


@dataclass(frozen=True)
class ConsumeSpec:
    """A whole consume run, typed (crosses to the consumer processes as is)."""

    topic: str
    config: ConsumerConfig
    partitions: tuple[int, ...]
    consumers: int = 1
    group: bool = False
    start: StartPosition = StartPosition("beginning")
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    run_tag: bytes | None = None
    duration_s: float | None = None
    max_records: int | None = None
    idle_timeout_s: float | None = None
    targets: dict[int, int] | None = None
    stop_when_caught_up: bool = False
    interval_s: float = 1.0
    warmup_s: float = 0.0
    e2e_by_schedule: bool = False     # produce --consume: ConsumeWorkerSpec.e2e_by_schedule
    warmup_records: int = 0           # ... and the producers' warm-up records per worker
    verify: bool = False
    clock_peer: str | None = None
    same_host_clock: bool = False


@dataclass
class ConsumeResult:
    summary: ConsumeSummary
    seen: dict[int, list[SeenRun]]              # partition -> runs (with verify)
    failures: dict[int, str]
    interrupted: bool
    stats: ConsumeStats
    setup_wall_ns: int = 0        # the earliest consumer's start of subscribing/assigning
    rejoin_ns: int = 0            # the longest time one consumer spent rejoining after the
                                  # measured start (the start, past any warm-up)
    warmup_ns: int = 0            # --warmup

    def perf_test_times(self) -> PerfTestTimes:
        """kafka-consumer-perf-test's clock for this run: its start taken before the
        consumers subscribe, rebalance.time.ms the joining up to the common start (every
        consumer assigned and at its positions) plus rejoining after it.

        With a warm-up the counts leave its records out, so the time does too: the window
        is the measured one (the summary's), from the warm-up's end (the consumers' first
        report after it) to the end, rebalance.time.ms the rejoining inside it."""
        s = self.summary.run
        if self.warmup_ns:
            measured = self.stats.measured_start_wall_ns
            start_ms = measured // 1_000_000 if measured is not None else s.end_unix_ms
            return PerfTestTimes(start_ms, s.end_unix_ms, self.rejoin_ns // 1_000_000)
        start_ms = self.setup_wall_ns // 1_000_000 if self.setup_wall_ns else s.start_unix_ms
        reading_ms = self.stats.start_wall_ns // 1_000_000
        return PerfTestTimes(start_ms, s.end_unix_ms, max(0, reading_ms - start_ms) + self.rejoin_ns // 1_000_000)


class ConsumeRun:
    def __init__(self, spec: ConsumeSpec, *, config_for_summary: dict[str, Any],
                 hdr_out: str | None = None,
                 on_round: Callable[[ConsumeStats, int], None] | None = None) -> None:
        if spec.consumers < 1:
            raise KctlError("--consumers must be at least 1")
        if not spec.group and spec.consumers > len(spec.partitions):
            raise KctlError(f"{spec.consumers} consumers in assign mode need at least as many partitions; "
                            f"topic {spec.topic!r} has {len(spec.partitions)} (use fewer --consumers, "
                            "or --group)")
        self.spec = spec
        self.config_for_summary = config_for_summary
        self.hdr_out = hdr_out
        self._own_hlog: IntervalLogWriter | None = None
        self.on_round = on_round
        self.stats: ConsumeStats | None = None
        self._ctx = mp.get_context("spawn")
        self._reports = self._ctx.Queue()
        self._stop = self._ctx.Event()
        self._gate = ConsumerGate(self._ctx.Event(), self._ctx.Value("q", 0))
        self._counter = self._ctx.Value("q", 0)
        self._controls: list[Any] = []
        self._procs: list[Any] = []
        self._thread: threading.Thread | None = None
        self._seen: dict[int, list[SeenRun]] = {}
        self._failures: dict[int, str] = {}
        self._finished: set[int] = set()
        self._clocks: list[ClockOffset] = []
        self._early: list[Any] = []
        self._error: BaseException | None = None
        self._setup_wall_ns = 0
        self._rejoin_ns: dict[int, int] = {}
        self._stopped_by: float | None = None     # _stop_deadline

    # -- starting ------------------------------------------------------------------------------
    def start(self) -> None:
        spec = self.spec
        n = spec.consumers
        for i in range(n):
            parts = None if spec.group else spec.partitions[i::n]
            ws = ConsumeWorkerSpec(
                consumer=i, config=spec.config.with_properties({"client.id": spec.config.client_id or
                                                                f"kctl-consumer-{i}"}),
                topic=spec.topic, partitions=parts, start=spec.start, run_tag=spec.run_tag,
                duration_ns=int(spec.duration_s * 1e9) if spec.duration_s is not None else None,
                max_records=spec.max_records,
                idle_timeout_ns=int(spec.idle_timeout_s * 1e9) if spec.idle_timeout_s is not None else None,
                targets=spec.targets, stop_when_caught_up=spec.stop_when_caught_up,
                interval_s=spec.interval_s, warmup_ns=int(spec.warmup_s * 1e9), verify=spec.verify,
                e2e_by_schedule=spec.e2e_by_schedule, warmup_records=spec.warmup_records,
                clock_peer=spec.clock_peer, same_host_clock=spec.same_host_clock)
            control = self._ctx.Queue()
            self._controls.append(control)
            p = self._ctx.Process(target=run_consumer, args=(ws, self._reports, self._stop, control,
                                                              self._gate, self._counter),
                                  name=f"kctl-consumer-{i}", daemon=True)
            p.start()
            self._procs.append(p)
        try:
            self._await_ready()
        except BaseException:
            self.stop()
            self._join()
            raise

    def _await_ready(self) -> None:
        ready: set[int] = set()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while len(ready) < len(self._procs):
            if time.monotonic() > deadline:
                raise KctlError(f"consumers not ready after {READY_TIMEOUT_S:g} s")
            try:
                msg = self._reports.get(timeout=0.2)
            except queue.Empty:
                for i, p in enumerate(self._procs):
                    if not p.is_alive() and i not in ready and self._reports.empty():
                        raise KctlError(f"consumer {i} exited with code {p.exitcode} before starting")
                continue
            if isinstance(msg, ConsumerReady):
                ready.add(msg.consumer)
                if msg.setup_wall_ns:
                    self._setup_wall_ns = min(self._setup_wall_ns or msg.setup_wall_ns, msg.setup_wall_ns)
                if msg.clock is not None:
                    self._clocks.append(msg.clock)
            elif isinstance(msg, ConsumerFailed):
                raise KctlError(f"consumer {msg.consumer} failed: {msg.error.splitlines()[0]}")
            else:
                self._early.append(msg)

    def begin(self, start_wall_ns: int | None = None, hlog: IntervalLogWriter | None = None) -> ConsumeStats:
        """Publishes the common start and reads reports in a thread from now on. ``hlog``:
        a log to write the e2e lines into (the producers'); else ``hdr_out`` is opened."""
        spec = self.spec
        start = start_wall_ns if start_wall_ns is not None else time.time_ns() + int(START_MARGIN_S * 1e9)
        if hlog is None and self.hdr_out:
            hlog = self._own_hlog = IntervalLogWriter.open(self.hdr_out, start)
        self._gate.start_wall_ns.value = start
        self._gate.go.set()
        self.stats = stats = ConsumeStats(consumers=spec.consumers, start_wall_ns=start, run_id=spec.run_id,
                                          config=self.config_for_summary,
                                          mode="group" if spec.group else "assign", hlog=hlog)
        if self._clocks:
            # The worst (widest) estimate over the consumers: every consumer host's offset
            # is within its own bound; report the largest bound with its offset.
            stats.clock = max(self._clocks, key=lambda c: c.error_ns)
        for msg in self._early:
            self._take(msg)
        self._thread = threading.Thread(target=self._read_reports, name="kctl-consume-reports", daemon=True)
        self._thread.start()
        return stats

    # -- running ---------------------------------------------------------------------------------
    def _take(self, msg: Any) -> None:
        assert self.stats is not None
        if isinstance(msg, ConsumerReady):
            return
        closed = self.stats.add(msg)
        if isinstance(msg, ConsumerInterval):
            self._rejoin_ns[msg.consumer] = msg.rejoin_ns
        if isinstance(msg, ConsumerFailed):
            self._failures[msg.consumer] = msg.error
            self._finished.add(msg.consumer)
            self._stop.set()
        elif isinstance(msg, ConsumerInterval) and msg.final:
            self._finished.add(msg.consumer)
            if msg.seen:
                for p, runs in msg.seen.items():
                    self._seen.setdefault(p, []).extend(runs)
        if closed and self.on_round is not None:
            self.on_round(self.stats, closed)

    def _read_reports(self) -> None:
        try:
            while len(self._finished) < len(self._procs):
                try:
                    msg = self._reports.get(timeout=0.2)
                except queue.Empty:
                    for i, p in enumerate(self._procs):
                        if not p.is_alive() and i not in self._finished:
                            time.sleep(0.2)
                            if i in self._finished or not self._reports.empty():
                                continue
                            self._take(ConsumerFailed(i, f"consumer {i} exited with code {p.exitcode} "
                                                         "without a report"))
                    continue
                self._take(msg)
        except BaseException as e:  # noqa: BLE001 - handed to wait()
            self._error = e
            self._stop.set()

    def set_targets(self, offsets: dict[int, int]) -> None:
        for control in self._controls:
            control.put(Targets(dict(offsets)))

    @property
    def counter(self) -> int:
        return int(self._counter.value)

    def stop(self) -> None:
        self._stop_deadline()

    def finished(self) -> bool:
        return len(self._finished) >= len(self._procs)

    def wait(self, timeout_s: float | None = None, *, interrupted: bool = False) -> ConsumeResult:
        """Until every consumer finished (``timeout_s``: then stops them and waits again).
        ``interrupted``: the run was already cut short (the producers of ``produce --consume``
        were stopped by Ctrl-C or SIGTERM); a Ctrl-C during the wait says so too."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        try:
            while self._thread is not None and self._thread.is_alive():
                if deadline is not None and time.monotonic() >= deadline:
                    self._stop_deadline()
                    deadline = None
                self._thread.join(0.2)
        except KeyboardInterrupt:
            interrupted = True
            deadline = self._stop_deadline()
            if self._thread is not None:
                self._thread.join(max(0.0, deadline - time.monotonic()))
        self._join()
        if self._thread is not None:
            self._thread.join(EXIT_MARGIN_S)    # the reports of consumers that just exited
        if self._error is not None:
            raise self._error
        assert self.stats is not None
        self.stats.interrupted = interrupted
        summary = self.stats.summary()
        if self._own_hlog is not None:
            self._own_hlog.close()
        return ConsumeResult(summary, self._seen, dict(self._failures), interrupted, self.stats,
                             self._setup_wall_ns, max(self._rejoin_ns.values(), default=0),
                             int(self.spec.warmup_s * 1e9))

    def _stop_deadline(self) -> float:
        """Stops the consumers (once) and returns by when each must have exited (monotonic
        s): a consumer closes within its close bound (``close_bound_s``: Java's close timer,
        min(30 s, request.timeout.ms)), then sends its final report and exits; one still
        alive ``EXIT_MARGIN_S`` after that is killed. The kill comes after the consumer's own
        bound, so a commit on close that fails, unanswered, is still reported."""
        self._stop.set()
        if self._stopped_by is None:
            self._stopped_by = time.monotonic() + close_bound_s(self.spec.config) + EXIT_MARGIN_S
        return self._stopped_by

    def _join(self) -> None:
        deadline = self._stop_deadline()
        for p in self._procs:
            p.join(timeout=max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()          # past the stop and its wait; SIGTERM would only stop it again
                p.join(timeout=2)

    def run(self) -> ConsumeResult:
        self.start()
        self.begin()
        return self.wait()
