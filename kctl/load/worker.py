"""One load worker: a producer engine driven by the open-loop schedule.

How this works
--------------
``run_worker(spec, reports, stop)`` runs in its own process (the GIL: scale is
processes, each with its own engine and connections). Its loop:

- asks the schedule how many records are due by now and appends them as one
  slice (at most ``SLICE_MAX`` records) with ``Producer.send_bulk``: values
  come from a pre-generated pool and are laid into batches from a
  ``BatchTemplate``, so nothing is built per record. Keyed runs go through
  ``Producer.send`` instead (each key picks its own partition).
- without keys, partitions are chosen as the Java client's built-in partitioner
  does (KIP-794, uniform sticky): the worker stays on one partition until it has
  appended batch.size bytes to it, then moves to the next;
- when nothing is due, it runs the engine's loop until the next record is due;
- every ``interval_s`` it sends the parent a ``WorkerInterval`` (latency
  histograms of that interval, cumulative engine counters, in-flight requests,
  buffer pool use); at the end a final one and the acknowledged ranges that
  ``--verify`` checks;
- ``stop`` (set by the parent on Ctrl-C) ends the schedule early; what is in
  flight is given ``stop_grace_s`` to finish, then abandoned (and counted).

Latency is recorded per acknowledged batch and append slice (stats/latency.py).
Records carry their identity in headers: ``kctl-run``, ``kctl-worker`` (decimal
text), ``kctl-seq`` (8-byte big-endian unsigned, per worker) and ``kctl-ts-ns``
(8-byte big-endian signed: the intended send time, wall-clock ns since the Unix
epoch; the append time in max-throughput mode).
"""

from __future__ import annotations

import random
import signal
import time
import traceback
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from kctl.config import ProducerConfig
from kctl.engine.batch import BatchState, ProducerBatch
from kctl.engine.clock import SystemClock
from kctl.engine.producer import Producer
from kctl.errors import KctlError
from kctl.load.payload import KeySpec, PayloadPool
from kctl.load.schedule import Schedule
from kctl.protocol.batch_builder import BatchTemplate
from kctl.protocol.compression import Compression
from kctl.protocol.records import Header
from kctl.stats.latency import LatencyRecorder
from kctl.stats.report import WorkerFailed, WorkerInterval, WorkerReady

SLICE_MAX = 256
ID_HEADERS = ("kctl-seq", "kctl-ts-ns")


@dataclass(frozen=True)
class WorkerSpec:
    worker: int
    run_id: str
    topic: str
    properties: dict[str, str]          # producer properties (Kafka names)
    schedule_rate: float
    schedule_phase_ns: int
    num_records: int | None
    duration_ns: int | None
    start_wall_ns: int                  # the run's common start, wall clock
    warmup_records: int = 0
    warmup_ns: int = 0
    payload: PayloadPool = field(default_factory=lambda: PayloadPool((b"x" * 100,), 100))
    keys: KeySpec = field(default_factory=lambda: KeySpec("none"))
    extra_headers: int = 0
    id_headers: bool = True
    interval_s: float = 1.0
    stop_grace_s: float = 5.0
    seed: int = 0
    verify: bool = False


@dataclass
class AckedRuns:
    """Acknowledged records per partition as runs: (offset, count, first_seq)."""

    runs: dict[int, list[tuple[int, int, int]]] = field(default_factory=lambda: defaultdict(list))

    def add(self, batch: ProducerBatch) -> None:
        """An acknowledged batch; offset -1 when the broker acknowledged it without
        one (DUPLICATE_SEQUENCE_NUMBER: an earlier attempt was written)."""
        if batch.result is None:
            return
        base = batch.result.base_offset
        offset = base
        out = self.runs[batch.tp.partition]
        for s in batch.slices:
            out.append((offset if base >= 0 else -1, s.count, s.first_seq))
            offset += s.count


def const_headers(spec: WorkerSpec) -> tuple[Header, ...]:
    hdrs = []
    if spec.id_headers:
        hdrs += [Header("kctl-run", spec.run_id.encode()), Header("kctl-worker", str(spec.worker).encode())]
    hdrs += [Header(f"h{i}", f"value-{i}".encode()) for i in range(spec.extra_headers)]
    return tuple(hdrs)


