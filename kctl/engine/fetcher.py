"""Fetcher: Fetch requests per broker and what their answers hand out (the Java
client's ``Fetcher``, ``FetchCollector`` and ``CompletedFetch``).

How this works
--------------
``send_fetches(now_ns)`` builds one FetchRequest per broker that leads (or, after a
KIP-392 hint, serves as preferred read replica for) at least one fetchable partition:
FETCHING, not paused, with a position. A broker with a Fetch in flight gets no second
one (as Java: a broker answers one connection's requests in order, so a second would
wait behind the first's ``fetch.max.wait.ms`` anyway).

Fetch-ahead (where kctl differs from Java's Fetcher, as librdkafka does): a partition
with one answer still buffered is fetched again from the end of that answer, so at most
two answers per partition are ever buffered (one handed out, one arriving). Java skips
partitions with buffered data; then a drained partition's Fetch, waiting out
``fetch.max.wait.ms`` at the broker for new data, holds back every other partition of
that broker until it returns, and a consumer that reads faster than one answer per
partition stalls for up to ``fetch.max.wait.ms`` at a time. Answers are handed out in
arrival order, so a partition's records still come in offset order; an answer whose
offset is no longer where the partition stands (a seek, a reset, an error before it) is
dropped. The request
carries ``fetch.max.wait.ms``, ``fetch.min.bytes``, ``fetch.max.bytes``,
``isolation.level``, per partition the position, the leader epoch metadata knows and
``max.partition.fetch.bytes``, and ``client.rack``. Fetch v13+ names topics by id; a
topic whose id metadata has not given is fetched at v12, as the Java client does.
Fetches are sessionless (session id 0, epoch -1: the broker keeps no fetch session).

Each partition of an answer becomes a ``CompletedFetch`` in arrival order.
``collect(max_records, now_ns)`` hands out records from them, ``max.poll.records``
at most, as ``ConsumedBatch``es (per batch, never per record on the fast path: see
``protocol/record_scan.py``):

- an answer for an offset that is no longer the partition's position (a seek or a
  reset came in between) is dropped, as is one for a partition no longer assigned;
- errors: leadership errors (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH,
  UNKNOWN_TOPIC_OR_PARTITION, ...) ask for a metadata refresh (and take a KIP-951
  ``current_leader`` at once); UNKNOWN_LEADER_EPOCH and UNKNOWN_SERVER_ERROR retry;
  OFFSET_OUT_OF_RANGE resets the position by ``auto.offset.reset`` or, with ``none``,
  raises ``OffsetOutOfRangeError``; anything else (authorization, corruption) raises;
- records before the position are skipped (a batch may start earlier); control
  batches are skipped; with read_committed, batches of aborted transactions are
  skipped using the answer's ``aborted_transactions`` (a producer id joins the
  aborted set once its first offset is reached, and leaves it at its ABORT marker,
  as in Java's ``CompletedFetch``);
- the position moves past what was handed out (and past skipped batches); the high
  watermark, last stable offset and log start offset of the answer are kept for lag.

Time is passed in; the network client's callbacks bring the answers.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from kctl.consumer_config import FetchConfig, IsolationLevel
from kctl.engine.batch import TopicPartition
from kctl.engine.clock import NS_PER_MS
from kctl.engine.consumer_metrics import ConsumerMetrics
from kctl.engine.metadata import Metadata, NodeAddress
from kctl.engine.network import ClientRequest, ClientResponse, NetworkClient
from kctl.engine.subscription import (
    FetchPosition, FetchState, OffsetOutOfRangeError, SubscriptionState)
from kctl.errors import BrokerError, DecodeError, KctlError
from kctl.protocol import requests, schema
from kctl.protocol.error_codes import broker_error, error_for
from kctl.protocol.identity import IDENTITY_SIZE
from kctl.protocol.record_scan import ScannedBatch, scan_fetched
from kctl.protocol.records import ControlRecordType, Record

__all__ = ["CompletedFetch", "ConsumedBatch", "Fetcher"]

log = logging.getLogger(__name__)

FETCH = schema.API_BY_NAME["Fetch"].api_key

#: Errors after which the leader may have moved: refresh metadata and fetch again.
LEADERSHIP_ERRORS = frozenset({
    "NOT_LEADER_OR_FOLLOWER", "REPLICA_NOT_AVAILABLE", "KAFKA_STORAGE_ERROR", "FENCED_LEADER_EPOCH",
    "OFFSET_NOT_AVAILABLE", "UNKNOWN_TOPIC_OR_PARTITION", "UNKNOWN_TOPIC_ID", "INCONSISTENT_TOPIC_ID",
    "NOT_LEADER_FOR_PARTITION",
})
#: Errors a later Fetch may not see again: log and fetch again.
RETRY_ERRORS = frozenset({"UNKNOWN_LEADER_EPOCH", "UNKNOWN_SERVER_ERROR"})


@dataclass(frozen=True, slots=True)
class ConsumedBatch:
    """The records of one batch handed out by one ``collect``: offsets
    ``first_offset`` .. ``end_offset - 1`` of ``tp`` (``count`` records), read at
    ``consumed_ns`` (monotonic)."""

    tp: TopicPartition
    batch: ScannedBatch
    first_offset: int
    end_offset: int
    count: int
    consumed_ns: int

    @property
    def identities(self) -> bytes | None:
        """The records' ``kctl`` identities (fast path only; see ``records`` otherwise)."""
        ids = self.batch.identities
        if ids is None:
            return None
        base = self.batch.base_offset
        if self.first_offset == base and self.end_offset == self.batch.next_offset:
            return ids
        return ids[(self.first_offset - base) * IDENTITY_SIZE:(self.end_offset - base) * IDENTITY_SIZE]

    @property
    def records(self) -> tuple[Record, ...]:
        """The records handed out (decoded now when the batch was scanned on the fast path)."""
        lo, hi = self.first_offset, self.end_offset
        return tuple(r for r in self.batch.decoded() if lo <= r.offset < hi)

    @property
    def key_value_bytes(self) -> int:
        b = self.batch
        if b.records is None:
            return b.key_value_bytes // b.count * self.count if b.count else 0
        return sum(len(r.key or b"") + len(r.value or b"") for r in self.records)


