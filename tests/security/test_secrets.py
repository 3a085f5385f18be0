"""A canary password given to kctl appears nowhere: not in stdout, stderr, the summary
JSON, the interval log, decoded frames, kctl inspect's frame view and kctl decode of its
capture, nor any process's command line."""

from __future__ import annotations

import binascii
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kctl.inspect.reassembly import ConnectionId, Endpoint, FrameSplitter, StreamData
from kctl.protocol import messages
from kctl.protocol.frames import frame
from tests.security.kafka_proxy import KafkaProxy

pytestmark = pytest.mark.broker

CANARY = "canary-pw-5d1e9b"


def _cmdlines_of_tree(root: int) -> list[str]:
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if int(proc.name) == root or ppid == root:
                out.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except (OSError, ValueError, IndexError):
            continue
    return out


@pytest.mark.parametrize("via", ["file", "env"])
def test_canary_password_never_shows(broker, tmp_path, via):
    users = {"alice": CANARY}
    pw_file = tmp_path / "pw"
    pw_file.write_text(CANARY + "\n")
    env = {**os.environ, "COLUMNS": "200"}
    args = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=SCRAM-SHA-256",
            "-X", "sasl.username=alice"]
    if via == "file":
        args += ["-X", f"sasl.password=@{pw_file}"]
    else:
        env["KCTL_SASL_PASSWORD"] = CANARY
    out, hlog = tmp_path / "s.json", tmp_path / "run.hlog"
    with KafkaProxy(broker.bootstrap, users=users) as proxy:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kctl", "produce", "-b", proxy.address, "-t", f"canary-{via}",
             "--num-records", "2000", "--rate", "1000", "--workers", "2", "--interval", "0.5",
             "--json-out", str(out), "--hdr-out", str(hlog), "--verify", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        cmdlines = []
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            cmdlines += _cmdlines_of_tree(proc.pid)
            time.sleep(0.2)
        stdout, stderr = proc.communicate(timeout=30)
        assert proc.returncode == 0, stderr
        assert any(ok for _, _, ok in proxy.logins)
    assert any("spawn" in c or "multiprocessing" in c for c in cmdlines), cmdlines  # workers seen
    summary = out.read_text()
    assert json.loads(summary)["counts"]["acked"] == 2000
    assert json.loads(summary)["config"]["producer"].get("sasl.password", "[redacted]") == "[redacted]"
    for where, text in [("stdout", stdout), ("stderr", stderr), ("summary", summary),
                        ("hlog", hlog.read_text()), ("cmdline", "\n".join(cmdlines))]:
        assert CANARY not in text, where


def _sasl_plain_frame() -> bytes:
    body = messages.message_class("SaslAuthenticateRequest")(auth_bytes=b"\0alice\0" + CANARY.encode())
    return frame(messages.encode_request(36, 1, 7, "kctl", body))


def test_decode_redacts_sasl_credentials_unless_asked():
    data = binascii.hexlify(_sasl_plain_frame()).decode()
    run = lambda *a: subprocess.run([sys.executable, "-m", "kctl", "decode", "--hex", "-v", *a],  # noqa: E731
                                    input=data, capture_output=True, text=True, timeout=60)
    hidden = run()
    assert hidden.returncode == 0, hidden.stderr
    assert CANARY not in hidden.stdout + hidden.stderr and "redacted" in hidden.stdout
    shown = run("--show-secrets")
    assert binascii.b2a_base64(b"\0alice\0" + CANARY.encode(), newline=False).decode() in shown.stdout


def test_tls_at_a_stream_start_is_named_not_decoded():
    conn = ConnectionId(Endpoint("10.0.0.1", 50000), Endpoint("10.0.0.2", 9093))
    splitter = FrameSplitter(conn, "request", synced=True)
    hello = bytes.fromhex("160301020001") + b"\x00" * 600
    out = splitter.feed(StreamData(0, hello, 0))
    assert [n.kind for n in out] == ["tls"] and "TLS on a Kafka port" in out[0].message
    assert splitter.feed(StreamData(len(hello), b"\x17\x03\x03" + b"\x01" * 100, 1)) == []


