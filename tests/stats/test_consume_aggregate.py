"""The parent's merge of consumer reports (stats/consume_aggregate.py): counters diffed
per consumer, warm-up excluded, e2e histograms added (never averaged), rounds closed
when every consumer reported, the lag timeline, the backlog's caught-up time."""

from __future__ import annotations

import random

from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader

from kctl.engine.consumer_metrics import ConsumerMetricsSnapshot
from kctl.percentiles import value_at_percentile
from kctl.stats.consume_aggregate import ConsumeStats
from kctl.stats.consume_report import ConsumerFailed, ConsumerInterval, PartitionProgress
from kctl.stats.e2e import E2eRecorder, signed_figures
from kctl.stats.hlog import IntervalLogWriter, read_interval_log
from kctl.stats.latency import PERCENTILES, new_histogram

S = 1_000_000_000
T0 = 1_800_000_000 * S


def _e2e(*ms: float) -> dict[str, bytes]:
    rec = E2eRecorder()
    rec.record_many(T0, [T0 - int(m * 1e6) for m in ms])
    return rec.encode_interval()


def _interval(consumer: int, k: int, records: int, *, e2e=(), lag=0, warmup=False, final=False,
              caught_up_at: int = 0) -> ConsumerInterval:
    """Consumer ``consumer``'s k-th report (interval [k, k+1) s), cumulative ``records``."""
    m = ConsumerMetricsSnapshot(records_consumed=records, key_value_bytes=100 * records, batch_bytes=130 * records,
                                batches_consumed=records // 10, fetch_requests=k + 1, fetch_responses=k + 1)
    part = PartitionProgress("t", consumer, position=records, end_offset=records + lag, target=-1)
    return ConsumerInterval(consumer, T0 + k * S, T0 + (k + 1) * S, _e2e(*e2e), m, (part,), matched=records,
                            warmup=warmup, final=final, caught_up=bool(caught_up_at),
                            caught_up_wall_ns=caught_up_at)


def test_rounds_close_when_every_consumer_reported_and_warmup_is_excluded(tmp_path):
    log = IntervalLogWriter.open(tmp_path / "c.hlog", T0)
    st = ConsumeStats(consumers=2, start_wall_ns=T0, run_id="r", hlog=log)
    assert st.add(_interval(0, 0, 50, e2e=(1.0,) * 50, warmup=True)) == 0      # warm-up round
    assert st.add(_interval(1, 0, 50, e2e=(1.0,) * 50, warmup=True)) == 1
    assert st.add(_interval(0, 1, 150, e2e=(2.0,) * 100, lag=30)) == 0         # waits for consumer 1
    assert st.add(_interval(1, 1, 250, e2e=(4.0,) * 200, lag=5)) == 1
    st.add(_interval(0, 2, 150, final=True))
    st.add(_interval(1, 2, 250, final=True))
    s = st.summary()
    log.close()
    # 300 records after the warm-up's 100, over the measured 2 s
    assert s.counts.records == 300 and s.rates.records_per_s == 150.0
    assert s.rates.mb_per_s == round(300 * 100 / 2 / 2**20, 6)
    e2e = s.latency["e2e"]
    assert e2e.count == 300                                                    # warm-up values excluded
    assert abs(e2e.p50_ms - 4.0) < 0.01 and abs(e2e.p99_ms - 4.0) < 0.01       # 200 of 300 at 4 ms
    assert abs(e2e.mean_ms - (100 * 2 + 200 * 4) / 300) < 0.01
    assert [p.total for p in s.lag_timeline][:2] == [0, 35] and s.lag_max == 35   # per round, warm-up too
    assert {p.partition for p in s.partitions} == {0, 1}
    tags = [iv.tag for iv in read_interval_log(tmp_path / "c.hlog")]
    assert tags and set(tags) == {"e2e"}


def test_a_failed_consumer_does_not_hold_rounds_back():
    st = ConsumeStats(consumers=2, start_wall_ns=T0)
    st.add(_interval(0, 0, 10, e2e=(1.0,) * 10))
    assert st.add(ConsumerFailed(1, "boom")) == 1
    s = st.summary()
    assert s.run.consumers_failed == ((1, "boom"),)


def test_caught_up_is_when_the_last_consumer_caught_up():
    st = ConsumeStats(consumers=2, start_wall_ns=T0)
    st.add(_interval(0, 0, 10, caught_up_at=T0 + S // 2))
    assert st.caught_up_at() is None
    st.add(_interval(1, 0, 10, caught_up_at=T0 + 3 * S // 4))
    assert st.caught_up_at() == T0 + 3 * S // 4


def _read_hlog_with_hdrh(path) -> dict[str, HdrHistogram]:
    """The log as an HdrHistogram tool sees it: hdrh's own reader, intervals added per tag."""
    reader = HistogramLogReader(str(path), new_histogram())
    out: dict[str, HdrHistogram] = {}
    while (h := reader.get_next_interval_histogram()) is not None:
        out.setdefault(h.get_tag(), new_histogram()).add(h)
    reader.close()
    return out


def test_the_hlog_gives_exactly_the_printed_e2e_figures(tmp_path):
    """Read back with hdrh, the e2e tag gives the summary's (and so the printed)
    percentiles and max to the last digit: same histogram, same unit, same rule. (The
    log once held a µs copy of ns histograms: 133.119 ms read where 133.169 was printed.)"""
    path = tmp_path / "e2e.hlog"
    rng = random.Random(5)
    log = IntervalLogWriter.open(path, T0)
    st = ConsumeStats(consumers=2, start_wall_ns=T0, hlog=log)
    for k in range(3):
        for c in range(2):
            ms = [rng.uniform(120.0, 140.0) for _ in range(400)] + [rng.uniform(0.2, 2.5) for _ in range(50)]
            st.add(_interval(c, k, 450 * (k + 1), e2e=ms, final=k == 2))
    s = st.summary()
    log.close()
    hist = _read_hlog_with_hdrh(path)
    assert set(hist) == {"e2e"}
    e2e = s.latency["e2e"]
    h = hist["e2e"]
    assert h.get_total_count() == e2e.count == 2700
    for key, pc in PERCENTILES:
        assert value_at_percentile(h, pc) / 1000 == getattr(e2e, f"{key}_ms"), key
    assert h.get_max_value() / 1000 == e2e.max_ms
    assert h.get_min_value() / 1000 == e2e.min_ms
    # The printed line shows these figures (3 decimals: exact in ms for whole µs).
    assert f"{e2e.p50_ms:.3f}" == f"{value_at_percentile(h, 50.0) / 1000:.3f}"


def test_with_negative_values_the_hlog_holds_the_signed_figures(tmp_path):
    """Negatives go to the tag e2e_negative (magnitudes): the two tags read back give the
    printed signed figures through the same rule."""
    path = tmp_path / "neg.hlog"
    log = IntervalLogWriter.open(path, T0)
    st = ConsumeStats(consumers=1, start_wall_ns=T0, hlog=log)
    st.add(_interval(0, 0, 100, e2e=[-3.3333] * 30 + [1.7777] * 70, final=True))
    s = st.summary()
    log.close()
    hist = _read_hlog_with_hdrh(path)
    assert set(hist) == {"e2e", "e2e_negative"}
    assert signed_figures(hist["e2e"], hist["e2e_negative"]) == s.latency["e2e"]
    assert s.latency["e2e"].negative == 30 and s.latency["e2e"].p50_ms == 1.777


def test_interval_rate_is_the_rounds_records_over_its_length_on_one_clock():
    """Consumers staggered by half a second: the round's rate is its records over its
    window (1.5 s) on one clock, not the sum of each consumer's own rate (2,000/s)."""
    import dataclasses

    st = ConsumeStats(consumers=2, start_wall_ns=T0, run_id="r")
    st.add(_interval(0, 0, 1000, final=True))
    late = _interval(1, 0, 1000, final=True)
    st.add(dataclasses.replace(late, start_wall_ns=late.start_wall_ns + S // 2,
                               end_wall_ns=late.end_wall_ns + S // 2))
    snap = st.snapshot(T0 + 2 * S)
    assert abs(snap.interval_s - 1.5) < 1e-9
    assert abs(snap.interval_rate - 2000 / 1.5) < 1e-6


def test_lag_max_covers_the_final_lag_of_partitions_never_fetched():
    """The timeline holds the lag of fetched partitions; the final lag adds the end
    offsets of the others, asked after the run (ListOffsets): lag.max was below lag.final."""
    st = ConsumeStats(consumers=1, start_wall_ns=T0, run_id="r")
    m = ConsumerMetricsSnapshot(records_consumed=100)
    fetched = PartitionProgress("t", 0, position=100, end_offset=110, target=-1)
    never = PartitionProgress("t", 1, position=0, end_offset=-1, target=-1)
    st.add(ConsumerInterval(0, T0, T0 + S, {}, m, (fetched, never), matched=100, final=True))
    s = st.summary()
    assert (s.lag_final, s.lag_max) == (10, 10)
    s = s.with_end_offsets({1: 500})
    assert s.lag_final == 510 and s.lag_max == 510


def test_failed_commits_are_in_the_summary_and_its_json():
    """A failed commit before a rebalance (cumulative count, last reason) and a failed
    closing commit reach the summary once per consumer and kind, in the JSON and back."""
    from dataclasses import replace

    from kctl.stats.consume_summary import ConsumeSummary, FailedCommit

    s = ConsumeStats(consumers=2, start_wall_ns=T0, mode="group")
    s.add(replace(_interval(0, 0, 10), rebalance_commit_failures=1, rebalance_commit_error="t-0 ILLEGAL_GENERATION"))
    s.add(_interval(1, 0, 10))
    s.add(replace(_interval(0, 1, 20, final=True), rebalance_commit_failures=2,
                  rebalance_commit_error="t-1 UNKNOWN_MEMBER_ID", close_commit_error="t-0 REBALANCE_IN_PROGRESS"))
    s.add(_interval(1, 1, 20, final=True))
    summary = s.summary()
    assert summary.failed_commits == (
        FailedCommit(0, "rebalance", 2, "t-1 UNKNOWN_MEMBER_ID"),
        FailedCommit(0, "close", 1, "t-0 REBALANCE_IN_PROGRESS"))
    doc = summary.to_json()
    assert doc["failed_commits"][0] == {"consumer": 0, "when": "rebalance", "count": 2,
                                        "error": "t-1 UNKNOWN_MEMBER_ID"}
    assert ConsumeSummary.from_json(doc).failed_commits == summary.failed_commits
    assert summary.failed_commits[0].warning().startswith(
        "WARNING: consumer 0: 2 commits before a rebalance failed (last: t-1 UNKNOWN_MEMBER_ID)")
