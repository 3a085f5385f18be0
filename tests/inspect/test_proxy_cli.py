"""``kctl inspect`` end to end, and its renderables drawn into a string console."""

import io
import subprocess
import sys
import time
import uuid

import pytest
from rich.console import Console

from kctl.broker import free_port
from kctl.engine import admin
from kctl.engine.blocking_client import BlockingClient
from kctl.inspect.faults import FaultDecision
from kctl.inspect.proxy import FrameEvent
from kctl.inspect.proxy_stats import ProxyStats
from kctl.ui.inspect_view import InspectView, frame_line, stats_lines


def _connect(address, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return BlockingClient(address).__enter__()
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _kctl(*args):
    return subprocess.Popen([sys.executable, "-m", "kctl", "inspect", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.broker
def test_show_frames_streams_decoded_lines(broker, tmp_path):
    port = free_port()
    cap = tmp_path / "cli.pcapng"
    proc = _kctl("--listen", f"127.0.0.1:{port}", "--upstream", broker.bootstrap, "--show", "frames",
                 "--duration", "3", "--capture", str(cap), "--throttle-ms", "5", "--seed", "1",
                 "--lose-records", "0.5:2", "--processors", "2")
    try:
        c = _connect(f"127.0.0.1:{port}")
        md = admin.fetch_metadata(c)
        c.close()
        out, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert md.brokers[0].port == port
    assert "-> ApiVersions v" in out and "<- Metadata v" in out
    assert f"listening on 127.0.0.1:{port}" in err and "throttle 5ms" in err
    assert "lose records 0.5 (at most 2)" in err and "(2 processors)" in err
    assert cap.stat().st_size > 0 and "packets merged from 2 processors" in err


@pytest.mark.broker
def test_lose_records_that_found_nothing_to_lose_says_why(broker):
    """One record: its partition's first batch, which --lose-records never takes."""
    from kctl.config import ProducerConfig
    from kctl.engine.producer import Producer
    with BlockingClient(broker.bootstrap) as c:
        admin.create_topics(c, ["cli-lose-first"], partitions=1)
    port = free_port()
    proc = _kctl("--listen", f"127.0.0.1:{port}", "--upstream", broker.bootstrap, "--duration", "4",
                 "--lose-records", "1", "--processors", "1")
    try:
        _connect(f"127.0.0.1:{port}").close()
        with Producer(ProducerConfig.from_properties({"bootstrap.servers": f"127.0.0.1:{port}"})) as p:
            h = p.send("cli-lose-first", b"first", partition=0)
            assert p.flush(10) and h.error is None
        out, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("kctl inspect: --lose-records lost no batch in 1 Produce request: "
                           "a batch is only taken from a partition with a batch already acknowledged"), err


def test_a_response_held_when_the_proxy_stops_is_undelivered(tmp_path):
    """Stopped while a delayed answer waits: the closing line and --json-out name it as
    undelivered, not as a response (the processors' last reports, taken once stopped)."""
    import json
    import signal
    import socket

    from kctl.protocol import messages
    from kctl.protocol.frames import frame
    from tests.engine.fake_broker import FakeBroker

    def answer(broker, conn_id, req):
        body = messages.response_class(3)(brokers=[], cluster_id="c", controller_id=-1, topics=[])
        return broker.response_frame(req, body)

    port = free_port()
    js = tmp_path / "i.json"
    with FakeBroker(answer) as fake:
        proc = _kctl("--listen", f"127.0.0.1:{port}", "--upstream", fake.address, "--delay-ms", "60000",
                     "--processors", "1", "--json-out", str(js))
        try:
            deadline = time.monotonic() + 15
            while True:
                try:
                    client = socket.create_connection(("127.0.0.1", port))
                    break
                except OSError:
                    assert time.monotonic() < deadline
                    time.sleep(0.05)
            body = messages.message_class("MetadataRequest")(topics=[])
            client.sendall(frame(messages.encode_request(3, 1, 9, "t", body)))
            fake.wait_requests(1, api_key=3)
            time.sleep(0.5)                      # the answer is read and held
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=20)
            client.close()
        finally:
            proc.kill()
    assert proc.returncode == 0, err
    assert "1 requests, 0 responses (not delivered: 1 undelivered)" in err, err
    doc = json.loads(js.read_text())
    assert doc["responses"] == 0 and doc["faults"]["undelivered"] == 1


def test_lose_note_wording():
    from kctl.commands.inspect import lose_note
    from kctl.inspect.faults import FaultPlan
    s = ProxyStats()
    assert lose_note(FaultPlan(), s.snapshot(1)) is None
    assert lose_note(FaultPlan(lose_rate=1.0), s.snapshot(1)) == (
        "--lose-records lost no batch: no Produce request passed through the proxy")
    s.on_request(0, "Produce", 100, True)
    s.on_request(0, "Produce", 100, True)
    note = lose_note(FaultPlan(lose_rate=0.5, lose_error="NOT_ENOUGH_REPLICAS"), s.snapshot(1))
    assert note.startswith("--reject-records refused no batch in 2 Produce requests: ")
    assert note.endswith("(and at rate 0.5 the draws may have spared the others)")
    s.on_fault("rejected")
    assert lose_note(FaultPlan(lose_rate=0.5, lose_error="NOT_ENOUGH_REPLICAS"), s.snapshot(1)) is None


def _processor_pids(pid: int) -> list[int]:
    """The spawned children of ``pid`` (not multiprocessing's resource tracker)."""
    try:
        children = open(f"/proc/{pid}/task/{pid}/children").read().split()
    except OSError:
        return []
    out = []
    for c in children:
        try:
            cmdline = open(f"/proc/{c}/cmdline", "rb").read()
        except OSError:
            continue
        if b"spawn_main" in cmdline:
            out.append(int(c))
    return out


@pytest.mark.broker
def test_a_processor_killed_mid_run_is_reported_and_fails_the_run(broker):
    import os
    import signal
    port = free_port()
    proc = _kctl("--listen", f"127.0.0.1:{port}", "--upstream", broker.bootstrap,
                 "--processors", "2", "--duration", "4")
    try:
        clients = [_connect(f"127.0.0.1:{port}") for _ in range(2)]   # one on each processor
        for c in clients:
            admin.fetch_metadata(c)
        pids = _processor_pids(proc.pid)
        assert len(pids) == 2
        os.kill(pids[0], signal.SIGKILL)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 1, err
    lines = [x for x in err.splitlines() if "died" in x]
    assert len(lines) == 1 and f"(pid {pids[0]}) died (killed by signal 9)" in lines[0]
    assert "its 1 connection(s) were lost: #" in lines[0]


@pytest.mark.broker
def test_stats_lines_without_a_tty(broker):
    port = free_port()
    proc = _kctl("--listen", f"127.0.0.1:{port}", "--upstream", broker.bootstrap,
                 "--duration", "2.5", "--delay-ms", "5-10", "--inject-error", "NOT_LEADER_OR_FOLLOWER:0.5")
    try:
        c = _connect(f"127.0.0.1:{port}")
        admin.fetch_metadata(c)
        c.close()
        out, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "Metadata: " in out and "p99=" in out and "faults: delayed=" in out


def test_bad_options_are_one_line_errors():
    run = subprocess.run([sys.executable, "-m", "kctl", "inspect", "--upstream", "127.0.0.1:1",
                          "--inject-error", "NOPE:0.1"], capture_output=True, text=True, timeout=30)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines()[-1].startswith(
        "kctl: error: --inject-error 'NOPE:0.1': unknown Kafka error name 'NOPE'")


def test_bad_lose_records_is_a_one_line_error():
    run = subprocess.run([sys.executable, "-m", "kctl", "inspect", "--upstream", "127.0.0.1:1",
                          "--lose-records", "often"], capture_output=True, text=True, timeout=30)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines()[-1].startswith("kctl: error: --lose-records 'often'")


def test_bad_reject_records_is_a_one_line_error():
    for arg, first in (("NOPE:1", "kctl: error: --reject-records 'NOPE:1': unknown Kafka error name 'NOPE'"),
                       ("OUT_OF_ORDER_SEQUENCE_NUMBER:often",
                        "kctl: error: --reject-records 'OUT_OF_ORDER_SEQUENCE_NUMBER:often': expected RATE[:LIMIT]"),
                       ("", "kctl: error: --reject-records '': expected NAME[:RATE[:LIMIT]]")):
        run = subprocess.run([sys.executable, "-m", "kctl", "inspect", "--upstream", "127.0.0.1:1",
                              "--reject-records", arg], capture_output=True, text=True, timeout=30)
        assert run.returncode == 2
        assert run.stderr.strip().splitlines()[-1].startswith(first), run.stderr


def test_none_is_refused_as_an_error_to_inject():
    for flag, arg in (("--inject-error", "NONE:0.5"), ("--inject-error", "none"),
                      ("--reject-records", "NONE:1")):
        run = subprocess.run([sys.executable, "-m", "kctl", "inspect", "--upstream", "127.0.0.1:1",
                              flag, arg], capture_output=True, text=True, timeout=30)
        assert run.returncode == 2
        lines = run.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"kctl: error: {flag} {arg!r}: "
                                                       "error name NONE is Kafka's code 0, no error"), run.stderr


def _snapshot():
    s = ProxyStats()
    s.on_connection_open(0, "127.0.0.1:5000", "127.0.0.1:9092", "127.0.0.1:19092")
    s.on_request(0, "Produce", 1000, True)
    s.on_request(0, "Produce", 1000, True)
    s.on_response(0, "Produce", 80, 2_500_000, 30, ["NOT_LEADER_OR_FOLLOWER"])
    s.on_fault("throttled")
    return s.snapshot(1_000_000_000)


def test_view_renders_into_a_string_console():
    console = Console(file=io.StringIO(), width=160, force_terminal=False)
    console.print(InspectView(_snapshot(), listeners=["127.0.0.1:19092"], faults="throttle 30ms"))
    text = console.file.getvalue()
    for needle in ("Produce", "2.5", "NOT_LEADER_OR_FOLLOWER", "127.0.0.1:5000", "throttle 30ms",
                   "throttled 1"):
        assert needle in text, needle
    lines = list(stats_lines(_snapshot()))
    assert lines[0].startswith("Produce: ") and "in_flight=1" in lines[1]


def test_frame_line():
    e = FrameEvent(0, 3, "response", 0, 9, 12, 120, b"", "c", "u", 2_100_000,
                   FaultDecision(delay_ns=5, errors_injected=1))
    assert frame_line(e) == "conn 3 c <- Produce v9 corr=12 120B 2.1ms [delayed errors-injected]"


def test_frame_line_marks_a_forged_acknowledgement():
    """--lose-records answers the removed batch with a forged success: the frame says so,
    as --inject-error's and --reject-records' rewrites say [errors-injected]."""
    e = FrameEvent(0, 3, "response", 0, 9, 12, 120, b"", "c", "u", 2_100_000, FaultDecision(forged=1))
    assert frame_line(e) == "conn 3 c <- Produce v9 corr=12 120B 2.1ms [records-lost]"


def test_frame_line_says_what_kctl_decode_says():
    """The client, topics/partitions, records and error names, in the words of
    ``kctl decode`` (``report.gist`` on the same frame)."""
    from tests.inspect.kafka_frames import produce_request, produce_response
    req = produce_request(12, "orders", {0: 3, 2: 5})[4:]
    e = FrameEvent(0, 3, "request", 0, 9, 12, len(req) + 4, req, "127.0.0.1:50712", "127.0.0.1:9092")
    assert frame_line(e) == (f"conn 3 127.0.0.1:50712 -> Produce v9 corr=12 {len(req) + 4}B acks=-1 "
                             "orders/0: 1b 3r; orders/2: 1b 5r")
    resp = produce_response(12, "orders", (0, 2), error_code=6, throttle_ms=30)[4:]
    e = FrameEvent(0, 3, "response", 0, 9, 12, len(resp) + 4, resp, "127.0.0.1:50712", "127.0.0.1:9092",
                   2_100_000, FaultDecision(errors_injected=2))
    assert frame_line(e) == (f"conn 3 127.0.0.1:50712 <- Produce v9 corr=12 {len(resp) + 4}B 2.1ms "
                             "orders/0@10 NOT_LEADER_OR_FOLLOWER orders/2@10 NOT_LEADER_OR_FOLLOWER "
                             "throttled 30ms [errors-injected]")


def test_frame_line_reads_a_response_whose_corr_is_its_length_minus_4():
    """A frame event's bytes have no size prefix: a response whose correlation id equals
    its length minus 4 is read whole, not cut 4 bytes short as if those were its size
    (audit 6d: 'decode error: tagged field count 104 exceeds the bytes left')."""
    from tests.inspect.kafka_frames import produce_response
    n = len(produce_response(1, version=11)) - 4
    resp = produce_response(n - 4, version=11)[4:]
    e = FrameEvent(0, 2, "response", 0, 11, n - 4, n + 4, resp, "c", "u", 500_000)
    assert frame_line(e) == f"conn 2 c <- Produce v11 corr={n - 4} {n + 4}B 0.5ms t/0@10"


def test_frame_line_shows_sasl_credentials_only_when_asked():
    from kctl.protocol import messages
    body = messages.message_class("SaslAuthenticateRequest")(auth_bytes=b"\0u\0pw")
    frame = messages.encode_request(36, 2, 4, "c", body)
    shown = FrameEvent(0, 1, "request", 36, 2, 4, 40, frame, "c", "u", show_secrets=True)
    assert frame_line(shown).endswith("auth_bytes=AHUAcHc=")
    hidden = FrameEvent(0, 1, "request", 36, 2, 4, 40, frame, "c", "u")
    assert hidden.redacted
    assert frame_line(hidden).endswith("auth_bytes=<redacted>") and "AHUAcHc" not in frame_line(hidden)


@pytest.mark.broker
def test_sigterm_stops_the_proxy_as_ctrl_c_does(broker, tmp_path):
    """SIGTERM to kctl alone stops ``kctl inspect`` (no --duration) as Ctrl-C does: the
    processors are stopped and merged, the closing line and --json-out are written, exit 0
    (a proxy runs until stopped), no traceback, no processor process left."""
    import json

    from tests.stop_signal import KctlProcess, group_gone

    port = free_port()
    js = tmp_path / "i.json"
    run = KctlProcess("inspect", "--listen", f"127.0.0.1:{port}", "--upstream", broker.bootstrap,
                      "--processors", "2", "--json-out", str(js))
    try:
        run.wait_for(lambda line: line.startswith("kctl inspect: listening on"), stream="err")
        c = _connect(f"127.0.0.1:{port}")
        admin.fetch_metadata(c)
        c.close()
        status = run.stop()
    finally:
        run.kill_group()
    assert status == 0, run.stderr
    assert "Traceback" not in run.stderr
    assert any(x.startswith("kctl inspect: ") and "over 2 processors" in x for x in run.err)
    doc = json.loads(js.read_text())
    assert doc["processors"] == 2 and doc["requests"] >= 2 and doc["lost_processors"] == []
    assert group_gone(run.pgid), "a processor outlived kctl inspect"


def test_closing_line_names_the_responses_the_client_never_had():
    from kctl.commands.inspect import _summary_line
    s = ProxyStats()
    s.on_request(0, "Produce", 1000, True)
    s.on_request(0, "Produce", 1000, True)
    s.on_request(0, "Produce", 1000, True)
    s.on_response(0, "Produce", 80, 2_500_000, 0, [])
    s.on_fault("dropped")
    s.on_fault("undelivered")
    line = _summary_line(s.snapshot(1))
    assert line.startswith("3 requests, 1 responses (not delivered: 1 dropped, 1 undelivered)"), line


@pytest.mark.parametrize("prop", ["linger.ms=5", "acks=0", "client.id=foo", "request.timeout.ms=1000",
                                  "sasl.mechanism=PLAIN"])
def test_upstream_properties_other_than_tls_are_refused(prop):
    """inspect's -X reaches only its upstream TLS: a client property would change nothing."""
    from kctl.commands.inspect import upstream_security
    from kctl.errors import ConfigError

    name = prop.split("=")[0]
    with pytest.raises(ConfigError, match=rf"-X {name}: kctl inspect"):
        upstream_security([prop], tls=False, ca=None, cert=None, key=None)
    assert upstream_security(["security.protocol=PLAINTEXT"], tls=False, ca=None, cert=None, key=None) is None


def test_inject_error_api_selector_errors_are_one_line():
    run = subprocess.run([sys.executable, "-m", "kctl", "inspect", "--upstream", "127.0.0.1:1",
                          "--inject-error", "NOT_COORDINATOR@Metadata:0.5"],
                         capture_output=True, text=True, timeout=30)
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "kctl: error: --inject-error 'NOT_COORDINATOR@Metadata:0.5': API Metadata is not one of "
        "Produce, Fetch, ListOffsets, FindCoordinator, InitProducerId, AddPartitionsToTxn, EndTxn"), run.stderr


