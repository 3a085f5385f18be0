"""``kctl consume`` on a topic another run wrote (the embedded broker, the real command):
``--verify`` over a partial read expects only what the read covered, the final lag
counts every partition (ListOffsets for those never fetched), a position past the log
end is named, and perf-test's two lines stay last on stdout with ``--verify``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.broker

TOTAL = 6000


def kctl(*args, timeout=180):
    return subprocess.run([sys.executable, "-m", "kctl", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "COLUMNS": "200"})


@pytest.fixture(scope="module")
def topic(broker):
    name = "partial-verify"
    run = kctl("produce", "-b", broker.bootstrap, "-t", name, "--partitions", "5", "--workers", "2",
               "--num-records", str(TOTAL), "--verify", "--quiet")
    assert run.returncode == 0, run.stdout + run.stderr
    return name


def _perf_test_last(stdout: str) -> list[str]:
    lines = stdout.splitlines()
    assert lines[-2].startswith("start.time, end.time, data.consumed.in.MB"), lines[-4:]
    return lines


def test_verify_over_a_partial_read_loses_nothing(broker, topic, tmp_path):
    js = tmp_path / "p.json"
    run = kctl("consume", "-b", broker.bootstrap, "-t", topic, "--verify", "--from", "300",
               "--num-records", "2000", "--consumers", "2", "--quiet", "--json-out", str(js))
    assert run.returncode == 0, run.stdout + run.stderr
    v = json.loads(js.read_text())["verify"]
    assert v["lost"] == 0 and v["duplicated"] == 0 and v["expected"] == v["found"] > 0
    lines = _perf_test_last(run.stdout)
    assert any(line.startswith("verify: ") for line in lines[:-2])


def test_final_lag_counts_every_partition(broker, topic, tmp_path):
    js = tmp_path / "l.json"
    run = kctl("consume", "-b", broker.bootstrap, "-t", topic, "--num-records", "500", "--consumers", "2",
               "-X", "max.poll.records=100", "--quiet", "--json-out", str(js))
    assert run.returncode == 0, run.stdout + run.stderr
    s = json.loads(js.read_text())
    parts = s["partitions"]
    # Every partition has an end offset (ListOffsets for those the run never fetched) and
    # the final lag sums them all. (Tansu's end offset is its last batch's base offset,
    # so the sum is not the record count.)
    assert len(parts) == 5 and all(p["end_offset"] >= 0 and p["lag"] is not None for p in parts)
    assert s["lag"]["unknown_partitions"] == []
    assert s["lag"]["final"] == sum(p["end_offset"] - p["position"] for p in parts) > 0


def test_a_start_past_the_log_end_is_named(broker, topic):
    run = kctl("consume", "-b", broker.bootstrap, "-t", topic, "--from", "999999", "--consumers", "1",
               "--idle-timeout", "1s", "--quiet")
    assert run.returncode == 0, run.stdout + run.stderr
    warning = [line for line in run.stderr.splitlines() if line.startswith("WARNING: position past the log end")]
    assert len(warning) == 1 and "partition(s) 0 (position 999999, end offset " in warning[0], run.stderr
    assert "WARNING" not in run.stdout
