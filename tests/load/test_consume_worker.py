"""One consumer process's loop pieces (load/consume_worker.py) with a fake clock: the run's
end is taken before closing (kafka-consumer-perf-test's end time), rebalance time counted
as ConsumerPerformance's listener counts it."""

from __future__ import annotations

import queue
import threading

from kctl.config import Setting
from kctl.consumer_config import ConsumerConfig
from kctl.engine.batch import TopicPartition
from kctl.load.consume_worker import ConsumerWorker, ConsumeWorkerSpec, StartPosition

S = 1_000_000_000
WALL0 = 1_800_000_000 * S


class FakeClock:
    """Monotonic and wall time advanced together, by hand."""

    def __init__(self) -> None:
        self.mono = 5 * S

    def now_ns(self) -> int:
        return self.mono

    def wall_ns(self) -> int:
        return WALL0 + self.mono

    def wall_ms(self) -> int:
        return self.wall_ns() // 1_000_000

    def advance(self, ns: int) -> None:
        self.mono += ns


def _worker(**spec) -> tuple[ConsumerWorker, FakeClock, queue.Queue]:
    config = ConsumerConfig.from_settings([Setting("bootstrap.servers", "127.0.0.1:9", "-b")])
    reports: queue.Queue = queue.Queue()
    w = ConsumerWorker(ConsumeWorkerSpec(0, config, "t", (0,), StartPosition("beginning"), **spec),
                       reports, threading.Event())
    clock = FakeClock()
    w.clock = clock
    w.consumer.wall_offset_ns = WALL0           # the consumer's read times on the fake wall clock
    return w, clock, reports


def test_the_final_report_ends_before_closing(monkeypatch):
    """ConsumerPerformance takes endMs after its loop and before consumer.close(): closing
    (the commit, LeaveGroup) is not run time. The final report's interval ends there; its
    counters are read after the close (a commit on close is still counted)."""
    w, clock, reports = _worker()
    closed = []

    def slow_close(timeout_s: float = 30.0) -> None:
        clock.advance(3 * S)                  # a commit and a LeaveGroup that take 3 s
        closed.append(clock.wall_ns())

    monkeypatch.setattr(w.consumer, "close", slow_close)
    stop_at = clock.wall_ns()
    w._finish()
    final = reports.get_nowait()
    assert final.final and closed
    assert final.end_wall_ns == stop_at                  # before the close, not after
    assert closed[0] - final.end_wall_ns == 3 * S


