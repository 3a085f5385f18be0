"""`kctl report` on inputs it did not write itself: a produce summary JSON and an
HdrHistogram log written by hdrh's own writer (nanoseconds, no tags); bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogWriter

import pytest

from kctl.bench.results import load_run
from kctl.errors import ConfigError


def kctl(*args):
    return subprocess.run([sys.executable, "-m", "kctl", *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "COLUMNS": "240"})


def foreign_hlog(path):
    """Three 1-second intervals of 1000 values each, in nanoseconds, as hdrh writes them."""
    with open(path, "w") as f:
        w = HistogramLogWriter(f)
        w.output_log_format_version()
        w.output_legend()
        for i in range(3):
            h = HdrHistogram(1, 3_600_000_000_000, 3)
            for v in range(1, 1001):
                h.record_value(v * 10_000 * (i + 1))      # 0.01 .. 10 ms (x i+1)
            h.set_start_time_stamp(1_700_000_000_000 + i * 1000)
            h.set_end_time_stamp(1_700_000_000_000 + (i + 1) * 1000)
            w.output_interval_histogram(h)


SUMMARY = {"schema": "kctl.produce.summary/1", "run": {"measured_s": 2.0},
           "config": {"producer": {"acks": "all", "bootstrap.servers": "x:1"}},
           "counts": {"acked": 10000, "failed": 0, "requests_sent": 400},
           "rates": {"records_per_s": 5000.0, "mb_per_s": 0.6},
           "latency": {"intended": {"p50_ms": 1.0, "p90_ms": 2.0, "p99_ms": 4.0, "p999_ms": 8.0,
                                    "p9999_ms": 9.0, "max_ms": 10.0},
                       "send": {"p50_ms": 0.5, "p99_ms": 2.0, "p999_ms": 3.0, "max_ms": 5.0}},
           "batching": {"records_per_batch": 25.0}, "throttle": {"time_ms": 0}, "errors_by_name": {}}


def test_foreign_hlog_in_nanoseconds(tmp_path):
    foreign_hlog(tmp_path / "other.hlog")
    [cell] = load_run(tmp_path / "other.hlog", hlog_unit="ns")
    m = cell.reps[0].metrics
    assert abs(m["records_per_s"] - 1000) < 1
    assert abs(m["max_ms"] - 30.0) / 30 < 0.01 and 7.0 < m["p50_ms"] < 10.0
    assert len(cell.reps[0].timeline) == 3
    # An untagged log measured no service time: its svc columns are n/a, not p50/p99 again.
    assert not any(cell.has(k) for k in ("service_p50_ms", "service_p99_ms", "service_p999_ms",
                                         "service_max_ms"))
    assert abs(cell.latency_histogram().get_max_value() / 1000 - 30.0) / 30 < 0.01   # rescaled to µs


def test_report_compares_a_summary_and_a_foreign_log_with_charts(tmp_path):
    foreign_hlog(tmp_path / "other.hlog")
    (tmp_path / "run1.json").write_text(json.dumps(SUMMARY))
    run = kctl("report", str(tmp_path / "run1.json"), str(tmp_path / "other.hlog"), "--hlog-unit", "ns",
               "--out", str(tmp_path / "out"))
    assert run.returncode == 0, run.stderr
    assert "run1" in run.stdout and "other" in run.stdout and "5,000*" in run.stdout
    for name in ("percentiles.png", "timeline.png", "report.html"):
        assert (tmp_path / "out" / name).stat().st_size > 5_000


def test_bad_input_is_one_line_and_no_traceback(tmp_path, capsys, monkeypatch):
    """In-process through cli.main (a subprocess per case costs a second of imports)."""
    import pytest

    from kctl import cli

    (tmp_path / "junk.json").write_text('{"hello": 1}')
    (tmp_path / "bad.toml").write_text("[workload]\nrepetitions = 0\n")
    (tmp_path / "junk.hlog").write_text("not a log\n")
    cases = [
        (("report", str(tmp_path / "missing.json")), "no such file"),
        (("report", str(tmp_path / "junk.json")), "neither bench results"),
        (("report", str(tmp_path / "junk.hlog")), "no histogram intervals"),
        (("bench", str(tmp_path / "bad.toml")), "repetitions must be at least 1"),
        (("bench", "--matrix", "acks"), "--matrix expects name=value1,value2"),
        (("bench", "--matrix", "acks=1,2"), "cell acks=2"),
        (("bench", "--max-regression", "speed=5%"), "unknown metric 'speed'"),
        (("bench", "--junit-xml", str(tmp_path / "j.xml")), "give --baseline too"),
    ]
    for args, message in cases:
        monkeypatch.setattr(sys, "argv", ["kctl", *args])
        with pytest.raises(SystemExit) as e:
            cli.main()
        err = capsys.readouterr().err
        assert e.value.code == 2, (args, err)
        assert "Traceback" not in err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (args, err)
    run = kctl("bench", "--matrix", "acks")       # and once as a real process
    assert run.returncode == 2 and run.stderr.startswith("kctl: error: --matrix") and "Traceback" not in run.stderr


def test_hlog_rate_leaves_out_the_gap_between_repetitions(tmp_path):
    """A bench cell's log holds each repetition, with the other cells' runs in between:
    the rate is the count over the time the intervals cover (3 s + 3 s), not first start
    -> last end (which counted the 6 s gap and showed half the rate)."""
    with open(tmp_path / "cell.hlog", "w") as f:
        w = HistogramLogWriter(f)
        w.output_log_format_version()
        for start_ms in (0, 1000, 2000, 9000, 10000, 11000):
            h = HdrHistogram(1, 3_600_000_000_000, 3)
            h.record_value(1000, 5000)
            h.set_start_time_stamp(1_700_000_000_000 + start_ms)
            h.set_end_time_stamp(1_700_000_000_000 + start_ms + 1000)
            w.output_interval_histogram(h)
    [cell] = load_run(tmp_path / "cell.hlog")
    assert abs(cell.reps[0].metrics["records_per_s"] - 5000) < 1


def test_covered_s_counts_an_overlap_once():
    from kctl.bench.results import covered_s
    assert covered_s([(0.0, 3.0), (9.0, 12.0)]) == 6.0
    assert covered_s([(0.0, 2.0), (1.0, 3.0), (3.0, 4.0)]) == 4.0
    assert covered_s([]) == 0.0


def _summary(tmp_path, sub, **config):
    doc = json.loads(json.dumps(SUMMARY))
    doc["config"].update(config)
    (tmp_path / sub).mkdir(exist_ok=True)
    path = tmp_path / sub / "run.json"
    path.write_text(json.dumps(doc))
    return path


def test_gate_warns_once_naming_a_different_workload(tmp_path):
    now = _summary(tmp_path, "now", record_size=100, rate=5000, partitions=6)
    base = _summary(tmp_path, "base", record_size=200, rate=10000, partitions=6)
    run = kctl("report", str(now), "--baseline", str(base))
    assert run.returncode == 0, run.stdout + run.stderr
    warnings = [line for line in run.stdout.splitlines() if "WARNING" in line]
    assert warnings == [f"gate: WARNING: the baseline {base} ran a different workload: "
                        "record_size 200 -> 100, rate 10000 -> 5000"], run.stdout
    same = kctl("report", str(now), "--baseline", str(now))
    assert same.returncode == 0 and "WARNING" not in same.stdout


def test_report_refuses_a_bad_baseline_before_the_table(tmp_path):
    now = _summary(tmp_path, "now")
    run = kctl("report", str(now), "--baseline", str(tmp_path / "nope.json"))
    assert run.returncode == 2 and run.stdout == "", run.stdout
    assert "--baseline" in run.stderr and "no such file" in run.stderr and "Traceback" not in run.stderr


def test_report_says_what_it_reads_of_a_max_rate_directory(tmp_path):
    d = tmp_path / "max-rate"
    d.mkdir()
    (d / "max-rate.json").write_text(json.dumps({"schema": "kctl.bench.max_rate/1", "steps": []}))
    for arg in (d, d / "max-rate.json"):
        with pytest.raises(ConfigError, match="a bench --find-max-rate search, which kctl report does "
                                              "not compare.*kctl report reads a bench results.json"):
            load_run(arg)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="a directory without results.json"):
        load_run(tmp_path / "empty")


def test_table_title_gives_each_runs_repetitions_when_they_differ():
    from io import StringIO

    from rich.console import Console

    from kctl.bench.results import CellResult, RepResult
    from kctl.ui.bench_view import comparison_table

    cells = [CellResult("b1", "b1", {}, [RepResult(i, {"records_per_s": 1.0}) for i in (1, 2)]),
             CellResult("b3", "b3", {}, [RepResult(1, {"records_per_s": 1.0})])]
    out = StringIO()
    Console(file=out, width=300, color_system=None).print(comparison_table(cells, title="kctl report"))
    assert "over b1: 2, b3: 1 repetition(s)" in out.getvalue()
    out = StringIO()
    Console(file=out, width=300, color_system=None).print(comparison_table(cells[:1]))
    assert "over 2 repetition(s)" in out.getvalue()


def test_bench_help_states_the_max_steps_minimum():
    run = kctl("bench", "--help")
    assert "at least 2" in " ".join(run.stdout.split())


def test_a_kctl_log_s_svc_figures_are_its_send_clock_s(tmp_path):
    """A kctl log tags its clocks: svc is the "send" histogram's, p50 the "intended" one's."""
    from kctl.stats.hlog import IntervalLogWriter
    base = 1_700_000_000_000_000_000
    with IntervalLogWriter.open(tmp_path / "kctl.hlog", base) as w:
        for tag, us in (("intended", 4000), ("send", 1000)):
            h = HdrHistogram(1, 3_600_000_000, 3)
            h.record_value(us, 100)
            w.output(tag, base, base + 1_000_000_000, h)
    m = load_run(tmp_path / "kctl.hlog")[0].reps[0].metrics
    assert abs(m["p50_ms"] - 4.0) < 0.01 and abs(m["service_p50_ms"] - 1.0) < 0.01
