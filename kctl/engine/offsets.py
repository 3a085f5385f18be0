"""OffsetFetcher: positions from ListOffsets (the Java client's ``OffsetFetcher``).

How this works
--------------
Two users, one request path. ``reset_positions_if_needed(now_ns)`` takes the partitions
waiting for a reset (no committed offset, OFFSET_OUT_OF_RANGE, a ``--from`` position)
and asks each partition's leader for the offset of the reset's timestamp (-2 earliest,
-1 latest, or a time), one ListOffsets per leader; the answer seeks the partition
if it still waits for that same reset. ``list_offsets(timestamps, now_ns)`` asks the
same for a caller (end offsets for lag and backlog) and returns an ``OffsetQuery`` the
caller polls. A retriable error (leadership moved, leader not available) refreshes
metadata and retries after ``retry.backoff.ms``; anything else fails the partition
(a reset raises it; a query records it). A timestamp with no record at or after it
(offset -1) resets to the end, as KIP-1106's by_duration does. With read_committed,
"latest" is the last stable offset (isolation level in the request, v2+).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kctl.consumer_config import FetchConfig
from kctl.engine.batch import TopicPartition
from kctl.engine.clock import NS_PER_MS
from kctl.engine.consumer_metrics import ConsumerMetrics
from kctl.engine.metadata import Metadata
from kctl.engine.network import ClientRequest, ClientResponse, NetworkClient
from kctl.engine.subscription import FetchPosition, FetchState, ResetKind, ResetRequest, SubscriptionState
from kctl.errors import KctlError
from kctl.protocol import schema
from kctl.protocol.error_codes import error_for
from kctl.protocol.requests import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, list_offsets, listed_offset

__all__ = ["ListedOffset", "OffsetFetcher", "OffsetQuery", "EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP"]

log = logging.getLogger(__name__)

LIST_OFFSETS = schema.API_BY_NAME["ListOffsets"].api_key
#: Errors after which the leader may have moved (Java's InvalidMetadataException family).
_RETRY_WITH_METADATA = frozenset({
    "NOT_LEADER_OR_FOLLOWER", "LEADER_NOT_AVAILABLE", "UNKNOWN_TOPIC_OR_PARTITION",
    "FENCED_LEADER_EPOCH", "UNKNOWN_LEADER_EPOCH", "REPLICA_NOT_AVAILABLE", "KAFKA_STORAGE_ERROR",
    "OFFSET_NOT_AVAILABLE", "NOT_LEADER_FOR_PARTITION", "REQUEST_TIMED_OUT", "NETWORK_EXCEPTION",
})


@dataclass(frozen=True, slots=True)
class ListedOffset:
    offset: int                 # -1: no record at or after the timestamp
    timestamp: int
    leader_epoch: int = -1


@dataclass
class OffsetQuery:
    """A caller's ListOffsets, per partition: results, or errors that will not pass."""

    timestamps: dict[TopicPartition, int]
    results: dict[TopicPartition, ListedOffset] = field(default_factory=dict)
    errors: dict[TopicPartition, str] = field(default_factory=dict)
    in_flight: set[TopicPartition] = field(default_factory=set)
    retry_at_ns: dict[TopicPartition, int] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return len(self.results) + len(self.errors) >= len(self.timestamps)

    def pending(self, now_ns: int) -> list[TopicPartition]:
        return [tp for tp in self.timestamps
                if tp not in self.results and tp not in self.errors and tp not in self.in_flight
                and now_ns >= self.retry_at_ns.get(tp, 0)]


