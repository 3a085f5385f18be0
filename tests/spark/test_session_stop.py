"""A stop (SIGTERM, as Ctrl-C) while Spark is still starting: held until the JVM and the
SparkContext have started, then the usual orderly stop (kctl/spark/session.py); and a
SIGTERM to kctl's whole process group mid-job, which the driver JVM (in a session of its
own) does not get."""

from __future__ import annotations

import time

from tests.spark.conftest import _need_spark
from tests.stop_signal import KctlProcess, command_of, group_gone, session_gone


def _java_started(run: KctlProcess) -> bool:
    return any(command_of(pid) == "java" for pid in run.note_sessions())


def _stop_analyze_when(ready, what: str, captures, tmp_path, timeout_s: float) -> str:
    """kctl analyze (local[1], a process of its own) gets SIGTERM to its whole process group
    once ``ready(run)``; asserts exit 130 and nothing of the run left; returns stderr."""
    _need_spark()
    paths, ports = captures
    run = KctlProcess("analyze", paths[0], "--port", str(ports[0]), "--out", str(tmp_path / "out"),
                      "--master", "local[1]")
    try:
        deadline = time.monotonic() + timeout_s
        while not ready(run):
            assert run.proc.poll() is None, run.stderr
            assert time.monotonic() < deadline, f"{what} in {timeout_s:g} s"
            time.sleep(0.02)
        status = run.stop(to_group=True)
    finally:
        run.kill_group()
    err = run.stderr
    assert status == 130, err
    assert group_gone(run.pgid, 30) and session_gone(run.sessions, 30), \
        "a process of the run outlived kctl analyze"
    return err


def test_a_stop_while_the_jvm_starts_waits_for_it_then_ends_everything(captures, tmp_path):
    """SIGTERM to kctl's whole process group as soon as Spark's JVM exists (kctl analyze in
    a process of its own): exit 130 with 'kctl: interrupted' and nothing else of note on
    stderr, and no process of the run left. Before, the stop cut py4j's calls to the
    half-started JVM: a py4j traceback and a Java stack trace on stderr, and the JVM could
    outlive kctl; then the group's SIGTERM reached the starting JVM too, which exited (the
    driver JVM is now in a session of its own)."""
    err = _stop_analyze_when(_java_started, "no JVM started", captures, tmp_path, 60)
    assert "kctl: interrupted" in err
    assert "Traceback" not in err and "\tat " not in err and "Exception" not in err, err
    assert "jdk.incubator.vector" not in err, err


def _python_task_started(run: KctlProcess) -> bool:
    """pyspark's daemon (a Python child of the driver JVM) runs: the first job's Python
    tasks have started."""
    ours = run.note_sessions()
    return any(command_of(pid) == "java" for pid in ours) and \
        any((command_of(pid) or "").startswith("python") and _parent(pid) in ours
            and command_of(_parent(pid)) == "java" for pid in ours)


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return 0
    return int(stat[stat.rindex(")") + 2:].split()[1])


def test_sigterm_to_the_group_mid_job_stops_as_ctrl_c_does(captures, tmp_path):
    """SIGTERM to kctl's whole process group (``kill -TERM -PGID``, systemd's
    ``KillMode=control-group``) while kctl analyze's first job runs its Python tasks: exit
    130 with 'kctl: interrupted' as for Ctrl-C, nothing else on stderr, no process of the
    run left. Before, the signal also reached the driver JVM, whose shutdown hooks stopped
    the SparkContext under the job: kctl failed (status 1) with py4j's traceback (its
    connection to the JVM refused), or printed the JVM's Java stack traces. The driver JVM
    is now in a session of its own."""
    err = _stop_analyze_when(_python_task_started, "no Spark task started", captures, tmp_path, 120)
    assert err.strip() == "kctl: interrupted", err
