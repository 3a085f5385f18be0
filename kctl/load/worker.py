"""One load worker: a producer engine driven by the open-loop schedule.

How this works
--------------
``run_worker(spec, reports, stop)`` runs in its own process (the GIL: scale is
processes, each with its own engine and connections). Its loop:

- asks the schedule how many records are due by now and hands them to the
  producer as one slice (at most ``SLICE_MAX`` records, ``SLICE_MAX_UNPACED``
  without a schedule) with
  ``Producer.send_bulk``: records come from a pre-generated ``RecordPool``
  (values, and keys for ``--keys``), cycled; the producer picks partitions
  (``partitioner.class``), lays batches out from a template and waits for
  memory. The worker picks nothing itself.
- a worker behind a sparse schedule (records 1 ms or more apart) hands its
  backlog over at most ``ceil(rate x 10 ms) + 1`` records in any 10.5 ms
  (load/schedule.py ``CatchUp``), polling while the limit holds the next one;
- when nothing is due, it runs the engine's loop until the next record is due
  (polling, not asleep, for the last ``spin_ns`` before it: ``--spin-ms``);
- every ``interval_s`` it sends the parent a ``WorkerInterval`` (latency
  histograms of that interval, cumulative engine counters, in-flight requests,
  buffer pool use); at the end a final one and the acknowledged ranges that
  ``--verify`` checks;
- a paced worker that has handed out its last record stays until its schedule's
  window ends (rates are records over that window);
- transactional (``transaction_duration_ms``, kafka-producer-perf-test's
  ``--transaction-duration-ms``): ``init_transactions`` before the start, a
  transaction begun at the start and committed whenever it is that old (and at the
  end); each commit's time (flush and EndTxn) goes into a commit-latency histogram.
  A commit that fails with an abortable error aborts the transaction and goes on;
  a fatal one (fenced) fails the worker. A batch acknowledged in a transaction is
  held (``_HeldAck``) until the transaction ends: at the commit its records enter
  the interval's latencies with their acknowledgement's latency, as the engine then
  counts them acked; an aborted (or never committed) transaction's records enter no
  acknowledged figure (the engine counts them failed). So counts, rates, latencies,
  the .hlog and the per-partition and per-broker figures cover the same records;
- ``stop`` (set by the parent on Ctrl-C) ends the schedule early; what is in
  flight is given ``stop_grace_s`` to finish, then abandoned (counted, with the
  reason); ``hurry`` (the parent's second stop) ends that wait at once
  (``STOPPED_AGAIN``). Records due by the worker's last turn before the stop that it never
  handed over (the catch-up limit held them, or they came due since its last
  hand-over) count as scheduled and abandoned (``UNSENT_AT_STOP``), so
  scheduled = acked + failed + abandoned. A fatal producer error (a ``KctlError``
  out of the loop) ends the schedule the same way: a last report with the
  complete counts goes out, then the error fails the worker (``WorkerFailed``).

Latency is recorded per acknowledged batch and append slice (stats/latency.py).
Records carry their identity in one ``kctl`` header (protocol/identity.py): run
tag, worker, sequence (the order in which this worker handed records to its
producer) and intended send time (the append time in max-throughput mode).

Setup (pools, producer, metadata, connections) allocates long-lived objects;
once it is done the worker moves everything alive to the permanent generation
(``gc.freeze()``), so the collector's full passes do not walk them again: a
generation-2 collection in both workers at once would otherwise stall the
schedule for tens of milliseconds. A paced worker then asks the kernel for a short
time slice, so that when it wakes for a due record it preempts whatever runs
(load/priority.py: measured, that is what keeps records on time on a small host).
"""

from __future__ import annotations

import gc
import math
import random
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kctl.config import ProducerConfig
from kctl.engine.batch import AppendSlice, BatchState, ProducerBatch, TopicPartition
from kctl.engine.bulk import RecordPool, RecordShape
from kctl.engine.clock import SystemClock
from kctl.engine.producer import Producer, TransactionAbortableError, TransactionTimeoutError
from kctl.errors import KctlError
from kctl.load.payload import KeySpec, PayloadPool
from kctl.load.priority import short_slice
from kctl.load.schedule import Schedule
from kctl.load.stop import STOP_GRACE_S, install_worker_stop
from kctl.protocol.identity import IdentityStamp, run_tag
from kctl.protocol.records import Header
from kctl.stats.latency import LatencyRecorder, encode_histogram, new_histogram
from kctl.stats.report import WorkerFailed, WorkerInterval, WorkerReady

