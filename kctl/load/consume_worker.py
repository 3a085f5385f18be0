"""One consumer process: a ``Consumer`` engine read per batch, e2e recorded, reported.

How this works
--------------
``run_consumer(spec, reports, stop, control, gate)`` runs in its own process (scale is
processes, as for producers). Set-up: the consumer is built from the typed
``ConsumerConfig``; in assign mode it takes its share of the partitions and seeks them
to where the run starts (``StartPosition``), in group mode it subscribes and joins.
Once it stands at its start (positions known, or the first assignment received) it
says ``ConsumerReady`` (with its clock offset to the producer's host when asked to
measure one) and waits for the run's common start.

No Fetch goes out before the common start: every partition is paused from the moment it
is assigned (``hold``: assign mode at ``assign()``, group mode in the rebalance listener,
so a partition assigned while waiting stays paused too) and resumed at the start
(``release``), as OMB pauses its consumers until the timer starts and resumes them
(Java's ``pause()``/``resume()``; a Java consumer fetches only inside ``poll()``). While
waiting, the consumer is still stepped: positions are found (ListOffsets, OffsetFetch),
the group is joined, heartbeats keep it a member. The garbage collector's collect and
freeze also run before the start, so the first interval begins at the common start.

The loop: ``Consumer.poll_batches`` hands out batches; per batch, one unpack of the
identities' columns gives the records' run tags, producer workers, sequences and
intended send times; e2e is recorded (stats/e2e.py) for the run's records (for every
kctl record when no run tag is given); with ``verify`` the records' (offset, producer
worker, sequence) go into runs (one per batch on the fast path). Every ``interval_s`` a
``ConsumerInterval`` goes to the parent with the interval's e2e histograms, the
engine's cumulative counters and each assigned partition's position, end offset and
target. Targets (partition -> offset to read to) come with the spec (a backlog) or
later through ``control`` (``kctl produce --consume``: the producers' acknowledged
end offsets); the consumer is *caught up* once every assigned partition's position has
reached its target. It stops on ``stop``, at the end of its duration, after
``max_records`` over the run (a shared counter), after ``idle_timeout`` without
records, or once caught up when told to (``stop_when_caught_up``). Closing commits
(``enable.auto.commit``) and leaves the group; the final report's interval ends before
closing (the run's end, as kafka-consumer-perf-test takes its end time before close), its
counters are read after.

Commits are the engine's, as a Java consumer with the same settings makes them: with
``enable.auto.commit`` every ``auto.commit.interval.ms``, before a rebalance revokes
partitions (ConsumerCoordinator's onJoinPrepare) and at close; with it off, none. The
rebalance listener only times rejoining (kafka-consumer-perf-test's listener does no
more): a commit of its own would commit with auto-commit off, and send a second,
identical OffsetCommit at close with it on.
"""

from __future__ import annotations

import gc
import queue
import struct
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kctl.consumer_config import ConsumerConfig
from kctl.engine.batch import TopicPartition
from kctl.engine.clock import SystemClock
from kctl.engine.consumer import Consumer
from kctl.engine.fetcher import ConsumedBatch
from kctl.engine.subscription import FetchPosition
from kctl.errors import KctlError
from kctl.load.clock_sync import measure_offset
from kctl.load.stop import install_worker_stop
from kctl.protocol.identity import find_identity
from kctl.stats.consume_report import (
    ClockOffset, ConsumerFailed, ConsumerInterval, ConsumerReady, PartitionProgress, SeenRun)
from kctl.stats.e2e import E2eRecorder

__all__ = ["ConsumeWorkerSpec", "ConsumerWorker", "StartPosition", "Targets", "run_consumer"]

_COLUMNS: dict[int, struct.Struct] = {}
#: How long a poll waits at most (the loop also reports and checks control messages).
POLL_S = 0.05


