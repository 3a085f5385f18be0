"""RunStats: per-worker diffing, histogram merge, rounds, warm-up exclusion, summary keys."""

from __future__ import annotations

import json
import pickle

import pytest

from kctl.stats.aggregate import RunStats, metrics_delta, metrics_sum
from kctl.stats.latency import CLOCKS, decode_histogram, new_histogram
from kctl.stats.report import WorkerFailed, WorkerInterval
from kctl.stats.summary import RunSummary
from tests.stats.conftest import MS, S, T0, metrics, report


def test_metrics_delta_and_sum() -> None:
    a = metrics(records_acked=10, batch_fill_total=1.5, errors_by_name={"X": 2},
                records_by_partition={("t", 0): 10})
    b = metrics(records_acked=25, batch_fill_total=2.0, errors_by_name={"X": 2, "Y": 1},
                records_by_partition={("t", 0): 20, ("t", 1): 5})
    d = metrics_delta(b, a)
    assert d.records_acked == 15 and d.batch_fill_total == pytest.approx(0.5)
    assert d.errors_by_name == {"Y": 1}
    assert d.records_by_partition == {("t", 0): 10, ("t", 1): 5}
    assert metrics_sum(a, d) == b


def test_report_pickles() -> None:
    r = report(0, 0, metrics(records_acked=3), latencies_ms=(1.0,))
    assert pickle.loads(pickle.dumps(r)) == r
    assert pickle.loads(pickle.dumps(WorkerFailed(1, "boom"))) == WorkerFailed(1, "boom")


def test_merge_is_histogram_add_not_averaged_percentiles() -> None:
    st = RunStats(workers=2, start_wall_ns=T0, target_rate=1000)
    st.add(report(0, 0, metrics(records_acked=100), latencies_ms=(1.0,), count=100))
    st.add(report(1, 0, metrics(records_acked=100), latencies_ms=(100.0,), count=100))
    # the same histogram built by hand
    parts = [decode_histogram(report(w, 0, metrics(), latencies_ms=(lat,), count=100).histograms["send"])
             for w, lat in ((0, 1.0), (1, 100.0))]
    merged = new_histogram()
    for p in parts:
        merged.add(p)
    cum = st.cumulative_histograms()
    for clock in CLOCKS:
        assert cum[clock].get_total_count() == 200
        assert cum[clock].get_value_at_percentile(90) == merged.get_value_at_percentile(90)
    lat = st.summary().to_json()["latency"]["send"]
    assert lat["count"] == 200
    assert lat["p50_ms"] == pytest.approx(1.0, rel=1e-2)
    assert lat["p90_ms"] == pytest.approx(100.0, rel=1e-2)    # averaging would say ~50
    assert lat["mean_ms"] == pytest.approx(50.5, rel=1e-2)


def test_counters_are_diffed_per_worker_and_summed() -> None:
    st = RunStats(workers=2, start_wall_ns=T0)
    st.add(report(0, 0, metrics(records_acked=100, records_sent=120, batches_acked=10)))
    st.add(report(1, 0, metrics(records_acked=50, records_sent=50, batches_acked=5)))
    st.add(report(0, 1, metrics(records_acked=250, records_sent=260, batches_acked=20)))
    assert st.snapshot(T0 + 2 * S).interval_acked == 150       # round 0 closed only
    n = st.add(report(1, 1, metrics(records_acked=60, records_sent=60, batches_acked=6)))
    assert n == 1
    snap = st.snapshot(T0 + 2 * S)
    assert snap.interval_acked == 150 + 10
    assert snap.records_per_batch == pytest.approx(160 / 11)
    assert snap.interval_rate == pytest.approx(160.0)           # both workers' 1 s intervals
    s = st.summary().to_json()
    assert s["counts"]["acked"] == 310 and s["counts"]["sent"] == 320
    assert s["rates"]["records_per_s"] == pytest.approx(310 / 2)
    assert s["batching"]["records_per_batch"] == pytest.approx(310 / 26, rel=1e-3)


