"""The three Spark pipelines on a real cluster: a standalone master and two one-core
workers on 127.0.0.1 (tests/spark/standalone.py), each command run as a user runs it
(``python -m kctl ... --master spark://...``). Executors are their own JVMs and Python
workers: the runs prove that no task relies on the driver process's state."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark


def kctl(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    res = subprocess.run([sys.executable, "-m", "kctl", *args], capture_output=True, text=True,
                         timeout=timeout)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return res


def _executors_ran(cluster, app_id_part: str = "app-") -> int:
    """Workers whose work directory holds an executor of some application."""
    return sum(1 for i in range(cluster.workers)
               if any(p.name.startswith(app_id_part) for p in (cluster.root / f"work{i}").glob("*")))


def test_produce_on_the_cluster(standalone, broker, tmp_path):
    summary = tmp_path / "s.json"
    res = kctl("produce", "--spark", "--master", standalone.url, "--tasks", "2", "-b", broker.bootstrap,
               "-t", "standalone-load", "--num-records", "3000", "--rate", "3000", "--record-size", "100",
               "--verify", "--json-out", str(summary))
    s = json.loads(summary.read_text())
    assert s["counts"]["acked"] == 3000 and s["verify"]["ok"]
    assert s["spark"]["tasks"] == 2 and len(s["spark"]["per_task"]) == 2
    assert "spark: 2 tasks on 1 host; start skew" in res.stdout
    assert any(line.startswith("3000 records sent, ") for line in res.stdout.splitlines())
    assert _executors_ran(standalone) == 2       # one executor JVM on each worker


def test_analyze_on_the_cluster_reads_file_uris(standalone, captures, spark, tmp_path):
    """Capture URIs opened by the executors themselves; the same rows as a local run."""
    from kctl.spark.analyze import analyze, sources
    paths, ports = captures
    uris = [Path(p).as_uri() for p in paths]
    args = ["analyze", *uris, "--master", standalone.url, "--out", str(tmp_path / "cluster"),
            "--split-mb", "1", "--json"]
    for p in ports:
        args += ["--port", str(p)]
    got = json.loads(kctl(*args).stdout)
    local = analyze(sources(paths, ports), str(tmp_path / "local"), spark=spark, range_bytes=1 << 20)
    assert got["tasks"] == local.tasks > 2 and got["requests"] == local.requests > 0

    def rows(d: str) -> list:
        t = spark.read.parquet(str(tmp_path / d / "requests")).drop("file")
        return sorted(json.dumps(r.asDict(recursive=True), sort_keys=True) for r in t.collect())
    assert rows("cluster") == rows("local")


def test_replay_on_the_cluster(standalone, broker, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    n = 1500
    path = tmp_path / "events.parquet"
    pq.write_table(pa.table({"id": list(range(n)), "user": [f"u{i % 5}" for i in range(n)]}), path)
    summary = tmp_path / "s.json"
    res = kctl("replay", path.as_uri(), "-t", "standalone-replay", "-b", broker.bootstrap,
               "--master", standalone.url, "--key-col", "user", "--tasks", "2", "--rate", "3000",
               "--verify", "--json-out", str(summary), "--quiet")
    assert f"verify: {n} acknowledged, {n} found, 0 lost, 0 duplicated, 0 reordered" in res.stdout
    s = json.loads(summary.read_text())
    assert s["counts"]["acked"] == n and s["spark"]["tasks"] == 2