@dataclass(frozen=True, slots=True)
class StartPosition:
    """Where reading starts: ``beginning``, ``end``, ``offset`` (``value``), ``timestamp``
    (``value`` ms), ``committed`` (the group's, else auto.offset.reset), ``reset`` (assign
    mode, no seek: auto.offset.reset, ``reset`` its text, as Java's assign() without a seek)
    or ``offsets`` (one offset per partition: a backlog's, or the end before ``produce --consume``)."""

    kind: str
    value: int = 0
    offsets: dict[int, int] | None = None
    reset: str = ""

    def describe(self) -> str:
        if self.kind in ("offset", "timestamp"):
            return f"{self.kind} {self.value}"
        if self.kind == "reset":
            return f"auto.offset.reset={self.reset}"
        return self.kind


@dataclass(frozen=True, slots=True)
class Targets:
    """A control message: partition -> the offset to read to."""

    offsets: dict[int, int]


@dataclass(frozen=True)
class ConsumeWorkerSpec:
    consumer: int
    config: ConsumerConfig               # typed and validated in the parent (bootstrap set)
    topic: str
    partitions: tuple[int, ...] | None   # assign mode: this consumer's partitions; None: subscribe
    start: StartPosition
    run_tag: bytes | None = None         # e2e and verify for this run's records only
    duration_ns: int | None = None
    max_records: int | None = None       # over the whole run (shared counter)
    idle_timeout_ns: int | None = None
    targets: dict[int, int] | None = None
    stop_when_caught_up: bool = False
    interval_s: float = 1.0
    warmup_ns: int = 0
    # produce --consume: e2e counts the producers' measured records (scheduled after their
    # warm-up: intended time from start + warmup_ns on, sequence from warmup_records on),
    # whenever they are read, as the producers count them (load/worker.py split_warmup)
    e2e_by_schedule: bool = False
    warmup_records: int = 0               # per producer worker (--warmup N records)
    verify: bool = False
    clock_peer: str | None = None        # host:port of a ClockServer to measure the offset to
    same_host_clock: bool = False        # the producers run on this host (one clock)
    seed: int = 0


class _Listener:
    """Times rejoining; commits nothing (module docstring)."""

    def __init__(self, worker: ConsumerWorker) -> None:
        self.worker = worker

    def on_partitions_revoked(self, partitions, positions) -> None:
        self.worker.lose(partitions)

    def on_partitions_assigned(self, partitions) -> None:
        self.worker.assigned_once = True
        self.worker.gain(partitions)
        self.worker.hold(partitions)

    def on_partitions_lost(self, partitions) -> None:
        self.worker.lose(partitions)


#: What a connection state means to someone waiting on that broker.
_STATE_WORDS = {"connecting": "connecting (TCP or TLS not done)",
                "checking_api_versions": "connected, no answer to ApiVersions yet",
                "authenticating": "connected, SASL not done",
                "disconnected": ""}


