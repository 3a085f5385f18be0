"""A stop (SIGTERM, as Ctrl-C) while Spark is still starting: held until the JVM and the
SparkContext have started, then the usual orderly stop (kctl/spark/session.py)."""

from __future__ import annotations

import os
import time

from tests.spark.conftest import _need_spark
from tests.stop_signal import KctlProcess, group_gone


def _java_in_group(pgid: int) -> bool:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        if comm == "java" and int(stat[stat.rindex(")") + 2:].split()[2]) == pgid:
            return True
    return False


def test_a_stop_while_the_jvm_starts_waits_for_it_then_ends_everything(captures, tmp_path):
    """SIGTERM as soon as Spark's JVM exists (kctl analyze in a process of its own): exit
    130 with 'kctl: interrupted' and nothing else of note on stderr, and no process of the
    run left. Before, the stop cut py4j's calls to the half-started JVM: a py4j traceback
    and a Java stack trace on stderr, and the JVM could outlive kctl."""
    _need_spark()
    paths, ports = captures
    run = KctlProcess("analyze", paths[0], "--port", str(ports[0]), "--out", str(tmp_path / "out"),
                      "--master", "local[1]")
    try:
        deadline = time.monotonic() + 60
        while not _java_in_group(run.pgid):
            assert run.proc.poll() is None, run.stderr
            assert time.monotonic() < deadline, "no JVM started in 60 s"
            time.sleep(0.02)
        status = run.stop()
    finally:
        run.kill_group()
    err = run.stderr
    assert status == 130, err
    assert "kctl: interrupted" in err
    assert "Traceback" not in err and "\tat " not in err and "Exception" not in err, err
    assert "jdk.incubator.vector" not in err, err
    assert group_gone(run.pgid, 30), "a process of the run outlived kctl analyze"
