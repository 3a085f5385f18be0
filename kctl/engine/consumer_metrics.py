"""Counters the consumer engine keeps; the stats layer snapshots and diffs them.

Plain integers updated on the engine's thread, as ``metrics.py`` is for the producer.
``snapshot()`` returns a frozen copy (it crosses to the parent process).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

__all__ = ["ConsumerMetrics", "ConsumerMetricsSnapshot"]


@dataclass(frozen=True, slots=True)
class ConsumerMetricsSnapshot:
    records_consumed: int = 0        # records handed out (control and aborted records not)
    key_value_bytes: int = 0         # their keys and values (kafka-consumer-perf-test's bytes)
    batch_bytes: int = 0             # record batch bytes fetched (wire, all batches)
    batches_consumed: int = 0
    fetch_requests: int = 0
    fetch_responses: int = 0
    fetch_partitions_with_data: int = 0
    fetch_latency_ns_total: int = 0  # request written -> response read, summed
    throttle_time_ms: int = 0
    throttled_responses: int = 0
    aborted_records_skipped: int = 0  # read_committed: records of aborted transactions
    control_batches: int = 0
    records_scanned: int = 0          # records read without a record object (fast path)
    records_decoded: int = 0          # records read by the full decoder
    offset_resets: int = 0
    rebalances: int = 0               # completed joins (generations)
    commits: int = 0
    commit_failures: int = 0
    errors_by_name: dict[str, int] = field(default_factory=dict)
    records_by_partition: dict[tuple[str, int], int] = field(default_factory=dict)
    reauthentications: int = 0        # SASL logins again on open connections (KIP-368)


@dataclass
class ConsumerMetrics:
    records_consumed: int = 0
    key_value_bytes: int = 0
    batch_bytes: int = 0
    batches_consumed: int = 0
    fetch_requests: int = 0
    fetch_responses: int = 0
    fetch_partitions_with_data: int = 0
    fetch_latency_ns_total: int = 0
    throttle_time_ms: int = 0
    throttled_responses: int = 0
    aborted_records_skipped: int = 0
    control_batches: int = 0
    records_scanned: int = 0
    records_decoded: int = 0
    offset_resets: int = 0
    rebalances: int = 0
    commits: int = 0
    commit_failures: int = 0
    errors_by_name: Counter = field(default_factory=Counter)
    records_by_partition: Counter = field(default_factory=Counter)

    def snapshot(self, *, reauthentications: int = 0) -> ConsumerMetricsSnapshot:
        """A frozen copy; ``reauthentications`` is the network client's count (it keeps its own)."""
        return ConsumerMetricsSnapshot(
            self.records_consumed, self.key_value_bytes, self.batch_bytes, self.batches_consumed,
            self.fetch_requests, self.fetch_responses, self.fetch_partitions_with_data,
            self.fetch_latency_ns_total, self.throttle_time_ms, self.throttled_responses,
            self.aborted_records_skipped, self.control_batches, self.records_scanned,
            self.records_decoded, self.offset_resets, self.rebalances, self.commits,
            self.commit_failures, dict(self.errors_by_name),
            {(tp[0], tp[1]): n for tp, n in self.records_by_partition.items()}, reauthentications)
