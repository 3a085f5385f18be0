"""``kctl produce`` under faults injected by kctl's fault proxy in front of the embedded
broker (issue 12, items 1-5). Every run is read back (``--verify``: every acknowledged
record present once, in order per partition) and checked against the accounting
invariant: every scheduled record is exactly one of acked, failed (by error name) or
abandoned (with the reason)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from kctl.inspect.faults import ErrorRewrite, FaultPlan
from kctl.inspect.proxy import InspectorProxy
from kctl.stats.hlog import read_interval_log
from kctl.stats.summary import RunSummary
from kctl.ui.produce_view import summary_line
from tests.stop_signal import group_gone

pytestmark = pytest.mark.broker

_topics = iter(range(10**6))


def produce_args(bootstrap, out, *extra, workers=1):
    return [sys.executable, "-m", "kctl", "produce", "-b", bootstrap,
            "-t", f"pfaults-{os.getpid()}-{next(_topics)}", "--partitions", "2", "--workers", str(workers),
            "--quiet", "--verify", "--json-out", str(out), *extra]


def run(bootstrap, out, *extra, timeout=90):
    return subprocess.run(produce_args(bootstrap, out, *extra), timeout=timeout,
                          capture_output=True, text=True)


def read_summary(out) -> tuple[dict, RunSummary]:
    doc = json.loads(out.read_text())
    return doc, RunSummary.from_json(doc)


class ProduceResponses:
    """The proxy's ``on_frame``: when each Produce response went back to kctl."""

    def __init__(self) -> None:
        self.ts_ns: list[int] = []

    def __call__(self, ev) -> None:
        if ev.api_name == "Produce" and ev.direction == "response":
            self.ts_ns.append(ev.ts_ns)

    def wait(self, n: int, timeout_s: float = 30.0) -> None:
        """Until ``n`` have gone back (the run is producing), or ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while len(self.ts_ns) < n and time.monotonic() < deadline:
            time.sleep(0.01)


def run_and_stop(args, responses: ProduceResponses, signum: int, before_stop,
                 to_group: bool = False) -> tuple[int, int, str, int]:
    """Runs kctl (in a process group of its own), waits until it is producing, calls
    ``before_stop(proc)``, sends ``signum`` to kctl (``to_group``: to every process of the
    group, workers included, as a terminal's Ctrl-C or systemd's stop does); returns the
    process group, the exit status, stderr and when the signal went (Unix ms)."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        responses.wait(50, 60)
        before_stop(proc)
        stop_unix_ms = time.time_ns() // 1_000_000
        if to_group:
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.pid, proc.returncode, err, stop_unix_ms


def check_accounted_and_read_back(doc, s: RunSummary):
    c = s.counts
    assert s.unaccounted == 0, f"scheduled {c.scheduled} != acked {c.acked} + failed {c.failed} " \
                               f"+ abandoned {c.abandoned} (+ warm-up)"
    assert c.failed == sum(c.failed_by_error.values())
    assert c.abandoned == sum(c.abandoned_by_reason.values())
    v = doc["verify"]
    assert v["ok"] and v["expected"] == c.acked and v["found"] == c.acked, v


def test_out_of_order_sequence_is_retried_with_an_epoch_bump(broker, tmp_path):
    """Item 1: the broker refuses a batch with OUT_OF_ORDER_SEQUENCE_NUMBER (the fault
    layer answers it without writing it); an idempotent producer bumps its epoch and
    retries: nothing fails, exit 0, the error is in errors_by_name."""
    out = tmp_path / "s.json"
    plan = FaultPlan(lose_rate=1.0, lose_limit=1, lose_error="OUT_OF_ORDER_SEQUENCE_NUMBER", seed=3)
    with InspectorProxy([broker.bootstrap], faults=plan) as proxy:
        r = run(proxy.bootstrap, out, "--rate", "2000", "--num-records", "4000",
                "-X", "enable.idempotence=true", "-X", "acks=all")
        assert proxy.snapshot().faults.get("rejected") == 1
    assert r.returncode == 0, r.stderr
    doc, s = read_summary(out)
    assert s.counts.failed == 0 and s.counts.acked == 4000
    assert s.errors_by_name.get("OUT_OF_ORDER_SEQUENCE_NUMBER", 0) >= 1
    check_accounted_and_read_back(doc, s)


