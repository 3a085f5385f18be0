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


# -- commits: the engine's, as the Java consumer makes them (ConsumerCoordinatorTest) -----------

def _group_worker(**props):
    """A group-mode worker whose consumer is stepped on a fake network (its own listener)."""
    from tests.engine.consumer_harness import ConsumerHarness
    from tests.engine.test_coordinator import GROUP

    from kctl.load.consume_worker import _Listener

    h = ConsumerHarness(partitions=4, **{**GROUP, **props})
    h.ready()
    w = ConsumerWorker(ConsumeWorkerSpec(0, h.config, "t", None, StartPosition("committed")),
                       queue.Queue(), threading.Event())
    w.consumer = h.consumer
    h.consumer.coordinator.listener = _Listener(w)
    h.consumer.subscribe(["t"])
    return w, h


def _close_answering(h) -> list:
    """Closes the consumer, the broker answering OffsetCommit and LeaveGroup; the requests
    sent, in order."""
    from tests.engine.consumer_harness import LeaveGroupResponse
    from tests.engine.test_coordinator import commit_body

    order = []
    send, poll = h.net.send, h.net.poll

    def sent(req, now_ns):
        order.append(req)
        return send(req, now_ns)

    def answering(timeout_ns, now_ns):
        for r in h.net.pending("OffsetCommit"):
            h.net.respond(r, commit_body(r))
        for r in h.net.pending("LeaveGroup"):
            h.net.respond(r, LeaveGroupResponse(throttle_time_ms=0, error_code=0, members=[]))
        return poll(timeout_ns, now_ns)

    h.net.send, h.net.poll = sent, answering
    h.consumer.close()
    return order


def test_without_auto_commit_a_rebalance_and_close_commit_nothing():
    """Java's ConsumerCoordinatorTest (testCloseDynamicAssignment, auto-commit off): no
    OffsetCommit before the JoinGroup of a rebalance nor before LeaveGroup. The worker's
    listener committed revoked partitions' positions: with enable.auto.commit=false a
    second run of the group read nothing."""
    from tests.engine.test_coordinator import answer, join_response, joined, sync_response

    w, h = _group_worker(**{"enable.auto.commit": "false"})
    joined(h, (0, 1))
    assert w.owned == {TopicPartition("t", 0), TopicPartition("t", 1)}
    h.consumer.seek(TopicPartition("t", 0), 10)
    h.consumer.coordinator.request_rejoin("test")
    h.step()                                              # eager: revoke, then JoinGroup
    assert not w.owned and len(h.net.pending("JoinGroup")) == 1
    answer(h, "JoinGroup", lambda r: join_response(r, generation=2, members=[]))
    answer(h, "SyncGroup", sync_response((0, 1)))
    h.consumer.seek(TopicPartition("t", 0), 12)
    order = _close_answering(h)
    assert h.net.requests("OffsetCommit") == []
    assert [r.api_key for r in order].count(13) == 1      # LeaveGroup


def test_with_auto_commit_close_commits_once_before_leaving():
    """Java's close(): maybeAutoCommitOffsetsSync, then LeaveGroup; the revoke callback
    adds no commit of its own (it sent a second, identical OffsetCommit)."""
    from tests.engine.test_coordinator import joined

    w, h = _group_worker(**{"enable.auto.commit": "true"})
    joined(h, (0, 1), generation=3)
    h.consumer.seek(TopicPartition("t", 0), 10)
    h.consumer.seek(TopicPartition("t", 1), 20)
    order = _close_answering(h)
    commits = [r for r in order if r.api_key == 8]
    assert len(commits) == 1
    assert order.index(commits[0]) < [r.api_key for r in order].index(13)
    assert {p.partition_index: p.committed_offset for t in commits[0].body.topics for p in t.partitions} == {
        0: 10, 1: 20}
    assert not w.owned


def test_assign_mode_without_a_seek_starts_by_auto_offset_reset():
    """StartPosition("reset"): the worker seeks nothing, so the engine asks ListOffsets by
    auto.offset.reset (latest: timestamp -1), as Java's assign() without a seek does."""
    from tests.engine.consumer_harness import ConsumerHarness

    h = ConsumerHarness(partitions=2, **{"auto.offset.reset": "latest"})
    h.ready()
    w = ConsumerWorker(ConsumeWorkerSpec(0, h.config, "t", (0, 1), StartPosition("reset", reset="latest")),
                       queue.Queue(), threading.Event())
    w.consumer = h.consumer
    w._position()
    h.step()
    req = h.net.pending("ListOffsets")[0]
    assert {p.partition_index: p.timestamp for t in req.body.topics for p in t.partitions} == {0: -1, 1: -1}


def test_a_failed_closing_commit_is_said_in_the_final_report():
    """enable.auto.commit=true: the consumer's closing commit (Java's close,
    maybeAutoCommitOffsetsSync) answered with an error left the group's offsets behind
    what was read: the final report says why (kctl consume's WARNING), not only the count."""
    from tests.engine.consumer_harness import LeaveGroupResponse
    from tests.engine.test_coordinator import commit_body, joined

    w, h = _group_worker(**{"enable.auto.commit": "true"})
    joined(h, (0,))
    h.consumer.seek(TopicPartition("t", 0), 7)
    poll = h.net.poll

    def answering(timeout_ns, now_ns):
        for r in h.net.pending("OffsetCommit"):
            h.net.respond(r, commit_body(r, {0: "REBALANCE_IN_PROGRESS"}))
        for r in h.net.pending("LeaveGroup"):
            h.net.respond(r, LeaveGroupResponse(throttle_time_ms=0, error_code=0, members=[]))
        return poll(timeout_ns, now_ns)

    h.net.poll = answering
    w._finish()
    final = w.reports.get_nowait()
    assert final.close_commit_error == "t-0 REBALANCE_IN_PROGRESS"
    assert (final.metrics.commits, final.metrics.commit_failures) == (0, 1)