class CompletedFetch:
    """One partition's part of one Fetch answer, consumed batch by batch."""

    __slots__ = ("tp", "fetch_offset", "data", "received_ns", "node", "batches", "index",
                 "next_offset", "aborted", "aborted_pids", "initialized", "consumed", "scanned",
                 "decoded", "size", "truncated", "error")

    def __init__(self, tp: TopicPartition, fetch_offset: int, data, received_ns: int, node: int) -> None:
        self.tp = tp
        self.fetch_offset = fetch_offset
        self.data = data                  # FetchResponse.PartitionData
        self.received_ns = received_ns
        self.node = node
        self.batches: list[ScannedBatch] | None = None
        self.index = 0
        self.next_offset = fetch_offset
        # read_committed: (first_offset, producer_id) still ahead, and aborted producers now.
        self.aborted: deque[tuple[int, int]] = deque()
        self.aborted_pids: set[int] = set()
        self.initialized = False
        self.consumed = False
        self.scanned = self.decoded = self.size = self.truncated = 0
        self.error: KctlError | None = None


class Fetcher:
    def __init__(self, config: FetchConfig, subscriptions: SubscriptionState, metadata: Metadata,
                 network: NetworkClient, metrics: ConsumerMetrics, *,
                 metadata_max_age_ms: int = 300000) -> None:
        self.config = config
        self.subscriptions = subscriptions
        self.metadata = metadata
        self.network = network
        self.metrics = metrics
        self._preferred_ttl_ns = metadata_max_age_ms * NS_PER_MS
        self._pending_nodes: set[int] = set()
        self.completed: deque[CompletedFetch] = deque()
        self._buffered: dict[TopicPartition, int] = {}      # answers buffered per partition
        self._fetch_ahead: dict[TopicPartition, int] = {}   # where its next Fetch starts

    # -- sending ---------------------------------------------------------------------------------
    def _fetch_node(self, s, now_ns: int) -> int | None:
        if s.preferred_replica >= 0:
            if now_ns < s.preferred_replica_expiry_ns and self.metadata.node(s.preferred_replica):
                return s.preferred_replica
            s.preferred_replica = -1
        return self.metadata.leader_for(s.tp)

    def send_fetches(self, now_ns: int) -> int:
        """Sends a Fetch to every broker that has fetchable partitions and none in flight;
        returns how many were sent."""
        by_node: dict[int, list] = {}
        for s in self.subscriptions.fetchable_partitions():
            buffered = self._buffered.get(s.tp, 0)
            if buffered and (buffered > 1 or s.tp not in self._fetch_ahead):
                continue
            node = self._fetch_node(s, now_ns)
            if node is None:
                self.metadata.add_topics([s.tp.topic])
                self.metadata.request_update()
                continue
            if node in self._pending_nodes:
                continue
            by_node.setdefault(node, []).append((s, self._fetch_ahead.get(s.tp) if buffered else
                                                 s.position.offset))
        sent = 0
        for node, states in by_node.items():
            if not self.network.ready(node, now_ns):
                continue
            self._send(node, states, now_ns)
            sent += 1
        return sent

    def _send(self, node: int, states: list, now_ns: int) -> None:
        cfg = self.config
        version = self.network.api_version(node, FETCH)
        if version is None:
            raise KctlError(f"broker {self.network.address(node)} has no Fetch version kctl speaks")
        requested: dict[TopicPartition, int] = {}
        wants = []
        for s, offset in states:
            meta = self.metadata.partition_meta(s.tp)
            requested[s.tp] = offset
            wants.append(requests.FetchPartition(s.tp.topic, s.tp.partition, offset, cfg.max_partition_bytes,
                                                 meta.leader_epoch if meta else -1))
        out = requests.fetch(version, wants, max_wait_ms=cfg.max_wait_ms, min_bytes=cfg.min_bytes,
                             max_bytes=cfg.max_bytes, isolation_level=int(cfg.isolation_level),
                             rack_id=cfg.client_rack, topic_ids=self.metadata.topic_ids)
        self._pending_nodes.add(node)
        self.metrics.fetch_requests += 1
        # A Fetch may wait fetch.max.wait.ms at the broker before it answers: the timeout
        # covers that wait on top of request.timeout.ms (Java adds it too).
        self.network.send(ClientRequest(node, FETCH, out.body, api_version=out.version, callback=self._on_fetch,
                                        user=requested, created_ns=now_ns,
                                        request_timeout_ms=cfg.request_timeout_ms + cfg.max_wait_ms),
                          now_ns)

    # -- answers ---------------------------------------------------------------------------------
    def _on_fetch(self, resp: ClientResponse) -> None:
        node = resp.node
        self._pending_nodes.discard(node)
        requested: dict[TopicPartition, int] = resp.request.user
        if resp.error is not None or resp.body is None:
            name = "REQUEST_TIMED_OUT" if resp.timed_out else "NETWORK_EXCEPTION"
            if isinstance(resp.error, DecodeError):
                name = "CORRUPT_MESSAGE"
            self.metrics.errors_by_name[name] += 1
            log.info("fetch from node %s failed: %s", node, resp.error)
            self.metadata.request_update()
            return
        body = resp.body
        self.metrics.fetch_responses += 1
        if resp.request.sent_ns >= 0:
            self.metrics.fetch_latency_ns_total += resp.received_ns - resp.request.sent_ns
        if body.throttle_time_ms:
            self.metrics.throttle_time_ms += body.throttle_time_ms
            self.metrics.throttled_responses += 1
            self.network.throttle(node, body.throttle_time_ms, resp.received_ns)
        if body.error_code:
            name = error_for(body.error_code).name
            self.metrics.errors_by_name[name] += 1
            log.info("fetch from node %s: %s", node, name)
            return
        names = {v: k for k, v in self.metadata.topic_ids.items()}
        for ep in getattr(body, "node_endpoints", None) or ():
            self.metadata.add_node(NodeAddress(ep.node_id, ep.host, ep.port, ep.rack))
        for t in body.responses:
            topic = t.topic or names.get(t.topic_id, "")
            for p in t.partitions:
                tp = TopicPartition(topic, p.partition_index)
                offset = requested.get(tp)
                if offset is None:
                    continue      # not asked for (a broker's mistake); nothing to hand out
                cf = CompletedFetch(tp, offset, p, resp.received_ns, node)
                self._scan(cf)
                self.completed.append(cf)
                self._buffered[tp] = self._buffered.get(tp, 0) + 1
                if cf.error is None and not p.error_code:
                    # From where this answer ends (where it started, when it brought nothing).
                    self._fetch_ahead[tp] = cf.batches[-1].next_offset if cf.batches else offset
                else:
                    self._fetch_ahead.pop(tp, None)

    def _scan(self, cf: CompletedFetch) -> None:
        records = cf.data.records or b""
        if cf.data.error_code or not records:
            cf.batches = []
            return
        try:
            scan = scan_fetched(records, check_crcs=self.config.check_crcs)
        except DecodeError as e:
            cf.error = KctlError(f"{cf.tp} at offset {cf.fetch_offset}: the fetched records do not "
                                 f"decode: {e}")
            cf.batches = []
            return
        cf.batches = scan.batches
        cf.scanned, cf.decoded, cf.size, cf.truncated = scan.scanned, scan.decoded, scan.size, scan.truncated

    # -- handing out -----------------------------------------------------------------------------
    @property
    def has_completed_fetches(self) -> bool:
        return bool(self.completed)

    def collect(self, max_records: int, now_ns: int) -> list[ConsumedBatch]:
        """Up to ``max_records`` records from the buffered answers, in order, as batches;
        positions move past them. Raises for errors the application must see."""
        out: list[ConsumedBatch] = []
        left = max_records
        while left > 0 and self.completed:
            cf = self.completed[0]
            if self.subscriptions.is_pending_revocation(cf.tp):
                self._drop(cf)      # Java: "no longer fetchable", not handed out
                continue
            if not cf.initialized:
                if not self._initialize(cf, now_ns):
                    self._drop(cf)
                    continue
            got = self._take(cf, left, now_ns, out)
            left -= got
            if cf.consumed:
                self._drop(cf)
        return out

    def _drop(self, cf: CompletedFetch) -> None:
        self.completed.popleft()
        n = self._buffered.get(cf.tp, 0) - 1
        if n > 0:
            self._buffered[cf.tp] = n
        else:
            self._buffered.pop(cf.tp, None)
            self._fetch_ahead.pop(cf.tp, None)

    def _initialize(self, cf: CompletedFetch, now_ns: int) -> bool:
        """Checks one partition's answer before records are handed out; False to drop it."""
        subs = self.subscriptions
        tp = cf.tp
        if not subs.is_assigned(tp):
            return False
        s = subs.state(tp)
        if s.state is not FetchState.FETCHING or s.position is None or s.position.offset != cf.fetch_offset:
            return False        # a seek or reset came in between: stale
        p = cf.data
        code = p.error_code
        if code:
            self._on_partition_error(cf, s, error_for(code).name)
            return False
        if p.high_watermark >= 0:
            s.high_watermark = p.high_watermark
        if p.last_stable_offset is not None and p.last_stable_offset >= 0:
            s.last_stable_offset = p.last_stable_offset
        if p.log_start_offset is not None and p.log_start_offset >= 0:
            s.log_start_offset = p.log_start_offset
        replica = getattr(p, "preferred_read_replica", -1)
        if replica is not None and replica >= 0:
            s.preferred_replica = replica
            s.preferred_replica_expiry_ns = now_ns + self._preferred_ttl_ns
        if cf.error is not None:
            raise cf.error
        if not cf.batches and cf.truncated:
            # Not one whole batch: before KIP-74 a batch larger than the partition limit
            # came back cut; a broker that still does this cannot serve this offset.
            raise KctlError(
                f"{tp} at offset {cf.fetch_offset}: the first batch is larger than "
                f"max.partition.fetch.bytes ({self.config.max_partition_bytes}) and the broker "
                "returned it cut; raise max.partition.fetch.bytes (Java's RecordTooLargeException)")
        if self.config.isolation_level is IsolationLevel.READ_COMMITTED and p.aborted_transactions:
            cf.aborted = deque(sorted((a.first_offset, a.producer_id) for a in p.aborted_transactions))
        if cf.batches:
            self.metrics.fetch_partitions_with_data += 1
            self.metrics.batch_bytes += cf.size
        cf.initialized = True
        return True

    def _on_partition_error(self, cf: CompletedFetch, s, name: str) -> None:
        tp = cf.tp
        self.metrics.errors_by_name[name] += 1
        p = cf.data
        if name in LEADERSHIP_ERRORS:
            s.preferred_replica = -1
            leader = getattr(p, "current_leader", None)
            if leader is not None and leader.leader_id is not None and leader.leader_id >= 0:
                self.metadata.update_leader(tp, leader.leader_id, leader.leader_epoch)
            self.metadata.request_update()
            log.info("fetch %s: %s; refreshing metadata", tp, name)
            return
        if name in RETRY_ERRORS:
            log.info("fetch %s: %s; fetching again", tp, name)
            return
        if name == "OFFSET_OUT_OF_RANGE":
            if self.subscriptions.has_default_reset:
                log.info("fetch %s: offset %s out of range; resetting by auto.offset.reset",
                         tp, cf.fetch_offset)
                self.metrics.offset_resets += 1
                self.subscriptions.request_offset_reset(tp)
                return
            raise OffsetOutOfRangeError(
                f"{tp}: offset {cf.fetch_offset} is out of range and auto.offset.reset=none "
                "(Java's OffsetOutOfRangeException)")
        err: BrokerError = broker_error(p.error_code)
        raise KctlError(f"fetching {tp}: {err}")

    def _take(self, cf: CompletedFetch, left: int, now_ns: int, out: list[ConsumedBatch]) -> int:
        """Hands out up to ``left`` records of ``cf``; returns how many."""
        batches = cf.batches
        assert batches is not None
        read_committed = self.config.isolation_level is IsolationLevel.READ_COMMITTED
        metrics = self.metrics
        taken = 0
        pos = cf.next_offset
        while cf.index < len(batches) and taken < left:
            b = batches[cf.index]
            if b.last_offset < pos:
                cf.index += 1
                continue
            if read_committed and b.producer_id >= 0:
                aborted = cf.aborted
                while aborted and aborted[0][0] <= b.last_offset:
                    cf.aborted_pids.add(aborted.popleft()[1])
                if b.control and b.control_type == ControlRecordType.ABORT:
                    cf.aborted_pids.discard(b.producer_id)
                elif b.transactional and not b.control and b.producer_id in cf.aborted_pids:
                    metrics.aborted_records_skipped += b.count
                    pos = b.next_offset
                    cf.index += 1
                    continue
            if b.control:
                metrics.control_batches += 1
                pos = b.next_offset
                cf.index += 1
                continue
            first = max(pos, b.base_offset)
            if b.records is None:
                n = min(b.next_offset - first, left - taken)
                end = first + n
                metrics.records_scanned += n
            else:
                offsets = [r.offset for r in b.records if r.offset >= first]
                if not offsets:
                    pos = b.next_offset
                    cf.index += 1
                    continue
                offsets = offsets[:left - taken]
                n = len(offsets)
                first = offsets[0]
                # The last record of the batch moves the position past the batch (a
                # compacted batch may end in a gap).
                end = b.next_offset if offsets[-1] == b.records[-1].offset else offsets[-1] + 1
                metrics.records_decoded += n
            cb = ConsumedBatch(cf.tp, b, first, end, n, now_ns)
            out.append(cb)
            taken += n
            pos = end
            metrics.records_consumed += n
            metrics.key_value_bytes += cb.key_value_bytes
            metrics.records_by_partition[cf.tp] += n
            if end >= b.next_offset:
                metrics.batches_consumed += 1
                cf.index += 1
        cf.next_offset = pos
        if cf.index >= len(batches):
            cf.consumed = True
        s = self.subscriptions.state(cf.tp)
        if pos != s.position.offset:
            s.position = FetchPosition(pos, s.position.leader_epoch)
        return taken

    def clear_buffered(self, keep: Callable[[TopicPartition], bool] | None = None) -> None:
        """Drops buffered answers (all, or those ``keep`` rejects): after a rebalance or seek."""
        kept = deque(cf for cf in self.completed if keep is not None and keep(cf.tp))
        self.completed = kept
        self._buffered = {}
        for cf in kept:
            self._buffered[cf.tp] = self._buffered.get(cf.tp, 0) + 1
        self._fetch_ahead = {tp: o for tp, o in self._fetch_ahead.items() if tp in self._buffered}

    @property
    def pending_nodes(self) -> frozenset[int]:
        return frozenset(self._pending_nodes)
