"""One load worker (load/worker.py), in this process against the embedded broker, stopped
while behind its schedule: its final report counts every record due by the stop, and
scheduled == acked + failed + abandoned for the worker itself (the summary's invariant
is the sum of these). The stall is the worker's own: its first interval report blocks,
as a preempted process would, so the catch-up limit holds a backlog when the stop comes."""

from __future__ import annotations

import threading
import time

import pytest

from kctl.config import ProducerConfig
from kctl.engine import admin
from kctl.engine.blocking_client import BlockingClient
from kctl.errors import KctlError
from kctl.inspect.faults import FaultPlan
from kctl.inspect.proxy import InspectorProxy
from kctl.load.worker import Worker, WorkerSpec
UNSENT_AT_STOP = "run stopped: due, never handed to the producer"
from kctl.stats.report import WorkerInterval

pytestmark = pytest.mark.broker

_topics = iter(range(10**6))


class StallingReports:
    """The worker's report queue: the first interval report takes ``stall_s`` (the worker
    falls behind), then ``stop`` is set ``stop_after_s`` later."""

    def __init__(self, stop: threading.Event, stall_s: float, stop_after_s: float) -> None:
        self.items: list = []
        self.stop = stop
        self.stall_s = stall_s
        self.stop_after_s = stop_after_s

    def put(self, msg) -> None:
        self.items.append(msg)
        if self.stall_s and isinstance(msg, WorkerInterval) and not msg.final:
            time.sleep(self.stall_s)
            self.stall_s = 0
            threading.Timer(self.stop_after_s, self.stop.set).start()

    @property
    def final(self) -> WorkerInterval:
        finals = [m for m in self.items if isinstance(m, WorkerInterval) and m.final]
        assert len(finals) == 1, self.items
        assert self.items[-1] is finals[0]
        return finals[0]

    @property
    def last(self) -> WorkerInterval:
        """A failing worker's last report (not final: its WorkerFailed follows)."""
        assert not any(isinstance(m, WorkerInterval) and m.final for m in self.items)
        return self.items[-1]


def spec_for(bootstrap: str, topic: str, **props: str) -> WorkerSpec:
    producer = ProducerConfig.from_properties({"bootstrap.servers": bootstrap, "linger.ms": "0",
                                               **props})
    return WorkerSpec(worker=0, run_id="feedc0de0001", topic=topic, producer=producer,
                      schedule_rate=1000.0, schedule_phase_ns=0, num_records=None,
                      duration_ns=30 * 1_000_000_000, start_wall_ns=time.time_ns() + 300_000_000,
                      interval_s=0.2, stop_grace_s=5.0)


def new_topic(broker) -> str:
    topic = f"wstop-{next(_topics)}-{time.monotonic_ns()}"
    with BlockingClient(broker.bootstrap) as c:
        admin.create_topics(c, [topic], partitions=2)
    return topic


def assert_accounted(final: WorkerInterval) -> None:
    m = final.metrics
    assert final.records_scheduled == m.records_acked + m.records_failed + final.abandoned, (
        final.records_scheduled, m.records_acked, m.records_failed, final.abandoned)
    assert final.abandoned == sum(final.abandoned_by_reason.values())


def test_records_held_by_the_catch_up_limit_at_a_stop_are_counted(broker):
    # 1,000 records/s; a 150 ms stall puts 150 records behind, drained at about 5% above
    # the rate, so a stop 100 ms later finds well over 100 due and never handed over.
    stop = threading.Event()
    reports = StallingReports(stop, stall_s=0.15, stop_after_s=0.1)
    Worker(spec_for(broker.bootstrap, new_topic(broker)), reports, stop).run()
    final = reports.final
    unsent = final.abandoned_by_reason.get(UNSENT_AT_STOP, 0)
    assert unsent > 100, final.abandoned_by_reason
    assert final.metrics.records_acked == final.records_scheduled - unsent
    assert_accounted(final)


def test_a_fatal_producer_error_still_accounts_for_every_record(broker):
    # The broker refuses a batch with CLUSTER_AUTHORIZATION_FAILED, fatal for an idempotent
    # producer (Java's too): everything the producer held fails with it, the next hand-over
    # raises, and the due slice it refused counts as never handed over. The last report
    # (complete counts, not final: the parent's WorkerFailed ends the worker) goes out
    # before the error fails the worker.
    stop = threading.Event()
    reports = StallingReports(stop, stall_s=0, stop_after_s=0)
    plan = FaultPlan(lose_rate=1.0, lose_limit=1, lose_error="CLUSTER_AUTHORIZATION_FAILED", seed=1)
    topic = new_topic(broker)
    with InspectorProxy([broker.bootstrap], faults=plan) as proxy:
        with pytest.raises(KctlError, match="CLUSTER_AUTHORIZATION_FAILED"):
            Worker(spec_for(proxy.bootstrap, topic, **{"enable.idempotence": "true",
                                                       "acks": "all"}), reports, stop).run()
    final = reports.last
    assert final.metrics.failed_by_error.get("CLUSTER_AUTHORIZATION_FAILED", 0) >= 1
    assert final.abandoned_by_reason.get(UNSENT_AT_STOP, 0) >= 1, final.abandoned_by_reason
    assert_accounted(final)


def test_a_stop_while_waiting_for_the_last_verdicts_is_bounded_by_the_grace(broker):
    # The schedule (500 records in half a second) ends on its own; behind an 8 s throttle
    # the wait for the last verdicts could last until delivery.timeout.ms (20 s here). A
    # stop during that wait (Ctrl-C, SIGTERM) bounds it by the stop grace (1 s), as a stop
    # during the schedule does: the rest is abandoned, and every record is accounted for.
    stop = threading.Event()
    reports = StallingReports(stop, stall_s=0, stop_after_s=0)
    topic = new_topic(broker)
    with InspectorProxy([broker.bootstrap], faults=FaultPlan(throttle_ms=8000)) as proxy:
        producer = ProducerConfig.from_properties({
            "bootstrap.servers": proxy.bootstrap, "linger.ms": "0", "batch.size": "1000",
            "request.timeout.ms": "10000", "delivery.timeout.ms": "20000"})
        spec = WorkerSpec(worker=0, run_id="feedc0de0002", topic=topic, producer=producer,
                          schedule_rate=1000.0, schedule_phase_ns=0, num_records=500, duration_ns=None,
                          start_wall_ns=time.time_ns() + 300_000_000, interval_s=0.2, stop_grace_s=1.0)
        timer = threading.Timer(2.5, stop.set)
        timer.start()
        t0 = time.monotonic()
        try:
            Worker(spec, reports, stop).run()
        finally:
            timer.cancel()
        elapsed = time.monotonic() - t0
    assert elapsed < 7, elapsed     # 2.5 s to the stop, the 1 s grace, and closing
    final = reports.final
    assert final.records_scheduled == 500 and final.abandoned > 0, final.abandoned_by_reason
    assert_accounted(final)
