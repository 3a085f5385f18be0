"""Stopping ``kctl produce`` and ``kctl consume`` (audit J): a second stop shortens the wait but the summary and
--json-out are still written; a stop bounds --verify's patience; a stop before the run
starts still writes an interrupted summary. Faults come from kctl's fault proxy."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from kctl.inspect.faults import FaultPlan
from kctl.inspect.proxy import InspectorProxy
from kctl.load.worker import STOPPED_AGAIN
from kctl.stats.summary import RunSummary

pytestmark = pytest.mark.broker

_topics = iter(range(10**6))


class ProduceRequests:
    """The proxy's ``on_frame``: how many Produce requests kctl has sent."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, ev) -> None:
        if ev.api_name == "Produce" and ev.direction == "request":
            self.count += 1

    def wait(self, n: int, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while self.count < n and time.monotonic() < deadline:
            time.sleep(0.02)
        assert self.count >= n, "kctl sent no Produce request"


def start(bootstrap, out, *extra) -> subprocess.Popen:
    args = [sys.executable, "-m", "kctl", "produce", "-b", bootstrap,
            "-t", f"pstop-{os.getpid()}-{next(_topics)}", "--partitions", "2",
            "--quiet", "--json-out", str(out), *extra]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def finish(proc: subprocess.Popen, timeout_s: float = 60.0) -> tuple[int, str, str, float]:
    """Waits for kctl; its status, stdout, stderr and when it ended (monotonic)."""
    try:
        out, err = proc.communicate(timeout=timeout_s)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    return proc.returncode, out, err, time.monotonic()


def accounted(s: RunSummary) -> None:
    c = s.counts
    assert s.unaccounted == 0, (c.scheduled, c.acked, c.failed, c.abandoned)
    assert c.abandoned == sum(c.abandoned_by_reason.values())


@pytest.mark.parametrize("verify", [False, True])
def test_a_second_ctrl_c_still_writes_the_summary(broker, tmp_path, verify):
    """Produce answers held 60 s: the first Ctrl-C waits for in-flight records (the stop
    grace), a second one ends that wait; the summary and --json-out are still written,
    the records without a verdict counted abandoned with the reason."""
    out = tmp_path / "s.json"
    requests = ProduceRequests()
    plan = FaultPlan(delay_ms=60_000, delay_apis=("Produce",))
    with InspectorProxy([broker.bootstrap], faults=plan, on_frame=requests) as proxy:
        proc = start(proxy.bootstrap, out, "--workers", "2", "--rate", "2k", "--duration", "20s",
                     *(["--verify"] if verify else []))
        requests.wait(2)
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        time.sleep(1.5)
        second = time.monotonic()
        proc.send_signal(signal.SIGINT)
        status, stdout, err, ended = finish(proc)
    assert status == 130, err
    # The second stop ended the stop grace's wait (5 s) for the held answers.
    assert ended - second < 4, f"{ended - second:.1f} s after the second stop"
    doc = json.loads(out.read_text())
    s = RunSummary.from_json(doc)
    assert s.run.interrupted and s.run.stopped_in == "run"
    assert s.counts.scheduled > 0 and s.counts.acked == 0
    accounted(s)
    assert s.counts.abandoned_by_reason.get(STOPPED_AGAIN), s.counts.abandoned_by_reason
    assert "interrupted: the run was stopped early" in err
    if verify:
        assert s.verify is None and "stopped a second time" in s.verify_error
        assert f"kctl: error: {s.verify_error}" in err


def test_verify_after_a_stop_has_the_stop_grace_to_reach_the_cluster(broker, tmp_path):
    """The broker stops answering mid-run, then Ctrl-C: the stop grace (5 s) is held for
    the records in flight, then --verify may try to reach the cluster for the stop grace,
    not max.block.ms (60 s); its error is on stderr as well as in --json-out."""
    out = tmp_path / "s.json"
    requests = ProduceRequests()
    with InspectorProxy([broker.bootstrap], on_frame=requests) as proxy:
        proc = start(proxy.bootstrap, out, "--workers", "1", "--rate", "1k", "--duration", "60s", "--verify")
        requests.wait(5)
        proxy.set_faults(FaultPlan(blackhole=True))
        time.sleep(1.0)
        stopped = time.monotonic()
        proc.send_signal(signal.SIGINT)
        status, stdout, err, ended = finish(proc, timeout_s=40)
    assert status == 130, err
    assert ended - stopped < 20, f"{ended - stopped:.1f} s after the stop"
    s = RunSummary.from_json(json.loads(out.read_text()))
    assert s.run.interrupted and s.run.stopped_in == "run"
    accounted(s)
    assert s.verify is None and s.verify_error and "stop grace" in s.verify_error, s.verify_error
    assert f"kctl: error: {s.verify_error}" in err


def test_a_stop_in_the_set_up_writes_an_interrupted_summary(broker, tmp_path):
    """Ctrl-C while the topic is being set up (its Metadata held by the proxy): no record
    was scheduled, and the summary and --json-out still say so, with where the stop came."""
    out = tmp_path / "s.json"
    metadata = []

    def on_frame(ev) -> None:
        if ev.api_name == "Metadata" and ev.direction == "request":
            metadata.append(ev)

    plan = FaultPlan(delay_ms=30_000, delay_apis=("Metadata",))
    with InspectorProxy([broker.bootstrap], faults=plan, on_frame=on_frame) as proxy:
        proc = start(proxy.bootstrap, out, "--rate", "1k", "--duration", "10s")
        deadline = time.monotonic() + 30
        while not metadata and time.monotonic() < deadline:
            time.sleep(0.02)
        assert metadata, "kctl asked no Metadata"
        proc.send_signal(signal.SIGINT)
        status, stdout, err, _ = finish(proc, timeout_s=30)
    assert status == 130, err
    s = RunSummary.from_json(json.loads(out.read_text()))
    assert s.run.interrupted and s.run.stopped_in == "set-up"
    assert s.counts.scheduled == 0 and s.counts.sent == 0
    assert "stopped before the run started" in err


def test_a_stop_while_a_group_joins_writes_an_interrupted_consume_summary(broker, tmp_path):
    """SIGTERM while the consumers join their group (JoinGroup answers held by the proxy):
    nothing was read, and the summary and --json-out still say so, stopped in the set-up."""
    out = tmp_path / "c.json"
    joins = []

    def on_frame(ev) -> None:
        if ev.api_name == "JoinGroup" and ev.direction == "request":
            joins.append(ev)

    topic = f"pstop-{os.getpid()}-{next(_topics)}"
    subprocess.run([sys.executable, "-m", "kctl", "produce", "-b", broker.bootstrap, "-t", topic,
                    "--partitions", "2", "--num-records", "100", "--quiet"], check=True, timeout=60,
                   capture_output=True)
    plan = FaultPlan(delay_ms=30_000, delay_apis=("JoinGroup",))
    with InspectorProxy([broker.bootstrap], faults=plan, on_frame=on_frame) as proxy:
        proc = subprocess.Popen([sys.executable, "-m", "kctl", "consume", "-b", proxy.bootstrap, "-t", topic,
                                 "--group", f"g-{topic}", "--consumers", "2", "--duration", "60s", "--quiet",
                                 "--json-out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
        deadline = time.monotonic() + 60
        while not joins and time.monotonic() < deadline:
            time.sleep(0.02)
        assert joins, "no consumer asked to join"
        proc.send_signal(signal.SIGTERM)
        status, stdout, err, _ = finish(proc, timeout_s=40)
    assert status == 130, err
    doc = json.loads(out.read_text())
    assert doc["run"]["interrupted"] is True and doc["run"]["stopped_in"] == "set-up"
    assert doc["counts"]["records"] == 0
    assert "stopped before the consumers started" in err


def test_verify_counts_records_reported_failed_that_were_written(broker, tmp_path):
    """Produce answers held 2.5 s with request.timeout.ms=1000: the batches time out and
    expire (DELIVERY_TIMEOUT) though the broker wrote them. --verify's verdict is about
    the acknowledged records only, and it says how many of the failed ones are in the log
    (read from each partition's log end before the run): the at-least-once surprise."""
    out = tmp_path / "s.json"
    plan = FaultPlan(delay_ms=2500, delay_apis=("Produce",))
    with InspectorProxy([broker.bootstrap], faults=plan) as proxy:
        proc = start(proxy.bootstrap, out, "--rate", "500", "--duration", "2s", "--verify",
                     "-X", "request.timeout.ms=1000", "-X", "delivery.timeout.ms=1500",
                     "-X", "enable.idempotence=false", "-X", "acks=1")
        status, stdout, err, _ = finish(proc, timeout_s=90)
    assert status == 1, err                      # records failed
    s = RunSummary.from_json(json.loads(out.read_text()))
    c, v = s.counts, s.verify
    assert c.failed > 0 and "DELIVERY_TIMEOUT" in c.failed_by_error
    assert v is not None and v.ok and v.expected == c.acked and v.found == c.acked
    assert 0 < v.written_unacked <= c.failed + c.abandoned
    assert f"{v.written_unacked} record(s) reported failed or abandoned were written" in stdout


def test_a_stop_during_verify_still_writes_the_run_summary(broker, tmp_path):
    """The run ends on its own; its --verify Fetch is held by the proxy; Ctrl-C then: the
    run's summary and --json-out are written, stopped in "verify", without a verdict."""
    out = tmp_path / "s.json"
    fetches = []

    def on_frame(ev) -> None:
        if ev.api_name == "Fetch" and ev.direction == "request":
            fetches.append(ev)

    plan = FaultPlan(delay_ms=30_000, delay_apis=("Fetch",))
    with InspectorProxy([broker.bootstrap], faults=plan, on_frame=on_frame) as proxy:
        proc = start(proxy.bootstrap, out, "--rate", "500", "--duration", "1s", "--verify")
        deadline = time.monotonic() + 60
        while not fetches and time.monotonic() < deadline:
            time.sleep(0.02)
        assert fetches, "--verify sent no Fetch"
        proc.send_signal(signal.SIGINT)
        status, stdout, err, _ = finish(proc, timeout_s=30)
    assert status == 130, err
    s = RunSummary.from_json(json.loads(out.read_text()))
    assert s.run.interrupted and s.run.stopped_in == "verify"
    assert s.counts.acked == s.counts.scheduled > 0
    assert s.verify is None and "stopped before it finished" in s.verify_error
    assert "its --verify was stopped" in err
