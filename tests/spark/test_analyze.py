"""``kctl analyze``: captures made here (kctl inspect's capture writer in front of the
broker) decoded by Spark tasks must agree with ``kctl decode --summary`` on the same files."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from kctl.cli import app
from kctl.engine import admin
from kctl.engine.blocking_client import BlockingClient
from kctl.inspect.proxy import InspectorProxy
from kctl.config import ProducerConfig
from kctl.load.run import LoadRun, LoadSpec

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def captures(broker, tmp_path_factory):
    """Two captures: one of a 2-worker load run plus a read-back (Produce, Fetch,
    Metadata, ...), one of metadata and fetches only. Returns (paths, proxy ports)."""
    d = tmp_path_factory.mktemp("captures")
    paths, ports = [], []
    with BlockingClient(broker.bootstrap) as c:
        admin.create_topics(c, ["cap-a", "cap-b"], partitions=2)
    for i, topic in enumerate(["cap-a", "cap-b"]):
        path = d / f"run{i}.pcapng"
        with InspectorProxy([broker.bootstrap], capture=path) as proxy:
            if i == 0:
                spec = LoadSpec(topic=topic, producer=ProducerConfig.from_properties(
                                    {"bootstrap.servers": proxy.bootstrap, "linger.ms": "2"}),
                                rate=4000, num_records=4000, workers=2, interval_s=0.5)
                LoadRun(spec, config_for_summary={}).run()
            with BlockingClient(proxy.bootstrap, client_id=f"reader-{i}") as c:
                admin.fetch_metadata(c, [topic, "no-such-topic-here"])
                for p in range(2):
                    admin.read_partition(c, "cap-a", p)
        paths.append(str(path))
        ports.append(int(proxy.bootstrap.rsplit(":", 1)[1]))
    return paths, ports


def _decode_summary(paths, ports) -> dict:
    args = ["decode", *paths, "--summary", "--json"]
    for p in ports:
        args += ["--port", str(p)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def test_small_files_are_one_shard_and_large_ones_split_by_connection(captures):
    from kctl.spark.analyze import plan_shards
    paths, _ = captures
    assert [(s.index, s.shards) for s in plan_shards(paths)] == [(0, 1), (0, 1)]
    split = plan_shards(paths, split_bytes=1)
    first = [s for s in split if s.file == paths[0]]
    assert len(first) > 1
    conns = [c for s in first for c in s.conns]
    assert len(conns) == len(set(conns))        # each connection in exactly one shard


def test_analyze_matches_decode_summary(spark, captures, tmp_path):
    split_bytes = 1     # split every capture by connection: several tasks per file
    from kctl.spark.analyze import analyze
    paths, ports = captures
    expected = _decode_summary(paths, ports)
    got = analyze(paths, ports, str(tmp_path / "out"), spark=spark, split_bytes=split_bytes)
    if split_bytes == 1:
        assert got.shards > len(paths)       # more than one task per capture
    by_api = {r["api_name"]: r for r in got.latency}
    assert set(by_api) == set(expected["apis"])
    for name, e in expected["apis"].items():
        g = by_api[name]
        for k in ("requests", "responses", "request_bytes", "response_bytes", "latency_count"):
            assert g[k] == e[k], (name, k)
        if e["latency_count"]:
            for p in ("p50", "p90", "p99", "p100"):
                # HdrHistogram (3 significant digits, whole microseconds) vs exact.
                assert math.isclose(g["latency_ms"][p], e["latency_ms"][p], rel_tol=0.01, abs_tol=0.002), (name, p, g["latency_ms"], e["latency_ms"], e["latency_count"])
    errors = {r["error"]: r["count"] for r in got.errors}
    assert errors == expected["errors"]
    assert "Produce" in by_api and "Fetch" in by_api
    parts = spark.read.parquet(str(tmp_path / "out" / "partitions"))
    for direction, key in (("produce", "produced"), ("fetch", "fetched")):
        rows = (parts.where(f"direction = '{direction}'").groupBy("topic", "partition")
                .agg({"records": "sum", "bytes": "sum", "batches": "sum"}).collect())
        mine = {(r["topic"], r["partition"]): (r["sum(records)"], r["sum(bytes)"], r["sum(batches)"])
                for r in rows}
        theirs = {(p["topic"], p["partition"]): (p["records"], p["bytes"], p["batches"])
                  for p in expected[key]}
        assert mine == theirs, direction
    produced = sum(r["records"] for r in got.throughput
                   if r["direction"] == "produce" and r["topic"] == "cap-a")
    assert produced == sum(p["records"] for p in expected["produced"] if p["topic"] == "cap-a") >= 4000
    assert got.clients and got.clients[0]["bytes"] >= got.clients[-1]["bytes"]
    reqs = spark.read.parquet(str(tmp_path / "out" / "requests"))
    assert reqs.count() == got.requests