def test_unknown_producer_id_is_retried(broker, tmp_path):
    """Item 1 (KIP-360): UNKNOWN_PRODUCER_ID for an idempotent producer is retried
    (with an epoch bump when the log start offset is known); nothing fails."""
    out = tmp_path / "s.json"
    plan = FaultPlan(lose_rate=1.0, lose_limit=1, lose_error="UNKNOWN_PRODUCER_ID", seed=5)
    with InspectorProxy([broker.bootstrap], faults=plan) as proxy:
        r = run(proxy.bootstrap, out, "--rate", "2000", "--num-records", "3000",
                "-X", "enable.idempotence=true")
        assert proxy.snapshot().faults.get("rejected") == 1
    assert r.returncode == 0, r.stderr
    doc, s = read_summary(out)
    assert s.counts.failed == 0 and s.errors_by_name.get("UNKNOWN_PRODUCER_ID", 0) >= 1
    check_accounted_and_read_back(doc, s)


def test_message_too_large_split_is_in_errors_by_name(broker, tmp_path):
    """Item 3: an injected MESSAGE_TOO_LARGE is split and delivered; errors_by_name
    counts it, and splits are counted apart from retries."""
    out = tmp_path / "s.json"
    plan = FaultPlan(lose_rate=1.0, lose_limit=1, lose_error="MESSAGE_TOO_LARGE", seed=1)
    with InspectorProxy([broker.bootstrap], faults=plan) as proxy:
        r = run(proxy.bootstrap, out, "--rate", "5000", "--num-records", "5000", "-X", "linger.ms=20")
    assert r.returncode == 0, r.stderr
    doc, s = read_summary(out)
    assert s.errors_by_name.get("MESSAGE_TOO_LARGE", 0) >= 1
    assert s.batching.splits >= 1 and s.counts.failed == 0
    check_accounted_and_read_back(doc, s)


def test_buffer_exhaustion_fails_records_and_the_run_goes_on(broker, tmp_path):
    """Item 2: a 1.5 s stall with a small buffer.memory: records that wait max.block.ms
    for memory fail (BUFFER_EXHAUSTED, counted); the run goes on to the end of its
    schedule and recovers with the broker; every record is accounted for."""
    out = tmp_path / "s.json"
    responses = ProduceResponses()

    with InspectorProxy([broker.bootstrap], on_frame=responses) as proxy:
        def stall():
            responses.wait(20)
            proxy.set_faults(FaultPlan(blackhole=True))
            time.sleep(1.5)
            proxy.set_faults(None)

        t = threading.Thread(target=stall, daemon=True)
        t.start()
        r = run(proxy.bootstrap, out, "--rate", "5000", "--duration", "4s",
                "-X", "buffer.memory=65536", "-X", "batch.size=16384", "-X", "max.block.ms=200",
                "-X", "request.timeout.ms=1000", "-X", "enable.idempotence=true")
        t.join(timeout=5)
    doc, s = read_summary(out)
    assert r.returncode == 1 and "BUFFER_EXHAUSTED" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    c = s.counts
    assert c.failed_by_error.get("BUFFER_EXHAUSTED", 0) > 0
    assert c.scheduled == 20_000, "the schedule ran to its end"
    assert c.acked > 10_000, "the producer recovered with the broker"
    # The stall is on the intended clock of the records that waited for memory.
    assert s.latency["intended"].max_ms > 1000
    check_accounted_and_read_back(doc, s)


def test_low_rate_is_measured_over_the_schedule_window(broker, tmp_path):
    """Item 4: 5 records/s for 3 s (answers delayed 0-20 ms by the fault proxy): 15
    records over the schedule's 3 s window, not over the time to the last answer."""
    out = tmp_path / "s.json"
    with InspectorProxy([broker.bootstrap], faults=FaultPlan(delay_ms=(0, 20), seed=2)) as proxy:
        r = run(proxy.bootstrap, out, "--rate", "5", "--duration", "3s")
    assert r.returncode == 0, r.stderr
    doc, s = read_summary(out)
    assert s.counts.acked == 15
    assert s.run.measured_s == pytest.approx(3.0, abs=0.05)
    assert s.rates.records_per_s == pytest.approx(5.0, rel=0.02)
    check_accounted_and_read_back(doc, s)


