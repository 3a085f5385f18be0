"""``--verify`` with acks=0: a send completes at once with no offset (-1, as in the Java
client), so the verifier reads each partition from its log end before the run and
matches the run's records by their identity header (load/verify.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kctl.inspect.faults import FaultPlan
from kctl.inspect.proxy import InspectorProxy
from kctl.load.verify import Verification
from kctl.protocol.identity import IDENTITY, ScannedBatch, run_tag

RUN_ID = "0123456789ab"
TAG = run_tag(RUN_ID)


def batch(offset: int, worker: int, first_seq: int, count: int, tag: bytes = TAG) -> ScannedBatch:
    ids = b"".join(IDENTITY.pack(tag, worker, first_seq + i, 0) for i in range(count))
    return ScannedBatch(offset, offset + count, ids)


def test_offsetless_acks_are_found_by_identity_from_the_log_end_before_the_run():
    # Worker 0 sent 10 records to partition 0, worker 1 sent 5 to partition 1, acks=0.
    acked = {0: {0: [(-1, 10, 0)]}, 1: {1: [(-1, 5, 0)]}}
    v = Verification(RUN_ID, acked, since={0: 100, 1: 7})
    assert v.ranges[0][0] == 100 and v.ranges[1][0] == 7
    # Before ``since``: not this run's (even with its tag); another run's tag: ignored.
    v.add(0, [batch(90, 0, 0, 10), batch(100, 0, 0, 4), batch(104, 9, 0, 3, tag=b"zzzz"),
              batch(107, 0, 4, 6)])
    v.add(1, [batch(7, 1, 0, 5)])
    r = v.result(0.0)
    assert (r.expected, r.found, r.lost, r.duplicated, r.reordered, r.misplaced) == (15, 15, 0, 0, 0, 0)
    assert r.ok and r.partitions[0]["expected"] == 10 and r.partitions[1]["expected"] == 5


def test_offsetless_acks_lost_duplicated_and_reordered_are_counted():
    acked = {0: {0: [(-1, 10, 0)]}}
    v = Verification(RUN_ID, acked, since={0: 0})
    # seq 3-4 lost, seq 0-1 written twice, seq 8-9 before 5-7.
    v.add(0, [batch(0, 0, 0, 3), batch(3, 0, 0, 2), batch(5, 0, 8, 2), batch(7, 0, 5, 3)])
    r = v.result(0.0)
    assert (r.expected, r.lost, r.duplicated) == (10, 2, 2)
    assert r.reordered >= 1 and r.misplaced == 0 and not r.ok
    assert set(r.lost_examples) == {(0, 3), (0, 4)}


def test_offsetless_acks_beside_placed_ones_are_found_from_the_log_end_before_the_run():
    # acks=1: seq 0-3 acknowledged at 50..53; a retry of seq 4-5 (written by its first
    # attempt at 54..55) answered DUPLICATE_SEQUENCE_NUMBER, acknowledged with offset -1;
    # seq 6-9 at 56..59. Partition 1: seq 10-12 at 20..22, 12 never written.
    acked = {0: {0: [(50, 4, 0), (-1, 2, 4), (56, 4, 6)], 1: [(20, 3, 10)]}}
    v = Verification(RUN_ID, acked, since={0: 50, 1: 20})
    assert v.ranges[0][0] == 50
    v.add(0, [batch(50, 0, 0, 10)])
    v.add(1, [batch(20, 0, 10, 2)])
    r = v.result(0.0)
    assert (r.expected, r.found, r.lost, r.duplicated, r.misplaced) == (13, 12, 1, 0, 0)
    # Per partition: the records acknowledged there, found there, lost of them.
    assert r.partitions[0] == {"expected": 10, "found": 10, "lost": 0, "reordered": 0}
    assert r.partitions[1] == {"expected": 3, "found": 2, "lost": 1, "reordered": 0}


def test_per_partition_expected_is_the_acknowledged_count_not_the_range():
    # Two workers interleaved in one partition, a transaction marker at offset 4 (the
    # range 0..7 holds 6 acknowledged records), worker 1's record at offset 3 lost.
    acked = {0: {0: [(0, 2, 0), (5, 2, 2)]}, 1: {0: [(2, 2, 0)]}}
    v = Verification(RUN_ID, acked)
    v.add(0, [batch(0, 0, 0, 2), batch(2, 1, 0, 1), batch(5, 0, 2, 2)])
    r = v.result(0.0)
    assert r.lost == 1 and r.lost_examples == ((1, 1),)
    assert r.partitions[0] == {"expected": 6, "found": 5, "lost": 1, "reordered": 0}


def kctl(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "kctl", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "COLUMNS": "200"})


@pytest.mark.broker
def test_clean_acks0_verify_finds_every_record(broker, tmp_path):
    topic = f"acks0-clean-{os.getpid()}"
    # Records already in the topic before the run are not the run's.
    first = kctl("produce", "-b", broker.bootstrap, "-t", topic, "--partitions", "2",
                 "--num-records", "300", "--quiet")
    assert first.returncode == 0, first.stderr
    out = tmp_path / "s.json"
    r = kctl("produce", "-b", broker.bootstrap, "-t", topic, "--partitions", "2", "--workers", "2",
             "--num-records", "2000", "-X", "acks=0", "--verify", "--quiet", "--json-out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "verify: 2000 sent (acks=0), 2000 found, 0 lost, 0 duplicated, 0 reordered" in r.stdout
    v = json.loads(out.read_text())["verify"]
    assert v["ok"] and v["expected"] == v["found"] == 2000 and v["lost"] == 0
    assert sum(p["expected"] for p in v["partitions"].values()) == 2000


@pytest.mark.broker
def test_acks0_verify_finds_batches_the_fault_layer_dropped(broker, tmp_path):
    out = tmp_path / "s.json"
    plan = FaultPlan(lose_rate=1.0, lose_limit=2, seed=4)
    with InspectorProxy([broker.bootstrap], faults=plan) as proxy:
        r = kctl("produce", "-b", proxy.bootstrap, "-t", f"acks0-lost-{os.getpid()}", "--partitions", "2",
                 "--num-records", "3000", "--rate", "3000", "-X", "acks=0", "-X", "linger.ms=5",
                 "--verify", "--quiet", "--json-out", str(out))
        faults = proxy.snapshot().faults
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    v = json.loads(out.read_text())["verify"]
    assert faults.get("lost") == 2, faults
    # Exactly the records of the dropped batches are lost; every other one is found.
    assert v["expected"] == 3000 and v["lost"] == faults["lost_records"] > 0, (v, faults)
    assert v["found"] + v["lost"] == 3000
    assert v["duplicated"] == 0 and v["misplaced"] == 0
    assert f"{v['lost']} lost" in r.stdout


def test_acks0_verify_without_identity_headers_is_refused_in_one_line():
    r = kctl("produce", "-b", "127.0.0.1:1", "-t", "x", "-X", "acks=0", "--verify", "--no-id-headers",
             timeout=30)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "--verify needs the record identity headers" in r.stderr.strip().splitlines()[-1]