#: Records handed to the producer at once on a schedule (a slice's records share one
#: latency accounting entry: see stats/latency.py for the error bound) ...
SLICE_MAX = 256
#: ... and without one (max throughput): fewer, larger slices mean fewer sender turns
#: and fuller requests (about 20% less CPU per record than 256 here).
SLICE_MAX_UNPACED = 2048
#: A report is made while the next record is at least this far away (it takes ~0.5 ms).
REPORT_SLACK_NS = 800_000
#: Why records due by a stop (Ctrl-C, a fatal producer error) that the worker never
#: handed to its producer are abandoned: the catch-up limit still held them, or they
#: came due since its last hand-over (schedule.py ``unsent_at_stop``).
UNSENT_AT_STOP = "run stopped: due, never handed to the producer"
#: How often the wait for the last verdicts after the schedule looks at the stop.
FINISH_STOP_CHECK_S = 0.05
#: Why records in flight at a second stop are abandoned: the parent no longer waits.
STOPPED_AGAIN = "run stopped again: the stop grace's wait for verdicts cut short"
#: Records a pool of random keys holds (each key drawn once per pool slot).
KEYED_POOL_MIN = 16384
#: Largest pool a keys file and payload pool are cycled through together.
KEYED_POOL_MAX = 1 << 20


@dataclass(frozen=True)
class WorkerSpec:
    worker: int
    run_id: str
    topic: str
    producer: ProducerConfig            # typed and validated in the parent
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
    stop_grace_s: float = STOP_GRACE_S
    seed: int = 0
    verify: bool = False
    transaction_duration_ms: int | None = None   # commit every N ms (needs transactional.id)
    spin_ns: int = 0                    # paced: poll, not sleep, this long before a due record


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

    def mark(self) -> dict[int, int]:
        """Where each partition's runs end now (``truncate`` goes back there)."""
        return {p: len(r) for p, r in self.runs.items()}

    def truncate(self, mark: dict[int, int]) -> None:
        for p, r in self.runs.items():
            del r[mark.get(p, 0):]