class ConsumerWorker:
    def __init__(self, spec: ConsumeWorkerSpec, reports: Any, stop: Any, control: Any = None,
                 counter: Any = None) -> None:
        self.spec = spec
        self.reports = reports
        self.stop = stop
        self.control = control
        self.counter = counter            # multiprocessing Value('q'): records over the run
        self.clock = SystemClock()
        self.e2e = E2eRecorder()
        self.assigned_once = False
        self.consumer = Consumer(spec.config, clock=self.clock, listener=_Listener(self))
        self.targets: dict[int, int] | None = dict(spec.targets) if spec.targets is not None else None
        self.matched = self.unidentified = self.foreign = 0
        self.seen: dict[int, list[SeenRun]] = {}
        self.caught_up_wall_ns = 0
        self.first_record_wall_ns = 0
        self.clock_offset: ClockOffset | None = None
        self._interval_start = self.clock.wall_ns()
        self._start_mono = 0
        self._e2e_from: int | None = None   # wall ns: e2e_by_schedule's measured start
        self._interval_warmup = False
        self._last_record_mono = 0
        self.setup_wall_ns = 0
        self.owned: set = set()
        self.rejoin_ns = 0                # after the measured start (the start, past any warm-up):
                                          # every partition revoked until assigned
        self._rejoin_from = 0             # monotonic ns the consumer last lost every partition
        self.holding = True               # before the common start: assigned partitions are paused

    # -- rebalance time (kafka-consumer-perf-test's rebalance listener) -------------------------
    def lose(self, partitions) -> None:
        self.owned.difference_update(partitions)
        if not self.owned:
            self._rejoin_from = self.clock.now_ns()

    def gain(self, partitions) -> None:
        if not self.owned and self._rejoin_from and self._start_mono:
            # Only the part inside the measured window: a warm-up's rejoining is left out
            # with its records (the perf-test line then covers the time after the warm-up).
            now = self.clock.now_ns()
            measured_from = self._start_mono + self.spec.warmup_ns
            self.rejoin_ns += max(0, now - max(self._rejoin_from, measured_from))
        self._rejoin_from = 0
        self.owned.update(partitions)

    # -- no Fetch before the start (module doc) ----------------------------------------------
    def hold(self, partitions) -> None:
        """Pauses ``partitions`` while the run has not started (Java's ``pause()``)."""
        if self.holding:
            self.consumer.subscriptions.pause(partitions)

    def release(self) -> None:
        """The common start: every assigned partition is fetched from now on (``resume()``)."""
        self.holding = False
        c = self.consumer
        c.subscriptions.resume(c.assignment())

    # -- set-up ------------------------------------------------------------------------------
    def _position(self) -> None:
        spec, c = self.spec, self.consumer
        topic = spec.topic
        if spec.partitions is None:
            c.subscribe([topic])
            return
        tps = [TopicPartition(topic, p) for p in spec.partitions]
        c.assign(tps)
        self.hold(tps)
        st = spec.start
        if st.kind == "beginning":
            c.seek_to_beginning(tps)
        elif st.kind == "end":
            c.seek_to_end(tps)
        elif st.kind == "offset":
            for tp in tps:
                c.seek(tp, st.value)
        elif st.kind == "timestamp":
            c.seek_to_timestamp(tps, st.value)
        elif st.kind == "offsets":
            offsets = st.offsets or {}
            for tp in tps:
                if tp.partition in offsets:
                    c.subscriptions.seek(tp, FetchPosition(offsets[tp.partition]))
                else:
                    c.seek_to_beginning([tp])
        # "committed": the group's committed offsets (ConsumerCoordinator), else auto.offset.reset;
        # "reset": no seek, so the engine resets by auto.offset.reset (none: it fails).

    def _ready(self) -> bool:
        c = self.consumer
        if self.spec.partitions is None:
            return self.assigned_once and c.subscriptions.has_all_fetch_positions()
        return c.subscriptions.has_all_fetch_positions()

    def setup_limit(self) -> tuple[float, str]:
        """How long set-up may take, and the setting that says so: ``default.api.timeout.ms``
        (Java's bound on ``partitionsFor`` and the position lookups), or the run's
        ``--duration`` when shorter: a consumer not at its start by then has nothing left
        to measure, and the run must still stop on time."""
        limit_s, name = self.spec.config.default_api_timeout_ms / 1000, "default.api.timeout.ms"
        if self.spec.duration_ns is not None and self.spec.duration_ns / 1e9 < limit_s:
            limit_s, name = self.spec.duration_ns / 1e9, "the run's --duration"
        return limit_s, name

    def setup(self) -> None:
        c = self.consumer
        self.setup_wall_ns = self.clock.wall_ns()
        limit_s, name = self.setup_limit()
        deadline = time.monotonic() + limit_s
        try:
            c.partitions_for(self.spec.topic, timeout_s=limit_s)
        except KctlError as e:
            raise KctlError(f"consumer {self.spec.consumer}: {e} ({name}){self._waiting_on()}") from None
        self._position()
        while not self._ready():
            if self.stop.is_set():
                return
            if time.monotonic() > deadline:
                what = "join its group" if self.spec.partitions is None else "find its start positions"
                raise KctlError(f"consumer {self.spec.consumer} did not {what} within {limit_s:g} s "
                                f"({name}){self._waiting_on()}")
            c.step(POLL_S)
        if self.spec.clock_peer:
            self.clock_offset = measure_offset(self.spec.clock_peer)

    def _waiting_on(self) -> str:
        """``; waiting on broker 1 at host:port (checking_api_versions; last: why it
        failed)`` for each broker the consumer has tried that is not ready."""
        c = self.consumer
        parts = []
        for node in sorted(c.network.unready_nodes()):
            address = c.metadata.node(node)
            where = f" at {address.host}:{address.port}" if address is not None else ""
            state = _STATE_WORDS.get(c.network.connection_state(node).value, "")
            why = c.network.connection_error(node)
            shown = "bootstrap broker" if node < 0 else f"broker {node}"
            parts.append(f"{shown}{where} ({'; '.join(x for x in (state, why and f'last: {why}') if x)})")
        return "; waiting on " + ", ".join(parts) if parts else ""

    # -- per batch ---------------------------------------------------------------------------
    def _on_batch(self, cb: ConsumedBatch) -> None:
        spec = self.spec
        n = cb.count
        if not n:
            return
        now_wall = self.consumer.wall_ns(cb.consumed_ns)
        if not self.first_record_wall_ns:
            self.first_record_wall_ns = now_wall
        self._last_record_mono = cb.consumed_ns
        tag = spec.run_tag
        ids = cb.identities
        if ids is not None:
            st = _COLUMNS.get(n)
            if st is None:
                st = _COLUMNS[n] = struct.Struct(">" + "4sIQq" * n)
            cols = st.unpack(ids)
            tags = cols[0::4]
            if tag is None or tags.count(tag) == n:
                intended = cols[3::4]
                mine = n
                if self._e2e_from is not None and (min(intended) < self._e2e_from
                                                   or min(cols[2::4]) < spec.warmup_records):
                    intended = self._measured(cols, range(n))
            else:
                keep = [i for i in range(n) if tags[i] == tag]
                intended = (tuple(cols[4 * i + 3] for i in keep) if self._e2e_from is None
                            else self._measured(cols, keep))
                mine = len(keep)
                self.foreign += n - mine
            self.e2e.record_many(now_wall, intended)
            self.matched += mine
            if spec.verify:
                self._seen_columns(cb, cols, tag)
        else:
            for r in cb.records:
                ident = find_identity(r.headers)
                if ident is None:
                    self.unidentified += 1
                    continue
                if tag is not None and ident.run_tag != tag:
                    self.foreign += 1
                    continue
                self.matched += 1
                if self._e2e_from is None or (ident.intended_ns >= self._e2e_from
                                              and ident.sequence >= spec.warmup_records):
                    self.e2e.record(now_wall, ident.intended_ns)
                if spec.verify:
                    self._seen(cb.tp.partition, (r.offset, 1, ident.run_tag, ident.worker, ident.sequence))

    def _measured(self, cols: tuple, indexes) -> tuple[int, ...]:
        """The intended times of the records at ``indexes`` the producers measured."""
        start, seqs = self._e2e_from, self.spec.warmup_records
        return tuple(cols[4 * i + 3] for i in indexes
                     if cols[4 * i + 3] >= start and cols[4 * i + 2] >= seqs)  # type: ignore[operator]

    def _seen_columns(self, cb: ConsumedBatch, cols: tuple, tag: bytes | None) -> None:
        n = cb.count
        w0, s0 = cols[1], cols[2]
        if ((tag is None or cols[0::4].count(cols[0]) == n) and cols[1::4].count(w0) == n
                and cols[2::4] == tuple(range(s0, s0 + n))):
            self._seen(cb.tp.partition, (cb.first_offset, n, cols[0], w0, s0))
            return
        for i in range(n):
            if tag is None or cols[4 * i] == tag:
                self._seen(cb.tp.partition, (cb.first_offset + i, 1, cols[4 * i], cols[4 * i + 1], cols[4 * i + 2]))

    def _seen(self, partition: int, run: SeenRun) -> None:
        runs = self.seen.setdefault(partition, [])
        if runs:
            o, c, t, w, s = runs[-1]
            if o + c == run[0] and t == run[2] and w == run[3] and s + c == run[4]:
                runs[-1] = (o, c + run[1], t, w, s)
                return
        runs.append(run)

    # -- progress ----------------------------------------------------------------------------
    def _progress(self) -> tuple[PartitionProgress, ...]:
        c = self.consumer
        iso = c.config.isolation_level
        out = []
        for s in c.subscriptions.states():
            end = s.last_stable_offset if iso.name == "READ_COMMITTED" else s.high_watermark
            target = self.targets.get(s.tp.partition, -1) if self.targets is not None else -1
            out.append(PartitionProgress(s.tp.topic, s.tp.partition, s.position.offset if s.position else -1,
                                         end, target))
        return tuple(out)

    def caught_up(self) -> bool:
        """Every assigned partition at its target (a group member: once in a stable group)."""
        if self.targets is None:
            return False
        c = self.consumer
        if c.coordinator is not None and c.subscriptions.has_auto_assigned_partitions \
                and not c.coordinator.in_stable_group:
            return False
        for s in c.subscriptions.states():
            t = self.targets.get(s.tp.partition)
            if t is not None and (s.position is None or s.position.offset < t):
                return False
        return True

    def _check_control(self) -> None:
        if self.control is None:
            return
        while True:
            try:
                msg = self.control.get_nowait()
            except (queue.Empty, OSError, EOFError):
                return
            if isinstance(msg, Targets):
                self.targets = dict(msg.offsets)

    # -- the loop ------------------------------------------------------------------------------
    def run(self, gate: Any = None) -> None:
        spec = self.spec
        c = self.consumer
        self.setup()
        start_wall = None
        if gate is not None:
            # Stepped while the others get ready: heartbeats, rebalances (partitions stay paused).
            start_wall = gate.wait(spec.consumer, self.reports, self.stop, ready=ConsumerReady(
                spec.consumer, self.clock_offset, self.setup_wall_ns), step=lambda: c.step(POLL_S))
            if start_wall is None:
                self._finish()
                return
        else:
            self.reports.put(ConsumerReady(spec.consumer, self.clock_offset, self.setup_wall_ns))
        now_mono, now_wall = self.clock.now_ns(), self.clock.wall_ns()
        self._start_mono = now_mono + ((start_wall - now_wall) if start_wall else 0)
        if spec.e2e_by_schedule and start_wall and (spec.warmup_ns or spec.warmup_records):
            # as the producers split (worker.py): only with a warm-up
            self._e2e_from = start_wall + spec.warmup_ns
        # Before the start, not after it: done after, it delayed the first interval by 13-33 ms.
        gc.collect()
        gc.freeze()
        self.wait_for_start()
        self._interval_start = start_wall if start_wall is not None else self.clock.wall_ns()
        self._interval_warmup = self._in_warmup()
        self._last_record_mono = self.clock.now_ns()
        interval_ns = int(spec.interval_s * 1e9)
        next_report = self._start_mono + interval_ns
        while not self.stop.is_set():
            for cb in c.poll_batches(POLL_S):
                self._on_batch(cb)
                if self.counter is not None:
                    with self.counter.get_lock():
                        self.counter.value += cb.count
            now = self.clock.now_ns()
            if not self.caught_up_wall_ns and self.caught_up():
                self.caught_up_wall_ns = self.clock.wall_ns()
            over = self._over(now)
            warmup_ended = self._interval_warmup and not self._in_warmup()
            # A report due as the run ends is the final one (an extra report would leave the
            # final interval empty); the warm-up's end is reported even then.
            if warmup_ended or (now >= next_report and not over):
                self._check_control()
                self._report(final=False)
                next_report = (now if warmup_ended else next_report) + interval_ns
            if over:
                break
        self._finish()

    def wait_for_start(self) -> None:
        """Steps the consumer, its partitions paused, until the common start; then
        resumes them (module doc)."""
        c = self.consumer
        while self.clock.now_ns() < self._start_mono and not self.stop.is_set():
            c.step(min(POLL_S, max(0.0, (self._start_mono - self.clock.now_ns()) / 1e9)))
        self.release()

    def _over(self, now: int) -> bool:
        spec = self.spec
        if spec.duration_ns is not None and now - self._start_mono >= spec.duration_ns:
            return True
        if spec.max_records is not None and self.counter is not None and self.counter.value >= spec.max_records:
            return True
        if spec.idle_timeout_ns is not None and now - self._last_record_mono >= spec.idle_timeout_ns:
            return True
        return spec.stop_when_caught_up and bool(self.caught_up_wall_ns)

    def _in_warmup(self) -> bool:
        return self.clock.now_ns() < self._start_mono + self.spec.warmup_ns

    def _finish(self) -> None:
        # The partitions as they stood before closing: a group member's close revokes them.
        progress = self._progress()
        # The run ends when reading stops, before closing (its commit and LeaveGroup), as
        # kafka-consumer-perf-test takes its end time before consumer.close().
        end_wall = self.clock.wall_ns()
        try:
            self.consumer.close()
        finally:
            gc.unfreeze()
            self._report(final=True, progress=progress, end_wall_ns=end_wall)

    def _report(self, *, final: bool, progress: tuple[PartitionProgress, ...] | None = None,
                end_wall_ns: int | None = None) -> None:
        """``end_wall_ns``: the interval's end when not now (the final report: before closing)."""
        now_wall = self.clock.wall_ns() if end_wall_ns is None else end_wall_ns
        # By schedule, the recorder holds measured records only: those read during a
        # warm-up interval (whose figures are left out) go with the first measured one.
        keep = self._e2e_from is not None and self._interval_warmup and not final
        rebalance_failed = self.consumer.rebalance_commit_failures
        self.reports.put(ConsumerInterval(
            consumer=self.spec.consumer, start_wall_ns=self._interval_start, end_wall_ns=now_wall,
            histograms={} if keep else self.e2e.encode_interval(), metrics=self.consumer.metrics_snapshot(),
            partitions=self._progress() if progress is None else progress, matched=self.matched, warmup=self._interval_warmup, final=final,
            close_commit_error=(self.consumer.close_commit_error or "") if final else "",
            rebalance_commit_failures=rebalance_failed.count, rebalance_commit_error=rebalance_failed.last_error,
            caught_up=bool(self.caught_up_wall_ns), caught_up_wall_ns=self.caught_up_wall_ns,
            first_record_wall_ns=self.first_record_wall_ns,
            seen=dict(self.seen) if final and self.spec.verify else None,
            unidentified=self.unidentified, foreign=self.foreign, rejoin_ns=self.rejoin_ns))
        self._interval_start = now_wall
        self._interval_warmup = self._in_warmup()


