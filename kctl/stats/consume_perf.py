"""kafka-consumer-perf-test's closing figures, from kctl's own clock.

ConsumerPerformance takes its start before it subscribes and its end before it closes
the consumer (kctl: when the last consumer stopped reading); ``rebalance.time.ms`` is the
time spent joining (start, or losing every partition, until partitions are assigned);
``fetch.time.ms`` = end - start - rebalance.time.ms; ``MB.sec`` and ``nMsg.sec`` are over
the whole elapsed time, ``fetch.MB.sec`` and ``fetch.nMsg.sec`` over fetch.time.ms. All
in whole milliseconds, as there, so the printed columns add up: start + rebalance +
fetch == end. MB is keys + values in MiB. (perf-test has no warm-up; with kctl's
``--warmup`` the times given here are the measured window's, load/consume_run.py.)
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PerfTestFigures", "PerfTestTimes", "perf_test_figures"]


@dataclass(frozen=True, slots=True)
class PerfTestTimes:
    start_ms: int          # unix ms, before the consumers subscribe / are assigned
    end_ms: int            # unix ms, the run's end
    rebalance_ms: int      # joining and rejoining within [start, end]


@dataclass(frozen=True, slots=True)
class PerfTestFigures:
    start_ms: int
    end_ms: int
    mb: float
    mb_per_s: float
    records: int
    records_per_s: float
    rebalance_ms: int
    fetch_ms: int
    fetch_mb_per_s: float
    fetch_records_per_s: float


def perf_test_figures(records: int, key_value_bytes: int, times: PerfTestTimes) -> PerfTestFigures:
    """The columns of the values line. A span of 0 ms gives rates of 0 (perf-test would
    print Infinity or NaN)."""
    elapsed_ms = max(0, times.end_ms - times.start_ms)
    rebalance_ms = min(max(0, times.rebalance_ms), elapsed_ms)
    fetch_ms = elapsed_ms - rebalance_ms
    mb = key_value_bytes / (1024 * 1024)

    def per_s(x: float, ms: int) -> float:
        return x / (ms / 1000) if ms > 0 else 0.0

    return PerfTestFigures(times.start_ms, times.start_ms + elapsed_ms, mb, per_s(mb, elapsed_ms), records,
                           per_s(records, elapsed_ms), rebalance_ms, fetch_ms, per_s(mb, fetch_ms),
                           per_s(records, fetch_ms))