def _warmup_count(s: AppendSlice, measured_from_ns: int, warmup_seqs: int) -> int:
    """How many of the slice's first records are warm-up records (see ``split_warmup``)."""
    by_seq = warmup_seqs - s.first_seq if s.first_seq >= 0 else 0
    first, step = s.intended_first_ns, s.intended_step_ns
    if first < 0:                            # no schedule: the append time decides
        by_time = s.count if s.appended_ns < measured_from_ns else 0
    elif s.positions is None:
        if first >= measured_from_ns:
            by_time = 0
        elif step <= 0:
            by_time = s.count
        else:
            by_time = -(-(measured_from_ns - first) // step)
    else:
        offsets = s.intended_offsets()
        if first >= measured_from_ns and step >= 0 and min(offsets, default=0) >= 0:
            by_time = 0                      # every record due after the warm-up (no per-record loop)
        else:
            by_time = sum(1 for k in offsets if first + k * step < measured_from_ns)
    return max(0, min(s.count, max(by_seq, by_time)))


def _part(s: AppendSlice, a: int, b: int) -> AppendSlice:
    """Records ``a`` to ``b`` of a slice, as a slice."""
    first = s.intended_first_ns
    if first >= 0 and s.positions is None:
        first += a * s.intended_step_ns
    return AppendSlice(b - a, s.appended_ns, first, s.intended_step_ns,
                       s.first_seq + a if s.first_seq >= 0 else -1,
                       s.positions[a:b] if s.positions is not None else None, s.positions_base)


def split_warmup(slices, measured_from_ns: int, warmup_seqs: int) -> tuple[list[AppendSlice], list[AppendSlice]]:
    """A batch's append slices as (warm-up records, measured records).

    A record belongs to the warm-up when it was scheduled in it: its sequence is below
    ``warmup_seqs`` (``--warmup N`` records) or its intended send time (the append time
    without a schedule) is before ``measured_from_ns`` (monotonic, the producer's clock),
    whenever it is acknowledged. So a backlog left by the warm-up and acknowledged after
    it is not counted as measured (it made a step's achieved rate exceed its target), and
    a consumer classifies the same records from their identity headers."""
    warm: list[AppendSlice] = []
    measured: list[AppendSlice] = []
    for s in slices:
        n = _warmup_count(s, measured_from_ns, warmup_seqs)
        if n <= 0:
            measured.append(s)
        elif n >= s.count:
            warm.append(s)
        else:
            warm.append(_part(s, 0, n))
            measured.append(_part(s, n, s.count))
    return warm, measured


@dataclass(slots=True)
class _MovedAcks:
    """Records acknowledged in an interval of the other kind (warm-up records in a measured
    interval, or measured ones in a warm-up interval), cumulative: the parent moves them
    by when they were scheduled, with their value bytes, partitions and brokers."""

    records: int = 0
    value_bytes: int = 0
    by_partition: Counter = field(default_factory=Counter)
    by_node: Counter = field(default_factory=Counter)

    def add(self, batch: ProducerBatch | _HeldAck, n: int) -> None:
        self.records += n
        self.value_bytes += batch.value_bytes * n // max(1, batch.record_count)
        self.by_partition[(batch.tp.topic, batch.tp.partition)] += n
        self.by_node[batch.node_id] += n


@dataclass(frozen=True, slots=True)
class _HeldAck:
    """An acknowledged batch of the open transaction, as its latencies and counts need it
    (not the batch: its records would stay in memory until the commit)."""

    tp: TopicPartition
    node_id: int
    record_count: int
    value_bytes: int
    sent_ns: int
    slices: list[AppendSlice]
    acked_ns: int
    acked_wall_ns: int


def record_shape(spec: WorkerSpec) -> RecordShape:
    """The extra headers (``--headers``) and, unless ``--no-id-headers``, the identity."""
    headers = tuple(Header(f"h{i}", f"value-{i}".encode()) for i in range(spec.extra_headers))
    identity = IdentityStamp(run_tag(spec.run_id), spec.worker) if spec.id_headers else None
    return RecordShape(headers, identity)


def record_pool(spec: WorkerSpec, rng: random.Random) -> RecordPool | None:
    """The records this worker cycles through; None for ``--keys seq`` (a fresh key
    per record: the worker makes one small pool per slice)."""
    payload, keys = spec.payload, spec.keys
    values = payload.values
    if keys.kind == "none":
        return RecordPool(values, None, payload.value_size)
    if keys.kind == "seq":
        return None
    n_values = len(values)
    if keys.kind == "random":
        size = max(n_values, KEYED_POOL_MIN)
        size = -(-size // n_values) * n_values
        drawn = tuple(keys.keys[rng.randrange(keys.count)] for _ in range(size))
    else:
        n_keys = len(keys.keys)
        size = math.lcm(n_keys, n_values)
        if size > KEYED_POOL_MAX:
            size = max(n_keys, n_values)
        drawn = tuple(keys.keys[i % n_keys] for i in range(size))
    return RecordPool(tuple(values[i % n_values] for i in range(size)), drawn, payload.value_size)


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
                 start_gate: StartGate | None = None, hurry: Any = None) -> None:
        """``hurry``: set by the parent at a second stop (its waits end early): the stop
        grace's wait for verdicts ends at once."""
        self.spec = spec
        self.hurry = hurry
        self.start_gate = start_gate
        self.reports = reports
        self.stop = stop
        self.clock = SystemClock()
        self.latency = LatencyRecorder()        # the measured records' latencies
        self.warmup_latency = LatencyRecorder() # the warm-up records' (the live view's warm-up rounds)
        # Records scheduled in the warm-up acknowledged in a measured interval, and measured
        # records acknowledged in a warm-up interval: the parent counts records by when they
        # were scheduled.
        self.warmup_late = _MovedAcks()
        self.measured_early = _MovedAcks()
        self.acked = AckedRuns()
        self.config = spec.producer
        self.producer = Producer(self.config, clock=self.clock, on_batch_done=self._on_batch_done)
        self._set_start(spec.start_wall_ns)
        self.seq = 0
        self.rng = random.Random(spec.seed * 1000 + spec.worker)
        self._interval_start_wall = self.clock.wall_ns()
        self._interval_warmup = False
        self.abandoned = 0                      # the final count: the producer's and self.unsent
        self.abandoned_by_reason: dict[str, int] = {}
        self.unsent = 0                         # due by the stop, never handed over (counted at the end)
        self.txn_ns = (spec.transaction_duration_ms or 0) * 1_000_000
        self.txn_started_ns = 0
        self._txn_mark: dict[int, int] = {}
        self._txn_open = False
        self._txn_acks: list[_HeldAck] = []     # acknowledged in the open transaction
        self.commit_latency = new_histogram()   # µs, this interval's commits
        self.last_done_wall_ns = 0              # the latest batch completion (acked or failed)
        self._stop_seen_ns: int | None = None   # when this worker first saw the stop (its grace runs)
        self.first_measured_done_wall_ns = 0    # the first acknowledgement of a measured record

    def _set_start(self, start_wall_ns: int) -> None:
        spec = self.spec
        now_mono, now_wall = self.clock.now_ns(), self.clock.wall_ns()
        start_mono = now_mono + (start_wall_ns - now_wall)
        self.schedule = Schedule(spec.schedule_rate, start_mono, spec.schedule_phase_ns,
                                 spec.num_records, spec.duration_ns)
        self.warmup_end_ns = start_mono + spec.warmup_ns
        # The measured window's start on the clock of the records' intended times, from the
        # wall-clock start with the offset the identity headers are written with, so that a
        # consumer comparing a header's intended time with start + warm-up gets the same answer.
        self.split = bool(spec.warmup_ns or spec.warmup_records)
        self.measured_from_ns = (start_wall_ns + spec.warmup_ns
                                 - self.producer.accumulator.wall_offset_ns)

    # -- completions ---------------------------------------------------------------------
    def _in_warmup(self, now_ns: int) -> bool:
        """Warm-up is decided per reporting interval: an interval that started during
        the warm-up (records or time) is warm-up, and the worker closes an interval
        the moment the warm-up ends. Counters and histograms of warm-up intervals are
        left out together, so counts and latencies always cover the same records."""
        return self.seq < self.spec.warmup_records or now_ns < self.warmup_end_ns

    def _on_batch_done(self, batch: ProducerBatch) -> None:
        self.last_done_wall_ns = self.clock.wall_ns()
        if batch.state is BatchState.ACKED:
            if self.spec.verify:
                self.acked.add(batch)
            if self.txn_ns:
                # Counted when its transaction commits (as the engine counts it), with the
                # latency of its acknowledgement; dropped if the transaction never commits.
                self._txn_acks.append(_HeldAck(batch.tp, batch.node_id, batch.record_count,
                                               batch.value_bytes, batch.sent_ns, batch.slices,
                                               self.clock.now_ns(), self.last_done_wall_ns))
                return
            self._count_ack(batch, self.clock.now_ns(), self.last_done_wall_ns)

    def _count_ack(self, batch: ProducerBatch | _HeldAck, now: int, wall: int) -> None:
        """An acknowledged batch's records into this interval's latencies (acknowledged at
        ``now``, ``wall``), warm-up records apart."""
        if not self.split:
            if not self.first_measured_done_wall_ns:
                self.first_measured_done_wall_ns = wall
            self.latency.record_batch(now, batch.sent_ns, batch.slices)
            return
        warm, measured = split_warmup(batch.slices, self.measured_from_ns, self.spec.warmup_records)
        if measured and not self.first_measured_done_wall_ns:
            self.first_measured_done_wall_ns = wall
        self.latency.record_batch(now, batch.sent_ns, measured)
        self.warmup_latency.record_batch(now, batch.sent_ns, warm)
        moved, other = ((self.measured_early, measured) if self._interval_warmup
                        else (self.warmup_late, warm))
        n = sum(s.count for s in other)
        if n:
            moved.add(batch, n)

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> None:
        spec = self.spec
        p = self.producer
        topic = spec.topic
        p.partitions_for(topic)          # metadata and connections before the start
        if self.txn_ns:
            p.init_transactions()
        pool = record_pool(spec, self.rng)
        shape = record_shape(spec)
        if self.start_gate is not None:
            start = self.start_gate.wait(spec.worker, self.reports, self.stop)
            if start is None:       # stopped before the start
                self._finish()
                return
            self._set_start(start)
        sched = self.schedule
        step = sched.interval_ns
        paced = sched.paced
        # Every worker starts at the run's common start (metadata and connections are
        # ready by then), so the merged schedule and the reporting rounds line up.
        gc.collect()
        gc.freeze()
        while (wait := sched.start_ns - self.clock.now_ns()) > 0 and not self.stop.is_set():
            p.poll(min(wait / 1e9, 0.05))
        if paced:
            short_slice()       # woken when a record is due, it preempts what runs (load/priority.py)
        self._interval_start_wall = self.clock.wall_ns()
        self._interval_warmup = self._in_warmup(self.clock.now_ns())
        next_report = time.monotonic() + spec.interval_s
        size = len(pool) if pool is not None else 0
        dense = not paced or step < REPORT_SLACK_NS
        slice_max = SLICE_MAX if paced else SLICE_MAX_UNPACED
        catch_up = sched.catch_up()     # None: overdue records go at once
        spin_ns = spec.spin_ns if paced else 0
        txn_ns = self.txn_ns
        if txn_ns:
            self._begin_transaction()
        turn_ns = sched.start_ns - 1   # the last turn's time (nothing is due before the start)
        try:
            while not self.stop.is_set():
                now = turn_ns = self.clock.now_ns()
                if sched.over(self.seq, now):
                    break
                if txn_ns and now - self.txn_started_ns >= txn_ns:
                    ended = self._end_transaction(None)
                    if not ended or self.stop.is_set():
                        # Stopped while the transaction ended (the grace may have run out
                        # first): no new one. The records due while it waited, up to the
                        # stop, were scheduled too (abandoned, never handed over).
                        turn_ns = self._stop_turn_ns()
                        break
                    self._begin_transaction()
                    now = self.clock.now_ns()
                due = sched.due(now)
                if catch_up is not None:
                    due = self.seq + catch_up.allowed(due, self.seq, now)
                sent = due > self.seq
                if sent:
                    k = min(due - self.seq, slice_max)
                    seq = self.seq
                    try:
                        if pool is not None:
                            p.send_bulk(topic, pool, seq % size, k, shape=shape,
                                        intended_first_ns=sched.intended_ns(seq) if paced else -1,
                                        intended_step_ns=step, first_seq=seq)
                        else:
                            p.send_bulk(topic, self._seq_key_pool(seq, k), 0, k, shape=shape,
                                        intended_first_ns=sched.intended_ns(seq) if paced else -1,
                                        intended_step_ns=step, first_seq=seq)
                    except TransactionAbortableError:
                        # The open transaction failed (a batch of it did): abort it and go on
                        # in a new one; the slice was not taken and goes again.
                        if not self._abort_transaction(None) or self.stop.is_set():
                            turn_ns = self._stop_turn_ns()
                            break
                        self._begin_transaction()
                        continue
                    self.seq = seq + k
                    now = self.clock.now_ns()       # after send_bulk, which may wait for memory
                    if catch_up is not None:
                        catch_up.handed(now)
                wait_ns = 0
                held = False        # by the catch-up limit, not by the schedule
                if paced:
                    wait_ns = sched.next_due_ns(self.seq) - now
                    if catch_up is not None and catch_up.next_ok_ns - now > wait_ns:
                        wait_ns = catch_up.next_ok_ns - now
                        held = True
                # A report (about half a millisecond of work) goes out where the schedule
                # leaves room for it, so it never holds a due record up; when records are
                # due closer together than that (or there is no schedule), when it is due.
                warmup_ended = self._interval_warmup and not self._in_warmup(now)
                mono = time.monotonic()
                if (warmup_ended or mono >= next_report) and (
                        dense or wait_ns >= REPORT_SLACK_NS or mono >= next_report + spec.interval_s / 2):
                    self._report(final=False)
                    next_report = (time.monotonic() + spec.interval_s if warmup_ended
                                   else next_report + spec.interval_s)
                    continue
                if not sent:
                    # The last spin_ns before a record is due are spent polling, not asleep:
                    # a sleeping thread's wake-up can come milliseconds late (load/priority.py).
                    # A record held by the catch-up limit is polled for the whole wait, so that
                    # it goes when the limit allows it, not a wake-up later: a sleeper woken
                    # 0.5 ms late would fall behind for good (11 records per 11 ms against 10.5).
                    if held or wait_ns <= spin_ns:
                        p.poll(0)
                    else:
                        p.poll(min((wait_ns - spin_ns) / 1e9, 0.05))
        except KctlError as error:
            # A fatal producer error (fenced, not authorized, ...) ends the schedule as a
            # stop does: every record still gets its verdict, and the last report (with
            # the complete counts) goes out before the error fails the worker. Records due
            # until the error (a commit can wait max.block.ms) count, as at a stop.
            self.unsent = sched.unsent_at_stop(self.seq, self.clock.now_ns())
            try:
                self._finish(failed=True)
            except KctlError as late:
                raise KctlError(f"{error} (then, while finishing: {late})") from None
            raise
        self.unsent = sched.unsent_at_stop(self.seq, turn_ns)
        self._wait_for_window_end(next_report)
        self._finish()

    def _wait_for_window_end(self, next_report: float) -> None:
        """A paced worker stays (answering the broker, reporting) until its schedule's
        window ends: the run's rate is records over that window, so the last interval
        must reach it (the last record is due one record interval before it)."""
        end = self.schedule.end_ns
        if end is None:
            return
        p = self.producer
        while not self.stop.is_set() and (left := end - self.clock.now_ns()) > 0:
            if time.monotonic() >= next_report:
                self._report(final=False)
                next_report += self.spec.interval_s
            p.poll(min(left / 1e9, 0.05))

    def _seq_key_pool(self, seq: int, k: int) -> RecordPool:
        """``--keys seq``: the records' schedule positions as decimal text, a fresh key
        per record (so a pool per slice)."""
        payload = self.spec.payload
        values = payload.values
        n = len(values)
        return RecordPool(tuple(values[(seq + i) % n] for i in range(k)),
                          tuple(str(seq + i).encode() for i in range(k)), payload.value_size)

    # -- transactions ----------------------------------------------------------------------------
    def _begin_transaction(self) -> None:
        self.producer.begin_transaction()
        self.txn_started_ns = self.clock.now_ns()
        self._txn_mark = self.acked.mark()
        self._txn_open = True

    def _end_transaction(self, timeout_s: float | None) -> bool:
        """Commits the open transaction (its records flushed first) and records how long
        that took; an abortable error aborts it instead (counted by the engine). The wait
        is bounded as ``_await_end`` says; False: a stop's grace ran out first, the
        transaction is left open (``_finish`` closes the producer, which counts it)."""
        p = self.producer
        t0 = self.clock.now_ns()
        try:
            if not self._await_end(p.commit_transaction, timeout_s, "commit_transaction"):
                return False
        except TransactionAbortableError:
            return self._abort_transaction(timeout_s)
        self._txn_open = False
        self.commit_latency.record_value(max(1, (self.clock.now_ns() - t0) // 1000))
        for ack in self._txn_acks:
            self._count_ack(ack, ack.acked_ns, ack.acked_wall_ns)
        self._txn_acks.clear()
        return True

    def _abort_transaction(self, timeout_s: float | None) -> bool:
        if not self._await_end(self.producer.abort_transaction, timeout_s, "abort_transaction"):
            return False
        self._drop_transaction()
        return True

    def _await_end(self, call: Callable[[float], None], timeout_s: float | None, what: str) -> bool:
        """Runs ``call`` (the producer's commit_transaction or abort_transaction, which go
        on with the same commit or abort when asked again after a timeout, as Java's) in
        turns of ``FINISH_STOP_CHECK_S``, so that a stop is seen while it waits: within
        ``timeout_s`` (max.block.ms when None, as Java's commitTransaction blocks), and once
        a stop is under way within what is left of the stop grace, kctl's promise for a
        stop. False: the stop grace ran out first. Without a stop, a timeout raises."""
        limit_s = self.config.max_block_ms / 1000 if timeout_s is None else timeout_s
        deadline = self.clock.now_ns() + int(limit_s * 1e9)
        while True:
            left_s = (deadline - self.clock.now_ns()) / 1e9
            if self.stop.is_set():
                left_s = min(left_s, self._grace_left_s())
            try:
                call(max(0.0, min(left_s, FINISH_STOP_CHECK_S)))
                return True
            except TransactionTimeoutError:
                if self.stop.is_set() and self._grace_left_s() <= 0:
                    return False
                if self.clock.now_ns() >= deadline:
                    if self.stop.is_set():
                        return False
                    raise TransactionTimeoutError(
                        f"{what}: the transaction did not end within {limit_s * 1000:g} ms"
                        + (" (max.block.ms)" if timeout_s is None else "")) from None

    def _stop_turn_ns(self) -> int:
        """The time this worker saw the stop: its last turn, for the records due by then."""
        return self._stop_seen_ns if self._stop_seen_ns is not None else self.clock.now_ns()

    def _grace_left_s(self) -> float:
        """What is left of the stop grace, which runs from when this worker first saw the
        stop: every wait after a stop (the transaction's end, the last verdicts) shares it,
        so the final report goes out within the grace, before the parent's kill."""
        now = self.clock.now_ns()
        if self._stop_seen_ns is None:
            self._stop_seen_ns = now
        return max(0.0, (self._stop_seen_ns + int(self.spec.stop_grace_s * 1e9) - now) / 1e9)

    def _drop_transaction(self) -> None:
        """The open transaction will never commit: its records are in no acknowledged
        figure (the engine counts them failed) and --verify does not expect them."""
        self.acked.truncate(self._txn_mark)
        self._txn_acks.clear()
        self._txn_open = False

    def _finish(self, *, failed: bool = False) -> None:
        """Waits for every record's verdict (and commits the open transaction); when
        stopped (Ctrl-C, also while waiting here) or ``failed`` (a fatal producer error),
        for ``stop_grace_s`` at most, then abandons what is left (an open transaction is
        aborted): counted
        apart, with the reason. Records due that were never handed over
        (``self.unsent``) are abandoned too, under ``UNSENT_AT_STOP``."""
        p = self.producer
        grace = self.spec.stop_grace_s
        if self.stop.is_set():
            done = self._flush_within(self._grace_left_s())
        elif failed:
            done = self._flush_within(grace)
        else:
            # The schedule ended on its own: every verdict is awaited, but a stop that comes
            # meanwhile (Ctrl-C, SIGTERM) bounds the rest of the wait by the stop grace, as it
            # does during the schedule (behind a throttling broker this wait can last until
            # delivery.timeout.ms).
            done = False
            while not done and not self.stop.is_set():
                done = p.flush(FINISH_STOP_CHECK_S)
            if not done:
                done = self._flush_within(self._grace_left_s())
        txn = p.transactions
        late: KctlError | None = None
        if done and not failed and txn is not None and txn.in_transaction:
            # Within the stop grace once stopped (_await_end), else max.block.ms as Java's.
            try:
                done = self._end_transaction(self._grace_left_s() if self.stop.is_set() else None)
            except KctlError as error:      # fenced, timed out: reported, then raised
                late, done = error, False
        if txn is not None and txn.is_completing:
            # A commit or abort the stop grace cut short: close counts its records (failed
            # TRANSACTION_NOT_COMMITTED, or abandoned when its EndTxn(commit) went out).
            done = False
        if txn is not None and txn.has_fatal_error and self._txn_open:
            # A fatal error left the transaction open: it never commits, so its records are
            # not expected (the engine counts them failed, TRANSACTION_NOT_COMMITTED).
            self._drop_transaction()
        reason = None if done else STOPPED_AGAIN if self._hurried() else \
            f"run stopped: no verdict within the {grace:g} s stop grace"
        p.close(0 if not done else None, abandon_reason=reason)
        if self._txn_open:
            self._drop_transaction()   # close aborted it (it could not commit)
        by_reason = dict(p.metrics.abandoned_by_reason)
        if self.unsent:
            by_reason[UNSENT_AT_STOP] = self.unsent
        self.abandoned = p.metrics.records_abandoned + self.unsent
        self.abandoned_by_reason = by_reason
        gc.unfreeze()
        # A failing worker's last report is not final: its WorkerFailed follows and ends it
        # (the parent stops listening to a worker at its final report).
        self._report(final=not failed and late is None)
        if late is not None:
            raise late

    def _flush_within(self, grace_s: float) -> bool:
        """Waits for the verdicts for ``grace_s`` at most; a second stop (the parent's
        ``hurry``) ends the wait at once. True when every record has its verdict."""
        p = self.producer
        end = self.clock.now_ns() + int(grace_s * 1e9)
        while True:
            left_s = max(0, end - self.clock.now_ns()) / 1e9
            if p.flush(min(FINISH_STOP_CHECK_S, left_s)):
                return True
            if left_s <= 0 or self._hurried():
                return False

    def _hurried(self) -> bool:
        return self.hurry is not None and self.hurry.is_set()

    def _report(self, *, final: bool) -> None:
        now_wall = self.clock.wall_ns()
        p = self.producer
        in_flight = {node: p.network.in_flight_request_count(node) for node in p.network.nodes()}
        if self.split and self._interval_warmup:
            # The measured records acknowledged so far stay for the first measured interval.
            histograms = self.warmup_latency.encode_interval()
        else:
            histograms = self.latency.encode_interval()
            if self.split:
                self.warmup_latency.encode_interval()   # the warm-up's stragglers: left out
        self.reports.put(WorkerInterval(
            worker=self.spec.worker, start_wall_ns=self._interval_start_wall, end_wall_ns=now_wall,
            histograms=histograms, metrics=p.metrics_snapshot(),
            in_flight_by_node=in_flight, buffer_available=p.pool.available_memory,
            buffer_total=p.pool.total_memory,
            warmup=self._interval_warmup, final=final,
            records_scheduled=self.seq + self.unsent, abandoned=self.abandoned,
            abandoned_by_reason=self.abandoned_by_reason,
            commit_latency=self._take_commit_latency(), last_done_wall_ns=self.last_done_wall_ns,
            first_measured_done_wall_ns=self.first_measured_done_wall_ns,
            warmup_acked_late=self.warmup_late.records, warmup_bytes_late=self.warmup_late.value_bytes,
            measured_acked_early=self.measured_early.records,
            measured_bytes_early=self.measured_early.value_bytes,
            warmup_late_by_partition=dict(self.warmup_late.by_partition),
            warmup_late_by_node=dict(self.warmup_late.by_node),
            measured_early_by_partition=dict(self.measured_early.by_partition),
            measured_early_by_node=dict(self.measured_early.by_node),
            acked_runs=dict(self.acked.runs) if final and self.spec.verify else None))
        self._interval_start_wall = now_wall
        self._interval_warmup = self._in_warmup(self.clock.now_ns())


    def _take_commit_latency(self) -> bytes | None:
        h = self.commit_latency
        if not self.txn_ns or not h.get_total_count():
            return None
        self.commit_latency = new_histogram()
        return encode_histogram(h)


def run_worker(spec: WorkerSpec, reports: Any, stop: Any, start_gate: StartGate | None = None,
               hurry: Any = None) -> None:
    """Process entry point: every failure reaches the parent as ``WorkerFailed``.

    Ctrl-C reaches every process of the terminal's group; workers ignore it and
    stop through ``stop``, set by the parent, so they still flush and report. SIGTERM
    (to the group, or to the worker alone) stops the worker as ``stop`` does (load/stop.py)."""
    stop = install_worker_stop(stop)
    try:
        Worker(spec, reports, stop, start_gate, hurry).run()
    except KctlError as e:
        reports.put(WorkerFailed(spec.worker, str(e)))
    except KeyboardInterrupt:
        reports.put(WorkerFailed(spec.worker, "interrupted"))
    except BaseException as e:  # noqa: BLE001 - a worker must always report back
        reports.put(WorkerFailed(spec.worker, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))