def test_ctrl_c_exits_130_and_says_the_run_was_cut_short(broker, tmp_path):
    """Item 5: Ctrl-C (SIGINT to kctl) stops the schedule; exit status 130, the summary
    says ``interrupted`` and is written, with every record accounted for."""
    out = tmp_path / "s.json"
    responses = ProduceResponses()

    with InspectorProxy([broker.bootstrap], on_frame=responses) as proxy:
        _, status, err, _ = run_and_stop(
            produce_args(proxy.bootstrap, out, "--rate", "1000", "--duration", "60s"),
            responses, signal.SIGINT, lambda proc: time.sleep(1.0))
    assert status == 130, err
    doc, s = read_summary(out)
    assert doc["run"]["interrupted"] is True and s.run.interrupted
    assert 0 < s.counts.scheduled < 60_000
    check_accounted_and_read_back(doc, s)


def test_transactional_run_aborts_a_failed_transaction_and_goes_on(broker, tmp_path):
    """A transactional run (--transaction-duration-ms) whose batch is refused with
    OUT_OF_ORDER_SEQUENCE_NUMBER: that transaction aborts (with an epoch bump), its
    acknowledged records count as failed (TRANSACTION_ABORTED), later transactions
    commit; every record is accounted for and the committed ones read back."""
    out = tmp_path / "s.json"
    plan = FaultPlan(lose_rate=1.0, lose_limit=1, lose_error="OUT_OF_ORDER_SEQUENCE_NUMBER", seed=3)
    with InspectorProxy([broker.bootstrap], faults=plan) as proxy:
        r = run(proxy.bootstrap, out, "--rate", "1000", "--duration", "3s",
                "--transaction-duration-ms", "500")
        assert proxy.snapshot().faults.get("rejected") == 1
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    doc, s = read_summary(out)
    t = s.transactions
    assert t is not None and t.aborted == 1 and t.committed >= 4
    c = s.counts
    assert c.failed_by_error.get("OUT_OF_ORDER_SEQUENCE_NUMBER", 0) >= 1
    assert c.failed_by_error.get("TRANSACTION_ABORTED", 0) > 0
    assert c.acked > 1500
    check_accounted_and_read_back(doc, s)


def test_verify_leaves_out_the_records_of_aborted_transactions(broker, tmp_path):
    """Transactions aborted between committed ones (INVALID_PRODUCER_EPOCH on a Produce,
    abortable): --verify reads as read_committed, so the aborted transactions' records
    inside the acknowledged ranges are left out of found (Tansu lists no aborted
    transactions; its ABORT markers say which) and counted apart."""
    out = tmp_path / "s.json"
    plan = FaultPlan(lose_rate=0.02, lose_limit=3, lose_error="INVALID_PRODUCER_EPOCH", seed=3)
    with InspectorProxy([broker.bootstrap], faults=plan) as proxy:
        r = run(proxy.bootstrap, out, "--rate", "1000", "--num-records", "2000",
                "--transaction-duration-ms", "300")
    assert "Traceback" not in r.stderr, r.stderr
    doc, s = read_summary(out)
    t, c = s.transactions, s.counts
    assert t is not None and t.aborted >= 1 and t.committed >= 1
    assert c.failed_by_error.get("TRANSACTION_ABORTED", 0) > 0
    check_accounted_and_read_back(doc, s)
    assert doc["verify"]["aborted"] > 0, doc["verify"]


@pytest.mark.parametrize(("signum", "to_group"), [(signal.SIGINT, True), (signal.SIGTERM, False),
                                                  (signal.SIGTERM, True)],
                         ids=["ctrl-c", "sigterm", "sigterm-to-group"])
