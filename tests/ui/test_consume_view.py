"""kctl consume's live view, plain lines and summary render the consume stats' figures:
the e2e clock (with its negatives), lag per partition, fetch figures, the clock offset."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

from rich.console import Console

from kctl.stats.consume_summary import ConsumeSummary
from kctl.ui.consume_view import ConsumeDashboardView, perf_test_lines, plain_line, summary_renderable
from tests.ui.test_produce_view import _consume_state


def _render(renderable, width: int = 200) -> str:
    out = StringIO()
    Console(file=out, width=width, force_terminal=False, color_system=None).print(renderable)
    return out.getvalue()


def test_live_view_shows_e2e_lag_and_fetch_figures():
    text = _render(ConsumeDashboardView(_consume_state))
    row = next(line for line in text.splitlines() if line.startswith("│ e2e "))
    for needle in ("12.5", "31.2", "88.0", "4,000", "3"):
        assert needle in row, (needle, row)
    for needle in ("records/s", "900", "fetch responses/s", "40.0", "records/response", "22.5",
                   "lag: 17 records", "t-0", "same host"):
        assert needle in text, (needle, text)


def test_plain_line_carries_e2e_and_lag():
    line = plain_line(_consume_state())
    assert line.startswith("900 records consumed, 900.0 records/sec")
    assert "40.0 fetch responses/s, 22.5 records/response;" in line   # what they count: responses
    assert "e2e p50 12.5 p99 31.2 max 37.5 ms (0 negative); lag 17; t=5.0s" in line


def test_summary_renders_e2e_backlog_and_perf_test_lines(tmp_path: Path):
    doc = {"schema": "kctl.consume.summary/1",
           "run": {"id": "abc", "start": "2026-01-01T00:00:00+00:00", "end": "2026-01-01T00:00:02+00:00",
                   "start_unix_ms": 1_767_225_600_000, "end_unix_ms": 1_767_225_602_000, "duration_s": 2.0,
                   "measured_s": 2.0, "consumers": 2, "mode": "assign", "intervals": 2, "caught_up": True},
           "counts": {"records": 6000, "key_value_bytes": 600_000, "fetch_requests": 10, "fetch_responses": 10,
                      "matched": 6000},
           "rates": {"records_per_s": 3000.0, "mb_per_s": 0.286, "fetch_requests_per_s": 5.0,
                     "records_per_fetch": 600.0},
           "latency": {"e2e": {"p50_ms": 4.5, "p90_ms": 6.0, "p95_ms": 7.0, "p99_ms": 9.25, "p999_ms": 10.0,
                               "p9999_ms": 11.0, "max_ms": 12.0, "mean_ms": 5.0, "count": 6000,
                               "negative": 2, "min_ms": -0.5}},
           "clock": None, "lag": {"final": 0, "max": 40, "timeline": [{"t_s": 1.0, "total": 40, "partitions": {}}]},
           "backlog": {"records": 6000, "drained": True, "drain_s": 2.0, "records_per_s": 3000.0},
           "partitions": [], "errors_by_name": {}}
    s = ConsumeSummary.from_json(json.loads(json.dumps(doc)))
    assert s.to_json()["latency"]["e2e"]["negative"] == 2
    text = _render(summary_renderable(s))
    for needle in ("e2e", "9.25", "6,000", "drained", "2.0"):
        assert needle in text, (needle, text)
    header, values = perf_test_lines(s)
    assert header.startswith("start.time, end.time, data.consumed.in.MB")
    assert ", 6000, " in values