class StartGate:
    """The common start of a run: each worker says it is ready, then waits until the
    parent has heard from every worker and published the start time. Starting from
    a fixed delay instead would let a slow process start (a loaded machine) turn the
    first seconds of the schedule into one burst."""

    def __init__(self, go: Any, start_wall_ns: Any) -> None:
        self.go = go                        # multiprocessing Event
        self.start_wall_ns = start_wall_ns  # multiprocessing Value('q')

    def wait(self, worker: int, reports: Any, stop: Any) -> int | None:
        reports.put(WorkerReady(worker))
        while not self.go.wait(0.05):
            if stop.is_set():
                return None
        return int(self.start_wall_ns.value)


class Worker:
    def __init__(self, spec: WorkerSpec, reports: Any, stop: Any,
                 start_gate: StartGate | None = None) -> None:
        self.spec = spec
        self.start_gate = start_gate
        self.reports = reports
        self.stop = stop
        self.clock = SystemClock()
        self.latency = LatencyRecorder()
        self.acked = AckedRuns()
        self.config = ProducerConfig.from_properties(spec.properties)
        self.producer = Producer(self.config, clock=self.clock, on_batch_done=self._on_batch_done)
        self._set_start(spec.start_wall_ns)
        self.seq = 0
        self.rng = random.Random(spec.seed * 1000 + spec.worker)
        self._interval_start_wall = self.clock.wall_ns()
        self._interval_warmup = False
        self.abandoned = 0

    def _set_start(self, start_wall_ns: int) -> None:
        spec = self.spec
        now_mono, now_wall = self.clock.now_ns(), self.clock.wall_ns()
        start_mono = now_mono + (start_wall_ns - now_wall)
        self.schedule = Schedule(spec.schedule_rate, start_mono, spec.schedule_phase_ns,
                                 spec.num_records, spec.duration_ns)
        self.warmup_end_ns = start_mono + spec.warmup_ns

    # -- completions ---------------------------------------------------------------------
    def _in_warmup(self, now_ns: int) -> bool:
        """Warm-up is decided per reporting interval: an interval that started during
        the warm-up (records or time) is warm-up, and the worker closes an interval
        the moment the warm-up ends. Counters and histograms of warm-up intervals are
        left out together, so counts and latencies always cover the same records."""
        return self.seq < self.spec.warmup_records or now_ns < self.warmup_end_ns

    def _on_batch_done(self, batch: ProducerBatch) -> None:
        if batch.state is BatchState.ACKED:
            if self.spec.verify:
                self.acked.add(batch)
            self.latency.record_batch(self.clock.now_ns(), batch.sent_ns, batch.slices)

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> None:
        spec = self.spec
        p = self.producer
        topic = spec.topic
        partitions = p.partitions_for(topic)
        pool = spec.payload
        values = list(pool.values)
        doubled = values + values[:SLICE_MAX]
        compression = Compression[self.config.compression_type.name]
        template = BatchTemplate(headers=const_headers(spec), compression=compression,
                                 compression_level=self.config.compression.level,
                                 id_headers=ID_HEADERS if spec.id_headers else None)
        value_size = pool.value_size
        record_bytes = template.record_size(value_size if value_size is not None else round(pool.mean_size))
        if self.start_gate is not None:
            start = self.start_gate.wait(spec.worker, self.reports, self.stop)
            if start is None:       # stopped before the start
                self._finish()
                return
            self._set_start(start)
        sched = self.schedule
        step = sched.interval_ns
        part_i = self.rng.randrange(len(partitions))
        sticky_bytes = 0
        switch_bytes = max(self.config.batch_size, record_bytes)
        # Every worker starts at the run's common start (metadata and connections are
        # ready by then), so the merged schedule and the reporting rounds line up.
        while (wait := sched.start_ns - self.clock.now_ns()) > 0 and not self.stop.is_set():
            p.poll(min(wait / 1e9, 0.05))
        self._interval_start_wall = self.clock.wall_ns()
        self._interval_warmup = self._in_warmup(self.clock.now_ns())
        next_report = time.monotonic() + spec.interval_s
        n_values = len(values)
        while not self.stop.is_set():
            now = self.clock.now_ns()
            if sched.over(self.seq, now):
                break
            due = sched.due(now)
            if due > self.seq:
                k = min(due - self.seq, SLICE_MAX)
                start = self.seq % n_values
                batch_values = doubled[start:start + k] if k <= n_values else [
                    values[(self.seq + i) % n_values] for i in range(k)]
                if spec.keys.keyed:
                    self._send_keyed(batch_values)
                else:
                    p.send_bulk(topic, partitions[part_i], batch_values, template=template,
                                record_bytes=record_bytes, value_size=value_size,
                                intended_first_ns=sched.intended_ns(self.seq) if sched.paced else -1,
                                intended_step_ns=step, first_seq=self.seq)
                    sticky_bytes += k * record_bytes
                    if sticky_bytes >= switch_bytes:
                        part_i = (part_i + 1) % len(partitions)
                        sticky_bytes = 0
                    self.seq += k
            else:
                wait_s = max(0.0, (sched.next_due_ns(self.seq) - now) / 1e9)
                p.poll(min(wait_s, 0.05))
            if self._interval_warmup and not self._in_warmup(self.clock.now_ns()):
                self._report(final=False)   # the warm-up just ended: close its interval
                next_report = time.monotonic() + spec.interval_s
            elif time.monotonic() >= next_report:
                self._report(final=False)
                next_report += spec.interval_s
        self._finish()

    def _send_keyed(self, batch_values: list[bytes]) -> None:
        spec = self.spec
        sched = self.schedule
        base = const_headers(spec)
        offset = self.clock.wall_ns() - self.clock.now_ns()
        for v in batch_values:
            seq = self.seq
            intended = sched.intended_ns(seq) if sched.paced else -1
            hdrs = base
            if spec.id_headers:
                ts = (intended if intended >= 0 else self.clock.now_ns()) + offset
                hdrs = base + (Header("kctl-seq", seq.to_bytes(8, "big")),
                               Header("kctl-ts-ns", ts.to_bytes(8, "big", signed=True)))
            self.producer.send(spec.topic, v, key=spec.keys.key_for(seq, self.rng), headers=hdrs,
                               intended_ns=intended, first_seq=seq)
            self.seq += 1

    def _finish(self) -> None:
        p = self.producer
        grace = self.spec.stop_grace_s if self.stop.is_set() else None
        done = p.flush(grace)
        if not done:
            self.abandoned = p.accumulator.incomplete_count
        p.close(0 if not done else None)
        self._report(final=True)

    def _report(self, *, final: bool) -> None:
        now_wall = self.clock.wall_ns()
        p = self.producer
        in_flight = {node: p.network.in_flight_request_count(node) for node in p.network.nodes()}
        self.reports.put(WorkerInterval(
            worker=self.spec.worker, start_wall_ns=self._interval_start_wall, end_wall_ns=now_wall,
            histograms=self.latency.encode_interval(), metrics=p.metrics.snapshot(),
            in_flight_by_node=in_flight, buffer_available=p.pool.available_memory,
            buffer_total=p.pool.total_memory,
            warmup=self._interval_warmup, final=final,
            records_scheduled=self.seq, abandoned=self.abandoned,
            acked_runs=dict(self.acked.runs) if final and self.spec.verify else None))
        self._interval_start_wall = now_wall
        self._interval_warmup = self._in_warmup(self.clock.now_ns())


def run_worker(spec: WorkerSpec, reports: Any, stop: Any, start_gate: StartGate | None = None) -> None:
    """Process entry point: every failure reaches the parent as ``WorkerFailed``.

    Ctrl-C reaches every process of the terminal's group; workers ignore it and
    stop through ``stop``, set by the parent, so they still flush and report."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        Worker(spec, reports, stop, start_gate).run()
    except KctlError as e:
        reports.put(WorkerFailed(spec.worker, str(e)))
    except KeyboardInterrupt:
        reports.put(WorkerFailed(spec.worker, "interrupted"))
    except BaseException as e:  # noqa: BLE001 - a worker must always report back
        reports.put(WorkerFailed(spec.worker, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))