def test_warmup_excluded_from_results_and_hlog(tmp_path) -> None:
    from kctl.stats.hlog import IntervalLogWriter, read_interval_log

    path = tmp_path / "run.hlog"
    with IntervalLogWriter.open(path, T0) as log:
        st = RunStats(workers=1, start_wall_ns=T0, target_rate=100, hlog=log)
        st.add(report(0, 0, metrics(records_acked=100, records_sent=100, retries=3),
                      latencies_ms=(500.0,), count=100, warmup=True))
        snap = st.snapshot(T0 + S)
        assert snap.warmup and snap.records_acked == 0 and snap.interval_acked == 100
        assert snap.interval_latency["send"].max_ms == pytest.approx(500, rel=1e-2)
        st.add(report(0, 1, metrics(records_acked=300, records_sent=300, retries=3),
                      latencies_ms=(2.0,), count=200, final=True))
        s = st.summary().to_json()
    assert s["counts"]["acked"] == 200 and s["counts"]["sent"] == 200
    assert s["retries"] == 0
    assert s["run"]["warmup"] == {"intervals": 1, "records_sent": 100, "records_acked": 100,
                                  "records_failed": 0, "bytes_sent": 0}
    assert s["run"]["intervals"] == 1
    assert s["latency"]["send"]["count"] == 200
    assert s["latency"]["send"]["max_ms"] == pytest.approx(2.0, rel=1e-2)
    assert s["rates"]["records_per_s"] == pytest.approx(200.0)
    logged = read_interval_log(path)
    assert [i.tag for i in logged] == list(CLOCKS)                # the measured round only
    assert all(i.histogram.get_total_count() == 200 for i in logged)


def test_round_waits_for_every_worker_then_for_lag() -> None:
    st = RunStats(workers=2, start_wall_ns=T0, max_lag_rounds=2)
    assert st.add(report(0, 0, metrics(records_acked=10))) == 0
    assert st.add(report(0, 1, metrics(records_acked=20))) == 0
    # worker 0 is two rounds ahead of the silent worker 1: round 0 closes anyway
    assert st.add(report(0, 2, metrics(records_acked=30))) == 1
    # worker 1's late first report is filed under the oldest open round (1), not lost
    assert st.add(report(1, 0, metrics(records_acked=5))) == 1
    assert st.snapshot(T0).interval_acked == 10 + 5
    assert st.finish() == 1
    assert st.summary().to_json()["counts"]["acked"] == 35


def test_failed_and_final_workers_are_not_waited_for() -> None:
    st = RunStats(workers=3, start_wall_ns=T0)
    st.add(WorkerFailed(2, "ConnectionRefusedError: boom"))
    st.add(report(0, 0, metrics(records_acked=1), final=True))
    assert st.add(report(1, 0, metrics(records_acked=2))) == 1
    assert st.add(report(1, 1, metrics(records_acked=4))) == 1     # only worker 1 is left
    snap = st.snapshot(T0 + 2 * S)
    assert snap.workers_failed == ((2, "ConnectionRefusedError: boom"),)
    assert snap.workers_running == 1
    assert st.summary().to_json()["run"]["workers_failed"] == [{"worker": 2, "error": "ConnectionRefusedError: boom"}]


def test_snapshot_live_figures() -> None:
    st = RunStats(workers=2, start_wall_ns=T0, target_rate=2000, duration_s=10, num_records=10_000)
    m0 = metrics(records_acked=900, records_sent=1000, batches_sent=12, retries=2, batches_acked=9,
                 batch_fill_total=5.0, queue_time_ns_total=30 * MS, bytes_sent=2 * 1024 * 1024,
                 value_bytes_acked=1024 * 1024, errors_by_name={"NOT_LEADER_OR_FOLLOWER": 2}, throttle_time_ms=40, throttled_requests=2,
                 records_by_node={1: 900})
    st.add(report(0, 0, m0, latencies_ms=(3.0,), count=900, in_flight={1: 2, 2: 1},
                  buffer_available=24, buffer_total=32, records_scheduled=1000))
    st.add(report(1, 0, metrics(records_acked=100, records_by_node={2: 100}), in_flight={1: 1},
                  buffer_available=30, buffer_total=32, records_scheduled=3000))
    snap = st.snapshot(T0 + 2 * S)
    assert snap.elapsed_s == pytest.approx(2.0)
    assert snap.target_rate == 2000
    assert snap.interval_rate == pytest.approx(1000)
    assert snap.interval_mb_per_s == pytest.approx(1.0)      # record values (as perf-test)
    assert snap.interval_wire_mb_per_s == pytest.approx(2.0)  # batch bytes written
    assert snap.batch_fill == pytest.approx(0.5)              # 5.0 over 10 batches first sent
    assert snap.queue_time_ms == pytest.approx(3.0)
    assert snap.in_flight_by_node == {1: 3, 2: 1}
    assert snap.records_by_node == {1: 900, 2: 100}
    assert (snap.buffer_used, snap.buffer_total) == (10, 64)
    assert snap.errors_by_name == {"NOT_LEADER_OR_FOLLOWER": 2}
    assert (snap.throttle_time_ms, snap.throttled_requests, snap.retries) == (40, 2, 2)
    assert snap.progress == pytest.approx(0.4)                # 4000 of 10000 scheduled
    assert snap.interval_latency["intended"].p50_ms == pytest.approx(3.0, rel=1e-2)
    assert snap.cumulative_latency["request"].count == 900
    assert not snap.intended_from_send


