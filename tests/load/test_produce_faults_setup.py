"""``kctl produce``'s set-up (ApiVersions, Metadata, CreateTopics, the log end offsets
before a --verify run) under connections cut by kctl's fault layer: asked again over a
new connection, with backoff, for at most max.block.ms (as the Java producer blocks for
its metadata; engine/setup_retry.py), and ``kctl consume``'s topic check, bounded by
default.api.timeout.ms."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kctl.inspect.faults import FaultPlan
from kctl.inspect.proxy import InspectorProxy

pytestmark = pytest.mark.broker

_topics = iter(range(10**6))


def produce(bootstrap, out, *extra, topic=None):
    return subprocess.run(
        [sys.executable, "-m", "kctl", "produce", "-b", bootstrap,
         "-t", topic or f"sfaults-{os.getpid()}-{next(_topics)}", "--partitions", "2",
         "--workers", "1", "--quiet", "--verify", "--json-out", str(out),
         "--num-records", "500", "--rate", "5000", *extra],
        timeout=120, capture_output=True, text=True)


def test_a_create_topics_answer_lost_is_success_when_the_topic_is_there(broker, tmp_path):
    """Every CreateTopics answer is cut: the first one created the topic; set-up asks
    Metadata again over a new connection, finds the topic, and the run goes on."""
    out = tmp_path / "s.json"
    plan = FaultPlan(drop_rate=1.0, drop_apis=("CreateTopics",), seed=1)
    with InspectorProxy([broker.bootstrap], faults=plan) as proxy:
        r = produce(proxy.bootstrap, out)
        faults = proxy.snapshot().faults
    assert faults.get("dropped") == 1, faults
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    assert doc["config"]["partitions"] == 2 and doc["verify"]["found"] == 500


def test_set_up_survives_dropped_connections(broker, tmp_path):
    """ApiVersions, Metadata, CreateTopics and ListOffsets answers cut at random (the
    producer engine's own connections too): the run completes and reads back whole."""
    out = tmp_path / "s.json"
    plan = FaultPlan(drop_rate=0.4, drop_apis=("ApiVersions", "Metadata", "CreateTopics", "ListOffsets"),
                     seed=5)
    with InspectorProxy([broker.bootstrap], faults=plan) as proxy:
        r = produce(proxy.bootstrap, out)
        faults = proxy.snapshot().faults
    assert faults.get("dropped", 0) >= 2, faults
    assert r.returncode == 0, r.stdout + r.stderr
    v = json.loads(out.read_text())["verify"]
    assert v["ok"] and v["found"] == 500


def test_set_up_gives_up_after_max_block_ms_and_says_so(broker, tmp_path):
    """Every Metadata answer cut, --no-create-topic: after max.block.ms the command ends
    with one line naming the step, the last reason and the bound."""
    out = tmp_path / "s.json"
    plan = FaultPlan(drop_rate=1.0, drop_apis=("Metadata",), seed=1)
    with InspectorProxy([broker.bootstrap], faults=plan) as proxy:
        r = produce(proxy.bootstrap, out, "--no-create-topic", "-X", "max.block.ms=1200")
        faults = proxy.snapshot().faults
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("kctl: error: setting up topic") and "max.block.ms=1200 ms" in last, last
    assert faults.get("dropped", 0) >= 3, faults


def test_consume_topic_check_gives_up_after_default_api_timeout_ms(broker):
    plan = FaultPlan(drop_rate=1.0, drop_apis=("Metadata",), seed=1)
    with InspectorProxy([broker.bootstrap], faults=plan) as proxy:
        r = subprocess.run([sys.executable, "-m", "kctl", "consume", "-b", proxy.bootstrap, "-t", "any",
                            "--duration", "1s", "-X", "default.api.timeout.ms=1000"],
                           timeout=60, capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("kctl: error: looking up topic 'any'") and "default.api.timeout.ms=1000 ms" in last, last
