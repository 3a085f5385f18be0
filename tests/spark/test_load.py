"""``kctl produce --spark``: load workers as Spark barrier tasks, merged like a local run."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from kctl.engine import admin
from kctl.engine.blocking_client import BlockingClient
from kctl.errors import KctlError
from kctl.config import ProducerConfig
from kctl.load.run import LoadSpec
from kctl.protocol.identity import find_identity, run_tag
from kctl.load.verify import verify
from kctl.stats.hlog import read_interval_log
from kctl.stats.latency import decode_histogram, new_histogram
from kctl.stats.report import WorkerInterval

pytestmark = pytest.mark.spark


def _config(bootstrap: str, **props: str) -> ProducerConfig:
    return ProducerConfig.from_properties({"bootstrap.servers": bootstrap, **props})


def _topic(broker, name: str, partitions: int = 3) -> None:
    with BlockingClient(broker.bootstrap) as c:
        admin.create_topics(c, [name], partitions=partitions)


def _read_back(broker, topic: str, partitions: int, run_id: str) -> int:
    n = 0
    with BlockingClient(broker.bootstrap) as c:
        for p in range(partitions):
            for b in admin.read_partition(c, topic, p):
                for r in b.records:
                    ident = find_identity(r.headers)
                    if ident is not None and ident.run_tag == run_tag(run_id):
                        n += 1
    return n


def test_distributed_run_merges_like_a_local_run(spark, broker, tmp_path):
    from kctl.spark.load import SparkLoadRun
    topic = "spark-load"
    _topic(broker, topic)
    spec = LoadSpec(topic=topic, producer=_config(broker.bootstrap, **{"linger.ms": "5"}),
                    rate=3000, duration_s=2.0, workers=3, interval_s=0.5, verify=True)
    hlog = tmp_path / "run.hlog"
    rounds = []
    run = SparkLoadRun(spec, config_for_summary={"topic": topic}, hdr_out=str(hlog),
                       on_round=lambda stats, n: rounds.append(n))
    result = run.run()
    assert not result.failures and not result.interrupted
    acked = result.summary.counts.acked
    assert acked == result.summary.counts.sent > 5000
    # Every acknowledged record is in the topic (counted by reading it back).
    assert _read_back(broker, topic, 3, spec.run_id) == acked
    assert verify(broker.bootstrap, topic, spec.run_id, result.acked_runs).ok
    # Merged histogram == the sum of the tasks' own histograms (HdrHistogram add).
    from kctl.spark.load import AGREED_START, TASK_START, AgreedStart, TaskStart
    starts = [msg for _w, i, msg in run.reports if i == TASK_START]
    agreed = [msg for _w, i, msg in run.reports if i == AGREED_START]
    reports = [r for r in run.reports if r[1] >= 0]
    assert len(agreed) == 3 and all(isinstance(a, AgreedStart) for a in agreed)
    assert len({a.wall_ns for a in agreed}) == 1    # one start, agreed by all
    assert run.stats.start_wall_ns == agreed[0].wall_ns == starts[0].agreed_wall_ns
    # Each carries what its TaskStart says of the task (kept if the task never returns).
    by_worker = {w: msg for w, i, msg in run.reports if i == AGREED_START}
    assert all((by_worker[s.worker].host, by_worker[s.worker].launched_wall_ns)
               == (s.host, s.launched_wall_ns) for s in starts)
    assert {w for w, _, _ in reports} == {0, 1, 2}
    assert sorted(s.worker for s in starts) == [0, 1, 2] and all(isinstance(s, TaskStart) for s in starts)
    sp = result.summary.spark
    assert sp.tasks == 3 and [t.task for t in sp.per_task] == [0, 1, 2]
    assert sp.start_skew_ms == round((max(s.began_wall_ns for s in starts)
                                      - min(s.began_wall_ns for s in starts)) / 1e6, 3)
    assert 0 <= sp.start_skew_ms < 1000 and all(t.late_ms >= 0 for t in sp.per_task)
    # The section survives the summary file (kctl report, bench baselines read it back).
    from kctl.stats.summary import RunSummary
    assert RunSummary.from_json(result.summary.to_json()).spark == sp
    for clock in ("intended", "send", "request"):
        total = new_histogram()
        for _w, _i, msg in reports:
            assert isinstance(msg, WorkerInterval)
            if not msg.warmup and clock in msg.histograms:
                total.add(decode_histogram(msg.histograms[clock]))
        merged = run.stats.cumulative_histograms()[clock]
        assert merged.get_total_count() == total.get_total_count()
        for pct in (50, 99, 99.9, 100):
            assert merged.get_value_at_percentile(pct) == total.get_value_at_percentile(pct)
        logged = new_histogram()
        for iv in read_interval_log(hlog):
            if iv.tag == clock:
                logged.add(iv.histogram)
        assert logged.get_total_count() == total.get_total_count()
    assert sum(rounds) >= 3        # intervals were merged while the job ran (live lines)


def test_a_late_start_is_measured_over_the_schedule_window_from_the_agreed_start(spark, broker):
    """Tasks that begin late (here every one, 0.5 s: the agreed start is put in the past)
    still owe their records from the agreed start, as a local run's workers do from their
    common start: the paced run's span is the schedule's window (8,000 records at 4,000/s:
    2 s) and its rate the target. Before, the span ran from the first task's first report
    (0.5 s late) and read about 5,300 records/s over about 1.5 s. (Each task's records are
    due 0.5 ms apart, so its overdue ones go at once and it ends on schedule.)"""
    from kctl.spark.load import SparkLoadRun
    topic = "spark-load-late"
    _topic(broker, topic, 2)
    spec = LoadSpec(topic=topic, producer=_config(broker.bootstrap), rate=4000, num_records=8000,
                    workers=2, interval_s=0.5)
    run = SparkLoadRun(spec, config_for_summary={}, start_delay_s=-0.5)
    s = run.run().summary
    assert s.counts.acked == 8000 and min(t.late_ms for t in s.spark.per_task) >= 500
    assert s.run.measured_s == pytest.approx(2.0)
    assert s.rates.records_per_s == pytest.approx(4000.0)
    assert s.run.start_unix_ms == run.stats.start_wall_ns // 1_000_000


def test_without_a_task_count_one_task_runs_per_slot(spark):
    from kctl.spark.load import slot_tasks
    count = slot_tasks(None)                  # the tests' session: local[4]
    assert (count.count, count.reason) == (4, "one Spark task per available slot")


def test_a_failed_task_fails_the_run_with_its_error(spark, broker):
    from kctl.spark.load import SparkLoadRun
    from kctl.spark.session import SparkJobError
    topic = "spark-load-fail"
    _topic(broker, topic, 1)
    spec = LoadSpec(topic=topic, producer=_config(broker.bootstrap),
                    rate=200, duration_s=30.0, workers=2)
    run = SparkLoadRun(spec, config_for_summary={})
    good = run.worker_specs()
    # Task 1 produces to a topic that does not exist, and gives up after max.block.ms.
    run.worker_specs = lambda: [good[0], replace(
        good[1], topic="spark-no-such-topic",
        producer=good[1].producer.with_properties({"max.block.ms": "2000"}))]
    t = time.monotonic()
    with pytest.raises(SparkJobError, match=r"task 1 failed: .*spark-no-such-topic"):
        run.run()
    assert time.monotonic() - t < 25      # the other task was stopped, not waited for


def test_more_tasks_than_slots_fails_clearly(spark):
    from kctl.spark.load import SparkLoadRun
    spec = LoadSpec(topic="x", producer=_config("127.0.0.1:1"), rate=10,
                    duration_s=1.0, workers=64)
    with pytest.raises(KctlError, match="--tasks 64 needs 64 task slots"):
        SparkLoadRun(spec, config_for_summary={}).run()


@pytest.mark.parametrize("command", ["produce", "replay"])
def test_more_tasks_than_slots_are_refused_before_anything_happens(spark, broker, tmp_path, capsys, command):
    """``--tasks 5`` on a 4-slot master: the one line and exit 2 come before the run has
    any effect: no 'producing to' line, no topic created (before: the topic was created
    and 'producing to ... with 5 worker(s)' printed, then the run refused)."""
    from kctl.cli import main
    from kctl.engine.blocking_client import BlockingClient
    topic = f"spark-slots-{command}"
    if command == "produce":
        argv = ["produce", "--spark", "--tasks", "5", "--num-records", "10"]
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq
        path = tmp_path / "rows.parquet"
        pq.write_table(pa.table({"id": list(range(10))}), path)
        argv = ["replay", str(path), "--tasks", "5"]
    with pytest.raises(SystemExit) as e:
        main(argv + ["-b", broker.bootstrap, "-t", topic])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("kctl: error: --tasks 5 needs 5 task slots running at once, but local[4] offers 4")
    with BlockingClient(broker.bootstrap) as c:
        md = admin.fetch_metadata(c, [topic])
    info = md.topics.get(topic)
    assert info is None or (info.error is not None and not info.partitions), info


def test_local_produce_does_not_import_pyspark():
    import subprocess
    import sys
    code = ("import sys, kctl.cli, kctl.load.produce, kctl.load.run, kctl.commands.produce;"
            "bad = [m for m in sys.modules if m.startswith(('pyspark', 'py4j', 'kctl.spark'))];"
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_distributed_run_over_tls(spark, tmp_path):
    """The Spark path takes the same security settings as a local run: TLS through
    stunnel in front of the broker, verified by reading back over TLS."""
    import shutil
    if shutil.which("stunnel4") is None and shutil.which("stunnel") is None:
        pytest.skip("stunnel not installed (tools/setup.sh)")
    from kctl.load.produce import ProduceOptions, execute, prepare
    from kctl.spark.load import spark_run_factory
    from tests.security.test_tls import TlsCluster
    tls = TlsCluster(tmp_path).start()
    try:
        plan = prepare(ProduceOptions(
            bootstrap=f"localhost:{tls.port}", topic="spark-tls", partitions=2, rate=2000,
            duration="1s", workers=2, verify=True, interval=0.5,
            properties=("security.protocol=SSL", f"ssl.ca.location={tls.ca_file}")))
        outcome = execute(plan, run_factory=spark_run_factory(None))
    finally:
        tls.stop()
    assert not outcome.result.failures
    acked = outcome.summary.counts.acked
    assert acked == outcome.summary.counts.sent >= 1900
    assert outcome.verify is not None and outcome.verify.ok and outcome.verify.found == acked


@pytest.mark.parametrize("signame,to_group", [("SIGINT", True), ("SIGTERM", True), ("SIGTERM", False)],
                         ids=["ctrl-c-to-the-group", "sigterm-to-the-group", "sigterm-to-kctl"])
def test_a_stop_ends_the_tasks_with_their_final_reports(broker, tmp_path, signame, to_group):
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it), SIGTERM to the
    whole group (``kill -TERM -PGID``, systemd's ``KillMode=control-group``) or SIGTERM to
    kctl alone mid-run (``produce --spark`` on local[2], two tasks; Spark's driver JVM is in
    a session of its own, so a signal to kctl's group does not reach it: before, a group
    SIGTERM ran its shutdown hooks, which stopped the SparkContext under the run and kctl
    failed with the JVM's error): the driver tells the tasks to stop over their report connections; each
    task's worker ends
    its schedule as a local worker does (due records never handed over and in-flight ones
    past the grace abandoned, with the reason) and makes its final report, then the job is
    done. The summary balances (scheduled = acked + failed + abandoned), exit 130, nothing
    of the run left. Before, the job was cancelled at once: the tasks died without a final
    report and the records in flight at their last interval report (linger.ms=400 keeps
    some there) had no verdict."""
    import json
    import signal

    from kctl.stats.summary import RunSummary
    from tests.spark.conftest import _need_spark
    from tests.stop_signal import KctlProcess, session_gone

    _need_spark()
    js = tmp_path / "s.json"
    run = KctlProcess("produce", "-b", broker.bootstrap, "-t", f"spark-stop-{signame.lower()}",
                      "--partitions", "2", "--spark", "--master", "local[2]", "--tasks", "2",
                      "--rate", "2000", "--duration", "120s", "--interval", "0.5",
                      "-X", "linger.ms=400", "--json-out", str(js))
    try:
        run.wait_for(lambda line: line.strip() != "", timeout_s=180)    # an interval line
        time.sleep(1.0)
        status = run.stop(getattr(signal, signame), to_group=to_group)
    finally:
        run.kill_group()
    err = run.stderr
    assert status == 130, err
    assert "Traceback" not in err and "kctl: error" not in err, err
    assert "jdk.incubator.vector" not in err     # the driver JVM's start-up warning is not passed on
    assert "with 2 worker(s) (--tasks)" in err   # what decided the count (replay has no --workers)
    s = RunSummary.from_json(json.loads(js.read_text()))
    assert s.run.workers_reason == "--tasks"
    c = s.counts
    assert s.run.interrupted and c.acked > 0 and c.failed == 0
    assert s.unaccounted == 0, f"scheduled {c.scheduled} != acked {c.acked} + failed {c.failed} " \
                               f"+ abandoned {c.abandoned}"
    assert c.abandoned == sum(c.abandoned_by_reason.values())
    # The interval lines add up to the summary, the last (cut short by the stop) marked;
    # the tasks' start figures are kept.
    lines = [ln for ln in run.stdout.splitlines() if " records acked, " in ln]
    assert sum(int(ln.split()[0]) for ln in lines) == c.acked, run.stdout
    assert lines[-1].endswith(" (partial: stopped)")
    assert s.spark is not None and s.spark.tasks == 2 and "spark: 2 tasks on 1 host" in run.stdout
    # Spark's JVM, pyspark's daemon and its Python workers (a process group of their own).
    assert session_gone(run.sessions, 30), "a process of the run outlived kctl"


