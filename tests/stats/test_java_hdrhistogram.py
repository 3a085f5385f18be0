"""kctl's percentiles against Java's HdrHistogram (the tool a Kafka engineer reads an
``.hlog`` with): ``kctl produce --consume`` writes a log, Java's ``HistogramLogProcessor``
(Debian's libhdrhistogram-java, installed by tools/setup.sh) reads it, and every percentile
it prints must be the one kctl printed (interval lines) or wrote (summary JSON)."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.broker

JAR = Path("/usr/share/java/hdrhistogram.jar")

# kctl's interval line: "... intended p50 3.7 p99 12.4 p99.9 16.0 ms; send p99 10.1 ms; request p99 4.3 ms; ..."
LINE = re.compile(r"intended p50 ([\d.]+) p99 ([\d.]+) p99\.9 ([\d.]+) ms; send p99 ([\d.]+) ms; "
                  r"request p99 ([\d.]+) ms")


def _java_totals(hlog: Path, tmp: Path, tag: str, window: tuple[float, float] | None = None) -> dict[str, str]:
    """HistogramLogProcessor's last CSV row for ``tag`` (values in ms, as printed: %.3f),
    over the whole log or over the intervals starting in ``window`` (s after StartTime)."""
    out = tmp / f"java-{tag}-{window[0] if window else 'all'}"
    args = ["java", "-cp", str(JAR), "org.HdrHistogram.HistogramLogProcessor", "-i", str(hlog),
            "-tag", tag, "-outputValueUnitRatio", "1000", "-csv", "-o", str(out)]
    if window:
        args += ["-start", f"{window[0]:.3f}", "-end", f"{window[1]:.3f}"]
    run = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and not run.stderr.strip(), run.stderr
    rows = list(csv.DictReader(line for line in out.read_text().splitlines() if not line.startswith("#")))
    assert rows, f"Java read no {tag} interval"
    return rows[-1]


def _starts(hlog: Path, tag: str) -> list[float]:
    """Start timestamps (s after BaseTime = StartTime) of the tag's interval lines."""
    return [float(line.split(",")[1]) for line in hlog.read_text().splitlines()
            if line.startswith(f"Tag={tag},")]


@pytest.mark.skipif(not JAR.exists() or shutil.which("java") is None,
                    reason="Java's HdrHistogram (apt libhdrhistogram-java, tools/setup.sh) is not installed")
def test_java_hdrhistogram_reads_the_percentiles_kctl_printed(broker, tmp_path):
    out, hlog = tmp_path / "s.json", tmp_path / "run.hlog"
    run = subprocess.run([sys.executable, "-m", "kctl", "produce", "-b", broker.bootstrap, "-t", "java-hdr",
                          "--rate", "3000", "--duration", "4s", "--workers", "1", "--interval", "1",
                          "--consume", "--json-out", str(out), "--hdr-out", str(hlog)],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert run.returncode == 0, run.stderr
    summary = json.loads(out.read_text())

    # The summary: Java's totals over the whole log, every clock (e2e too, when none negative).
    clocks = ["intended", "send", "request"]
    if summary["latency"].get("e2e", {}).get("count") and not summary["latency"]["e2e"].get("negative"):
        clocks.append("e2e")
    compared = 0
    for clock in clocks:
        java = _java_totals(hlog, tmp_path, clock)
        fig = summary["latency"][clock]
        assert int(java["Total_Count"]) == fig["count"], clock
        for col, key in (("Total_50%", "p50_ms"), ("Total_90%", "p90_ms"), ("Total_99%", "p99_ms"),
                         ("Total_99.9%", "p999_ms"), ("Total_99.99%", "p9999_ms"), ("Total_Max", "max_ms")):
            assert float(java[col]) == fig[key], (clock, col, java[col], fig[key])
            compared += 1

    # Each printed interval line: Java's figures over that one interval, as kctl prints them (0.1 ms).
    printed = [m.groups() for m in map(LINE.search, run.stdout.splitlines()) if m]
    starts = {tag: _starts(hlog, tag) for tag in ("intended", "send", "request")}
    assert len(printed) == len(starts["intended"]) >= 3, run.stdout
    for i, (p50, p99, p999, send_p99, request_p99) in enumerate(printed):
        for tag, cols in (("intended", (("Total_50%", p50), ("Total_99%", p99), ("Total_99.9%", p999))),
                          ("send", (("Total_99%", send_p99),)), ("request", (("Total_99%", request_p99),))):
            s = starts[tag][i]
            java = _java_totals(hlog, tmp_path, tag, (max(0.0, s - 0.2), s + 0.2))
            for col, shown in cols:
                assert f"{float(java[col]):.1f}" == shown, (i, tag, col, java[col], shown)
                compared += 1
    assert compared >= 18 + 5 * 3


@pytest.mark.skipif(not JAR.exists() or shutil.which("java") is None,
                    reason="Java's HdrHistogram (apt libhdrhistogram-java, tools/setup.sh) is not installed")
def test_java_rank_on_a_hand_made_log(tmp_path):
    """Without a broker: a log of values where Java's rank and Python hdrh's differ
    (p99 of 5999, p99.9 of 13994), written by kctl's writer, read back by Java."""
    from hdrh.histogram import HdrHistogram

    from kctl.percentiles import values_at_percentiles
    from kctl.stats.hlog import IntervalLogWriter
    from kctl.stats.latency import new_histogram

    hists = []
    for n, tail in ((5999, 100), (13994, 20), (41000, 60)):
        h: HdrHistogram = new_histogram()
        h.record_value(1, n - tail)
        for v in range(1001, 1001 + tail):
            h.record_value(v)
        hists.append(h)
    hlog = tmp_path / "hand.hlog"
    with IntervalLogWriter.open(hlog, 1_700_000_000 * 10**9) as writer:
        for i, h in enumerate(hists):
            writer.output("intended", (1_700_000_000 + 10 * i) * 10**9, (1_700_000_001 + 10 * i) * 10**9, h)
    differ = 0
    for i, h in enumerate(hists):
        java = _java_totals(hlog, tmp_path, "intended", (10 * i - 1, 10 * i + 1))
        mine = values_at_percentiles(h, (50.0, 90.0, 99.0, 99.9, 99.99))
        for col, p in (("Total_50%", 50.0), ("Total_90%", 90.0), ("Total_99%", 99.0),
                       ("Total_99.9%", 99.9), ("Total_99.99%", 99.99)):
            assert float(java[col]) == mine[p] / 1000, (i, col, java[col], mine[p])
            differ += h.get_value_at_percentile(p) != mine[p]
    assert differ >= 3          # the log holds cases where Python hdrh's own rank reads another value