def test_inspect_and_decode_of_a_sasl_session_keep_the_canary_out(broker, tmp_path):
    """A SASL PLAIN client (the password in clear on the wire) through ``kctl inspect
    --show frames --capture``: neither inspect's output nor ``kctl decode`` of the real
    capture (text, -v, JSON, summary) shows the password, nor does any command line."""
    from kctl.broker import free_port
    from kctl.config import ProducerConfig
    from kctl.engine import admin
    from kctl.engine.blocking_client import BlockingClient
    from kctl.engine.producer import Producer

    port, cap = free_port(), tmp_path / "sasl.pcapng"
    with KafkaProxy(broker.bootstrap, users={"alice": CANARY}) as sasl:
        inspect = subprocess.Popen(
            [sys.executable, "-m", "kctl", "inspect", "--listen", f"127.0.0.1:{port}",
             "--upstream", sasl.address, "--show", "frames", "--capture", str(cap), "--duration", "30"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            props = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
                     "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": CANARY}
            deadline = time.monotonic() + 20
            while True:
                try:
                    with BlockingClient(props["bootstrap.servers"],
                                        security=ProducerConfig.from_properties(props).security) as c:
                        admin.create_topics(c, ["canary-inspect"], partitions=1)
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
            cmdlines = _cmdlines_of_tree(inspect.pid)
            with Producer(ProducerConfig.from_properties(props)) as p:
                handles = [p.send("canary-inspect", b"x" * 10) for _ in range(20)]
                assert p.flush(20)
            assert all(h.error is None for h in handles)
            scram = {**props, "sasl.mechanism": "SCRAM-SHA-256"}
            with BlockingClient(scram["bootstrap.servers"],
                                security=ProducerConfig.from_properties(scram).security) as c:
                admin.fetch_metadata(c)
            inspect.send_signal(signal.SIGTERM)
            stdout, stderr = inspect.communicate(timeout=20)
        finally:
            inspect.kill()
        assert ("PLAIN", "alice", True) in sasl.logins
    assert inspect.returncode == 0, stderr
    assert "-> SaslAuthenticate v" in stdout and "auth_bytes=<redacted>" in stdout
    assert "-> Produce v" in stdout
    # The capture holds the frames in clear: the password is in it, so the checks below bite.
    assert CANARY.encode() in cap.read_bytes()
    ports = ["--port", str(port), "--port", sasl.address.rsplit(":", 1)[1]]
    outputs = {"inspect stdout": stdout, "inspect stderr": stderr, "cmdline": "\n".join(cmdlines)}
    modes = ([], ["-v", "--records"], ["--json", "-v"], ["--summary", "--json"],
             ["--json", "--show-secrets", "--api", "SaslAuthenticate"])
    runs = [subprocess.Popen([sys.executable, "-m", "kctl", "decode", str(cap), *ports, *mode],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for mode in modes]   # in parallel: each start costs a second or so
    for mode, run in zip(modes, runs):
        out, err = run.communicate(timeout=60)
        assert run.returncode == 0, err
        outputs[f"decode {mode} stdout"], outputs[f"decode {mode} stderr"] = out, err
    shown = outputs.pop(f"decode {modes[-1]} stdout")
    assert "SaslAuthenticate" in outputs["decode [] stdout"]
    plain_b64 = binascii.b2a_base64(b"\0alice\0" + CANARY.encode(), newline=False).decode()
    assert plain_b64 in shown   # the JSON form of auth_bytes with --show-secrets: the checks bite
    for where, text in outputs.items():
        assert CANARY not in text and plain_b64 not in text, where


def test_bench_keeps_the_canary_out(broker, tmp_path):
    """kctl bench over SCRAM with the password from a file: not in its output, its
    results, hlogs and charts, nor any process's command line."""
    pw_file = tmp_path / "pw"
    pw_file.write_text(CANARY + "\n")
    out = tmp_path / "bench-out"
    with KafkaProxy(broker.bootstrap, users={"alice": CANARY}) as proxy:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kctl", "bench", "-b", proxy.address, "--topic", "canary-bench",
             "--matrix", "acks=1,all", "--rate", "1000", "--duration", "1s", "--warmup", "200ms",
             "--repetitions", "1", "--workers", "1", "--out", str(out),
             "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=SCRAM-SHA-512",
             "-X", "sasl.username=alice", "-X", f"sasl.password=@{pw_file}"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "COLUMNS": "200"})
        cmdlines = []
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            cmdlines += _cmdlines_of_tree(proc.pid)
            time.sleep(0.2)
        stdout, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 0, stderr
        assert any(ok for _, _, ok in proxy.logins)
    written = [p for p in out.rglob("*") if p.is_file()]
    assert any(p.name == "results.json" for p in written)
    texts = [("stdout", stdout), ("stderr", stderr), ("cmdline", "\n".join(cmdlines))]
    texts += [(str(p), p.read_bytes().decode("latin-1")) for p in written]
    for where, text in texts:
        assert CANARY not in text, where
