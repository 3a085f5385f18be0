"""Measurement for ``kctl produce``: latency histograms per clock, the messages workers
send the parent, the parent's merge, the summary JSON and the HdrHistogram interval log.

Workers record (``LatencyRecorder``) and report (``WorkerInterval``); the parent merges
(``RunStats``) and hands plain snapshots (``DashboardState``) to the UI. Nothing here
renders or reads a clock by itself: times are passed in.
"""

from kctl.stats.aggregate import DashboardState, RunStats
from kctl.stats.hlog import IntervalLogWriter, read_interval_log
from kctl.stats.latency import (
    CLOCKS,
    LatencyFigures,
    LatencyRecorder,
    decode_histogram,
    encode_histogram,
    new_histogram,
)
from kctl.stats.report import WorkerFailed, WorkerInterval

__all__ = [
    "CLOCKS", "DashboardState", "IntervalLogWriter", "LatencyFigures", "LatencyRecorder",
    "RunStats", "WorkerFailed", "WorkerInterval", "decode_histogram", "encode_histogram",
    "new_histogram", "read_interval_log",
]
