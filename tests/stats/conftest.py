"""Builders for worker reports."""

from __future__ import annotations

import dataclasses

from kctl.engine.batch import AppendSlice
from kctl.engine.metrics import MetricsSnapshot
from kctl.stats.aggregate import zero_metrics
from kctl.stats.latency import LatencyRecorder
from kctl.stats.report import WorkerInterval

S = 1_000_000_000
MS = 1_000_000
T0 = 1_700_000_000 * S


def metrics(**kw) -> MetricsSnapshot:
    return dataclasses.replace(zero_metrics(), **kw)


def report(worker: int, k: int, m: MetricsSnapshot, *, latencies_ms: tuple[float, ...] = (),
           count: int = 1, warmup: bool = False, final: bool = False, offset_ns: int = 0,
           in_flight: dict[int, int] | None = None, **kw) -> WorkerInterval:
    """Worker ``worker``'s k-th one-second report; every latency in ``latencies_ms`` is
    recorded ``count`` times on every clock."""
    rec = LatencyRecorder()
    for lat in latencies_ms:
        ack = 10 * S + int(lat * MS)
        rec.record_batch(ack, 10 * S, [AppendSlice(count, 10 * S, 10 * S, 0)])
    start = T0 + k * S + offset_ns
    return WorkerInterval(worker=worker, start_wall_ns=start, end_wall_ns=start + S,
                          histograms=rec.encode_interval(), metrics=m,
                          in_flight_by_node=in_flight or {}, buffer_available=kw.pop("buffer_available", 0),
                          buffer_total=kw.pop("buffer_total", 0), warmup=warmup, final=final, **kw)