def test_max_throughput_reports_intended_from_send(tmp_path) -> None:
    from kctl.stats.hlog import IntervalLogWriter, read_interval_log

    path = tmp_path / "mt.hlog"
    log = IntervalLogWriter.open(path, T0)
    st = RunStats(workers=1, start_wall_ns=T0, target_rate=None, hlog=log)
    st.add(report(0, 0, metrics(records_acked=5), latencies_ms=(7.0,), count=5))
    s = st.summary().to_json()
    log.close()
    assert s["run"]["max_throughput"] and s["run"]["intended_from"] == "send"
    assert s["latency"]["intended"] == s["latency"]["send"]
    assert st.snapshot(T0).intended_from_send
    assert [i.tag for i in read_interval_log(path)] == ["send", "request"]


SUMMARY_KEYS = {
    "counts": {"sent": int, "acked": int, "failed": int, "failed_by_error": dict},
    "rates": {"records_per_s": float, "mb_per_s": float, "wire_mb_per_s": float,
              "target_records_per_s": (float, type(None))},
    "batching": {"records_per_batch": float, "batch_fill": float},
    "throttle": {"time_ms": int, "requests": int},
    "run": {"id": str, "start": str, "end": str, "duration_s": float, "workers": int,
            "workers_reason": str, "warmup": dict},
}


def test_summary_keys_present_and_typed() -> None:
    config = {"topic": "t", "acks": "all", "linger.ms": 5, "nested": {"a": (1, 2)}, "path": object()}
    st = RunStats(workers=1, start_wall_ns=T0, target_rate=1000, config=config, run_id="r1")
    st.add(report(0, 0, metrics(records_acked=10, records_sent=10, records_failed=1, batches_acked=1,
                                batches_sent=1, failed_by_error={"MESSAGE_TOO_LARGE": 1},
                                errors_by_name={"MESSAGE_TOO_LARGE": 1},
                                records_by_partition={("t", 0): 6, ("t", 1): 4}, records_by_node={1: 10}),
                  latencies_ms=(1.0,), count=10, final=True))
    typed = st.summary(end_wall_ns=T0 + 2 * S)
    s = typed.to_json()
    json.loads(json.dumps(s))                                  # plain JSON
    assert RunSummary.from_json(json.loads(json.dumps(s))).to_json() == s   # read back whole
    for section, keys in SUMMARY_KEYS.items():
        for key, typ in keys.items():
            assert isinstance(s[section][key], typ), (section, key, s[section][key])
    for clock in CLOCKS:
        fig = s["latency"][clock]
        for key in ("p50_ms", "p90_ms", "p99_ms", "p999_ms", "p9999_ms", "max_ms", "mean_ms"):
            assert isinstance(fig[key], float), (clock, key)
        assert fig["count"] == 10
    assert s["config"]["topic"] == "t" and s["config"]["nested"] == {"a": [1, 2]}
    assert isinstance(s["config"]["path"], str)
    assert s["run"]["id"] == "r1" and s["run"]["duration_s"] == 2.0
    assert s["counts"]["failed_by_error"] == {"MESSAGE_TOO_LARGE": 1}
    assert s["errors_by_name"] == {"MESSAGE_TOO_LARGE": 1}
    assert isinstance(s["retries"], int)
    assert s["partitions"] == [{"topic": "t", "partition": 0, "records_acked": 6},
                               {"topic": "t", "partition": 1, "records_acked": 4}]
    assert s["brokers"] == [{"node_id": 1, "records_acked": 10}]


def test_paced_rate_is_over_the_schedule_window_or_to_the_last_completion() -> None:
    """A paced run's records/s: over the schedule's window (3 s) when every batch
    completed inside it (a low rate's last gap is not "late"), over the time to the last
    completion when the cluster fell behind (not the target rate it never sustained).
    The worker's final report comes at 6 s either way (it waited, then flushed)."""
    for done, expected in ((T0 + 2 * S, 100.0), (T0 + 5 * S, 60.0)):
        st = RunStats(workers=1, start_wall_ns=T0, target_rate=100, window_s=3.0)
        st.add(WorkerInterval(worker=0, start_wall_ns=T0, end_wall_ns=T0 + 6 * S, histograms={},
                              metrics=metrics(records_acked=300), final=True, last_done_wall_ns=done))
        st.finish()
        assert st.summary().rates.records_per_s == pytest.approx(expected), done


