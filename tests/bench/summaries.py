"""Small ``RunSummary`` values for tests that judge figures (no run behind them)."""

from __future__ import annotations

from kctl.stats.summary import SUMMARY_SCHEMA, RunSummary


def _figures(p99_ms: float, count: int) -> dict[str, float]:
    return {"p50_ms": p99_ms / 2, "p90_ms": p99_ms * 0.8, "p95_ms": p99_ms * 0.9, "p99_ms": p99_ms,
            "p999_ms": p99_ms * 1.2, "p9999_ms": p99_ms * 1.3, "max_ms": p99_ms * 1.5, "mean_ms": p99_ms / 2,
            "count": count}


def summary_with(*, rate: float, p99_ms: float, failed: int = 0, e2e_p99_ms: float | None = None,
                 e2e_count: int | None = None, measured_s: float = 5.0) -> RunSummary:
    """A produce summary that achieved ``rate`` records/s over ``measured_s`` with the
    intended clock's p99 at ``p99_ms`` (and an e2e clock when ``e2e_p99_ms`` is given)."""
    acked = int(rate * measured_s)
    latency = {"intended": _figures(p99_ms, acked), "send": _figures(p99_ms, acked),
               "request": _figures(p99_ms, acked)}
    if e2e_p99_ms is not None:
        latency["e2e"] = {**_figures(e2e_p99_ms, acked if e2e_count is None else e2e_count), "negative": 0}
    return RunSummary.from_json({
        "schema": SUMMARY_SCHEMA,
        "run": {"id": "test", "measured_s": measured_s, "duration_s": measured_s, "workers": 1},
        "config": {}, "counts": {"sent": acked + failed, "acked": acked, "failed": failed, "scheduled": acked},
        "rates": {"records_per_s": rate, "mb_per_s": 0.0}, "latency": latency,
        "batching": {}, "throttle": {}, "retries": 0, "errors_by_name": {}, "partitions": [], "brokers": []})