def test_a_stop_while_behind_counts_the_records_the_catch_up_limit_held(broker, tmp_path, signum, to_group):
    """Ctrl-C (to the whole group, as a terminal sends it) or SIGTERM (taken as Ctrl-C; to
    kctl alone as ``kill`` sends it, or to the whole group as systemd does, when the workers
    take it as their own stop) while two paced workers (1,000 records/s each) catch up
    after a 300 ms stall (the whole process group stopped, as a preempted host would): the
    catch-up limit still holds most of the backlog, and those records count as scheduled
    and abandoned (never handed to the producer); every record is accounted for and read
    back, and both workers stopped in order (none failed) and ended."""
    out = tmp_path / "s.json"
    responses = ProduceResponses()

    def stall(proc):
        os.killpg(proc.pid, signal.SIGSTOP)
        time.sleep(0.3)
        os.killpg(proc.pid, signal.SIGCONT)
        time.sleep(0.2)

    with InspectorProxy([broker.bootstrap], on_frame=responses) as proxy:
        pgid, status, err, stop_unix_ms = run_and_stop(
            produce_args(proxy.bootstrap, out, "--rate", "2000", "--duration", "60s", workers=2),
            responses, signum, stall, to_group)
    assert status == 130, err
    assert "Traceback" not in err
    assert group_gone(pgid), "a worker outlived kctl produce"
    doc, s = read_summary(out)
    assert s.run.interrupted and s.run.workers == 2
    assert s.counts.acked > 0 and len(doc["run"]["workers_failed"]) == 0
    unsent = s.counts.abandoned_by_reason.get("run stopped: due, never handed to the producer", 0)
    assert unsent > 200, s.counts        # about 600 fell due in the stall; ~10% drained
    # Scheduled: every record due by the stop (the workers see it within a poll; the
    # margin above is for a slow parent), not just those handed over.
    due_at_stop = 2000 * (stop_unix_ms - s.run.start_unix_ms) // 1000
    assert due_at_stop - 10 <= s.counts.scheduled <= due_at_stop + 200, (due_at_stop, s.counts)
    check_accounted_and_read_back(doc, s)


def test_a_fatal_producer_error_fails_the_run_with_every_record_accounted(broker, tmp_path):
    """A batch refused with CLUSTER_AUTHORIZATION_FAILED is fatal for an idempotent producer
    (as Java's): the worker fails the run (one ``kctl: error:`` line, status 2), but first
    reports its complete counts, so the summary is written and adds up, the due slice it
    could not hand over abandoned."""
    out = tmp_path / "s.json"
    plan = FaultPlan(lose_rate=1.0, lose_limit=1, lose_error="CLUSTER_AUTHORIZATION_FAILED", seed=1)
    with InspectorProxy([broker.bootstrap], faults=plan) as proxy:
        r = run(proxy.bootstrap, out, "--rate", "1000", "--duration", "10s",
                "-X", "enable.idempotence=true", "-X", "acks=all")
    assert r.returncode == 2, r.stderr
    assert "\nkctl: error: worker 0 failed: " in r.stderr and "CLUSTER_AUTHORIZATION_FAILED" in r.stderr
    assert "record(s) failed: CLUSTER_AUTHORIZATION_FAILED x" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    _, s = read_summary(out)
    c = s.counts
    assert [w.worker for w in s.run.workers_failed] == [0]
    assert c.failed_by_error.get("CLUSTER_AUTHORIZATION_FAILED", 0) >= 1
    assert c.abandoned_by_reason.get("run stopped: due, never handed to the producer", 0) >= 1
    assert s.unaccounted == 0 and c.abandoned == sum(c.abandoned_by_reason.values())
    assert c.failed == sum(c.failed_by_error.values())


def test_a_fenced_transactional_run_counts_its_open_transaction_failed(broker, tmp_path):
    """PRODUCER_FENCED on a Produce is fatal for a transactional producer (as Java's): the
    open transaction can never commit, so the records the broker acknowledged in it count
    failed (TRANSACTION_NOT_COMMITTED), not acked; the fatal line says why; every record is
    accounted for and the committed ones read back (read_committed)."""
    out = tmp_path / "s.json"
    # The first Produce request that may be refused (a partition's second batch): always
    # inside the first transaction, whatever the machine's load makes of the batching.
    plan = FaultPlan(lose_rate=1.0, lose_limit=1, lose_error="PRODUCER_FENCED", seed=5)
    with InspectorProxy([broker.bootstrap], faults=plan) as proxy:
        r = run(proxy.bootstrap, out, "--rate", "1000", "--num-records", "2000",
                "--transaction-duration-ms", "300")
        assert proxy.snapshot().faults.get("rejected") == 1
    assert r.returncode == 2, r.stderr
    assert "PRODUCER_FENCED: another producer with the same transactional.id" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    doc, s = read_summary(out)
    c = s.counts
    assert f"{c.failed} record(s) failed: " in r.stderr and "TRANSACTION_NOT_COMMITTED x" in r.stderr
    assert s.transactions is not None and s.transactions.committed == 0
    assert c.acked == 0 and c.failed_by_error.get("TRANSACTION_NOT_COMMITTED", 0) > 0, c
    assert s.unaccounted == 0 and c.failed == sum(c.failed_by_error.values())
    check_acked_figures_agree(s)      # no latency for "0 records sent"
    assert summary_line(s).startswith("0 records sent, 0.000000 records/sec (0.00 MB/sec), "
                                      "0.00 ms avg latency, 0.00 ms max latency"), summary_line(s)


