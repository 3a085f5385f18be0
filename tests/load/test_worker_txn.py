"""A transactional worker's figures agree with the records' final verdicts: a batch
acknowledged in a transaction enters the latency histograms (with its acknowledgement's
latency) and the moved-acks figures only when the transaction commits, as the engine
counts it acked only then; an aborted transaction's records are in none. No broker: the
producer's commit and abort are stood in for, the batches built by hand."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from kctl.config import ProducerConfig
from kctl.engine.batch import AppendSlice, BatchState, TopicPartition
from kctl.engine.clock import FakeClock
from kctl.engine.producer import TransactionAbortableError, TransactionTimeoutError
from kctl.load.worker import Worker, WorkerSpec
from kctl.stats.latency import decode_histogram

MS = 1_000_000
S = 1000 * MS


class _TxnProducer:
    """The worker's producer, for its transaction calls only."""

    def __init__(self, real, commit_error=None):
        self._real = real
        self.commit_error = commit_error
        self.aborted = 0
        self.stalled = None      # a FakeClock: the commit never ends, its waits take their time
        self.on_wait = None      # called after each wait (a stop comes in)

    def commit_transaction(self, timeout_s=None):
        if self.stalled is not None:
            assert timeout_s is not None, "the worker waits in bounded turns"
            self.stalled.advance(ns=int(timeout_s * 1e9))
            if self.on_wait:
                self.on_wait()
            raise TransactionTimeoutError("commit_transaction: not complete")
        if self.commit_error:
            raise TransactionAbortableError(f"commit_transaction: {self.commit_error}")

    def abort_transaction(self, timeout_s=None):
        self.aborted += 1

    def begin_transaction(self):
        pass

    def __getattr__(self, name):
        return getattr(self._real, name)


def _worker(commit_error=None, props=None, **kw) -> Worker:
    producer = ProducerConfig.from_properties({"bootstrap.servers": "127.0.0.1:9",
                                               "transactional.id": "tx", **(props or {})})
    clock = FakeClock(now_ns=10 * S)
    spec = WorkerSpec(worker=0, run_id="feedc0de0001", topic="t", producer=producer,
                      schedule_rate=1000.0, schedule_phase_ns=0, num_records=None,
                      duration_ns=5 * S, start_wall_ns=clock.wall_ns(),
                      transaction_duration_ms=1000, **kw)
    reports: list = []
    w = Worker(spec, SimpleNamespace(put=reports.append), threading.Event())
    w.clock = clock
    w.producer = _TxnProducer(w.producer, commit_error)
    w.reports_seen = reports
    w._begin_transaction()
    return w


def _acked(w: Worker, n: int, due_ns: int, first_seq: int = 0, offset: int = 0):
    """A batch of ``n`` records due 1 ms apart from ``due_ns``, acknowledged now."""
    s = AppendSlice(n, due_ns, due_ns, MS, first_seq=first_seq)
    w._on_batch_done(SimpleNamespace(state=BatchState.ACKED, slices=[s], sent_ns=-1, record_count=n,
                                     value_bytes=100 * n, tp=TopicPartition("t", 0), node_id=1,
                                     result=SimpleNamespace(base_offset=offset)))


def _count(report) -> int:
    return decode_histogram(report.histograms["intended"]).get_total_count()


def test_a_transactions_latencies_are_reported_when_it_commits_with_their_ack_time():
    w = _worker()
    now = w.clock.now_ns()
    _acked(w, 10, now - 5 * MS)               # acked 5-14 ms after their intended times
    w._report(final=False)
    assert _count(w.reports_seen[-1]) == 0, "not acknowledged for good before the commit"
    w.clock.advance(ms=900)                   # the commit comes much later
    w._end_transaction(None)
    w._report(final=False)
    h = decode_histogram(w.reports_seen[-1].histograms["intended"])
    assert h.get_total_count() == 10
    assert h.get_max_value() < 20_000, "the latency is the acknowledgement's (µs), not the commit's"
    assert w.first_measured_done_wall_ns != 0


