"""Counters the producer engine keeps; the stats layer snapshots and diffs them.

Plain integers updated on the engine's own thread (no locks). Per-broker and
per-partition figures are dicts keyed by node id / TopicPartition. The engine
never renders: ``snapshot()`` returns a frozen copy for the stats layer.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    records_sent: int
    records_acked: int
    records_failed: int
    bytes_sent: int
    batches_sent: int
    batches_acked: int
    requests_sent: int
    responses_received: int
    retries: int
    splits: int
    throttle_time_ms: int
    throttled_requests: int
    queue_time_ns_total: int
    batch_fill_total: float
    request_latency_ns_total: int
    errors_by_name: dict[str, int]
    failed_by_error: dict[str, int]
    records_by_partition: dict[tuple[str, int], int]
    records_by_node: dict[int, int]
    epoch_bumps: int
    value_bytes_acked: int = 0
    records_abandoned: int = 0
    abandoned_by_reason: dict[str, int] = field(default_factory=dict)
    transactions_committed: int = 0
    transactions_aborted: int = 0
    compression_rate_total: float = 0.0
    compression_rate_batches: int = 0
    reauthentications: int = 0   # SASL logins again on open connections (KIP-368)


@dataclass
class ProducerMetrics:
    records_sent: int = 0        # records written in a Produce request (first attempt)
    records_acked: int = 0
    records_failed: int = 0
    bytes_sent: int = 0          # record batch bytes in requests (retries included)
    value_bytes_acked: int = 0   # bytes of the values of acknowledged records
    batches_sent: int = 0        # batches in requests (retries included)
    batches_acked: int = 0
    requests_sent: int = 0
    responses_received: int = 0
    retries: int = 0             # batch attempts after the first
    splits: int = 0
    throttle_time_ms: int = 0
    throttled_requests: int = 0
    queue_time_ns_total: int = 0  # sum over first drains of (drained - created)
    batch_fill_total: float = 0.0  # sum over first drains of estimated bytes / batch.size
    request_latency_ns_total: int = 0
    epoch_bumps: int = 0
    records_abandoned: int = 0   # records given up without a verdict (the run stopped first)
    transactions_committed: int = 0
    transactions_aborted: int = 0
    # Java's compression-rate-avg, as a sum and a count: compressed / uncompressed
    # records bytes of every batch in a request (retries too); compression on only.
    compression_rate_total: float = 0.0
    compression_rate_batches: int = 0
    #: batch attempts ended in an error, by name (a Produce response's partition error, or
    #: the client's own: REQUEST_TIMED_OUT, NETWORK_EXCEPTION, DELIVERY_TIMEOUT, ...), retries too
    errors_by_name: Counter = field(default_factory=Counter)
    failed_by_error: Counter = field(default_factory=Counter)  # records that finally failed
    abandoned_by_reason: Counter = field(default_factory=Counter)
    records_by_partition: Counter = field(default_factory=Counter)
    records_by_node: Counter = field(default_factory=Counter)

    def snapshot(self, *, reauthentications: int = 0) -> MetricsSnapshot:
        """A frozen copy; ``reauthentications`` is the network client's count (it keeps its own)."""
        return MetricsSnapshot(
            self.records_sent, self.records_acked, self.records_failed, self.bytes_sent,
            self.batches_sent, self.batches_acked, self.requests_sent, self.responses_received,
            self.retries, self.splits, self.throttle_time_ms, self.throttled_requests,
            self.queue_time_ns_total, self.batch_fill_total, self.request_latency_ns_total,
            dict(self.errors_by_name), dict(self.failed_by_error),
            {(tp[0], tp[1]): n for tp, n in self.records_by_partition.items()},
            dict(self.records_by_node), self.epoch_bumps, self.value_bytes_acked,
            self.records_abandoned, dict(self.abandoned_by_reason), self.transactions_committed,
            self.transactions_aborted, self.compression_rate_total, self.compression_rate_batches,
            reauthentications)