def check_acked_figures_agree(s: RunSummary, hlog=None):
    """Every acknowledged figure covers the records counted acked, no more: latencies on
    each clock, the per-partition and per-broker counts, records per batch, the .hlog."""
    c = s.counts
    for clock, lat in s.latency.items():
        assert lat.count == c.acked, (clock, lat.count, c.acked)
    assert sum(p.records_acked for p in s.partitions) == c.acked
    assert sum(b.records_acked for b in s.brokers) == c.acked
    assert c.batches_acked <= c.acked
    if c.batches_acked:
        assert abs(s.batching.records_per_batch - c.acked / c.batches_acked) < 1e-3
    if hlog is not None:
        logged: dict[str, int] = {}
        for interval in read_interval_log(hlog):
            logged[interval.tag] = logged.get(interval.tag, 0) + interval.histogram.get_total_count()
        assert logged and all(n == c.acked for n in logged.values()), (logged, c.acked)


def test_an_aborted_transaction_is_in_no_acked_figure(broker, tmp_path):
    """``--inject-error TRANSACTION_ABORTABLE@EndTxn`` on the first EndTxn (KIP-890): that
    commit fails, the worker aborts the transaction and goes on. The records the broker had
    acknowledged in it count failed (TRANSACTION_ABORTED), and no acknowledged figure holds
    them: the latencies of every clock, the .hlog, the per-partition and per-broker counts
    and records per batch cover exactly the records counted acked, which read back."""
    out, hlog = tmp_path / "s.json", tmp_path / "run.hlog"
    plan = FaultPlan(error=ErrorRewrite("TRANSACTION_ABORTABLE", 1.0, ("EndTxn",), limit=1), seed=2)
    with InspectorProxy([broker.bootstrap], faults=plan) as proxy:
        r = run(proxy.bootstrap, out, "--rate", "1000", "--duration", "2s",
                "--transaction-duration-ms", "400", "--hdr-out", str(hlog))
        assert proxy.snapshot().faults.get("errors_injected") == 1
    assert "Traceback" not in r.stderr, r.stderr
    doc, s = read_summary(out)
    t, c = s.transactions, s.counts
    assert t is not None and t.aborted == 1 and t.committed >= 3
    assert c.failed_by_error.get("TRANSACTION_ABORTED", 0) > 0 and c.acked > 0
    check_acked_figures_agree(s, hlog)
    check_accounted_and_read_back(doc, s)


def test_an_idempotent_run_goes_on_after_init_producer_id_is_refused_for_authorization(broker, tmp_path):
    """``--inject-error CLUSTER_AUTHORIZATION_FAILED@InitProducerId`` on the first answer:
    as Java's (trunk) idempotent producer, not fatal: the records held fail with the error,
    the producer asks again and the run goes on; every record is accounted for."""
    out = tmp_path / "s.json"
    plan = FaultPlan(error=ErrorRewrite("CLUSTER_AUTHORIZATION_FAILED", 1.0, ("InitProducerId",), limit=1),
                     seed=1)
    with InspectorProxy([broker.bootstrap], faults=plan) as proxy:
        r = run(proxy.bootstrap, out, "--rate", "1000", "--num-records", "1500",
                "-X", "enable.idempotence=true", "-X", "acks=all")
        assert proxy.snapshot().faults.get("errors_injected") == 1
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stderr
    doc, s = read_summary(out)
    c = s.counts
    assert not s.run.workers_failed and c.acked > 1000
    assert c.failed == c.failed_by_error.get("CLUSTER_AUTHORIZATION_FAILED", 0)
    assert s.errors_by_name.get("CLUSTER_AUTHORIZATION_FAILED") == 1
    check_acked_figures_agree(s)
    check_accounted_and_read_back(doc, s)


