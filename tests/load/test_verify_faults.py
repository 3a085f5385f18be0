"""``kctl produce --verify`` under faults of kctl's fault layer (kctl inspect) in front of
the embedded broker: records acknowledged without an offset (a retry the broker answered
DUPLICATE_SEQUENCE_NUMBER) are found; per-partition figures count acknowledged records;
a verify read whose connection breaks reconnects; one that cannot read keeps the run's
summary and JSON; the log end offsets are asked again (one round each time, on a fresh
Metadata) while the leader's error may pass, within max.block.ms, and an error that will
not pass fails at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kctl.inspect.faults import ErrorRewrite, FaultPlan
from kctl.inspect.proxy import InspectorProxy

pytestmark = pytest.mark.broker

_topics = iter(range(10**6))


def produce(bootstrap, out, *extra, partitions=1):
    return subprocess.run(
        [sys.executable, "-m", "kctl", "produce", "-b", bootstrap,
         "-t", f"vfaults-{os.getpid()}-{next(_topics)}", "--partitions", str(partitions),
         "--workers", "1", "--quiet", "--verify", "--json-out", str(out), *extra],
        timeout=120, capture_output=True, text=True)


def test_records_acknowledged_without_an_offset_are_found(broker, tmp_path):
    """A Produce answer rewritten to NOT_LEADER_OR_FOLLOWER after the broker wrote the
    batch: the retry is answered DUPLICATE_SEQUENCE_NUMBER and acknowledged with offset -1
    (as Java's Sender.completeBatch). --verify finds those records in the partition from
    its log end before the run; none is lost."""
    out = tmp_path / "s.json"
    plan = FaultPlan(error=ErrorRewrite("NOT_LEADER_OR_FOLLOWER", 0.5), seed=2)
    with InspectorProxy([broker.bootstrap], faults=plan) as proxy:
        r = produce(proxy.bootstrap, out, "--num-records", "20", "--rate", "20")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    assert doc["errors_by_name"].get("DUPLICATE_SEQUENCE_NUMBER", 0) >= 1, doc["errors_by_name"]
    assert "verify: 20 acknowledged, 20 found, 0 lost, 0 duplicated" in r.stdout
    assert doc["verify"]["partitions"]["0"] == {"expected": 20, "found": 20, "lost": 0, "reordered": 0}


def test_per_partition_expected_and_lost_count_acknowledged_records(broker, tmp_path):
    """A batch the fault layer drops while telling kctl it was written: acknowledged,
    never in the log. Each partition's expected is what was acknowledged there (the
    summary's records_acked) and its lost what of it was found nowhere."""
    out = tmp_path / "s.json"
    plan = FaultPlan(lose_rate=1.0, lose_limit=1, seed=1)
    with InspectorProxy([broker.bootstrap], faults=plan) as proxy:
        r = produce(proxy.bootstrap, out, "--num-records", "600", "--rate", "3000", "-X", "acks=1",
                    "-X", "enable.idempotence=false", partitions=2)
        faults = proxy.snapshot().faults
    assert r.returncode == 1, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    v = doc["verify"]
    assert v["lost"] == faults["lost_records"] > 0, (v, faults)
    acked = {str(p["partition"]): p["records_acked"] for p in doc["partitions"]}
    assert {p: s["expected"] for p, s in v["partitions"].items()} == acked
    assert sum(s["lost"] for s in v["partitions"].values()) == v["lost"]
    assert all(s["found"] + s["lost"] == s["expected"] for s in v["partitions"].values()), v


def test_verify_reconnects_when_a_fetch_connection_breaks(broker, tmp_path):
    """Fetch answers cut part-way (the connection closed): the read asks again from the
    same offset over a new connection, as a consumer reconnects; every record is found."""
    out = tmp_path / "s.json"
    plan = FaultPlan(drop_rate=0.7, drop_apis=("Fetch",), seed=3)
    with InspectorProxy([broker.bootstrap], faults=plan) as proxy:
        r = produce(proxy.bootstrap, out, "--num-records", "2000", "--rate", "4000", partitions=4)
        faults = proxy.snapshot().faults
    assert faults.get("dropped", 0) >= 1, faults
    assert r.returncode == 0, r.stdout + r.stderr
    v = json.loads(out.read_text())["verify"]
    assert v["ok"] and v["expected"] == v["found"] == 2000


def test_a_failed_verify_read_keeps_the_summary_and_json(broker, tmp_path):
    """Every Fetch answer cut: the read gives up after max.block.ms. The run's summary
    (perf-test's line) and --json-out are written, with verify_error; then the reason on
    one line and exit 2."""
    out = tmp_path / "s.json"
    plan = FaultPlan(drop_rate=1.0, drop_apis=("Fetch",), seed=1)
    with InspectorProxy([broker.bootstrap], faults=plan) as proxy:
        r = produce(proxy.bootstrap, out, "--num-records", "500", "--rate", "5000",
                    "-X", "max.block.ms=1500")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "500 records sent" in r.stdout and "verify:" not in r.stdout
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("kctl: error: --verify could not read") and "max.block.ms=1500 ms" in last, last
    assert "Traceback" not in r.stderr
    doc = json.loads(out.read_text())
    assert doc["counts"]["acked"] == 500 and "verify" not in doc
    assert doc["verify_error"].startswith("--verify could not read")


def test_end_offsets_are_asked_again_while_the_leader_error_may_pass(broker, tmp_path):
    """The first three ListOffsets answers say NOT_LEADER_OR_FOLLOWER (a leader moving):
    the end offsets before the run are asked again until the leader answers (one ListOffsets
    a round, each after a fresh Metadata), and acks=0 records are read back from them."""
    out = tmp_path / "s.json"
    plan = FaultPlan(error=ErrorRewrite("NOT_LEADER_OR_FOLLOWER", apis=("ListOffsets",), limit=3), seed=1)
    with InspectorProxy([broker.bootstrap], faults=plan) as proxy:
        r = produce(proxy.bootstrap, out, "--num-records", "200", "--rate", "2000", "-X", "acks=0",
                    partitions=2)
        snap = proxy.snapshot()
    assert r.returncode == 0, r.stdout + r.stderr
    assert snap.faults["errors_injected"] == 3 * 2, snap.faults     # 3 answers, both partitions each
    # three rounds answered with the error, one before the run that passed, one after it
    assert snap.apis["ListOffsets"].responses == 5, snap.apis["ListOffsets"]
    v = json.loads(out.read_text())["verify"]
    assert v["ok"] and v["expected"] == v["found"] == 200


def test_end_offsets_give_up_at_max_block_ms_naming_the_partitions(broker, tmp_path):
    out = tmp_path / "s.json"
    plan = FaultPlan(error=ErrorRewrite("NOT_LEADER_OR_FOLLOWER", apis=("ListOffsets",)), seed=1)
    with InspectorProxy([broker.bootstrap], faults=plan) as proxy:
        r = produce(proxy.bootstrap, out, "--num-records", "20", "-X", "max.block.ms=1500", partitions=2)
        asked = proxy.snapshot().apis["ListOffsets"].responses
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("kctl: error: --verify: the log end offset of ") and \
        "before the run is unknown (NOT_LEADER_OR_FOLLOWER from broker" in last, last
    assert f"partition(s) 0, 1; asked {asked} time(s) for max.block.ms=1500 ms)" in last, (asked, last)
    assert asked >= 3                                    # 100, 200, 400, 800 ms backoff within 1.5 s


def test_end_offsets_error_that_will_not_pass_fails_at_once(broker, tmp_path):
    out = tmp_path / "s.json"
    plan = FaultPlan(error=ErrorRewrite("TOPIC_AUTHORIZATION_FAILED", apis=("ListOffsets",)), seed=1)
    with InspectorProxy([broker.bootstrap], faults=plan) as proxy:
        r = produce(proxy.bootstrap, out, "--num-records", "20", partitions=2)
        asked = proxy.snapshot().apis["ListOffsets"].responses
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert "before the run is unknown (TOPIC_AUTHORIZATION_FAILED from broker" in last, last
    assert "partition(s) 0, 1)" in last and "asked" not in last, last
    assert asked == 1                                    # max.block.ms (60 s) was not waited out