def test_the_driver_jvm_never_outlives_a_killed_kctl(broker):
    """SIGKILL to kctl alone mid-run (``produce --spark``, local[1]): kctl can end nothing,
    yet Spark's driver JVM (in a session of its own, out of reach of signals to kctl's
    group) sees its stdin, a pipe from kctl, end and exits, stopping its SparkContext:
    the JVM, pyspark's daemon and its Python workers are gone within the bound."""
    import signal

    from tests.spark.conftest import _need_spark
    from tests.stop_signal import KctlProcess, command_of, session_gone

    _need_spark()
    run = KctlProcess("produce", "-b", broker.bootstrap, "-t", "spark-sigkill", "--spark",
                      "--master", "local[1]", "--tasks", "1", "--rate", "500", "--duration", "120s",
                      "--interval", "0.5")
    try:
        run.wait_for(lambda line: line.strip() != "", timeout_s=180)    # an interval line
        jvms = [pid for pid in run.note_sessions() if command_of(pid) == "java"]
        assert len(jvms) == 1, "no driver JVM among kctl's processes"
        assert run.sessions - {run.pgid}, "the driver JVM is in kctl's session"
        t = time.monotonic()
        status = run.stop(signal.SIGKILL)
        assert status == -signal.SIGKILL
        assert session_gone(run.sessions, 30), "a Spark process outlived the killed kctl"
    finally:
        run.kill_group()
    print(f"kctl killed: its Spark processes ended within {time.monotonic() - t:.1f} s")