class OffsetFetcher:
    def __init__(self, config: FetchConfig, subscriptions: SubscriptionState, metadata: Metadata,
                 network: NetworkClient, metrics: ConsumerMetrics, *, wall_ms: Callable[[], int]) -> None:
        self.config = config
        self.subscriptions = subscriptions
        self.metadata = metadata
        self.network = network
        self.metrics = metrics
        self.wall_ms = wall_ms
        self._backoff_ns = config.retry_backoff_ms * NS_PER_MS
        self._resetting: set[TopicPartition] = set()
        self._queries: list[OffsetQuery] = []
        self.fatal_error: KctlError | None = None

    # -- resets ----------------------------------------------------------------------------------
    def reset_positions_if_needed(self, now_ns: int) -> None:
        wall = self.wall_ms()
        todo: dict[TopicPartition, tuple[int, ResetRequest]] = {}
        for s in self.subscriptions.partitions_needing_reset(now_ns):
            if s.tp in self._resetting or s.reset is None:
                continue
            todo[s.tp] = (s.reset.list_offsets_timestamp(wall), s.reset)
        if not todo:
            return
        for node, parts in self._by_leader(todo, now_ns).items():
            stamps = {tp: todo[tp][0] for tp in parts}
            resets = {tp: todo[tp][1] for tp in parts}
            self._resetting.update(parts)
            self._send(node, stamps, now_ns, lambda resp, r=resets: self._on_reset(resp, r))

    def _on_reset(self, resp: ClientResponse, resets: dict[TopicPartition, ResetRequest]) -> None:
        now = resp.received_ns
        self._resetting.difference_update(resets)
        subs = self.subscriptions
        outcome = self._outcomes(resp, resets)
        for tp, result in outcome.items():
            if not subs.is_assigned(tp):
                continue
            s = subs.state(tp)
            if s.state is not FetchState.AWAIT_RESET or s.reset != resets[tp]:
                continue   # reset again or sought meanwhile: this answer is stale
            if isinstance(result, ListedOffset):
                if result.offset < 0:
                    # Nothing at or after that time: start at the end (KIP-1106).
                    subs.request_offset_reset(tp, ResetRequest(ResetKind.LATEST))
                    continue
                subs.seek(tp, FetchPosition(result.offset, result.leader_epoch))
                log.debug("reset %s to offset %s (%s)", tp, result.offset, resets[tp].kind.value)
            elif result in _RETRY_WITH_METADATA:
                self.metadata.request_update()
                subs.reset_failed(tp, now + self._backoff_ns)
            else:
                self.fatal_error = KctlError(f"cannot find a position for {tp}: ListOffsets answered {result}")

    # -- queries ---------------------------------------------------------------------------------
    def list_offsets(self, timestamps: Mapping[TopicPartition, int], now_ns: int) -> OffsetQuery:
        """Starts a query; ``poll_queries`` (run by the consumer's loop) keeps it going."""
        q = OffsetQuery(dict(timestamps))
        self._queries.append(q)
        self.poll_queries(now_ns)
        return q

    def poll_queries(self, now_ns: int) -> None:
        for q in self._queries:
            pending = q.pending(now_ns)
            if not pending:
                continue
            for node, parts in self._by_leader({tp: None for tp in pending}, now_ns).items():
                q.in_flight.update(parts)
                self._send(node, {tp: q.timestamps[tp] for tp in parts}, now_ns,
                           lambda resp, q=q, parts=parts: self._on_query(resp, q, parts))
        self._queries = [q for q in self._queries if not q.done]

    def _on_query(self, resp: ClientResponse, q: OffsetQuery, parts: list[TopicPartition]) -> None:
        q.in_flight.difference_update(parts)
        for tp, result in self._outcomes(resp, {tp: None for tp in parts}).items():
            if isinstance(result, ListedOffset):
                q.results[tp] = result
            elif result in _RETRY_WITH_METADATA:
                self.metadata.request_update()
                q.retry_at_ns[tp] = resp.received_ns + self._backoff_ns
            else:
                q.errors[tp] = result

    # -- the request -----------------------------------------------------------------------------
    def _by_leader(self, tps: Mapping[TopicPartition, object], now_ns: int) -> dict[int, list[TopicPartition]]:
        out: dict[int, list[TopicPartition]] = {}
        for tp in tps:
            leader = self.metadata.leader_for(tp)
            if leader is None:
                self.metadata.add_topics([tp.topic])
                self.metadata.request_update()
                continue
            if not self.network.ready(leader, now_ns):
                continue
            out.setdefault(leader, []).append(tp)
        return out

    def _send(self, node: int, stamps: dict[TopicPartition, int], now_ns: int,
              callback: Callable[[ClientResponse], None]) -> None:
        version = self.network.api_version(node, LIST_OFFSETS)
        if version is None:
            raise KctlError(f"broker {self.network.address(node)} has no ListOffsets version kctl speaks")
        epochs = {tp: meta.leader_epoch for tp in stamps
                  if (meta := self.metadata.partition_meta(tp)) is not None}
        body = list_offsets(version, stamps, leader_epochs=epochs,
                            isolation_level=int(self.config.isolation_level),
                            timeout_ms=self.config.request_timeout_ms)
        self.network.send(ClientRequest(node, LIST_OFFSETS, body, callback=callback, created_ns=now_ns,
                                        user=list(stamps)), now_ns)

    def _outcomes(self, resp: ClientResponse, asked: Mapping[TopicPartition, object]
                  ) -> dict[TopicPartition, ListedOffset | str]:
        """Per partition asked: the offset, or the error's name."""
        if resp.error is not None or resp.body is None:
            name = "REQUEST_TIMED_OUT" if resp.timed_out else "NETWORK_EXCEPTION"
            return {tp: name for tp in asked}
        body = resp.body
        if body.throttle_time_ms:
            self.network.throttle(resp.node, body.throttle_time_ms, resp.received_ns)
        out: dict[TopicPartition, ListedOffset | str] = {}
        for t in body.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                if tp not in asked:
                    continue
                if p.error_code:
                    name = error_for(p.error_code).name
                    self.metrics.errors_by_name[name] += 1
                    out[tp] = name
                    continue
                out[tp] = ListedOffset(listed_offset(p), p.timestamp if p.timestamp is not None else -1,
                                       p.leader_epoch if p.leader_epoch is not None else -1)
        for tp in asked:
            out.setdefault(tp, "UNKNOWN_TOPIC_OR_PARTITION")   # left out of the answer
        return out
