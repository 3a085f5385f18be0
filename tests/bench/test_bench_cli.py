"""`kctl bench` end to end on the embedded broker: the example workload (2 cells x 2
repetitions of 2 s), its outputs (results.json, one .hlog per cell, PNGs, HTML opened in
headless Chromium), and the regression gate both ways. Runs the real command in a
subprocess."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kctl.stats.hlog import read_interval_log

pytestmark = pytest.mark.broker

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "bench.toml"


def kctl(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "kctl", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "COLUMNS": "240"})


def ok(run):
    assert run.returncode == 0, f"exit {run.returncode}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    return run


@pytest.fixture(scope="module")
def baseline_run(broker, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "base"
    run = ok(kctl("bench", str(EXAMPLE), "-b", broker.bootstrap, "--topic", "bench-base", "--out", str(out)))
    return out, run


def test_example_workload_writes_results_hlogs_and_table(baseline_run):
    out, run = baseline_run
    res = json.loads((out / "results.json").read_text())
    assert res["schema"] == "kctl.bench.results/1"
    assert [c["name"] for c in res["cells"]] == ["acks-1", "acks-all"]
    assert res["order"] == ["1/acks-1", "1/acks-all", "2/acks-1", "2/acks-all"]   # interleaved
    env = res["environment"]
    assert env["kctl"] and env["python"] and env["versions"]["hdrhistogram"] and env["cpus"]
    for c in res["cells"]:
        assert len(c["repetitions"]) == 2
        for rep in c["repetitions"]:
            assert rep["topic"] == f"bench-base-{c['name']}"
            assert rep["summary"]["counts"]["acked"] > 0 and rep["summary"]["counts"]["failed"] == 0
            assert abs(rep["metrics"]["records_per_s"] - 5000) / 5000 < 0.05
            assert rep["summary"]["config"]["producer"]["acks"] == c["properties"]["acks"]
            assert rep["summary"]["config"]["id_headers"] is True    # as kctl produce sends
            assert len(rep["timeline"]) >= 4
        stat = c["stats"]["records_per_s"]
        assert stat["min"] <= stat["median"] <= stat["max"]
        ivs = read_interval_log(out / c["hlog"])
        assert {i.tag for i in ivs} == {"intended", "send", "request"}
        assert sum(i.histogram.get_total_count() for i in ivs if i.tag == "intended") == sum(
            r["summary"]["counts"]["acked"] for r in c["repetitions"])
    # The table: both cells, every column, medians with their ranges, a best mark.
    table = run.stdout
    for word in ("records/s", "MB/s", "p50 ms", "p99 ms", "p99.9 ms", "max ms", "svc p99 ms",
                 "rec/batch", "req/s", "throttle ms", "errors", "acks=1", "acks=all"):
        assert word in table
    assert "*" in table and re.search(r"\d–\d", table)


def _image_check(path: Path, colours: list[str]):
    import matplotlib.image as mpimg
    import numpy as np
    from matplotlib.colors import to_rgb

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    img = mpimg.imread(path)[..., :3]
    assert img.shape[0] >= 400 and img.shape[1] >= 800
    assert len(np.unique((img * 255).astype(np.uint8).reshape(-1, 3), axis=0)) > 50
    for colour in colours:   # each cell's curve is drawn in its colour
        near = np.all(np.abs(img - np.array(to_rgb(colour))) < 0.03, axis=-1)
        assert near.sum() > 300, f"no {colour} curve in {path.name}"


def test_pngs_have_the_curves(baseline_run):
    out, _ = baseline_run
    from kctl.bench.charts import _COLOURS
    _image_check(out / "percentiles.png", list(_COLOURS[:2]))
    _image_check(out / "timeline.png", list(_COLOURS[:2]))


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium not installed (tools/setup.sh)")
def test_html_report_renders_in_headless_chromium(baseline_run, tmp_path):
    out, _ = baseline_run
    page = (out / "report.html").read_text()
    assert "<script src=" not in page and "acks=all" in page   # self-contained
    dom = subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000", "--dump-dom",
         (out / "report.html").as_uri()], capture_output=True, text=True, timeout=60).stdout
    # plotly drew both charts: 2 percentile curves + (2 cells x 2 repetitions x 2 panels).
    assert dom.count('class="main-svg"') >= 2
    assert len(re.findall(r'class="js-line"[^>]*d="M[^"]{20,}', dom)) >= 10
    assert "latency by percentile" in dom and "throughput and p99 over time" in dom


def test_gate_passes_against_a_baseline_from_the_same_code(baseline_run, broker, tmp_path):
    out, _ = baseline_run
    junit = tmp_path / "junit.xml"
    # p99 of a 2 s run at 5000 records/s is a few ms on this shared 2-core machine, but a
    # stall of the whole machine (CPU steal; seen on the request clock of every client,
    # up to ~400 ms in one CI run) lands in the p99 of a run this short now and then. The
    # absolute term is the bound syntax for that (README); throughput keeps the plain 10 %.
    # The doctored-baseline test below shows the gate still catches real regressions.
    run = ok(kctl("bench", str(EXAMPLE), "-b", broker.bootstrap, "--topic", "bench-again", "--quiet",
                  "--baseline", str(out / "results.json"), "--junit-xml", str(junit),
                  "--max-regression", "records_per_s=10%,p99_ms=20%+500ms"))
    assert "gate: passed: 4 check(s)" in run.stdout
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite.get("tests") == "4" and suite.get("failures") == "0"


def test_gate_fails_with_the_table_against_a_doctored_baseline(baseline_run, tmp_path):
    out, _ = baseline_run
    doc = json.loads((out / "results.json").read_text())
    # acks=all's baseline: every repetition twice the best throughput and a quarter of the
    # best p99 measured, so no spread of the measured runs can cover the difference (the
    # median of two is at most the best plus half the spread).
    cell = doc["cells"][1]
    reps = cell["repetitions"]
    best_rps = max(r["metrics"]["records_per_s"] for r in reps)
    best_p99 = min(r["metrics"]["p99_ms"] for r in reps)
    for rep in reps:
        rep["metrics"]["records_per_s"] = best_rps * 2
        rep["metrics"]["p99_ms"] = best_p99 / 4
    doctored = tmp_path / "doctored.json"
    doctored.write_text(json.dumps(doc))
    junit = tmp_path / "junit.xml"
    run = kctl("report", str(out / "results.json"), "--baseline", str(doctored), "--junit-xml", str(junit))
    assert run.returncode == 1, run.stdout + run.stderr
    assert "regressions beyond --max-regression" in run.stdout
    lines = [line for line in run.stdout.splitlines() if "REGRESSED" in line]
    assert len(lines) == 2 and all("acks=all" in line for line in lines)   # the table's spelling
    rps = next(line for line in lines if "records_per_s" in line)
    change = float(re.search(r"([-+]\d+\.\d)%", rps).group(1))
    assert -75.0 < change <= -50.0
    p99 = next(line for line in lines if "p99_ms" in line)
    assert float(re.search(r"([-+]\d+\.\d)%", p99).group(1)) >= 300.0
    assert "gate: FAILED: 2 of 4 check(s) regressed" in run.stdout
    assert ET.parse(junit).getroot().find("testsuite").get("failures") == "2"


def test_report_reads_results_and_charts_without_a_broker(baseline_run, tmp_path):
    out, _ = baseline_run
    hlog = out / "hlog" / "acks-1.hlog"
    run = ok(kctl("report", str(out), str(hlog), "--out", str(tmp_path / "r")))
    assert "base: acks=1" in run.stdout and "acks-1" in run.stdout
    for name in ("percentiles.png", "timeline.png", "report.html"):
        assert (tmp_path / "r" / name).stat().st_size > 10_000


def test_sigterm_stops_the_bench_as_ctrl_c_does(broker, tmp_path):
    """SIGTERM to kctl alone mid-cell stops the running cell's workers in order and ends the
    bench as Ctrl-C does: ``kctl: interrupted``, exit 130, no traceback, no worker left
    loading the broker (before, SIGTERM killed the parent alone and the cell's workers
    went on to the end of its 30 s)."""
    import time

    from tests.stop_signal import KctlProcess, group_gone

    run = KctlProcess("bench", "-b", broker.bootstrap, "--topic", f"bench-sigterm-{os.getpid()}",
                      "--matrix", "acks=1,all", "--rate", "1000", "--duration", "30s", "--warmup", "0s",
                      "--repetitions", "1", "--workers", "1", "--out", str(tmp_path / "out"))
    try:
        run.wait_for(lambda line: line.startswith("[1/2] repetition 1"), stream="err")
        time.sleep(2)                     # the cell's worker starts and produces
        t0 = time.monotonic()
        status = run.stop()
        stopped_s = time.monotonic() - t0
    finally:
        run.kill_group()
    assert status == 130, run.stderr
    assert "kctl: interrupted" in run.stderr and "Traceback" not in run.stderr
    assert "[2/2]" not in run.stderr      # the next cell never started
    assert group_gone(run.pgid), "a process of the bench outlived kctl"
    assert stopped_s < 20
    # No run completed: results.json still says which was cut short and which never ran.
    from kctl.bench.results import BenchResults
    results = BenchResults.from_dict(json.loads((tmp_path / "out" / "results.json").read_text()))
    assert results.cells == [] and results.order == []
    assert results.interrupted is not None and results.interrupted.cut_short == "1/acks-1"
    assert results.interrupted.not_run == ("1/acks-all",)


def test_ctrl_c_keeps_what_the_completed_runs_measured(broker, tmp_path):
    """Ctrl-C (SIGINT to kctl) in the second run of a 2 x 2 matrix: the first run's figures
    are in the table and in --out (results.json, the cell's .hlog, charts), the run cut
    short is left out and named, the runs never started are listed, 'kctl: interrupted',
    exit 130. Before, a stopped bench wrote nothing at all."""
    import signal

    from kctl.bench.results import BenchResults
    from tests.stop_signal import KctlProcess, group_gone

    out = tmp_path / "out"
    run = KctlProcess("bench", "-b", broker.bootstrap, "--topic", f"bench-sigint-{os.getpid()}",
                      "--matrix", "acks=1,all", "--rate", "1000", "--duration", "2s", "--warmup", "0s",
                      "--repetitions", "2", "--workers", "1", "--out", str(out))
    try:
        run.wait_for(lambda line: line.startswith("[2/4] repetition 1"), stream="err")
        status = run.stop(signal.SIGINT)
    finally:
        run.kill_group()
    assert status == 130, run.stderr
    assert "kctl: interrupted" in run.stderr and "Traceback" not in run.stderr
    assert ("interrupted: 1 run(s) completed and are in the table and the results; repetition 1 "
            "of cell acks-all was cut short and is left out; 2 run(s) never started") in run.stderr
    assert "acks=1" in run.stdout and "acks=all" not in run.stdout       # the table: the completed cell
    results = BenchResults.from_dict(json.loads((out / "results.json").read_text()))
    assert [c.label for c in results.cells] == ["acks=1"] and len(results.cells[0].reps) == 1
    assert results.cells[0].reps[0].metrics["records_per_s"] > 500
    assert results.order == ["1/acks-1"]
    assert results.interrupted is not None and results.interrupted.cut_short == "1/acks-all"
    assert results.interrupted.not_run == ("2/acks-1", "2/acks-all")
    assert read_interval_log(out / "hlog" / "acks-1.hlog")
    assert (out / "report.html").exists()
    assert group_gone(run.pgid), "a process of the bench outlived kctl"