@dataclass
class ConsumerGate:
    """The common start (as the producers' StartGate): ready, then wait for the start time."""

    go: Any
    start_wall_ns: Any

    def wait(self, consumer: int, reports: Any, stop: Any, *, ready: ConsumerReady,
             step: Callable[[], None] | None = None) -> int | None:
        """``step``: run while waiting (the consumer's loop, so it stays in its group)."""
        reports.put(ready)
        while not self.go.is_set():
            if stop.is_set():
                return None
            if step is not None:
                step()
            else:
                self.go.wait(0.05)
        return int(self.start_wall_ns.value)


def run_consumer(spec: ConsumeWorkerSpec, reports: Any, stop: Any, control: Any = None,
                 gate: Any = None, counter: Any = None) -> None:
    """Process entry point: every failure reaches the parent as ``ConsumerFailed``. Ctrl-C
    is ignored (the parent sets ``stop``); SIGTERM stops the consumer as ``stop`` does
    (load/stop.py), so it still commits and sends its final report."""
    stop = install_worker_stop(stop)
    try:
        ConsumerWorker(spec, reports, stop, control, counter).run(gate)
    except KctlError as e:
        reports.put(ConsumerFailed(spec.consumer, str(e)))
    except BaseException as e:  # noqa: BLE001 - a consumer must always report back
        reports.put(ConsumerFailed(spec.consumer, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))