def test_tasks_that_do_not_hear_the_stop_are_cancelled_after_the_bound(spark, broker, monkeypatch):
    """The stop's wait is bounded: tasks that never get the driver's stop (here it is not
    written) are cancelled with the job once the stop grace and the margin have passed,
    and the summary covers the reports received, marked interrupted."""
    import _thread
    import threading

    from kctl.spark import load

    topic = "spark-stop-unheard"
    _topic(broker, topic, 1)
    monkeypatch.setattr(load, "STOP_MARGIN_S", 1.0)
    monkeypatch.setattr(load.ReportListener, "stop_tasks", lambda self: None)
    spec = LoadSpec(topic=topic, producer=_config(broker.bootstrap), rate=500, duration_s=60.0,
                    workers=2, interval_s=0.25, stop_grace_s=1.0)
    run = load.SparkLoadRun(spec, config_for_summary={}, start_delay_s=0.5)
    timer = threading.Timer(6.0, _thread.interrupt_main)
    timer.start()
    t = time.monotonic()
    try:
        result = run.run()
    finally:
        timer.cancel()
    assert 7.0 < time.monotonic() - t < 30     # waited for the bound (grace + margin), then cancelled
    assert result.interrupted and not result.failures
    # No task returned, but what their live reports said of their start is kept (before:
    # no spark section at all).
    sp = result.summary.spark
    assert result.summary.counts.acked > 0 and sp is not None and sp.tasks == 2
    assert [t.task for t in sp.per_task] == [0, 1] and all(t.late_ms >= 0 for t in sp.per_task)
    assert sp.start_skew_ms < 1000


def test_the_driver_jvms_stderr_is_passed_on_but_the_incubator_warning():
    """Every line the driver JVM writes reaches kctl's stderr as it was, in order, except
    Spark 4's start-up 'Using incubator modules' warning; a partial last line too."""
    import os
    import threading

    from kctl.spark.session import forward_jvm_stderr
    jvm_r, jvm_w = os.pipe()
    out_r, out_w = os.pipe()
    t = threading.Thread(target=forward_jvm_stderr, args=(os.fdopen(jvm_r, "rb"), out_w))
    t.start()
    os.write(jvm_w, b"WARNING: Using incubator modules: jdk.incubator.vector\n"
                    b"12:00:01 ERROR TaskSetManager: Task 0 in stage 1.0 failed\n"
                    b"WARNING: Using incubator modules: jdk.incubator.foreign\n"
                    b"no newline at the end")
    os.close(jvm_w)
    t.join(10)
    os.close(out_w)
    with os.fdopen(out_r, "rb") as f:
        assert f.read() == (b"12:00:01 ERROR TaskSetManager: Task 0 in stage 1.0 failed\n"
                            b"WARNING: Using incubator modules: jdk.incubator.foreign\n"
                            b"no newline at the end")
