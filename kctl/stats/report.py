"""What a load worker sends the parent: one ``WorkerInterval`` per interval, or a
``WorkerFailed`` when it dies. Both pickle (they cross a multiprocessing queue).

Histograms are this interval's only (the worker resets its recorder each time);
``metrics`` is the engine's CUMULATIVE counter snapshot, which the parent diffs per
worker. Cumulative counters make a lost or merged report harmless for the totals.
The k-th report of every worker is taken to cover the same interval of the run, so
workers should report on a common cadence from a common start.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kctl.engine.metrics import MetricsSnapshot

__all__ = ["WorkerFailed", "WorkerInterval", "WorkerReady"]


@dataclass(frozen=True, slots=True)
class WorkerInterval:
    worker: int
    start_wall_ns: int            # interval start, wall clock (time.time_ns())
    end_wall_ns: int
    histograms: dict[str, bytes]  # clock -> encode_histogram(...), this interval only
    metrics: MetricsSnapshot      # the engine's cumulative counters at end_wall_ns
    in_flight_by_node: dict[int, int] = field(default_factory=dict)  # requests in flight now
    buffer_available: int = 0     # BufferPool bytes free now
    buffer_total: int = 0         # buffer.memory
    warmup: bool = False          # still warming up: shown live, not counted in results
    # the worker's last report (it has flushed and stopped); a failing worker's last report
    # is not final (its counts are complete): its WorkerFailed follows it
    final: bool = False
    # cumulative: records the schedule has handed out (warm-up too); in the final report
    # of a stopped paced worker, also those due by the stop but never handed over
    records_scheduled: int = 0
    abandoned: int = 0            # cumulative: records without a verdict when the worker gave up
    #: cumulative: ``abandoned`` by reason: the engine's (no verdict within the stop grace)
    #: and the worker's (due by the stop, never handed to the producer)
    abandoned_by_reason: dict[str, int] = field(default_factory=dict)
    commit_latency: bytes | None = None   # this interval's transaction commits (µs histogram)
    last_done_wall_ns: int = 0    # cumulative: when the worker's latest batch was acked or failed
    first_measured_done_wall_ns: int = 0   # when its first measured record was acked (0: not yet)
    # cumulative: records scheduled in the warm-up acknowledged in measured intervals, and
    # measured records (scheduled after it) acknowledged in warm-up intervals, with their
    # value bytes; the parent moves them so records count by when they were scheduled
    warmup_acked_late: int = 0
    warmup_bytes_late: int = 0
    measured_acked_early: int = 0
    measured_bytes_early: int = 0
    # the same records by partition ((topic, partition)) and by broker (node id), so the
    # per-partition and per-broker counts follow the same rule and sum to the acked count
    warmup_late_by_partition: dict[tuple[str, int], int] = field(default_factory=dict)
    warmup_late_by_node: dict[int, int] = field(default_factory=dict)
    measured_early_by_partition: dict[tuple[str, int], int] = field(default_factory=dict)
    measured_early_by_node: dict[int, int] = field(default_factory=dict)
    # final report of a --verify run only: partition -> [(offset, count, first_seq)] acked runs
    acked_runs: dict[int, list[tuple[int, int, int]]] | None = None

    @property
    def duration_ns(self) -> int:
        return max(0, self.end_wall_ns - self.start_wall_ns)


@dataclass(frozen=True, slots=True)
class WorkerFailed:
    worker: int
    error: str                    # one line: exception type and message


@dataclass(frozen=True, slots=True)
class WorkerReady:
    """The worker has its metadata and connections and waits for the common start."""

    worker: int