def test_an_aborted_transactions_records_are_in_no_latency_figure():
    w = _worker(commit_error="TRANSACTION_ABORTABLE")
    _acked(w, 10, w.clock.now_ns() - 5 * MS)
    w._end_transaction(None)                  # the commit fails: aborted instead
    assert w.producer.aborted == 1
    w._begin_transaction()
    _acked(w, 3, w.clock.now_ns() - 2 * MS)
    w.producer.commit_error = None
    w._end_transaction(None)
    w._report(final=False)
    assert _count(w.reports_seen[-1]) == 3, "only the committed transaction's records"


def test_warmup_records_of_a_transaction_move_when_it_commits_not_when_it_aborts():
    w = _worker(commit_error="TRANSACTION_ABORTABLE", warmup_ns=S)
    w._interval_warmup = False
    _acked(w, 10, w.measured_from_ns - 10 * MS)     # all scheduled in the warm-up
    w._end_transaction(None)                        # aborted
    w._report(final=False)
    assert (w.reports_seen[-1].warmup_acked_late, w.reports_seen[-1].warmup_late_by_node) == (0, {})
    w._begin_transaction()
    w.producer.commit_error = None
    _acked(w, 4, w.measured_from_ns - 10 * MS)
    w._report(final=False)
    assert w.reports_seen[-1].warmup_acked_late == 0, "not before the commit"
    w._end_transaction(None)                        # committed
    w._report(final=False)
    r = w.reports_seen[-1]
    assert (r.warmup_acked_late, r.warmup_late_by_node) == (4, {1: 4})


def test_a_stop_during_a_stalled_commit_ends_the_wait_within_the_stop_grace():
    """A commit that never completes (Produce and EndTxn stalled) waits max.block.ms, as
    Java's commitTransaction; a stop that comes meanwhile ends the wait within the stop
    grace (counted from the stop), the transaction's records stay out of every acked
    figure, and the final report (with the acked runs --verify checks) still goes out."""
    w = _worker(props={"max.block.ms": "60000"}, stop_grace_s=5.0, verify=True)
    now = w.clock.now_ns()
    _acked(w, 4, now - 5 * MS, first_seq=0, offset=0)
    w._end_transaction(None)                        # committed: 4 records
    w._begin_transaction()
    _acked(w, 6, now - 3 * MS, first_seq=4, offset=4)
    w.producer.stalled = w.clock
    t0 = w.clock.now_ns()
    stop_at = t0 + 3 * S

    def stop_comes():
        if w.clock.now_ns() >= stop_at:
            w.stop.set()
    w.producer.on_wait = stop_comes
    assert w._end_transaction(None) is False, "stopped, the commit not complete"
    waited = w.clock.now_ns() - stop_at
    assert 5 * S <= waited <= 5 * S + 100 * MS, "bounded by the stop grace, not max.block.ms"
    w.producer.stalled = None
    w._finish()                                     # the grace is spent: nothing more to wait for
    assert w.clock.now_ns() - stop_at <= 5 * S + 100 * MS
    final = w.reports_seen[-1]
    assert final.final
    assert dict(final.acked_runs) == {0: [(0, 4, 0)]}, "only the committed transaction is expected"
    assert sum(_count(r) for r in w.reports_seen) == 4


def test_a_stalled_commit_without_a_stop_times_out_after_max_block_ms():
    """KafkaProducer.commitTransaction blocks max.block.ms, then throws TimeoutException:
    without a stop the worker waits that long (in turns that look at the stop), then the
    timeout fails the run (its _finish still reports every verdict)."""
    w = _worker(props={"max.block.ms": "2000"})
    w.producer.stalled = w.clock
    t0 = w.clock.now_ns()
    with pytest.raises(TransactionTimeoutError, match=r"within 2000 ms \(max.block.ms\)"):
        w._end_transaction(None)
    assert 2 * S <= w.clock.now_ns() - t0 <= 2 * S + 100 * MS
