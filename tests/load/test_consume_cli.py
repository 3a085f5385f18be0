"""``kctl consume`` and ``kctl produce --consume`` end to end against the embedded broker
(the real command in a subprocess): a backlog drained in assign mode and by a group of
two consumer processes (the second member's join rebalances the group), the e2e clock
in every output (stdout lines, summary JSON, .hlog), and a producer stall injected by
the fault proxy showing on the e2e clock (intended send time, not send time)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from kctl.inspect.faults import FaultPlan
from kctl.inspect.proxy import InspectorProxy
from kctl.percentiles import value_at_percentile
from kctl.stats.hlog import read_interval_log
from kctl.stats.latency import PERCENTILES, new_histogram

pytestmark = pytest.mark.broker


def kctl(*args, timeout=180):
    run = subprocess.run([sys.executable, "-m", "kctl", *args], capture_output=True, text=True,
                         timeout=timeout, env={**os.environ, "COLUMNS": "200"})
    assert run.returncode == 0, f"exit {run.returncode}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    return run


def test_backlog_drained_in_assign_mode_with_e2e_everywhere(broker, tmp_path):
    js, hlog = tmp_path / "c.json", tmp_path / "c.hlog"
    run = kctl("consume", "-b", broker.bootstrap, "-t", "backlog-assign", "--backlog", "6000",
               "--partitions", "3", "--consumers", "2", "--verify", "--interval", "0.5",
               "--json-out", str(js), "--hdr-out", str(hlog))
    s = json.loads(js.read_text())
    b = s["backlog"]
    assert b["records"] == 6000 and b["drained"] and b["drain_s"] > 0
    assert b["records_per_s"] == pytest.approx(6000 / b["drain_s"], rel=0.01)
    lines = run.stdout.splitlines()
    assert any(line.startswith(f"backlog: 6000 records drained in {b['drain_s']:.3f} s") for line in lines)
    # The e2e clock: summary JSON, the closing e2e line, the .hlog.
    e2e = s["latency"]["e2e"]
    assert e2e["count"] == 6000 and e2e["negative"] == 0 and e2e["p50_ms"] > 0
    assert any(line.startswith("e2e: p50 ") for line in lines)
    assert {iv.tag for iv in read_interval_log(hlog)} == {"e2e"}
    assert sum(iv.histogram.get_total_count() for iv in read_interval_log(hlog)) == 6000
    # Java's HdrHistogram rank (kctl/percentiles.py) over the .hlog gets exactly the printed and summary figures.
    logged = new_histogram()
    for iv in read_interval_log(hlog):
        logged.add(iv.histogram)
    for key, pc in PERCENTILES:
        assert e2e[f"{key}_ms"] == value_at_percentile(logged, pc) / 1000, key
    assert e2e["max_ms"] == logged.get_max_value() / 1000
    f = {k: value_at_percentile(logged, p) / 1000 for k, p in (("p50", 50), ("p99", 99), ("p99.9", 99.9))}
    assert (f"e2e: p50 {f['p50']:.3f} ms, p99 {f['p99']:.3f} ms, p99.9 {f['p99.9']:.3f} ms, "
            f"max {logged.get_max_value() / 1000:.3f} ms, 6000 records") in run.stdout
    assert s["run"]["mode"] == "assign" and s["run"]["consumers"] == 2
    assert s["counts"]["fetch_requests"] > 0 and s["rates"]["records_per_fetch"] > 0
    assert s["lag"]["final"] == 0 and s["lag"]["timeline"]
    assert s["verify"]["lost"] == 0
    assert s["verify"]["expected"] == s["verify"]["found"] == 6000
    assert "verify: 6000 expected, 6000 found, 0 lost, 0 duplicated, 0 reordered" in run.stdout
    # kafka-consumer-perf-test's header and values, last on stdout.
    assert any(line.startswith("start.time, end.time, data.consumed.in.MB") for line in lines[-4:])


def test_group_of_two_consumers_rebalances_and_reads_everything_once(broker, tmp_path):
    js = tmp_path / "g.json"
    run = kctl("consume", "-b", broker.bootstrap, "-t", "backlog-group", "--group", "kctl-test-group",
         "--backlog", "4000", "--partitions", "4", "--consumers", "2", "--verify", "--quiet",
         "-X", "heartbeat.interval.ms=300", "-X", "partition.assignment.strategy=cooperative-sticky",
         "--json-out", str(js))
    s = json.loads(js.read_text())
    assert s["run"]["mode"] == "group" and s["run"]["consumers"] == 2
    # Each member took part in a rebalance (they may join in one generation; a second
    # member joining a settled group is tests/engine/test_consumer_live.py's case).
    assert s["counts"]["rebalances"] >= 2, s["counts"]
    # Closing commits with the member's generation, then leaves: no UNKNOWN_MEMBER_ID.
    assert s["counts"]["commits"] >= 1 and s["counts"]["commit_failures"] == 0, s["counts"]
    c = s["counts"]
    assert (f"group: {c['rebalances']} rebalance(s) (joins completed, summed over the consumers), "
            f"{c['commits']} commit(s), 0 failed") in run.stdout.splitlines()
    v = s["verify"]
    assert v["expected"] == v["found"] == 4000 and v["lost"] == v["duplicated"] == v["reordered"] == 0
    assert s["backlog"]["drained"] and s["latency"]["e2e"]["count"] == 4000
    # Every partition's records were consumed by someone, as many as the backlog wrote to
    # it. (The sticky partitioner spreads ~17 batches over 4 partitions: one of them can
    # get none, about one run in thirty, so the written counts are the reference.)
    written = {int(p): c["expected"] for p, c in v["partitions"].items() if c["expected"]}
    assert {p["partition"]: p["records"] for p in s["partitions"] if p["records"]} == written


def test_no_fetch_on_the_wire_before_the_common_start_and_the_window_opens_there(broker, tmp_path):
    """Watched through kctl inspect's proxy: a group of two consumers sends its first
    Fetch after the common start (the run's start), not during the start margin (a
    quarter of a backlog arrived before it, and the drain rate came out doubled). The
    measured window opens at the common start, so the summary's rate and the backlog's
    drain rate agree."""
    js = tmp_path / "w.json"
    fetches: list[int] = []

    def on_frame(ev):
        if ev.api_name == "Fetch" and ev.direction == "request":
            fetches.append(ev.ts_ns)

    with InspectorProxy([broker.bootstrap], on_frame=on_frame) as proxy:
        kctl("consume", "-b", proxy.bootstrap, "-t", "backlog-wire", "--group", "kctl-wire-group",
             "--backlog", "20000", "--partitions", "2", "--consumers", "2", "--quiet",
             "-X", "heartbeat.interval.ms=300", "--json-out", str(js))
    s = json.loads(js.read_text())
    start_ns = s["run"]["start_unix_ms"] * 1_000_000          # floored to the ms: 1 ms of slack
    assert fetches and min(fetches) >= start_ns, (min(fetches) - start_ns) / 1e6
    b = s["backlog"]
    assert b["drained"] and s["counts"]["records"] == 20000
    assert s["run"]["measured_s"] == pytest.approx(b["drain_s"], abs=0.005)
    assert s["rates"]["records_per_s"] == pytest.approx(b["records_per_s"], rel=0.02)


def test_produce_consume_e2e_in_every_output_and_a_stall_on_the_e2e_clock(broker, tmp_path):
    js, hlog = tmp_path / "pc.json", tmp_path / "pc.hlog"
    responses = []

    def on_frame(ev):
        if ev.api_name == "Produce" and ev.direction == "response":
            responses.append(ev.ts_ns)

    with InspectorProxy([broker.bootstrap], on_frame=on_frame) as proxy:
        def stall():
            # Once the run is producing, hold one Produce answer for 1.5 s.
            deadline = time.monotonic() + 60
            while len(responses) < 50 and time.monotonic() < deadline:
                time.sleep(0.01)
            proxy.set_faults(FaultPlan(delay_ms=1500, delay_apis=("Produce",)))
            time.sleep(0.02)
            proxy.set_faults(None)

        t = threading.Thread(target=stall, daemon=True)
        t.start()
        run = kctl("produce", "-b", proxy.bootstrap, "-t", "pc-stall", "--partitions", "2", "--rate", "2000",
                   "--duration", "5s", "--workers", "1", "--consume", "--verify", "--interval", "0.5",
                   "--consumer-property", "fetch.max.wait.ms=50",
                   "-X", "max.in.flight.requests.per.connection=1", "-X", "enable.idempotence=false",
                   "-X", "acks=1", "--json-out", str(js), "--hdr-out", str(hlog))
        t.join(timeout=5)
    s = json.loads(js.read_text())
    e2e, intended = s["latency"]["e2e"], s["latency"]["intended"]
    assert e2e["count"] == s["counts"]["acked"] == 10_000
    # The stall is on the e2e clock: records scheduled during it were consumed late
    # by at least the stall (their intended send time, not their send time, counts).
    assert e2e["max_ms"] > 1000 and e2e["p99_ms"] > 1000, e2e
    assert e2e["max_ms"] >= intended["max_ms"] * 0.9
    assert e2e["negative"] == 0
    # Every output carries e2e: interval lines, the closing line, JSON, the .hlog.
    intervals = [line for line in run.stdout.splitlines() if "records acked" in line]
    assert intervals and all("e2e p50" in line for line in intervals)
    assert any(line.startswith("e2e: p50 ") and "10000 records consumed" in line for line in run.stdout.splitlines())
    assert s["consume"]["counts"]["matched"] == 10_000
    tags = {iv.tag for iv in read_interval_log(hlog)}
    assert {"intended", "send", "request", "e2e"} <= tags
    # Verified from what the consumers read, against the acknowledgements.
    assert s["verify"]["expected"] == s["verify"]["found"] == 10_000 and s["verify"]["lost"] == 0


def test_two_kctl_processes_measure_and_report_the_clock_offset(broker, tmp_path):
    """Producer and consumer as two kctl processes (as on two hosts): `produce
    --clock-server` answers, `consume --clock-peer` measures the offset and reports it
    beside e2e (here one kernel clock: 0 within the measured bound)."""
    js = tmp_path / "peer.json"
    producer = subprocess.Popen(
        [sys.executable, "-m", "kctl", "produce", "-b", broker.bootstrap, "-t", "two-procs", "--partitions", "2",
         "--rate", "1000", "--duration", "8s", "--workers", "1", "--clock-server", "127.0.0.1:0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        address = None
        deadline = time.monotonic() + 60
        while address is None and time.monotonic() < deadline:
            line = producer.stderr.readline()
            if "answering clock-offset exchanges at " in line:
                address = line.split(" at ", 1)[1].split()[0]
        assert address and address.startswith("127.0.0.1:"), address
        run = kctl("consume", "-b", broker.bootstrap, "-t", "two-procs", "--from", "end", "--consumers", "1",
                   "--duration", "3s", "--clock-peer", address, "--json-out", str(js),
                   "-X", "fetch.max.wait.ms=50")
    finally:
        producer.wait(timeout=60)
    s = json.loads(js.read_text())
    clock = s["clock"]
    assert clock["method"].startswith("NTP-style exchange with 127.0.0.1:") and clock["samples"] >= 1
    assert abs(clock["offset_ms"]) <= clock["error_ms"]
    e2e = s["latency"]["e2e"]
    assert e2e["count"] > 500 and e2e["negative"] == 0
    assert "e2e: p50 " in run.stdout
    # Not a terminal: the offset is still reported beside the figures, as clock_text says it.
    lines = run.stdout.splitlines()
    clock_line = next(x for x in lines if x.startswith("clock offset: "))
    assert "ms +/- " in clock_line and "NTP-style exchange with 127.0.0.1:" in clock_line
    assert lines.index(clock_line) == next(i for i, x in enumerate(lines) if x.startswith("e2e: p50 ")) + 1


@pytest.mark.parametrize("command", ["consume", "produce --consume"])
def test_sigterm_stops_the_consumers_as_ctrl_c_does(broker, tmp_path, command):
    """SIGTERM to kctl alone (``kill PID``, ``timeout``) mid-run stops the consumer
    processes (and the producer workers of ``produce --consume``) in order, as Ctrl-C does:
    the summary is written and says ``interrupted``, nothing failed, exit 130, no traceback,
    and no process of the run is left (before, SIGTERM killed the parent alone and the
    consumers read on to the end of their --duration)."""
    from kctl.engine import admin
    from kctl.engine.blocking_client import BlockingClient
    from kctl.stats.summary import RunSummary
    from tests.stop_signal import KctlProcess, group_gone

    topic = f"sigterm-{command.replace(' --', '-')}-{os.getpid()}"
    js = tmp_path / "s.json"
    common = ("-b", broker.bootstrap, "-t", topic, "--interval", "0.25", "--json-out", str(js))
    if command == "consume":
        with BlockingClient(broker.bootstrap) as c:
            admin.create_topics(c, [topic], partitions=2)
        kctl_ = KctlProcess("consume", *common, "--consumers", "2", "--from", "end", "--duration", "60s")
    else:
        kctl_ = KctlProcess("produce", *common, "--partitions", "2", "--workers", "1", "--rate", "1000",
                            "--duration", "60s", "--consume", "--consumers", "2")
    try:
        kctl_.wait_for(lambda line: line.strip() != "")    # an interval line: under way
        t0 = time.monotonic()
        status = kctl_.stop()
        stopped_s = time.monotonic() - t0
    finally:
        kctl_.kill_group()
    err = kctl_.stderr
    assert status == 130, err
    assert "interrupted: " in err and "Traceback" not in err
    assert group_gone(kctl_.pgid), "a process of the run outlived kctl"
    assert stopped_s < 20
    doc = json.loads(js.read_text())
    if command == "consume":
        run = doc["run"]
        assert run["interrupted"] and run["consumers"] == 2 and run["consumers_failed"] == []
        assert run["duration_s"] < 30
    else:
        s = RunSummary.from_json(doc)
        assert s.run.interrupted and doc["run"]["workers_failed"] == []
        assert s.counts.acked > 0 and s.unaccounted == 0
        assert doc["consume"]["run"]["consumers_failed"] == [] and doc["consume"]["run"]["interrupted"]


def test_group_without_from_reads_from_the_beginning_stops_idle_and_times_the_join(broker, tmp_path):
    """perf-test's defaults in a group run: partitions without a committed offset start at
    the beginning (not the Java client's latest); a run short of --num-records ends after
    --timeout without a record and says how many it read; rebalance.time.ms covers the
    join (every JoinGroup answer held 1.5 s by the fault proxy) and the columns add up."""
    kctl("produce", "-b", broker.bootstrap, "-t", "group-prefilled", "--partitions", "2",
         "--num-records", "3000", "--workers", "1", "--quiet")
    js = tmp_path / "g.json"
    with InspectorProxy([broker.bootstrap]) as proxy:
        proxy.set_faults(FaultPlan(delay_ms=1500, delay_apis=("JoinGroup",)))
        t0 = time.monotonic()
        run = kctl("consume", "-b", proxy.bootstrap, "-t", "group-prefilled", "--group", "kctl-prefilled",
                   "--consumers", "2", "--num-records", "3500", "--timeout", "2000", "--quiet",
                   "--json-out", str(js))
        took = time.monotonic() - t0
    s = json.loads(js.read_text())
    assert s["counts"]["records"] == 3000, s["counts"]       # every record, from offset 0
    assert s["config"]["consumer"]["auto.offset.reset"] == "earliest"
    assert took < 60, took                                      # ended idle, did not hang
    lines = run.stdout.strip().splitlines()
    assert "WARNING: read 3000 of the 3500 records asked (--num-records): no record for 2 s" in run.stderr
    assert "WARNING" not in run.stdout
    header, values = lines[-2], lines[-1]
    assert header.startswith("start.time, end.time")
    cols = [x.strip() for x in values.split(",")]

    def ms(text: str) -> int:
        day, hh, mm, ss, milli = text.replace(" ", ":").split(":")
        return int(time.mktime(time.strptime(f"{day} {hh}:{mm}:{ss}", "%Y-%m-%d %H:%M:%S"))) * 1000 + int(milli)

    start, end = ms(cols[0]), ms(cols[1])
    rebalance, fetch = int(cols[6]), int(cols[7])
    assert end - start - rebalance == fetch
    assert rebalance >= 1500, cols                               # the held JoinGroup is in it
    assert fetch >= 2000, cols                                   # the idle wait is fetching time
    mb = float(cols[2])
    assert float(cols[3]) == pytest.approx(mb / ((end - start) / 1000), abs=1e-3)
    assert float(cols[5]) == pytest.approx(3000 / ((end - start) / 1000), rel=1e-3)
    assert float(cols[9]) == pytest.approx(3000 / (fetch / 1000), rel=1e-3)


def test_assign_mode_starts_where_auto_offset_reset_says(broker, tmp_path):
    """Java's assign() without a seek: -X auto.offset.reset=latest reads none of the
    records already there (kctl read them all from the beginning), none fails in one line
    with Java's NoOffsetForPartitionException wording."""
    kctl("produce", "-b", broker.bootstrap, "-t", "assign-reset", "--partitions", "2",
         "--num-records", "500", "--workers", "1", "--quiet")
    read = {}
    for name, args in (("latest", ("-X", "auto.offset.reset=latest")), ("end", ("--from", "end"))):
        js = tmp_path / f"{name}.json"
        kctl("consume", "-b", broker.bootstrap, "-t", "assign-reset", "--consumers", "1", *args,
             "--duration", "2s", "--quiet", "--json-out", str(js))
        s = json.loads(js.read_text())
        read[name] = s["counts"]["records"]
    assert s["config"]["from"] == "end" and json.loads((tmp_path / "latest.json").read_text())[
        "config"]["from"] == "auto.offset.reset=latest"
    # Both start at ListOffsets "latest" (Tansu answers the last batch's base offset, not
    # the log end, so a few records may follow; a real broker answers the end: none).
    assert read["latest"] == read["end"] < 500, read
    run = subprocess.run([sys.executable, "-m", "kctl", "consume", "-b", broker.bootstrap, "-t", "assign-reset",
                          "--consumers", "1", "-X", "auto.offset.reset=none", "--duration", "2s", "--quiet"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run                  # kctl's exit status for an error line
    err = run.stderr.strip().splitlines()
    assert len(err) == 1, run.stderr
    assert ("Undefined offset with no reset policy for partitions: [assign-reset-0, assign-reset-1] "
            "(auto.offset.reset=none)") in err[0]


@pytest.mark.parametrize("fault", ["blackhole", "commit-unanswered"])
def test_ctrl_c_under_a_dead_coordinator_reports_the_commit_on_close(broker, tmp_path, fault):
    """The audit's run: a group consumer's coordinator stops answering, then Ctrl-C. The
    consumer's close is bounded by min(30 s, request.timeout.ms) (3 s here) and the parent
    waits that bound out before any kill, so the failed commit on close is reported (the
    WARNING line, the summary's failed_commits, counts.commit_failures) and kctl exits
    soon after the bound (15.4 s after the signal before, with nothing reported). No
    auto-commit goes out while closing (before: one every auto.commit.interval.ms).
    ``blackhole``: nothing is answered (requests still reach the broker). ``commit-unanswered``:
    only OffsetCommit goes unanswered, so the coordinator is still known when the bound
    passes and LeaveGroup is written then, as Java's close does."""
    from tests.stop_signal import KctlProcess

    topic = f"close-dead-{fault}-{os.getpid()}"
    js = tmp_path / "d.json"
    # Records, so the consumer has each partition's end from a Fetch answer before the fault
    # (kctl consume asks the end of a partition never fetched after the run, through the fault).
    kctl("produce", "-b", broker.bootstrap, "-t", topic, "--partitions", "2", "--num-records", "2000",
         "--workers", "1", "--quiet")
    frames: list[tuple[int, str, str]] = []

    def on_frame(ev):
        frames.append((time.time_ns(), ev.api_name, ev.direction))

    with InspectorProxy([broker.bootstrap], on_frame=on_frame) as proxy:
        kctl_ = KctlProcess("consume", "-b", proxy.bootstrap, "-t", topic, "--group", f"g-{topic}",
                            "--consumers", "1", "--duration", "60s", "--interval", "0.25",
                            "--json-out", str(js), "-X", "request.timeout.ms=3000",
                            "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=300",  # a quick join
                            "-X", "auto.commit.interval.ms=" + ("500" if fault == "blackhole" else "60000"))
        try:
            kctl_.wait_for(lambda line: line.split(" ", 1)[0].isdigit() and line.split(" ", 1)[0] != "0")
            proxy.set_faults(FaultPlan(blackhole=True) if fault == "blackhole" else
                             FaultPlan(delay_ms=30000, delay_apis=("OffsetCommit",)))
            time.sleep(0.3)
            signalled = time.time_ns()
            t0 = time.monotonic()
            status = kctl_.stop(signal.SIGINT)
            stopped_s = time.monotonic() - t0
        finally:
            kctl_.kill_group()
            proxy.set_faults(None)
    err = kctl_.stderr
    assert status == 130, err
    assert stopped_s < 3 + 5, err          # the close bound, and the exit margin at most
    assert "WARNING: consumer 0: the commit on close failed (" in err, err
    doc = json.loads(js.read_text())
    assert [f["when"] for f in doc["failed_commits"]] == ["close"]
    assert doc["counts"]["commit_failures"] >= 1
    assert doc["run"]["consumers_failed"] == []
    after = [api for ts, api, d in frames if ts >= signalled and d == "request"]
    # The closing commit; an auto-commit may have gone out between the signal and the close.
    assert after.count("OffsetCommit") <= 2, after
    if fault == "commit-unanswered":
        assert "OffsetCommit not answered within the close's 3 s" in doc["failed_commits"][0]["error"]
        assert after.count("OffsetCommit") == 1 and "LeaveGroup" in after, after
        assert after.index("LeaveGroup") > after.index("OffsetCommit")


def test_a_leader_that_never_answers_ends_the_run_on_time_with_one_line(tmp_path):
    """The partition's leader (as Metadata advertises it) accepts connections and never
    answers ApiVersions: the consumer cannot find its start position. The run stops
    within its --duration, naming the broker and what it waits for, not after
    default.api.timeout.ms (60 s)."""
    import socket
    from kctl.broker import EmbeddedBroker
    from kctl.engine import admin
    from kctl.engine.blocking_client import BlockingClient
    silent = socket.create_server(("127.0.0.1", 0))
    silent.settimeout(0.2)
    accepted, stopped = [], threading.Event()

    def accept():
        while not stopped.is_set():
            try:
                accepted.append(silent.accept()[0])
            except OSError:
                pass
    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    address = f"127.0.0.1:{silent.getsockname()[1]}"
    try:
        with EmbeddedBroker(advertised=address, stop_grace_s=1.0) as b:
            with BlockingClient(b.bootstrap) as c:
                admin.create_topics(c, ["kctl-stalled-leader"], partitions=1)
            start = time.monotonic()
            run = subprocess.run([sys.executable, "-m", "kctl", "consume", "-b", b.bootstrap, "-t",
                                  "kctl-stalled-leader", "--duration", "3s"],
                                 capture_output=True, text=True, timeout=90)
            took = time.monotonic() - start
    finally:
        stopped.set()
        thread.join(2)
        for conn in accepted:
            conn.close()
        silent.close()
    assert accepted, "the consumer never dialled the advertised leader"
    assert run.returncode != 0 and took < 15, (took, run.stderr)
    line = run.stderr.strip().splitlines()[-1]
    assert "within 3 s (the run's --duration)" in line and address in line, run.stderr
    assert "no answer to ApiVersions" in line and "Traceback" not in run.stderr