def test_rebalance_time_counts_only_after_the_warmup():
    """A warm-up's records are left out of the counts, so its time is left out of the
    perf-test window too, rejoining included: a rejoin that began in the warm-up counts
    from the warm-up's end; one after it counts whole."""
    w, clock, _ = _worker(warmup_ns=2 * S)
    w._start_mono = clock.now_ns()                  # the common start
    tp = TopicPartition("t", 0)
    w.gain([tp])                                    # first assignment: before the start, no rejoin
    clock.advance(S)
    w.lose([tp])                                    # 1 s in: revoked (inside the warm-up)
    clock.advance(3 * S)
    w.gain([tp])                                    # 4 s in: back; 2 s of it after the warm-up
    assert w.rejoin_ns == 2 * S
    clock.advance(S)
    w.lose([tp])
    clock.advance(S // 2)
    w.gain([tp])                                    # wholly after the warm-up
    assert w.rejoin_ns == 2 * S + S // 2


def _batch(clock: FakeClock, records: list[tuple[int, int]], tag: bytes = b"\x01\x02\x03\x04"):
    """A consumed batch of records (sequence, intended wall ns) of producer worker 0."""
    from types import SimpleNamespace

    from kctl.protocol.identity import IDENTITY
    ids = b"".join(IDENTITY.pack(tag, 0, seq, t) for seq, t in records)
    return SimpleNamespace(tp=TopicPartition("t", 0), count=len(records), consumed_ns=clock.now_ns(),
                           identities=ids, first_offset=0)


def test_produce_consume_e2e_counts_the_records_the_producers_measured():
    """produce --consume: e2e covers the records scheduled after the producers' warm-up
    (start + warm-up), whenever the consumer reads them, as the acknowledged count does;
    timed from the consumer's own warm-up, 1,497 of 1,504 were counted and the step
    failed. Records read while the consumer's interval is still warm-up go out with its
    first measured interval."""
    from kctl.stats.e2e import E2E
    from kctl.stats.latency import decode_histogram

    w, clock, reports = _worker(warmup_ns=2 * S, e2e_by_schedule=True, run_tag=b"\x01\x02\x03\x04")
    start_wall = clock.wall_ns()
    w._e2e_from = start_wall + 2 * S                # as run() sets it from the common start
    w._start_mono = clock.now_ns()
    w._interval_warmup = True
    clock.advance(2 * S + 1)                        # just past the warm-up, interval not closed
    m = start_wall + 2 * S
    w._on_batch(_batch(clock, [(1, m - 2), (2, m - 1), (3, m), (4, m + 1)]))
    w._report(final=False)                          # the warm-up interval: nothing measured out
    warm = reports.get_nowait()
    assert warm.warmup and not warm.histograms
    w._on_batch(_batch(clock, [(5, m + 2)]))
    w._report(final=False)
    measured = reports.get_nowait()
    assert not measured.warmup
    assert decode_histogram(measured.histograms[E2E]).get_total_count() == 3


def test_produce_consume_e2e_leaves_out_the_warmup_records_by_sequence():
    w, clock, reports = _worker(e2e_by_schedule=True, warmup_records=3)
    w._e2e_from = clock.wall_ns()
    w._on_batch(_batch(clock, [(s, clock.wall_ns()) for s in range(6)]))
    w._report(final=False)
    from kctl.stats.e2e import E2E
    from kctl.stats.latency import decode_histogram
    assert decode_histogram(reports.get_nowait().histograms[E2E]).get_total_count() == 3


def _group_worker(**props):
    """A group member's worker on a scripted coordinator (tests/engine's fake network),
    its rebalance listener the worker's, joined with partition 0 read up to offset 7."""
    from tests.engine.test_coordinator import harness, joined
    h = harness(**props)
    w = ConsumerWorker(ConsumeWorkerSpec(0, h.config, "t", None, StartPosition("committed")),
                       queue.Queue(), threading.Event())
    w.consumer = h.consumer
    h.on_partitions_revoked = w.listener.on_partitions_revoked
    h.consumer.subscribe(["t"])
    joined(h, (0,))
    h.consumer.seek(TopicPartition("t", 0), 7)
    return w, h


def _answer_commits(h, errors_by_call):
    """Answers OffsetCommits as the close sends them: the n-th with ``errors_by_call[n]``."""
    from tests.engine.consumer_harness import LeaveGroupResponse
    from tests.engine.test_coordinator import commit_body
    calls = iter(errors_by_call)
    orig_poll = h.net.poll

    def poll(timeout_ns, now_ns):
        for r in h.net.pending("OffsetCommit"):
            h.net.respond(r, commit_body(r, next(calls)))
        for r in h.net.pending("LeaveGroup"):
            h.net.respond(r, LeaveGroupResponse(throttle_time_ms=0, error_code=0, members=[]))
        return orig_poll(timeout_ns, now_ns)
    h.net.poll = poll


def test_a_failed_revoke_commit_at_close_is_said_in_the_final_report():
    """enable.auto.commit=false: the listener's commit of the revoked partitions is the
    only closing commit. Answered with an error it left the group's offsets behind what
    was read: the final report says why (kctl consume's WARNING), not only the count."""
    w, h = _group_worker(**{"enable.auto.commit": "false"})
    _answer_commits(h, [{0: "REBALANCE_IN_PROGRESS"}])
    w._finish()
    final = w.reports.get_nowait()
    assert final.close_commit_error == "the revoke listener's commit: t-0 REBALANCE_IN_PROGRESS"
    assert final.metrics.commit_failures == 1


def test_a_failed_revoke_commit_after_a_closing_commit_at_that_offset_is_only_counted():
    """enable.auto.commit=true: the consumer's own closing commit stored offset 7; the
    listener's second commit of 7 failing leaves nothing behind: counted, no warning."""
    w, h = _group_worker()
    _answer_commits(h, [{}, {0: "REBALANCE_IN_PROGRESS"}])
    w._finish()
    final = w.reports.get_nowait()
    assert final.close_commit_error == ""
    assert (final.metrics.commits, final.metrics.commit_failures) == (1, 1)


def test_an_unanswered_revoke_commit_at_close_is_said_after_the_close_timeout():
    """The close waits for the listener's commit up to its timeout (30 s), then closes
    the connections: a commit left unanswered is said, not lost without a word."""
    w, h = _group_worker(**{"enable.auto.commit": "false"})
    orig_poll = h.net.poll

    def poll(timeout_ns, now_ns):
        h.clock.advance(ms=100)                     # the coordinator never answers
        return orig_poll(timeout_ns, now_ns)
    h.net.poll = poll
    start = h.clock.now_ns()
    w._finish()
    assert h.clock.now_ns() - start >= 30 * S
    assert w.reports.get_nowait().close_commit_error == (
        "the revoke listener's commit: t-0 no answer before closing")
