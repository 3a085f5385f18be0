"""The parent's merge of consumer reports: the live view's state, the summary, e2e in
the interval log (the consume side's ``RunStats``).

How this works
--------------
Each consumer process sends a ``ConsumerInterval`` per interval (stats/consume_report.py).
``ConsumeStats.add`` diffs the consumer's cumulative counters against its previous
report (results, or warm-up totals for a warm-up report), adds the interval's e2e
histograms to the cumulative ones (never averaging percentiles), keeps each consumer's
partitions (positions, end offsets, targets), and files the report under a round (the
k-th report of every consumer); a round closes when every live consumer has reported
it, or when one is two rounds ahead. Closing a round fixes the "last interval" figures,
appends a point to the lag timeline and writes the ``e2e`` (and ``e2e_negative``) line
of the .hlog.

Definitions (docs/consume-summary.md): records/s = records handed out (warm-up
excluded) / the measured span, and for one round its records / its window on one
clock (``round_window_ns``, as the producers'); MB/s = their keys and values in MiB/s
(kafka-consumer-perf-test's MB.sec); wire MB/s = record batch bytes fetched; fetch
requests/s; records per fetch = records / Fetch answers; lag = end offset - position
per partition (clamped at 0: a broker whose high watermark trails its log, as Tansu's
does, would otherwise show negative lag); e2e: stats/e2e.py.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from hdrh.histogram import HdrHistogram

from kctl.engine.consumer_metrics import ConsumerMetricsSnapshot
from kctl.stats.aggregate import closable_round, combine_counters, round_window_ns
from kctl.stats.consume_report import ClockOffset, ConsumerFailed, ConsumerInterval, PartitionProgress
from kctl.stats.consume_summary import (
    ConsumeCounts, ConsumeRates, ConsumeRunInfo, ConsumeSummary, FailedCommit, LagPoint, PartitionState)
from kctl.stats.e2e import E2E, E2E_NEGATIVE, merged, new_e2e_histogram, signed_figures
from kctl.stats.hlog import IntervalLogWriter
from kctl.stats.latency import LatencyFigures, decode_histogram

__all__ = ["ConsumeDashboard", "ConsumeStats"]

MB = 1024 * 1024
_ZERO = ConsumerMetricsSnapshot()


@dataclass(frozen=True, slots=True)
class ConsumeDashboard:
    """What the live view shows of the consume side (plain data)."""

    elapsed_s: float
    warmup: bool
    interval_s: float
    interval_records: int
    interval_rate: float
    interval_mb_per_s: float
    interval_fetch_per_s: float             # Fetch responses/s (the summary's rate counts requests)
    interval_records_per_fetch: float       # records per Fetch response
    cumulative_rate: float
    records: int
    matched: int
    interval_e2e: LatencyFigures
    cumulative_e2e: LatencyFigures
    lag_total: int
    lag_by_partition: dict[str, int]
    consumers: int
    consumers_running: int
    consumers_failed: tuple[tuple[int, str], ...]
    rebalances: int
    clock: ClockOffset | None


class _Round:
    __slots__ = ("reports", "start_ns", "end_ns", "hists", "measured", "delta", "warmup_only")

    def __init__(self) -> None:
        self.reports = 0
        self.start_ns = 1 << 62
        self.end_ns = 0
        self.hists: dict[str, HdrHistogram] = {}
        self.measured: dict[str, HdrHistogram] = {}
        self.delta: list[int] = [0, 0, 0]   # records, key+value bytes, fetch responses
        self.warmup_only = True


class ConsumeStats:
    def __init__(self, *, consumers: int, start_wall_ns: int, run_id: str | None = None,
                 config: Mapping[str, Any] | None = None, mode: str = "assign",
                 hlog: IntervalLogWriter | None = None, max_lag_rounds: int = 2) -> None:
        self.consumers = consumers
        self.start_wall_ns = start_wall_ns
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.config = dict(config or {})
        self.mode = mode
        self.hlog = hlog
        self.max_lag_rounds = max_lag_rounds
        self.interrupted = False   # Ctrl-C (or SIGTERM) stopped the run (ConsumeRun says so)
        self.stopped_in: str | None = None   # where: "set-up" (before the start), else the run
        self._lock = threading.RLock()
        self._last: dict[int, ConsumerMetricsSnapshot] = {}
        self._results = _ZERO
        self._warmup = _ZERO
        self._cumulative: dict[str, HdrHistogram] = {}
        self._measured_start = 1 << 62
        self._measured_end = 0
        self._last_end = start_wall_ns
        self._partitions: dict[int, tuple[PartitionProgress, ...]] = {}
        self._matched: dict[int, int] = {}
        self._unidentified: dict[int, int] = {}
        self._foreign: dict[int, int] = {}
        self._caught_up: dict[int, int] = {}          # consumer -> when it caught up (wall ns)
        self._first_record: dict[int, int] = {}
        self._next_round: dict[int, int] = {}
        self._rounds: dict[int, _Round] = {}
        self._closed_upto = -1
        self._done: set[int] = set()
        self._failed: dict[int, str] = {}
        self._failed_commits: dict[tuple[int, str], FailedCommit] = {}   # (consumer, when) -> latest
        self._intervals = 0
        self._timeline: list[LagPoint] = []
        self._lag_max = 0
        self._last_round: tuple | None = None
        self._last_round_end_ns: int | None = None   # where the next round's window starts
        self.clock: ClockOffset | None = None

    # -- input -----------------------------------------------------------------------------------
    def add(self, msg: ConsumerInterval | ConsumerFailed) -> int:
        with self._lock:
            if isinstance(msg, ConsumerFailed):
                self._failed[msg.consumer] = msg.error
                self._done.add(msg.consumer)
                self._next_round.setdefault(msg.consumer, self._closed_upto + 1)
                return self._close_ready()
            c = msg.consumer
            prev = self._last.get(c)
            delta = msg.metrics if prev is None else combine_counters(msg.metrics, prev, -1)
            self._last[c] = msg.metrics
            hists = {k: decode_histogram(v) for k, v in msg.histograms.items() if k in (E2E, E2E_NEGATIVE)}
            if msg.warmup:
                self._warmup = combine_counters(self._warmup, delta, 1)
            else:
                self._results = combine_counters(self._results, delta, 1)
                merged(self._cumulative, hists)
                self._measured_start = min(self._measured_start, msg.start_wall_ns)
                self._measured_end = max(self._measured_end, msg.end_wall_ns)
            self._last_end = max(self._last_end, msg.end_wall_ns)
            self._partitions[c] = msg.partitions
            self._matched[c] = msg.matched
            self._unidentified[c] = msg.unidentified
            self._foreign[c] = msg.foreign
            if msg.caught_up_wall_ns:
                self._caught_up.setdefault(c, msg.caught_up_wall_ns)
            if msg.first_record_wall_ns:
                self._first_record.setdefault(c, msg.first_record_wall_ns)
            if msg.rebalance_commit_failures:
                self._failed_commits[c, "rebalance"] = FailedCommit(
                    c, "rebalance", msg.rebalance_commit_failures, msg.rebalance_commit_error)
            if msg.close_commit_error:
                self._failed_commits[c, "close"] = FailedCommit(c, "close", 1, msg.close_commit_error)
            r = max(self._next_round.get(c, 0), self._closed_upto + 1)
            self._next_round[c] = r + 1
            rnd = self._rounds.setdefault(r, _Round())
            rnd.reports += 1
            rnd.start_ns = min(rnd.start_ns, msg.start_wall_ns)
            rnd.end_ns = max(rnd.end_ns, msg.end_wall_ns)
            merged(rnd.hists, hists)
            if not msg.warmup:
                rnd.warmup_only = False
                merged(rnd.measured, hists)
            rnd.delta[0] += delta.records_consumed
            rnd.delta[1] += delta.key_value_bytes
            rnd.delta[2] += delta.fetch_responses
            if msg.final:
                self._done.add(c)
            return self._close_ready()

    def finish(self) -> None:
        with self._lock:
            while self._rounds:
                self._close(min(self._rounds))

    def _close_ready(self) -> int:
        n = 0
        while (r := closable_round(self._rounds, self._closed_upto, self._next_round, self._done,
                                   self.consumers, self.max_lag_rounds)) is not None:
            self._close(r)
            n += 1
        return n

    def _close(self, r: int) -> None:
        rnd = self._rounds.pop(r)
        self._closed_upto = max(self._closed_upto, r)
        self._intervals += 1
        if not rnd.warmup_only and self.hlog is not None:
            # The histograms the figures come from, as they are (µs, as the other clocks').
            pos = rnd.measured.get(E2E)
            neg = rnd.measured.get(E2E_NEGATIVE)
            self.hlog.output(E2E, rnd.start_ns, rnd.end_ns, pos if pos is not None else new_e2e_histogram())
            if neg is not None:
                self.hlog.output(E2E_NEGATIVE, rnd.start_ns, rnd.end_ns, neg)
        # The round's records over its length on one clock, as the producers' (stats/aggregate.py).
        records, kv, responses = rnd.delta
        length_s = round_window_ns(rnd.start_ns, rnd.end_ns, self._last_round_end_ns) / 1e9
        self._last_round_end_ns = max(self._last_round_end_ns or 0, rnd.end_ns)
        rate = records / length_s if length_s else 0.0
        mbps = kv / length_s / MB if length_s else 0.0
        fetch = responses / length_s if length_s else 0.0
        lag, per = self._lag()
        self._lag_max = max(self._lag_max, lag)
        self._timeline.append(LagPoint(round(max(0, rnd.end_ns - self.start_wall_ns) / 1e9, 3), lag, per))
        self._last_round = (rnd.warmup_only, length_s, rate, mbps, fetch,
                            records / responses if responses else 0.0,
                            signed_figures(rnd.hists.get(E2E), rnd.hists.get(E2E_NEGATIVE)), records)

    def _lag(self) -> tuple[int, dict[str, int]]:
        per: dict[str, int] = {}
        for parts in self._partitions.values():
            for p in parts:
                lag = p.lag
                if lag is not None:
                    per[f"{p.topic}-{p.partition}"] = lag
        return sum(per.values()), dict(sorted(per.items()))

    # -- questions -------------------------------------------------------------------------------
    @property
    def matched(self) -> int:
        with self._lock:
            return sum(self._matched.values())

    def all_caught_up(self) -> bool:
        with self._lock:
            live = [c for c in range(self.consumers) if c not in self._failed]
            return bool(live) and all(c in self._caught_up for c in live)

    def caught_up_at(self) -> int | None:
        """When the last consumer caught up (wall ns), if all did."""
        with self._lock:
            if not self.all_caught_up():
                return None
            return max(self._caught_up.values())

    def first_record_at(self) -> int | None:
        with self._lock:
            return min(self._first_record.values()) if self._first_record else None

    @property
    def measured_start_wall_ns(self) -> int | None:
        """Where the measured window starts (the earliest report after the warm-up), if any."""
        with self._lock:
            return self._measured_start if self._measured_start < 1 << 62 else None

    def e2e_histograms(self) -> dict[str, HdrHistogram]:
        with self._lock:
            return dict(self._cumulative)

    def e2e_figures(self) -> LatencyFigures:
        with self._lock:
            return signed_figures(self._cumulative.get(E2E), self._cumulative.get(E2E_NEGATIVE))

    def snapshot(self, now_wall_ns: int) -> ConsumeDashboard:
        with self._lock:
            res = self._results
            span = max(0, self._measured_end - self._measured_start) / 1e9
            last = self._last_round
            lag, per = self._lag()
            empty = signed_figures(None, None)
            return ConsumeDashboard(
                elapsed_s=max(0, now_wall_ns - self.start_wall_ns) / 1e9,
                warmup=last[0] if last else False, interval_s=last[1] if last else 0.0,
                interval_records=last[7] if last else 0,
                interval_rate=last[2] if last else 0.0, interval_mb_per_s=last[3] if last else 0.0,
                interval_fetch_per_s=last[4] if last else 0.0,
                interval_records_per_fetch=last[5] if last else 0.0,
                cumulative_rate=res.records_consumed / span if span else 0.0,
                records=res.records_consumed, matched=sum(self._matched.values()),
                interval_e2e=last[6] if last else empty,
                cumulative_e2e=signed_figures(self._cumulative.get(E2E), self._cumulative.get(E2E_NEGATIVE)),
                lag_total=lag, lag_by_partition=per, consumers=self.consumers,
                consumers_running=max(0, self.consumers - len(self._done)),
                consumers_failed=tuple(sorted(self._failed.items())),
                rebalances=combine_counters(res, self._warmup, 1).rebalances, clock=self.clock)

    # -- the summary -----------------------------------------------------------------------------
    def summary(self, end_wall_ns: int | None = None) -> ConsumeSummary:
        with self._lock:
            self.finish()
            res, total = self._results, combine_counters(self._results, self._warmup, 1)
            end = end_wall_ns if end_wall_ns is not None else self._last_end
            span = max(0, self._measured_end - self._measured_start) / 1e9
            lag, _ = self._lag()
            records_by_tp = total.records_by_partition
            parts = []
            for plist in self._partitions.values():
                for p in plist:
                    parts.append(PartitionState(p.topic, p.partition, records_by_tp.get((p.topic, p.partition), 0),
                                                p.position, p.end_offset, p.lag))
            run = ConsumeRunInfo(
                id=self.run_id, start=_iso(self.start_wall_ns), end=_iso(end),
                start_unix_ms=self.start_wall_ns // 1_000_000, end_unix_ms=end // 1_000_000,
                duration_s=round(max(0, end - self.start_wall_ns) / 1e9, 6), measured_s=round(span, 6),
                consumers=self.consumers, consumers_failed=tuple(sorted(self._failed.items())),
                mode=self.mode, intervals=self._intervals, caught_up=self.all_caught_up(),
                interrupted=self.interrupted,
                stopped_in=(self.stopped_in or "run") if self.interrupted else None)
            return ConsumeSummary(
                run=run, config=dict(self.config),
                counts=ConsumeCounts(
                    records=res.records_consumed, key_value_bytes=res.key_value_bytes,
                    batch_bytes=res.batch_bytes, batches=res.batches_consumed,
                    fetch_requests=res.fetch_requests, fetch_responses=res.fetch_responses,
                    matched=sum(self._matched.values()), unidentified=sum(self._unidentified.values()),
                    foreign=sum(self._foreign.values()), aborted_records_skipped=total.aborted_records_skipped,
                    control_batches=total.control_batches, records_decoded=total.records_decoded,
                    rebalances=total.rebalances, commits=total.commits, commit_failures=total.commit_failures,
                    offset_resets=total.offset_resets, throttle_time_ms=total.throttle_time_ms,
                    reauthentications=total.reauthentications),
                rates=ConsumeRates(
                    records_per_s=round(res.records_consumed / span, 3) if span else 0.0,
                    mb_per_s=round(res.key_value_bytes / span / MB, 6) if span else 0.0,
                    wire_mb_per_s=round(res.batch_bytes / span / MB, 6) if span else 0.0,
                    fetch_requests_per_s=round(res.fetch_requests / span, 3) if span else 0.0,
                    records_per_fetch=round(res.records_consumed / res.fetch_responses, 3)
                    if res.fetch_responses else 0.0),
                latency={E2E: signed_figures(self._cumulative.get(E2E), self._cumulative.get(E2E_NEGATIVE))},
                lag_final=lag, lag_max=max(self._lag_max, lag), lag_timeline=tuple(self._timeline),
                partitions=tuple(sorted(parts, key=lambda p: (p.topic, p.partition))),
                errors_by_name=dict(sorted(total.errors_by_name.items())), clock=self.clock,
                failed_commits=tuple(self._failed_commits[k] for k in sorted(
                    self._failed_commits, key=lambda k: (k[0], k[1] != "rebalance"))))


def _iso(wall_ns: int) -> str:
    return datetime.fromtimestamp(wall_ns / 1e9, UTC).isoformat(timespec="milliseconds")
