"""The parent's merge of worker reports: live dashboard state, summary JSON, interval log.

How this works
--------------
Each worker sends one ``WorkerInterval`` per interval (``kctl/stats/report.py``). The
parent feeds every message to ``RunStats.add``; it

* diffs the worker's CUMULATIVE ``MetricsSnapshot`` against that worker's previous one
  and adds the difference to the results, or to the warm-up totals when the report is
  marked ``warmup`` (warm-up never counts in results, in the summary or in the .hlog);
* adds the interval histograms to the cumulative ones (HdrHistogram add: percentiles
  are never averaged);
* files the report under a ROUND: the k-th report of every worker is taken to cover
  the same stretch of the run. A round closes when every live worker has reported it
  (a worker that sent ``final`` or ``WorkerFailed`` is not waited for), or when some
  worker is ``max_lag_rounds`` ahead (a stalled worker must not freeze the display; its
  late report is filed under the oldest open round instead, so nothing is lost). Closing
  a round fixes the "last interval" figures and writes one .hlog line per clock.

Definitions (also in docs/produce-summary.md):

* rate: records ACKED per second. Over the run: measured acked records / the measured
  span (earliest non-warm-up interval start to latest end, over all workers). For one
  round: the records acked in it / its length on one clock, as perf-test's window: from
  the previous round's end (the first round: its earliest report's start) to the
  latest end of its reports. Rounds so tile the run, and a run of one round shows the
  closing rate. (Summing each worker's own rate over its own interval overstated the
  total when workers were staggered by their start-up: 359,232 vs 276,928 records/s.)
* MB/s: bytes of acknowledged record values / 2**20 per second, as
  kafka-producer-perf-test counts MB; the wire rate (``wire_mb_per_s``) is RecordBatch
  bytes written in Produce requests (``bytes_sent``: record framing, headers, batch
  headers and retries included) / 2**20 per second.
* records per batch: records acked / batches acked.
* batch fill: ``batch_fill_total`` / batches first sent; queue time: ``queue_time_ns_total``
  / batches first sent, where batches first sent = ``batches_sent - retries``.
* compression rate (compression on): ``compression_rate_total`` /
  ``compression_rate_batches``, Java's compression-rate-avg over the run.
* max-throughput mode (no target rate): there is no schedule, so the intended clock is
  not recorded and is reported from the send clock (``intended_from_send``).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from pathlib import PurePath
from typing import Any, TypeVar

from hdrh.histogram import HdrHistogram

from kctl.engine.metrics import MetricsSnapshot
from kctl.stats.hlog import IntervalLogWriter
from kctl.stats.latency import (
    CLOCKS,
    EMPTY_FIGURES,
    LatencyFigures,
    decode_histogram,
    new_histogram,
)
from kctl.stats.report import WorkerFailed, WorkerInterval
from kctl.stats.summary import (
    SUMMARY_SCHEMA,
    Batching,
    BrokerCount,
    Counts,
    PartitionCount,
    Rates,
    RunInfo,
    RunSummary,
    Throttle,
    TransactionTotals,
    WarmupTotals,
    WorkerFailure,
)

__all__ = ["SUMMARY_SCHEMA", "DashboardState", "RunStats", "metrics_delta", "metrics_sum",
           "zero_metrics"]

MB = 1024 * 1024


# -- counters ----------------------------------------------------------------------------------
_Counters = TypeVar("_Counters")   # a frozen dataclass of counters (MetricsSnapshot, ConsumerMetricsSnapshot)


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def combine_counters(a: _Counters, b: _Counters, sign: int) -> _Counters:
    """``a + sign * b`` for a snapshot of cumulative counters (the producer's or the
    consumer's). Generic over the dataclass's fields, so a counter the engine adds is
    merged too: numbers add, dicts add key by key (zero entries dropped)."""
    out: dict[str, Any] = {}
    for name in _field_names(type(a)):
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, dict):
            d = dict(x)
            for k, v in y.items():
                d[k] = d.get(k, 0) + sign * v
            out[name] = {k: v for k, v in d.items() if v}
        else:
            out[name] = x + sign * y
    return type(a)(**out)


def zero_metrics() -> MetricsSnapshot:
    def zero(type_name: str) -> Any:
        return {} if "dict" in type_name else 0.0 if "float" in type_name else 0
    return MetricsSnapshot(**{f.name: zero(str(f.type)) for f in fields(MetricsSnapshot)})


def metrics_delta(cur: MetricsSnapshot, prev: MetricsSnapshot) -> MetricsSnapshot:
    """``cur - prev`` field by field (both cumulative snapshots of one engine)."""
    return combine_counters(cur, prev, -1)


def metrics_sum(a: MetricsSnapshot, b: MetricsSnapshot) -> MetricsSnapshot:
    return combine_counters(a, b, 1)


def _first_sent_batches(m: MetricsSnapshot) -> int:
    return max(0, m.batches_sent - m.retries)


def _ratio(a: float, b: float) -> float:
    return a / b if b else 0.0


def _summed(counts: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """Per-name counts added up, sorted by name."""
    out: Counter[str] = Counter()
    for c in counts:
        out.update(c)
    return dict(sorted(out.items()))


# -- the dashboard's view ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class DashboardState:
    """Everything the live view shows, as plain data (the dicts are the state's own copies).

    Each field covers one window, named in its comment: ``interval_*`` figures and the
    batching, throttling, retry and split figures are the last closed round's (a warm-up
    round's too, flagged by ``warmup``); ``cumulative_*``, the ``records_*`` counts and
    ``records_by_node`` are results (warm-up excluded); errors and transactions are
    totals since the start, warm-up included (an error in the warm-up is still news).
    """

    elapsed_s: float
    warmup: bool                       # the last closed interval was warm-up only
    intervals: int                     # rounds closed so far
    interval_s: float                  # length of the last closed interval
    target_rate: float | None          # records/s over all workers; None: max throughput
    interval_rate: float               # records acked/s, last interval
    interval_mb_per_s: float           # record values (kafka-producer-perf-test's MB/s)
    interval_wire_mb_per_s: float      # RecordBatch bytes written
    cumulative_rate: float
    cumulative_mb_per_s: float
    cumulative_wire_mb_per_s: float
    interval_acked: int
    records_sent: int
    records_acked: int
    records_failed: int
    interval_latency: dict[str, LatencyFigures]
    cumulative_latency: dict[str, LatencyFigures]
    intended_from_send: bool           # no schedule: "intended" shows the send clock
    records_per_batch: float           # last interval
    batch_fill: float                  # last interval, 0..1
    queue_time_ms: float               # last interval, mean time in the accumulator
    in_flight_by_node: dict[int, int]  # requests in flight now, summed over workers
    records_by_node: dict[int, int]    # records acked per broker, measured (warm-up excluded)
    throttle_time_ms: int              # last interval
    throttled_requests: int            # last interval
    retries: int                       # last interval
    errors_by_name: dict[str, int]     # since the start, warm-up included
    failed_by_error: dict[str, int]    # since the start, warm-up included
    buffer_used: int                   # bytes, summed over workers
    buffer_total: int
    progress: float | None             # 0..1 of --duration / --num-records; None: open-ended
    workers: int
    workers_reason: str                # why this many ran (the default's reason, or "--workers")
    workers_running: int
    workers_failed: tuple[tuple[int, str], ...]
    # transactional runs (--transaction-duration-ms); totals since the start
    transactional: bool = False
    transactions_committed: int = 0
    transactions_aborted: int = 0
    commit_latency: LatencyFigures = EMPTY_FIGURES
    splits: int = 0                    # last interval
    last_round: bool = False           # the last closed interval is the run's last
    interrupted: bool = False          # the run was stopped (Ctrl-C, SIGTERM)


# -- rounds ----------------------------------------------------------------------------------------
class _Round:
    __slots__ = ("index", "start_ns", "end_ns", "m_start_ns", "m_end_ns", "reports",
                 "measured_reports", "hists", "measured", "delta")

    def __init__(self, index: int) -> None:
        self.index = index
        self.start_ns = self.m_start_ns = 1 << 62
        self.end_ns = self.m_end_ns = 0
        self.reports = 0
        self.measured_reports = 0
        self.hists: dict[str, HdrHistogram] = {}
        self.measured: dict[str, HdrHistogram] = {}
        self.delta = zero_metrics()

    def add(self, msg: WorkerInterval, hists: dict[str, HdrHistogram], delta: MetricsSnapshot) -> None:
        self.reports += 1
        self.start_ns = min(self.start_ns, msg.start_wall_ns)
        self.end_ns = max(self.end_ns, msg.end_wall_ns)
        _add_hists(self.hists, hists)
        if not msg.warmup:
            self.measured_reports += 1
            self.m_start_ns = min(self.m_start_ns, msg.start_wall_ns)
            self.m_end_ns = max(self.m_end_ns, msg.end_wall_ns)
            _add_hists(self.measured, hists)
        self.delta = metrics_sum(self.delta, delta)



def _add_hists(into: dict[str, HdrHistogram], hists: Mapping[str, HdrHistogram]) -> None:
    for clock, h in hists.items():
        if not h.get_total_count():
            continue   # also: hdrh's add() of an empty histogram resets min to 0
        dest = into.get(clock)
        if dest is None:
            dest = into[clock] = new_histogram()
        dest.add(h)


def round_window_ns(start_ns: int, end_ns: int, previous_end_ns: int | None) -> int:
    """A round's length on one clock (the producers' and the consumers'): from the
    previous round's end (or, for the first round, its earliest report's start
    ``start_ns``) to its latest report's end ``end_ns``. A round whose reports all ended
    before the previous round's end (a lagging member's reports only) is measured over
    its own reports instead."""
    if previous_end_ns is not None and end_ns > previous_end_ns:
        return end_ns - previous_end_ns
    return max(0, end_ns - start_ns)


def closable_round(rounds: Mapping[int, object], closed_upto: int, next_round: Mapping[int, int],
                   done: Container[int], members: int, max_lag_rounds: int) -> int | None:
    """The next round to close (``closed_upto + 1``) when every member (worker or
    consumer) has reported into it or finished, or some member is ``max_lag_rounds``
    ahead of it; else None. ``next_round``: each member's next round."""
    r = closed_upto + 1
    if r not in rounds:
        return None
    ready = sum(1 for m, nxt in next_round.items() if m in done or nxt > r)
    ahead = max(next_round.values(), default=0) - 1
    if ready < members and ahead < r + max_lag_rounds:
        return None
    return r


