"""``kctl replay``: a generated Parquet file produced from Spark tasks, verified clean."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kctl.cli import app
from kctl.engine import admin
from kctl.engine.blocking_client import BlockingClient

pytestmark = pytest.mark.spark


def test_replay_parquet_with_verify(spark, broker, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    n = 2000
    path = tmp_path / "events.parquet"
    pq.write_table(pa.table({"id": list(range(n)), "user": [f"u{i % 7}" for i in range(n)],
                             "payload": [{"a": i, "b": f"x{i}"} for i in range(n)]}), path)
    summary = tmp_path / "summary.json"
    res = CliRunner().invoke(app, ["replay", str(path), "-t", "replayed", "-b", broker.bootstrap,
                                   "--key-col", "user", "--value-col", "payload", "--rate", "4000",
                                   "--tasks", "2", "--partitions", "3", "--verify",
                                   "--json-out", str(summary), "--quiet"])
    assert res.exit_code == 0, res.output
    assert "verify: 2000 acknowledged, 2000 found, 0 lost, 0 duplicated, 0 reordered" in res.output
    assert "spark: 2 tasks on 1 host; start skew " in res.output
    s = json.loads(summary.read_text())
    assert s["counts"]["acked"] == n and s["verify"]["ok"]
    assert s["spark"]["tasks"] == 2 and len(s["spark"]["per_task"]) == 2
    got = []
    with BlockingClient(broker.bootstrap) as c:
        for p in range(3):
            for b in admin.read_partition(c, "replayed", p):
                got += [(r.key, json.loads(r.value)) for r in b.records]
    assert sorted(got, key=lambda kv: kv[1]["a"]) == [
        (f"u{i % 7}".encode(), {"a": i, "b": f"x{i}"}) for i in range(n)]
