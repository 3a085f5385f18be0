"""Warm-up records are the records scheduled in the warm-up, whenever they are
acknowledged (load/worker.py ``split_warmup``): a backlog left by the warm-up and
acknowledged in a measured interval is not measured (it made --find-max-rate steps
report 494/s against a 375/s target), and measured records acknowledged before the
interval closed are. No broker: slices and batches are built by hand."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from kctl.config import ProducerConfig
from kctl.engine.batch import AppendSlice, BatchState, TopicPartition
from kctl.load.worker import Worker, WorkerSpec, split_warmup
from kctl.stats.latency import decode_histogram

MS = 1_000_000
S = 1000 * MS


def test_a_paced_slice_splits_at_the_first_record_scheduled_after_the_warmup():
    # 10 records due 1 ms apart from t=95 ms; the measured part starts at 100 ms.
    s = AppendSlice(10, 120 * MS, 95 * MS, MS, first_seq=40)
    warm, measured = split_warmup([s], 100 * MS, 0)
    assert [(p.count, p.intended_first_ns, p.first_seq) for p in warm] == [(5, 95 * MS, 40)]
    assert [(p.count, p.intended_first_ns, p.first_seq) for p in measured] == [(5, 100 * MS, 45)]
    assert split_warmup([s], 90 * MS, 0) == ([], [s])          # all after
    assert split_warmup([s], 200 * MS, 0) == ([s], [])         # all before


def test_warmup_records_are_the_first_sequences():
    s = AppendSlice(10, 0, 0, MS, first_seq=95)
    warm, measured = split_warmup([s], 0, 100)                 # --warmup 100 (records)
    assert [p.count for p in warm] == [5] and [p.first_seq for p in measured] == [100]


def test_without_a_schedule_the_append_time_decides():
    early, late = AppendSlice(7, 99 * MS, -1, 0), AppendSlice(3, 100 * MS, -1, 0)
    assert split_warmup([early, late], 100 * MS, 0) == ([early], [late])


def test_a_partitions_share_splits_by_its_positions():
    # One partition's share of a round-robin slice: every 2nd record from position 10.
    s = AppendSlice(4, 0, 0, MS, first_seq=0, positions=range(10, 18, 2), positions_base=0)
    warm, measured = split_warmup([s], 13 * MS, 0)             # positions 10, 12 before
    assert [p.positions for p in warm] == [range(10, 14, 2)]
    assert [p.positions for p in measured] == [range(14, 18, 2)]


def _worker(**kw) -> Worker:
    producer = ProducerConfig.from_properties({"bootstrap.servers": "127.0.0.1:9"})
    spec = WorkerSpec(worker=0, run_id="feedc0de0001", topic="t", producer=producer,
                      schedule_rate=1000.0, schedule_phase_ns=0, num_records=None,
                      duration_ns=5 * S, start_wall_ns=time.time_ns(), **kw)
    reports: list = []
    w = Worker(spec, SimpleNamespace(put=reports.append), threading.Event())
    w.reports_seen = reports
    return w


def _acked(slices, value_bytes: int, partition: int = 0, node: int = 1):
    return SimpleNamespace(state=BatchState.ACKED, slices=slices, sent_ns=-1,
                           record_count=sum(s.count for s in slices), value_bytes=value_bytes,
                           tp=TopicPartition("t", partition), node_id=node)


def test_the_warmups_backlog_acked_in_a_measured_interval_is_not_measured():
    w = _worker(warmup_ns=S)
    m = w.measured_from_ns
    w._interval_warmup = False                      # the warm-up interval has closed
    # 30 records scheduled in the last 30 ms of the warm-up, acked with 10 measured ones.
    w._on_batch_done(_acked([AppendSlice(40, m, m - 30 * MS, MS, first_seq=0)], 4000))
    w._report(final=False)
    r = w.reports_seen[-1]
    assert (r.warmup_acked_late, r.warmup_bytes_late) == (30, 3000)
    assert r.measured_acked_early == 0
    # the same 30 by partition and broker, so the summary's per-partition and per-broker
    # counts leave them out as the acked count does
    assert (r.warmup_late_by_partition, r.warmup_late_by_node) == ({("t", 0): 30}, {1: 30})
    assert (r.measured_early_by_partition, r.measured_early_by_node) == ({}, {})
    # the measured 10 only
    assert decode_histogram(r.histograms["intended"]).get_total_count() == 10


def test_measured_records_acked_in_the_warmup_interval_count_and_keep_their_latency():
    w = _worker(warmup_ns=S)
    m = w.measured_from_ns
    w._interval_warmup = True
    w._on_batch_done(_acked([AppendSlice(10, m, m - 5 * MS, MS, first_seq=0)], 1000, partition=3, node=2))
    w._report(final=False)                          # the warm-up interval's report
    r = w.reports_seen[-1]
    assert (r.measured_acked_early, r.measured_bytes_early) == (5, 500)
    assert (r.measured_early_by_partition, r.measured_early_by_node) == ({("t", 3): 5}, {2: 5})
    assert decode_histogram(r.histograms["intended"]).get_total_count() == 5   # warm-up's 5 (live view)
    w._interval_warmup = False                      # the warm-up has ended
    w._report(final=False)                          # the first measured interval's report
    r = w.reports_seen[-1]
    assert decode_histogram(r.histograms["intended"]).get_total_count() == 5   # the measured 5