def test_inspect_inject_error_aborted_transactions_leave_the_summary_consistent(broker, tmp_path):
    """Through ``kctl inspect --inject-error INVALID_PRODUCER_EPOCH:0.02`` (the CLI, in its
    own process): Produce answers refused at random make their transactions abortable;
    the run aborts them and goes on. The summary's figures agree with the verdicts: every
    latency count and the .hlog equal the acked count, as do the per-partition and
    per-broker counts; aborted records are failed TRANSACTION_ABORTED; every record is
    accounted for and the committed ones read back."""
    from kctl.broker import free_port

    port = free_port()
    proxy = subprocess.Popen([sys.executable, "-m", "kctl", "inspect", "--listen", f"127.0.0.1:{port}",
                              "--upstream", broker.bootstrap, "--inject-error", "INVALID_PRODUCER_EPOCH:0.02",
                              "--seed", "3", "--duration", "90"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    out, hlog = tmp_path / "s.json", tmp_path / "run.hlog"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and proxy.poll() is None, "kctl inspect did not listen"
                time.sleep(0.05)
        r = run(f"127.0.0.1:{port}", out, "--rate", "1000", "--num-records", "3000",
                "--transaction-duration-ms", "300", "--hdr-out", str(hlog))
    finally:
        proxy.send_signal(signal.SIGINT)
        try:
            _, proxy_err = proxy.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proxy.kill()
            raise
    assert "Traceback" not in r.stderr, r.stderr
    assert "(faults: INVALID_PRODUCER_EPOCH@Produce 0.02, seed 3)" in proxy_err, proxy_err
    doc, s = read_summary(out)
    assert not s.run.workers_failed, r.stderr
    t, c = s.transactions, s.counts
    assert t is not None and t.aborted >= 1 and t.committed >= 1
    assert c.failed_by_error.get("INVALID_PRODUCER_EPOCH", 0) >= 1
    assert c.failed_by_error.get("TRANSACTION_ABORTED", 0) > 0 and c.acked > 0
    check_acked_figures_agree(s, hlog)
    check_accounted_and_read_back(doc, s)


def test_a_stop_during_a_stalled_commit_ends_within_the_stop_grace(broker, tmp_path):
    """Produce, AddPartitionsToTxn and EndTxn answers held 60 s mid-run, then SIGTERM while
    the worker waits to commit: the wait ends within the stop grace (not max.block.ms, not
    the parent's kill), the worker reports every verdict; the stalled transaction's records
    the broker acknowledged count failed TRANSACTION_NOT_COMMITTED (its EndTxn never went
    out), or abandoned when its EndTxn had, none acked; --verify expects exactly the
    committed records, which read back."""
    out = tmp_path / "s.json"
    responses = ProduceResponses()
    stall = FaultPlan(delay_ms=60_000, delay_apis=("Produce", "AddPartitionsToTxn", "EndTxn"))

    with InspectorProxy([broker.bootstrap], on_frame=responses) as proxy:
        def stall_then_wait(proc):
            time.sleep(1.0)                   # a few transactions commit
            proxy.set_faults(stall)
            time.sleep(2.0)                   # the worker is waiting for its commit
        started = time.monotonic()
        _, status, err, stop_unix_ms = run_and_stop(
            produce_args(proxy.bootstrap, out, "--rate", "1000", "--duration", "30s",
                         "--transaction-duration-ms", "500"),
            responses, signal.SIGTERM, stall_then_wait)
        after_stop_s = time.time_ns() / 1e9 - stop_unix_ms / 1000
        proxy.set_faults(None)
    assert time.monotonic() - started < 40
    assert status == 130, err
    assert "no verdict in the summary" not in err and "Traceback" not in err, err
    # The grace (5 s), then the summary and --verify; the parent's SIGKILL would come
    # only 10 s after the stop (grace + 5 s).
    assert after_stop_s < 9.5, f"{after_stop_s:.1f} s after the stop (grace 5 s)"
    doc, s = read_summary(out)
    c, t = s.counts, s.transactions
    assert t is not None and t.committed >= 1
    stalled = (c.failed_by_error.get("TRANSACTION_NOT_COMMITTED", 0)
               + c.abandoned_by_reason.get("producer closed before the transaction's end was known", 0))
    assert stalled > 0, c
    # The records due while the worker waited for its commit, up to the stop, were
    # scheduled too: abandoned, never handed over (the schedule's rate over the run).
    assert c.abandoned_by_reason.get("run stopped: due, never handed to the producer", 0) > 500, c
    assert c.scheduled >= 1000 * (stop_unix_ms - doc["run"]["start_unix_ms"]) / 1000 - 200, c
    check_accounted_and_read_back(doc, s)
    check_acked_figures_agree(s)