def test_frame_line_names_topic_ids_from_any_connections_metadata():
    """A Fetch names its topic by id; the name comes from Metadata another connection
    (here conn 1) asked, as kctl decode names it from the capture's Metadata."""
    from kctl.protocol.messages import encode_request, encode_response, request_class, response_class
    tid = uuid.UUID("01a21021-185f-7e22-9e19-cd4d0c7fa242")
    fetch, meta = request_class(1), response_class(3)
    md = encode_response(3, 12, 1, meta(
        brokers=[meta.MetadataResponseBroker(node_id=1, host="h", port=9092)],
        topics=[meta.MetadataResponseTopic(name="orders", topic_id=tid, partitions=[
            meta.MetadataResponsePartition(partition_index=0, leader_id=1)])]))
    fr = encode_request(1, 16, 2, "cli", fetch(max_wait_ms=500, topics=[
        fetch.FetchTopic(topic_id=tid, partitions=[fetch.FetchPartition(partition=0, fetch_offset=7)])]))
    names: dict[uuid.UUID, str] = {}
    fetch_event = FrameEvent(0, 2, "request", 1, 16, 2, len(fr) + 4, fr, "c2", "u")
    assert str(tid) in frame_line(fetch_event, names)            # no Metadata seen yet
    frame_line(FrameEvent(0, 1, "response", 3, 12, 1, len(md) + 4, md, "c1", "u", 1_000_000), names)
    line = frame_line(fetch_event, names)
    assert "orders/0@7" in line and str(tid) not in line
