"""The interval log is read back by hdrh's own HistogramLogReader with the same figures."""

from __future__ import annotations

import io

import pytest
from hdrh.log import HistogramLogReader

from kctl.percentiles import value_at_percentile
from kctl.stats.aggregate import RunStats
from kctl.stats.hlog import IntervalLogWriter, read_interval_log
from kctl.stats.latency import CLOCKS, new_histogram
from tests.stats.conftest import S, T0, metrics, report


def test_header_lines() -> None:
    out = io.StringIO()
    w = IntervalLogWriter(out, T0 + 250_000_000, comment="kctl produce --rate 100")
    h = new_histogram()
    h.record_value(1500, 3)
    w.output("send", T0 + 1_250_000_000, T0 + 2_250_000_000, h)
    lines = out.getvalue().splitlines()
    assert lines[1] == "#[Histogram log format version 1.3]"
    assert lines[2].startswith("#[StartTime: 1700000000.250 (seconds since epoch), 2023-11-14T22:13:20.250")
    assert lines[3] == "#[BaseTime: 1700000000.250 (seconds since epoch)]"
    assert "#kctl produce --rate 100" in lines
    assert lines[-2] == '"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"'
    assert lines[-1].startswith("Tag=send,1.000,1.000,1.500,HIST")
    with pytest.raises(ValueError):
        w.output("a,b", T0, T0, h)


def test_start_time_is_the_summary_s_start_unix_ms() -> None:
    """StartTime and BaseTime are the start in whole milliseconds, truncated as the summary
    JSON's ``start_unix_ms`` (and Java's currentTimeMillis) are, not rounded up."""
    start = T0 + 250_999_999
    out = io.StringIO()
    IntervalLogWriter(out, start)
    lines = out.getvalue().splitlines()
    ms = start // 1_000_000
    assert lines[2].startswith(f"#[StartTime: {ms / 1000:.3f} (seconds since epoch), "
                               "2023-11-14T22:13:20.250+00:00]")
    assert lines[3] == "#[BaseTime: 1700000000.250 (seconds since epoch)]"


def test_hdrh_reader_sees_same_percentiles(tmp_path) -> None:
    path = tmp_path / "run.hlog"
    with IntervalLogWriter.open(path, T0) as log:
        st = RunStats(workers=2, start_wall_ns=T0, target_rate=500, hlog=log)
        for k in range(3):
            for w in range(2):
                lat = (1.0 + k, 10.0 * (w + 1) + k, 250.0 * (k + 1))
                st.add(report(w, k, metrics(records_acked=(k + 1) * 30), latencies_ms=lat,
                              count=10, offset_ns=w * 100_000_000, final=k == 2))
        summary = st.summary().to_json()

    # hdrh's reader: one interval per clock per round, tags kept, times relative to BaseTime
    reader = HistogramLogReader(str(path), new_histogram())
    per_tag = {c: new_histogram() for c in CLOCKS}
    seen = []
    while (h := reader.get_next_interval_histogram()) is not None:
        seen.append((h.get_tag(), round(h.get_start_time_stamp() / 1000.0 - T0 / 1e9, 3)))
        per_tag[h.get_tag()].add(h)
    reader.close()
    assert seen == [(c, float(k)) for k in range(3) for c in CLOCKS]
    cum = st.cumulative_histograms()
    for clock in CLOCKS:
        assert per_tag[clock].get_total_count() == cum[clock].get_total_count() == 180
        for p in (50, 90, 99, 99.9, 100):
            assert per_tag[clock].get_value_at_percentile(p) == cum[clock].get_value_at_percentile(p)
        assert summary["latency"][clock]["p99_ms"] == value_at_percentile(per_tag[clock], 99.0) / 1000

    intervals = read_interval_log(path)
    assert len(intervals) == 9
    first = intervals[0]
    assert first.start_s == pytest.approx(T0 / 1e9) and first.end_s == pytest.approx(T0 / 1e9 + 1.1)
    # the line's Interval_Max is the interval max in ms
    line = next(x for x in path.read_text().splitlines() if x.startswith("Tag=intended,2.000"))
    assert float(line.split(",")[3]) == pytest.approx(750.0, rel=1e-2)
    assert S  # (fixture constant used by report())


def test_an_interval_starting_before_the_base_time_is_not_lost(tmp_path):
    # hdrh's reader (like other HdrHistogram tools) skips lines with a negative start.
    h = new_histogram()
    h.record_value(1000, 10)
    base = 1_700_000_000_000_000_000
    path = tmp_path / "early.hlog"
    with IntervalLogWriter.open(path, base) as w:
        w.output("send", base - 5_000_000, base + 500_000_000, h)
    (iv,) = read_interval_log(path)
    assert iv.histogram.get_total_count() == 10 and iv.start_s == base / 1e9