def test_interval_rate_is_the_rounds_records_over_its_length_on_one_clock() -> None:
    """Workers staggered by their start-up: worker 1's intervals begin 0.5 s after worker
    0's. A round's rate is its acked records over its window on one clock (perf-test's
    definition), so a one-round run prints the closing rate; summing each worker's own
    rate over its own interval said 2,000 records/s for 2,000 records in 1.5 s."""
    st = RunStats(workers=2, start_wall_ns=T0)
    st.add(report(0, 0, metrics(records_acked=1000, value_bytes_acked=1024 * 1024), final=True))
    st.add(report(1, 0, metrics(records_acked=1000, value_bytes_acked=1024 * 1024),
                  offset_ns=S // 2, final=True))
    snap = st.snapshot(T0 + 2 * S)
    closing = st.summary().rates
    assert snap.interval_s == pytest.approx(1.5)
    assert snap.interval_rate == pytest.approx(2000 / 1.5)
    assert snap.interval_rate == pytest.approx(closing.records_per_s)
    assert snap.interval_mb_per_s == pytest.approx(closing.mb_per_s)


def test_rounds_tile_the_run_from_the_previous_rounds_end() -> None:
    st = RunStats(workers=2, start_wall_ns=T0)
    for k in range(3):
        st.add(report(0, k, metrics(records_acked=1000 * (k + 1))))
        st.add(report(1, k, metrics(records_acked=1000 * (k + 1)), offset_ns=S // 2))
    st.finish()
    snap = st.snapshot(T0 + 4 * S)
    # the last round: from the previous round's end (T0 + 2.5 s) to T0 + 3.5 s
    assert snap.interval_s == pytest.approx(1.0)
    assert snap.interval_rate == pytest.approx(2000)


def test_last_interval_panel_figures_are_the_last_rounds_and_brokers_are_measured() -> None:
    """Throttling, retries and splits in the snapshot are the last round's (they were
    totals since the start, warm-up included); records per broker are the measured ones,
    as the cumulative records acked beside them."""
    st = RunStats(workers=1, start_wall_ns=T0, target_rate=100)
    st.add(report(0, 0, metrics(records_acked=100, throttle_time_ms=1480, throttled_requests=74,
                                retries=5, splits=1, records_by_node={1: 100}), warmup=True))
    st.add(report(0, 1, metrics(records_acked=300, throttle_time_ms=3100, throttled_requests=155,
                                retries=7, splits=1, records_by_node={1: 300})))
    snap = st.snapshot(T0 + 2 * S)
    assert (snap.throttle_time_ms, snap.throttled_requests) == (1620, 81)
    assert (snap.retries, snap.splits) == (2, 0)
    assert snap.records_by_node == {1: 200} and snap.records_acked == 200


def test_compression_rate_avg_is_the_mean_over_batches_and_only_with_compression() -> None:
    # Java's compression-rate-avg: per-batch ratios summed over workers, averaged.
    st = RunStats(workers=2, start_wall_ns=T0)
    st.add(report(0, 0, metrics(records_acked=10, batches_acked=2, compression_rate_total=1.0,
                                compression_rate_batches=2)))
    st.add(report(1, 0, metrics(records_acked=10, batches_acked=2, compression_rate_total=0.8,
                                compression_rate_batches=2)))
    s = st.summary().to_json()
    assert s["batching"]["compression_rate_avg"] == pytest.approx(0.45)
    assert RunSummary.from_json(s).batching.compression_rate_avg == pytest.approx(0.45)
    st = RunStats(workers=1, start_wall_ns=T0)
    st.add(report(0, 0, metrics(records_acked=10, batches_acked=2)))
    s = st.summary().to_json()
    assert "compression_rate_avg" not in s["batching"]
    assert RunSummary.from_json(s).batching.compression_rate_avg is None


def test_records_count_by_when_they_were_scheduled_not_when_acked() -> None:
    """A warm-up that fell behind: 30 of its records are acknowledged in the first measured
    interval. They are the warm-up's (a 100/s step reported 130/s before), and 5 measured
    records acknowledged before the warm-up interval closed are the results'."""
    st = RunStats(workers=1, start_wall_ns=T0, target_rate=100, window_s=2.0)
    st.add(report(0, 0, metrics(records_acked=75, value_bytes_acked=750), warmup=True,
                  measured_acked_early=5, measured_bytes_early=50))
    st.add(report(0, 1, metrics(records_acked=75 + 125, value_bytes_acked=2000), final=True,
                  warmup_acked_late=30, warmup_bytes_late=300, measured_acked_early=5,
                  measured_bytes_early=50, last_done_wall_ns=T0 + 2 * S))
    s = st.summary().to_json()
    assert s["counts"]["acked"] == 100 and s["counts"]["value_bytes"] == 1000
    assert s["run"]["warmup"]["records_acked"] == 100
    assert s["rates"]["records_per_s"] == pytest.approx(100.0)
    assert st.snapshot(T0 + 2 * S).interval_acked == 95      # the measured round's own


def test_per_broker_and_per_partition_counts_follow_the_scheduled_rule_and_sum_to_acked() -> None:
    """records_by_node and records_by_partition count the records the acked count counts
    (scheduled after the warm-up, acked whenever): partition 0 on broker 1 acks 30 of the
    warm-up's backlog in the first measured interval, partition 1 on broker 2 acks 5
    measured records before the warm-up interval closes. Split by the ack's interval they
    said 60 + 65 = 125 for 100 measured records."""
    p0, p1 = ("t", 0), ("t", 1)
    st = RunStats(workers=1, start_wall_ns=T0, target_rate=100, window_s=2.0)
    st.add(report(0, 0, metrics(records_acked=75, value_bytes_acked=750,
                                records_by_partition={p0: 40, p1: 35}, records_by_node={1: 40, 2: 35}),
                  warmup=True, measured_acked_early=5, measured_bytes_early=50,
                  measured_early_by_partition={p1: 5}, measured_early_by_node={2: 5}))
    live = st.snapshot(T0 + S)
    assert live.records_acked == 5 and live.records_by_node == {2: 5}
    st.add(report(0, 1, metrics(records_acked=200, value_bytes_acked=2000,
                                records_by_partition={p0: 100, p1: 100}, records_by_node={1: 100, 2: 100}),
                  final=True, warmup_acked_late=30, warmup_bytes_late=300, measured_acked_early=5,
                  measured_bytes_early=50, warmup_late_by_partition={p0: 30}, warmup_late_by_node={1: 30},
                  measured_early_by_partition={p1: 5}, measured_early_by_node={2: 5},
                  last_done_wall_ns=T0 + 2 * S))
    s = st.summary()
    assert s.counts.acked == 100
    assert {(p.topic, p.partition): p.records_acked for p in s.partitions} == {p0: 30, p1: 70}
    assert {b.node_id: b.records_acked for b in s.brokers} == {1: 30, 2: 70}
    assert st.snapshot(T0 + 2 * S).records_by_node == {1: 30, 2: 70}
    assert s.run.warmup.records_acked == 100


def test_paced_span_runs_from_the_first_measured_ack_when_acks_lag_the_schedule() -> None:
    """Records count by their scheduled time, so a constant ack latency (200 ms) must not
    lengthen the span: 80 records scheduled in a 2 s window after a 0.5 s warm-up are 40/s
    (the last ack at +2.7 s from the warm-up's end said 36/s and failed a 40/s step). A
    cluster that fell behind shows what it sustained: first to last measured ack."""
    for first, last, expected in ((T0 + 7 * S // 10, T0 + 27 * S // 10, 40.0),
                                  (T0 + 7 * S // 10, T0 + 47 * S // 10, 20.0)):
        st = RunStats(workers=1, start_wall_ns=T0, target_rate=40, window_s=2.5)
        st.add(WorkerInterval(worker=0, start_wall_ns=T0, end_wall_ns=T0 + S // 2, histograms={},
                              metrics=metrics(records_acked=20), warmup=True))
        st.add(WorkerInterval(worker=0, start_wall_ns=T0 + S // 2, end_wall_ns=last + S // 10,
                              histograms={}, metrics=metrics(records_acked=100), final=True,
                              last_done_wall_ns=last, first_measured_done_wall_ns=first))
        assert st.summary().rates.records_per_s == pytest.approx(expected), expected


def test_one_report_closing_several_rounds_gives_a_line_for_each() -> None:
    """A stopped worker's final report can close several rounds at once (Spark's stop: a
    task's late reports arrive together). A plain line per round, so the lines add up to
    the summary's count; before, only the last round's line was printed."""
    st = RunStats(workers=2, start_wall_ns=T0, max_lag_rounds=5)
    lines: list[int] = []

    def on_round(stats, closed):
        lines.append(stats.snapshot(T0).interval_acked)

    for k in range(3):
        st.add(report(0, k, metrics(records_acked=10 * (k + 1))), on_round)
    assert lines == []                       # waiting for worker 1
    st.add(report(1, 0, metrics(records_acked=5), final=True), on_round)
    assert lines == [15, 10, 10]             # rounds 0, 1 and 2, one line each
    st.finish(on_round)
    assert sum(lines) == st.summary().to_json()["counts"]["acked"] == 35