@dataclass(frozen=True, slots=True)
class _ClosedRound:
    index: int
    warmup: bool
    length_s: float
    rate: float
    mb_per_s: float
    wire_mb_per_s: float
    acked: int
    latency: dict[str, LatencyFigures]
    records_per_batch: float
    batch_fill: float
    queue_time_ms: float
    throttle_time_ms: int
    throttled_requests: int
    retries: int
    splits: int
    last: bool = False      # the run's last round (every worker done, or the run ended)


class RunStats:
    """Merges worker reports; answers ``snapshot()`` for the UI and ``summary()`` for JSON.

    ``workers``: how many workers report. ``target_rate``: records/s over all workers
    (None or 0: max-throughput mode). ``config``: the run's full configuration, copied
    into the summary. ``duration_s`` / ``num_records``: the planned run, for the progress
    fraction (wall time since ``start_wall_ns``; records scheduled, warm-up included).
    ``hlog``: an ``IntervalLogWriter`` that gets one line per clock per measured round.
    ``window_s``: the schedule's window (load/schedule.py ``window_ns``) of a paced run;
    the measured span ends there, so a rate is records over the schedule's window (not
    over a low rate's last gap), unless batches were still completing after it: then it
    ends at the last completion, so a cluster that fell behind shows the rate it
    sustained, as perf-test's does (its elapsed time includes the final flush).
    """

    def __init__(self, *, workers: int, start_wall_ns: int, target_rate: float | None = None,
                 config: Mapping[str, Any] | None = None, run_id: str | None = None,
                 duration_s: float | None = None, num_records: int | None = None,
                 hlog: IntervalLogWriter | None = None, clocks: Sequence[str] = CLOCKS,
                 max_lag_rounds: int = 2, workers_reason: str = "",
                 window_s: float | None = None, transactional: bool = False) -> None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self.workers = workers
        self.workers_reason = workers_reason
        self.start_wall_ns = start_wall_ns
        self.target_rate = float(target_rate) if target_rate else None
        self.config = dict(config or {})
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.duration_s = duration_s
        self.window_s = window_s
        self.interrupted = False   # Ctrl-C stopped the run (LoadRun says so)
        self.stopped_in: str | None = None   # where: "set-up" (before the start), else the run
        self.transactional = transactional
        self._had_warmup = False
        self._commit_latency = new_histogram()   # every commit of the run (warm-up too)
        self.num_records = num_records
        self.hlog = hlog
        self.clocks = tuple(clocks)
        self.max_lag_rounds = max(1, max_lag_rounds)
        # The live view reads snapshots from its refresh thread while reports arrive on
        # the main thread: every public method holds this lock.
        self._lock = threading.RLock()

        self._last_metrics: dict[int, MetricsSnapshot] = {}
        self._results = zero_metrics()          # non-warm-up deltas, all workers
        self._warmup = zero_metrics()           # warm-up deltas, all workers
        self._cumulative: dict[str, HdrHistogram] = {}   # non-warm-up histograms
        self._cum_figures: dict[str, LatencyFigures] | None = None
        self._measured_start_ns = 1 << 62
        self._moved_so_far: dict[int, MetricsSnapshot] = {}   # worker -> its net moved records
        self._first_measured_done_ns = 0                       # the first measured ack, any worker
        self._measured_end_ns = 0
        self._last_done_ns = 0          # the latest batch completion any worker reported
        self._last_end_ns = start_wall_ns
        self._in_flight: dict[int, dict[int, int]] = {}
        self._buffer: dict[int, tuple[int, int]] = {}
        self._scheduled: dict[int, int] = {}    # latest cumulative figures per worker
        self._abandoned: dict[int, int] = {}
        self._abandoned_by_reason: dict[int, dict[str, int]] = {}
        self._next_round: dict[int, int] = {}   # worker -> round its next report belongs to
        self._done: set[int] = set()
        self._failed: dict[int, str] = {}
        self._rounds: dict[int, _Round] = {}
        self._closed_upto = -1
        self._warmup_rounds = 0
        self._measured_rounds = 0
        self._last: _ClosedRound | None = None
        self._last_round_end_ns: int | None = None   # where the next round's window starts

    @property
    def open_loop(self) -> bool:
        return self.target_rate is not None

    # -- input -------------------------------------------------------------------------------------
    def add(self, msg: WorkerInterval | WorkerFailed,
            on_round: Callable[[RunStats, int], None] | None = None) -> int:
        """Takes one worker message; returns how many rounds it closed. ``on_round`` is
        called after each round it closes (a plain line per round: one message can close
        several, e.g. a stopped worker's final report)."""
        with self._lock:
            return self._add_unlocked(msg, on_round)

    def _add_unlocked(self, msg: WorkerInterval | WorkerFailed,
                      on_round: Callable[[RunStats, int], None] | None = None) -> int:
        if isinstance(msg, WorkerFailed):
            self._failed[msg.worker] = msg.error
            self._done.add(msg.worker)
            self._next_round.setdefault(msg.worker, self._closed_upto + 1)
            return self._close_ready(on_round)
        w = msg.worker
        prev = self._last_metrics.get(w)
        delta = msg.metrics if prev is None else metrics_delta(msg.metrics, prev)
        self._last_metrics[w] = msg.metrics
        hists = {c: decode_histogram(b) for c, b in msg.histograms.items() if c in self.clocks}
        # Records count by when they were scheduled, not by when they were acknowledged:
        # the warm-up's backlog acknowledged in a measured interval goes to the warm-up,
        # measured records acknowledged in a warm-up interval to the results (worker.py).
        moved = self._moved(msg)
        if msg.warmup:
            self._had_warmup = True
            delta = metrics_delta(delta, moved)
            self._warmup = metrics_sum(self._warmup, delta)
            self._results = metrics_sum(self._results, moved)
        else:
            self._warmup = metrics_delta(self._warmup, moved)
            delta = metrics_sum(delta, moved)
            self._results = metrics_sum(self._results, delta)
            _add_hists(self._cumulative, hists)
            self._cum_figures = None
            self._measured_start_ns = min(self._measured_start_ns, msg.start_wall_ns)
            self._measured_end_ns = max(self._measured_end_ns, msg.end_wall_ns)
            self._last_done_ns = max(self._last_done_ns, msg.last_done_wall_ns)
        if msg.first_measured_done_wall_ns:
            self._first_measured_done_ns = min(self._first_measured_done_ns or msg.first_measured_done_wall_ns,
                                               msg.first_measured_done_wall_ns)
        self._last_end_ns = max(self._last_end_ns, msg.end_wall_ns)
        self._in_flight[w] = dict(msg.in_flight_by_node)
        self._buffer[w] = (msg.buffer_available, msg.buffer_total)
        self._scheduled[w] = msg.records_scheduled
        if msg.commit_latency is not None:
            self._commit_latency.add(decode_histogram(msg.commit_latency))
        self._abandoned[w] = msg.abandoned
        self._abandoned_by_reason[w] = msg.abandoned_by_reason

        r = max(self._next_round.get(w, 0), self._closed_upto + 1)
        self._next_round[w] = r + 1
        rnd = self._rounds.get(r)
        if rnd is None:
            rnd = self._rounds[r] = _Round(r)
        rnd.add(msg, hists, delta)
        if msg.final:
            self._done.add(w)
            self._in_flight[w] = {}
        return self._close_ready(on_round)

    def _moved(self, msg: WorkerInterval) -> MetricsSnapshot:
        """The records (value bytes, per partition and per broker) this report moves into
        the results: measured records acknowledged early less warm-up records acknowledged
        late, since the worker's previous report."""
        zero = zero_metrics()
        early = dataclasses.replace(zero, records_acked=msg.measured_acked_early,
                                    value_bytes_acked=msg.measured_bytes_early,
                                    records_by_partition=msg.measured_early_by_partition,
                                    records_by_node=msg.measured_early_by_node)
        late = dataclasses.replace(zero, records_acked=msg.warmup_acked_late,
                                   value_bytes_acked=msg.warmup_bytes_late,
                                   records_by_partition=msg.warmup_late_by_partition,
                                   records_by_node=msg.warmup_late_by_node)
        now = metrics_delta(early, late)
        prev = self._moved_so_far.get(msg.worker, zero)
        self._moved_so_far[msg.worker] = now
        return metrics_delta(now, prev)

    def finish(self, on_round: Callable[[RunStats, int], None] | None = None) -> int:
        """Closes every open round (end of run); returns how many it closed. ``on_round``
        is called after each (a plain line per round: a stopped run's rounds whose workers
        never made a final report)."""
        with self._lock:
            return self._finish_unlocked(on_round)

    def _finish_unlocked(self, on_round: Callable[[RunStats, int], None] | None = None) -> int:
        n = 0
        while self._rounds:
            self._close(min(self._rounds), ending=True)
            n += 1
            if on_round is not None:
                on_round(self, 1)
        if self.hlog is not None:
            self.hlog.flush()
        return n

    def _close_ready(self, on_round: Callable[[RunStats, int], None] | None = None) -> int:
        n = 0
        while (r := closable_round(self._rounds, self._closed_upto, self._next_round, self._done,
                                   self.workers, self.max_lag_rounds)) is not None:
            self._close(r)
            n += 1
            if on_round is not None:
                on_round(self, 1)
        return n

    def _close(self, r: int, *, ending: bool = False) -> None:
        rnd = self._rounds.pop(r)
        last = not self._rounds and (ending or len(self._done) >= self.workers)
        self._closed_upto = max(self._closed_upto, r)
        warmup = rnd.measured_reports == 0
        if warmup:
            self._warmup_rounds += 1
        else:
            self._measured_rounds += 1
            if self.hlog is not None:
                for clock in self._logged_clocks():
                    self.hlog.output(clock, rnd.m_start_ns, rnd.m_end_ns,
                                     rnd.measured.get(clock) or new_histogram())
        d = rnd.delta
        length_s = round_window_ns(rnd.start_ns, rnd.end_ns, self._last_round_end_ns) / 1e9
        self._last_round_end_ns = max(self._last_round_end_ns or 0, rnd.end_ns)
        first = _first_sent_batches(d)
        self._last = _ClosedRound(
            index=r, warmup=warmup, length_s=length_s,
            rate=_ratio(d.records_acked, length_s),
            mb_per_s=_ratio(d.value_bytes_acked, length_s) / MB,
            wire_mb_per_s=_ratio(d.bytes_sent, length_s) / MB, acked=d.records_acked,
            latency=self._figures(rnd.hists),
            records_per_batch=_ratio(d.records_acked, d.batches_acked),
            batch_fill=_ratio(d.batch_fill_total, first),
            queue_time_ms=_ratio(d.queue_time_ns_total, first) / 1e6,
            throttle_time_ms=d.throttle_time_ms, throttled_requests=d.throttled_requests,
            retries=d.retries, splits=d.splits, last=last)

    def _logged_clocks(self) -> tuple[str, ...]:
        # Max-throughput mode records nothing on the intended clock: leave its tag out
        # rather than log the send clock under its name.
        return self.clocks if self.open_loop else tuple(c for c in self.clocks if c != "intended")

    def _figures(self, hists: Mapping[str, HdrHistogram]) -> dict[str, LatencyFigures]:
        out = {c: LatencyFigures.from_histogram(hists.get(c)) for c in self.clocks}
        if not self.open_loop and "intended" in out and "send" in out:
            out["intended"] = out["send"]
        return out

    def _cumulative_figures(self) -> dict[str, LatencyFigures]:
        if self._cum_figures is None:
            self._cum_figures = self._figures(self._cumulative)
        return self._cum_figures

    # -- output ------------------------------------------------------------------------------------
    def _measured_span_s(self) -> float:
        start, end = self._measured_start_ns, self._measured_end_ns
        if self.open_loop and self.window_s is not None and end > start:
            # The schedule's window: from the run's start (or the warm-up's end) to its end,
            # or on to the last completion when the cluster fell behind and the records
            # scheduled in the window were still being acknowledged after it.
            schedule_end = self.start_wall_ns + int(self.window_s * 1e9)
            if not self._had_warmup:
                start = min(start, self.start_wall_ns)
            first_done = self._first_measured_done_ns
            if first_done:
                # The records counted are those scheduled in the window (worker.split_warmup),
                # acknowledged from the first one's ack to the last one's: the span is the
                # window, or that stretch when it is longer (the cluster fell behind). A
                # constant latency so shifts both ends (to the last ack from the window's
                # start understated a 40/s step with 200 ms acks by 10%).
                window = min(end, schedule_end) - start
                return max(0, window, self._last_done_ns - first_done) / 1e9
            end = min(end, max(schedule_end, self._last_done_ns))
        return max(0, end - start) / 1e9

    def snapshot(self, now_wall_ns: int) -> DashboardState:
        with self._lock:
            return self._snapshot_unlocked(now_wall_ns)

    def _snapshot_unlocked(self, now_wall_ns: int) -> DashboardState:
        """The live view's state at ``now_wall_ns`` (last closed round + totals)."""
        res, wu = self._results, self._warmup
        total = metrics_sum(res, wu)
        last = self._last
        span = self._measured_span_s()
        elapsed = max(0, now_wall_ns - self.start_wall_ns) / 1e9
        in_flight: dict[int, int] = {}
        for per in self._in_flight.values():
            for node, n in per.items():
                in_flight[node] = in_flight.get(node, 0) + n
        avail = sum(a for a, _ in self._buffer.values())
        buf_total = sum(t for _, t in self._buffer.values())
        progress = None
        if self.duration_s:
            progress = elapsed / self.duration_s
        if self.num_records:
            p = max(total.records_sent, sum(self._scheduled.values())) / self.num_records
            progress = p if progress is None else max(progress, p)
        if progress is not None:
            progress = min(1.0, max(0.0, progress))
        empty = {c: EMPTY_FIGURES for c in self.clocks}
        return DashboardState(
            elapsed_s=elapsed,
            warmup=last.warmup if last else False,
            intervals=self._warmup_rounds + self._measured_rounds,
            interval_s=last.length_s if last else 0.0,
            target_rate=self.target_rate,
            interval_rate=last.rate if last else 0.0,
            interval_mb_per_s=last.mb_per_s if last else 0.0,
            interval_wire_mb_per_s=last.wire_mb_per_s if last else 0.0,
            cumulative_rate=_ratio(res.records_acked, span),
            cumulative_mb_per_s=_ratio(res.value_bytes_acked, span) / MB,
            cumulative_wire_mb_per_s=_ratio(res.bytes_sent, span) / MB,
            interval_acked=last.acked if last else 0,
            records_sent=res.records_sent, records_acked=res.records_acked,
            records_failed=res.records_failed,
            interval_latency=dict(last.latency) if last else empty,
            cumulative_latency=dict(self._cumulative_figures()),
            intended_from_send=not self.open_loop,
            records_per_batch=last.records_per_batch if last else 0.0,
            batch_fill=last.batch_fill if last else 0.0,
            queue_time_ms=last.queue_time_ms if last else 0.0,
            in_flight_by_node=dict(sorted(in_flight.items())),
            records_by_node=dict(sorted(res.records_by_node.items())),
            throttle_time_ms=last.throttle_time_ms if last else 0,
            throttled_requests=last.throttled_requests if last else 0,
            retries=last.retries if last else 0,
            errors_by_name=dict(sorted(total.errors_by_name.items())),
            failed_by_error=dict(sorted(total.failed_by_error.items())),
            buffer_used=max(0, buf_total - avail), buffer_total=buf_total,
            progress=progress,
            workers=self.workers,
            workers_reason=self.workers_reason,
            workers_running=max(0, self.workers - len(self._done)),
            workers_failed=tuple(sorted(self._failed.items())),
            transactional=self.transactional,
            transactions_committed=total.transactions_committed,
            transactions_aborted=total.transactions_aborted,
            commit_latency=(LatencyFigures.from_histogram(self._commit_latency)
                            if self.transactional else EMPTY_FIGURES),
            splits=last.splits if last else 0,
            last_round=last.last if last else False,
            interrupted=self.interrupted,
        )

    def cumulative_histograms(self) -> dict[str, HdrHistogram]:
        with self._lock:
            return self._cumulative_histograms_unlocked()

    def _cumulative_histograms_unlocked(self) -> dict[str, HdrHistogram]:
        """The results' merged histograms by clock (warm-up excluded); do not modify."""
        return {c: self._cumulative.get(c) or new_histogram() for c in self.clocks}

    def summary(self, end_wall_ns: int | None = None) -> RunSummary:
        with self._lock:
            return self._summary_unlocked(end_wall_ns)

    def _summary_unlocked(self, end_wall_ns: int | None = None) -> RunSummary:
        """The run's summary (docs/produce-summary.md). Closes any open round first."""
        self.finish()
        res, wu = self._results, self._warmup
        end_ns = end_wall_ns if end_wall_ns is not None else self._last_end_ns
        span = self._measured_span_s()
        first = _first_sent_batches(res)
        lat = self._cumulative_figures()
        run = RunInfo(
            id=self.run_id, start=_iso(self.start_wall_ns), end=_iso(end_ns),
            start_unix_ms=self.start_wall_ns // 1_000_000, end_unix_ms=end_ns // 1_000_000,
            duration_s=round(max(0, end_ns - self.start_wall_ns) / 1e9, 6),
            measured_s=round(span, 6), workers=self.workers, workers_reason=self.workers_reason,
            workers_failed=tuple(WorkerFailure(w, e) for w, e in sorted(self._failed.items())),
            intervals=self._measured_rounds, max_throughput=not self.open_loop,
            warmup=WarmupTotals(self._warmup_rounds, wu.records_sent, wu.records_acked,
                                wu.records_failed, wu.bytes_sent),
            interrupted=self.interrupted,
            stopped_in=(self.stopped_in or "run") if self.interrupted else None)
        total = metrics_sum(res, wu)
        return RunSummary(
            run=run,
            config=_jsonable(self.config),
            counts=Counts(
                sent=res.records_sent, acked=res.records_acked, failed=res.records_failed,
                failed_by_error=dict(sorted(res.failed_by_error.items())),
                abandoned=sum(self._abandoned.values()), scheduled=sum(self._scheduled.values()),
                abandoned_by_reason=_summed(self._abandoned_by_reason.values()),
                bytes_sent=res.bytes_sent, value_bytes=res.value_bytes_acked,
                batches_sent=res.batches_sent, batches_acked=res.batches_acked,
                requests_sent=res.requests_sent, responses_received=res.responses_received,
                reauthentications=total.reauthentications),
            rates=Rates(
                records_per_s=round(_ratio(res.records_acked, span), 3),
                mb_per_s=round(_ratio(res.value_bytes_acked, span) / MB, 6),
                wire_mb_per_s=round(_ratio(res.bytes_sent, span) / MB, 6),
                target_records_per_s=self.target_rate),
            latency={c: lat[c] for c in self.clocks},
            batching=Batching(
                records_per_batch=round(_ratio(res.records_acked, res.batches_acked), 3),
                batch_fill=round(_ratio(res.batch_fill_total, first), 6),
                queue_time_ms_mean=round(_ratio(res.queue_time_ns_total, first) / 1e6, 6),
                splits=res.splits,
                compression_rate_avg=round(_ratio(res.compression_rate_total,
                                                  res.compression_rate_batches), 6)
                if res.compression_rate_batches else None),
            throttle=Throttle(res.throttle_time_ms, res.throttled_requests),
            retries=res.retries,
            errors_by_name=dict(sorted(res.errors_by_name.items())),
            partitions=tuple(PartitionCount(t, p, n)
                             for (t, p), n in sorted(res.records_by_partition.items())),
            brokers=tuple(BrokerCount(node, n) for node, n in sorted(res.records_by_node.items())),
            transactions=TransactionTotals(
                total.transactions_committed, total.transactions_aborted,
                LatencyFigures.from_histogram(self._commit_latency)) if self.transactional else None)


def _iso(wall_ns: int) -> str:
    return datetime.fromtimestamp(wall_ns / 1e9, UTC).isoformat(timespec="milliseconds")


def _jsonable(v: Any) -> Any:
    """The config as JSON values: mappings, lists and scalars kept; enums by value;
    anything else (paths, objects) as its string."""
    if v is None or isinstance(v, bool | int | float | str):
        return v
    if isinstance(v, enum.Enum):
        return _jsonable(v.value)
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple | set | frozenset):
        return [_jsonable(x) for x in v]
    if isinstance(v, PurePath):
        return str(v)
    if hasattr(v, "__dataclass_fields__"):
        return {f: _jsonable(getattr(v, f)) for f in v.__dataclass_fields__}
    return str(v)