def _fetched(h) -> list[int]:
    """The partitions of the Fetches sent so far (each request's partitions, in order)."""
    return [p.partition for r in h.net.requests("Fetch") for t in r.body.topics for p in t.partitions]


def test_no_fetch_before_the_common_start_in_assign_mode():
    """OMB pauses its consumers until the timer starts (a Java consumer fetches only in
    poll()): the worker's wait for the start stepped the consumer, which fetched, so a
    quarter of a backlog arrived before the measured window opened. Partitions are
    paused from assign() on and resumed at the start."""
    from tests.engine.consumer_harness import ConsumerHarness

    h = ConsumerHarness(partitions=2)
    h.ready()
    w = ConsumerWorker(ConsumeWorkerSpec(0, h.config, "t", (0, 1), StartPosition("offsets", offsets={0: 5, 1: 7})),
                       queue.Queue(), threading.Event())
    w.consumer, w.clock = h.consumer, h.clock
    w._position()
    assert w._ready()                                    # at its start: positions known
    w._start_mono = h.clock.now_ns() + 200_000_000       # START_MARGIN_S ahead
    for _ in range(5):
        h.step(ms=10)
        h.consumer.step(0)
    assert _fetched(h) == []
    h.clock.advance(ms=200)
    w.wait_for_start()
    h.step()
    assert sorted(_fetched(h)) == [0, 1]
    assert not any(s.paused for s in h.consumer.subscriptions.states())


def test_no_fetch_before_the_common_start_in_a_group_and_heartbeats_go_on():
    """Group mode: partitions assigned while waiting (the first assignment, and a
    rebalance's) are paused in the listener; heartbeats keep the member in its group."""
    from tests.engine.test_coordinator import answer, join_response, joined, offset_fetch_body, sync_response
    from tests.engine.consumer_harness import HeartbeatResponse, code

    w, h = _group_worker(**{"enable.auto.commit": "false"})
    w.clock = h.clock
    joined(h, (0, 1))
    h.step()
    answer(h, "OffsetFetch", lambda r: offset_fetch_body(r, {0: 3, 1: 4}))
    assert w._ready()
    w._start_mono = h.clock.now_ns() + 5 * S
    h.step(ms=1000)                                      # heartbeat.interval.ms
    hb = h.net.pending("Heartbeat")[0]
    assert _fetched(h) == []
    h.net.respond(hb, HeartbeatResponse(throttle_time_ms=0, error_code=code("REBALANCE_IN_PROGRESS")))
    h.net.poll(0, h.clock.now_ns())
    h.step()
    answer(h, "JoinGroup", lambda r: join_response(r, generation=2, members=[]))
    answer(h, "SyncGroup", sync_response((0, 1, 2)))
    h.step()
    answer(h, "OffsetFetch", lambda r: offset_fetch_body(r, {0: 3, 1: 4, 2: 5}))
    for _ in range(3):
        h.step(ms=10)
    assert _fetched(h) == []
    h.clock.advance(5 * S)
    w.wait_for_start()
    h.step()
    assert sorted(_fetched(h)) == [0, 1, 2]


def test_a_duration_stop_sends_no_empty_interval_after_the_last_one(monkeypatch):
    """--duration 2s --interval 1s: two intervals, [0, 1) and [1, 2]. The loop reported
    at 2 s and then stopped, so the final report covered nothing and the plain output
    printed a second line with the same t=."""
    import kctl.load.consume_worker as cw

    w, clock, reports = _worker(duration_ns=2 * S, interval_s=1.0)

    def poll_batches(timeout_s):
        clock.advance(50_000_000)                  # POLL_S, nothing read
        return []

    monkeypatch.setattr(w, "setup", lambda: None)
    monkeypatch.setattr(w.consumer, "poll_batches", poll_batches)
    monkeypatch.setattr(w.consumer, "close", lambda timeout_s=30.0: None)
    monkeypatch.setattr(cw.time, "monotonic", lambda: clock.now_ns() / 1e9)   # one clock for the old loop too
    start = clock.wall_ns()
    w.run()
    sent = [reports.get_nowait() for _ in range(reports.qsize())]
    intervals = [((m.start_wall_ns - start) / S, (m.end_wall_ns - start) / S, m.final)
                 for m in sent if hasattr(m, "final")]
    assert intervals == [(0.0, 1.0, False), (1.0, 2.0, True)]


def test_a_failed_commit_before_a_rebalance_is_said_in_the_reports():
    """enable.auto.commit=true, a rebalance mid-run: the commit before it (Java's
    onJoinPrepare) answered ILLEGAL_GENERATION left the group's offsets behind what was
    read. Every report after it carries the count and the reason (kctl consume's WARNING
    and the summary's failed_commits), not only commit_failures."""
    from tests.engine.test_coordinator import commit_body, joined

    w, h = _group_worker(**{"enable.auto.commit": "true"})
    joined(h, (0,))
    h.consumer.seek(TopicPartition("t", 0), 7)
    h.consumer.coordinator.request_rejoin("group is rebalancing (Heartbeat: REBALANCE_IN_PROGRESS)")
    h.step()
    req = h.net.pending("OffsetCommit")[0]
    h.net.respond(req, commit_body(req, {0: "ILLEGAL_GENERATION"}))
    h.net.poll(0, h.clock.now_ns())
    h.step()
    assert len(h.net.pending("JoinGroup")) == 1
    w._report(final=False)
    report = w.reports.get_nowait()
    assert (report.rebalance_commit_failures, report.rebalance_commit_error) == (1, "t-0 ILLEGAL_GENERATION")
