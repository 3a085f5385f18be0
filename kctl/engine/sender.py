"""Sender: one step of the producer's I/O loop (the Java client's Sender.runOnce).

How this works
--------------
``run_once(now_ns)`` makes every decision for one turn of the loop and sends
what it decided, without waiting; it returns the monotonic time at which it
next needs to run. The caller then waits on the sockets
(``NetworkClient.poll``) at most until then; responses arrive through request
callbacks into ``_on_produce``, ``_on_metadata`` and ``_on_init_producer_id``.
In one turn:

1. With idempotence and no producer id (or an epoch bump pending and nothing
   in flight), ask for one with InitProducerId and send nothing else.
2. Refresh metadata when due (see metadata.py) through the least-loaded node.
3. Ask the accumulator which leaders have sendable batches; drop those the
   network cannot send to now (connecting, backing off, throttled, at
   max.in.flight.requests.per.connection) and remember when they will be.
   Each ready node's "could drain or not" goes back to the accumulator
   (``partitioner.availability.timeout.ms``), and the topics' queue sizes to
   the partitioner (``on_partition_load``, adaptive partitioning, KIP-794).
4. Drain up to max.request.size per node, build one ProduceRequest per node
   at the version negotiated with it, and send it.
5. Fail batches whose delivery.timeout.ms passed, queued or in flight.

Responses: success completes a batch; a retriable error (or a broken
connection, or a request timeout) sends it back to the accumulator to retry
after backoff if delivery.timeout.ms and ``retries`` allow, refreshing
metadata on leadership errors; MESSAGE_TOO_LARGE splits it; anything else
fails it with the error's name. Every batch resolves exactly once: a response
for a batch that already expired is ignored. throttle_time_ms mutes the
broker for that long (KIP-219) and is counted.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence

from kctl.config import SenderConfig
from kctl.engine.accumulator import PartitionLoad, RecordAccumulator
from kctl.engine.batch import BatchResult, BatchState, ProducerBatch, TopicPartition
from kctl.engine.clock import NS_PER_MS
from kctl.engine.idempotence import ErrorAction, Idempotence
from kctl.engine.metadata import Metadata
from kctl.engine.metrics import ProducerMetrics
from kctl.engine.network import ClientRequest, ClientResponse, NetworkClient
from kctl.protocol import messages, schema
from kctl.protocol.error_codes import error_for

PRODUCE = schema.API_BY_NAME["Produce"].api_key
METADATA = schema.API_BY_NAME["Metadata"].api_key
INIT_PRODUCER_ID = schema.API_BY_NAME["InitProducerId"].api_key

_ProduceRequest = messages.message_class("ProduceRequest")
_ZERO_UUID = uuid.UUID(int=0)

#: Errors after which the client's view of leaders is stale (Java's InvalidMetadataException family).
METADATA_ERRORS = frozenset({
    "NOT_LEADER_OR_FOLLOWER", "UNKNOWN_TOPIC_OR_PARTITION", "LEADER_NOT_AVAILABLE",
    "KAFKA_STORAGE_ERROR", "UNKNOWN_TOPIC_ID", "FENCED_LEADER_EPOCH", "UNKNOWN_LEADER_EPOCH",
    "NOT_CONTROLLER", "NETWORK_EXCEPTION", "INCONSISTENT_TOPIC_ID",
})

#: Wall-clock milliseconds, for record timestamps (injected; tests fix it).
WallClock = Callable[[], int]


class Sender:
    def __init__(self, config: SenderConfig, accumulator: RecordAccumulator, metadata: Metadata,
                 network: NetworkClient, *, idempotence: Idempotence | None,
                 metrics: ProducerMetrics, wall_ms: WallClock,
                 on_batch_done: Callable[[ProducerBatch], None] | None = None,
                 batch_size: int = 16384,
                 on_partition_load: Callable[[Sequence[PartitionLoad]], None] | None = None) -> None:
        self.config = config
        self.accumulator = accumulator
        self.metadata = metadata
        self.network = network
        self.idempotence = idempotence
        self.metrics = metrics
        self.wall_ms = wall_ms
        self.on_batch_done = on_batch_done
        self.batch_size = batch_size
        self.on_partition_load = on_partition_load
        self.delivery_timeout_ns = config.delivery_timeout_ms * NS_PER_MS
        self.guarantee_order = config.max_in_flight_requests_per_connection == 1
        self._in_flight: set[ProducerBatch] = set()
        self._metadata_in_flight = False
        self._init_in_flight = False
        self.fatal_error: str | None = None

    # -- one turn ------------------------------------------------------------------------
    def run_once(self, now_ns: int) -> int:
        wake = now_ns + 1_000 * NS_PER_MS
        auth_error = self.network.authentication_error()
        if auth_error is not None:
            # TLS or SASL refused: retrying with the same settings cannot help (Java fails
            # the pending sends with the AuthenticationException).
            self.fatal_error = str(auth_error)
            self._fail_everything(self.fatal_error, now_ns)
            return wake
        wake = min(wake, self._maybe_update_metadata(now_ns))
        if self.idempotence is not None and not self.idempotence.has_producer_id():
            self._expire(now_ns)
            return min(wake, self._maybe_init_producer_id(now_ns))
        check = self.accumulator.ready(self.metadata, now_ns)
        if self.on_partition_load is not None:
            self.on_partition_load(check.partition_load)
        if check.unknown_leader_topics:
            self.metadata.add_topics(check.unknown_leader_topics)
            self.metadata.request_update()
            wake = min(wake, now_ns + self.metadata.time_to_next_update_ns(now_ns))
        nodes = []
        for node in check.ready_nodes:
            can_drain = self.network.ready(node, now_ns)
            self.accumulator.update_node_latency_stats(node, now_ns, can_drain)
            if can_drain:
                nodes.append(node)
                continue
            delay = self.network.poll_delay_ns(node, now_ns)
            if delay > 0:
                wake = min(wake, now_ns + delay)
            # No delay: connected but at max.in.flight.requests.per.connection, or a
            # connect just started. A response or the socket becoming writable wakes
            # the loop's wait on the sockets; a timer would only spin it.
        if nodes:
            drained = self.accumulator.drain(self.metadata.partitions_by_node(), nodes,
                                             self.config.max_request_size, now_ns)
            for node, batches in drained.items():
                self._send_produce(node, batches, now_ns)
        self._expire(now_ns)
        wake = min(wake, check.next_ready_check_ns)
        if self._in_flight:
            oldest = min(b.created_ns for b in self._in_flight)
            wake = min(wake, oldest + self.delivery_timeout_ns)
        return max(wake, now_ns)

    # -- metadata and producer id ------------------------------------------------------------
    def _maybe_update_metadata(self, now_ns: int) -> int:
        if self._metadata_in_flight:
            return now_ns + 1_000 * NS_PER_MS
        delay = self.metadata.time_to_next_update_ns(now_ns)
        if delay > 0:
            return now_ns + delay
        node = self.network.least_loaded_node(now_ns)
        if node is None or not self.network.ready(node, now_ns):
            return now_ns + max(NS_PER_MS, self.network.connection_delay_ns(node, now_ns)
                                if node is not None else 50 * NS_PER_MS)
        req = self.metadata.build_request(now_ns, self.network.api_version(node, METADATA))
        self._metadata_in_flight = True
        self.network.send(ClientRequest(node, METADATA, req, callback=self._on_metadata), now_ns)
        return now_ns + 1_000 * NS_PER_MS

    def _on_metadata(self, resp: ClientResponse) -> None:
        self._metadata_in_flight = False
        if resp.body is None or resp.error is not None:
            self.metadata.failed_update(resp.received_ns)
            return
        update = self.metadata.handle_response(resp.body, resp.received_ns)
        self.network.set_nodes({n.node_id: (n.host, n.port) for n in self.metadata.nodes.values()})
        for topic, error in update.topic_errors.items():
            self._fail_topic(topic, error, resp.received_ns)

    def _maybe_init_producer_id(self, now_ns: int) -> int:
        assert self.idempotence is not None
        if self.idempotence.fatal_error:
            self._fail_everything(self.idempotence.fatal_error, now_ns)
            return now_ns + 1_000 * NS_PER_MS
        if self._init_in_flight or not self.idempotence.needs_producer_id():
            return now_ns + 1_000 * NS_PER_MS
        if self._in_flight:
            # An epoch bump waits until the requests under the old epoch have answered.
            return now_ns + 1_000 * NS_PER_MS
        node = self.network.least_loaded_node(now_ns)
        if node is None or not self.network.ready(node, now_ns):
            return now_ns + max(NS_PER_MS, self.network.connection_delay_ns(node, now_ns)
                                if node is not None else 50 * NS_PER_MS)
        version = self.network.api_version(node, INIT_PRODUCER_ID)
        if version is None:
            self.idempotence.handle_init_response("UNSUPPORTED_VERSION", False, -1, -1)
            return now_ns
        req = self.idempotence.build_init_request(version)
        self._init_in_flight = True
        self.network.send(ClientRequest(node, INIT_PRODUCER_ID, req,
                                        callback=self._on_init_producer_id), now_ns)
        return now_ns + 1_000 * NS_PER_MS

    def _on_init_producer_id(self, resp: ClientResponse) -> None:
        assert self.idempotence is not None
        self._init_in_flight = False
        if resp.body is None or resp.error is not None:
            self.idempotence.producer_init_failed(str(resp.error))
            return
        body = resp.body
        if body.throttle_time_ms:
            self._throttle(resp.node, body.throttle_time_ms, resp.received_ns)
        if body.error_code:
            err = error_for(body.error_code)
            self.idempotence.handle_init_response(err.name, err.retriable, -1, -1)
            return
        self.idempotence.handle_init_response(None, False, body.producer_id, body.producer_epoch)

    # -- produce -----------------------------------------------------------------------------
    def _send_produce(self, node: int, batches: Sequence[ProducerBatch], now_ns: int) -> None:
        version = self.network.api_version(node, PRODUCE)
        wall = self.wall_ms()
        by_topic: dict[str, list] = {}
        for b in batches:
            records = b.encode(wall)
            by_topic.setdefault(b.tp.topic, []).append(
                _ProduceRequest.PartitionProduceData(index=b.tp.partition, records=records))
            if b.state is BatchState.RETRY:
                self.metrics.retries += 1
            else:
                self.metrics.records_sent += b.record_count
                self.metrics.queue_time_ns_total += now_ns - b.created_ns
                self.metrics.batch_fill_total += min(1.0, b.estimated_bytes / max(self.batch_size, 1))
            b.transition(BatchState.IN_FLIGHT)
            b.attempts += 1
            b.node_id = node
            b.sent_ns = -1
            self.metrics.batches_sent += 1
            self.metrics.bytes_sent += b.encoded_size
            self._in_flight.add(b)
            if self.guarantee_order:
                self.accumulator.mute(b.tp)
        by_id = version is not None and version >= 13
        if by_id and any(t not in self.metadata.topic_ids for t in by_topic):
            # Produce v13+ names topics by id only; without an id, speak v12 (as Java does).
            version, by_id = 12, False
        topic_data = [
            _ProduceRequest.TopicProduceData(
                name="" if by_id else topic,
                topic_id=self.metadata.topic_ids.get(topic, _ZERO_UUID) if by_id else _ZERO_UUID,
                partition_data=parts)
            for topic, parts in by_topic.items()]
        acks = self.config.acks
        body = _ProduceRequest(
            transactional_id=None, acks=acks, timeout_ms=self.config.request_timeout_ms,
            topic_data=topic_data)
        self.metrics.requests_sent += 1
        self.network.send(ClientRequest(node, PRODUCE, body, api_version=version,
                                        expects_response=acks != 0,
                                        callback=self._on_produce, user=list(batches),
                                        created_ns=now_ns), now_ns)

    def _on_produce(self, resp: ClientResponse) -> None:
        batches: list[ProducerBatch] = resp.request.user
        now_ns = resp.received_ns
        sent_ns = resp.request.sent_ns
        for b in batches:
            b.sent_ns = sent_ns
        if resp.error is not None or (resp.body is None and resp.request.expects_response):
            if resp.version_mismatch:
                for b in batches:
                    self._fail(b, "UNSUPPORTED_VERSION", str(resp.error), now_ns)
                return
            error = "REQUEST_TIMED_OUT" if resp.timed_out else "NETWORK_EXCEPTION"
            if not resp.disconnected:
                error = "CORRUPT_MESSAGE" if resp.error is not None else "NETWORK_EXCEPTION"
            self.metadata.request_update()
            for b in batches:
                self._retry_or_fail(b, error, str(resp.error or ""), now_ns, retriable=True)
            return
        self.metrics.responses_received += resp.request.expects_response
        if resp.body is None:  # acks=0: done once written
            for b in batches:
                self._ack(b, -1, -1, now_ns)
            return
        body = resp.body
        self.metrics.request_latency_ns_total += now_ns - resp.request.enqueued_ns
        if body.throttle_time_ms:
            self._throttle(resp.node, body.throttle_time_ms, now_ns)
        by_tp = {b.tp: b for b in batches}
        by_id = {self.metadata.topic_ids.get(b.tp.topic): b.tp.topic for b in batches}
        for t in body.responses:
            topic = t.name or by_id.get(t.topic_id, t.name)
            for p in t.partition_responses:
                b = by_tp.pop(TopicPartition(topic, p.index), None)
                if b is None:
                    continue
                self._on_partition(b, p, now_ns)
        for b in by_tp.values():  # the broker left a partition out of its answer
            self._retry_or_fail(b, "NETWORK_EXCEPTION", "partition missing from the Produce response",
                                now_ns, retriable=True)

    def _on_partition(self, b: ProducerBatch, p, now_ns: int) -> None:
        if b.is_done:
            return  # expired while in flight; already resolved
        code = p.error_code
        if code == 0:
            self._ack(b, p.base_offset, p.log_append_time_ms, now_ns)
            return
        err = error_for(code)
        name = err.name
        message = p.error_message or ""
        leader = getattr(p, "current_leader", None)
        if leader is not None and leader.leader_id >= 0:
            self.metadata.update_leader(b.tp, leader.leader_id, leader.leader_epoch)
        if self.idempotence is not None:
            action = self.idempotence.on_error(b, name, p.log_start_offset)
            if action is ErrorAction.SUCCEED:
                self._ack(b, p.base_offset, p.log_append_time_ms, now_ns)
                return
            if action is ErrorAction.RETRY:
                self._retry_or_fail(b, name, message, now_ns, retriable=True)
                return
            if action is ErrorAction.RETRY_AFTER_BUMP:
                self.idempotence.request_bump()
                self.metrics.epoch_bumps += 1
                self._retry_or_fail(b, name, message, now_ns, retriable=True)
                return
            if action is ErrorAction.FAIL_AND_BUMP:
                self.metrics.epoch_bumps += 1
                self._fail(b, name, message, now_ns)   # on_failed asks for the bump
                return
            if action is ErrorAction.FAIL:
                self._fail(b, name, message, now_ns)
                return
        if name == "MESSAGE_TOO_LARGE" and b.record_count > 1:
            self._split(b, now_ns)
            return
        if name in METADATA_ERRORS:
            self.metadata.request_update()
        self._retry_or_fail(b, name, message, now_ns, retriable=err.retriable)

    def _split(self, b: ProducerBatch, now_ns: int) -> None:
        parts = b.split(2, now_ns)
        self.metrics.splits += 1
        self._in_flight.discard(b)
        if self.idempotence is not None and b.base_sequence >= 0:
            self.idempotence.replace_split(b, parts)
        b.transition(BatchState.SPLIT)  # its records and handles live on in its parts
        self.accumulator.deallocate(b)
        self.accumulator.requeue_split(parts)
        if self.guarantee_order:
            self.accumulator.unmute(b.tp)

    def _retry_or_fail(self, b: ProducerBatch, error: str, message: str, now_ns: int, *,
                       retriable: bool) -> None:
        if b.is_done:
            return
        self.metrics.errors_by_name[error] += 1
        within_time = now_ns < b.created_ns + self.delivery_timeout_ns
        if retriable and within_time and b.attempts <= self.config.retries:
            self._in_flight.discard(b)
            b.transition(BatchState.RETRY)
            self.accumulator.reenqueue(b, now_ns)
            if self.guarantee_order:
                self.accumulator.unmute(b.tp)
            return
        if not within_time:
            message = (f"{error} and delivery.timeout.ms ({self.config.delivery_timeout_ms} ms) "
                       f"passed: {message}").rstrip(": ")
        self._fail(b, error, message, now_ns)

    # -- resolution ------------------------------------------------------------------------
    def _ack(self, b: ProducerBatch, base_offset: int, log_append_time_ms: int, now_ns: int) -> None:
        self._in_flight.discard(b)
        if self.idempotence is not None:
            self.idempotence.on_acked(b, base_offset + b.record_count - 1 if base_offset >= 0 else -1)
        b.complete(BatchState.ACKED, BatchResult(base_offset, log_append_time_ms))
        self.metrics.records_acked += b.record_count
        self.metrics.value_bytes_acked += b.value_bytes
        self.metrics.batches_acked += 1
        self.metrics.records_by_partition[b.tp] += b.record_count
        self.metrics.records_by_node[b.node_id] += b.record_count
        self._done(b)

    def _fail(self, b: ProducerBatch, error: str, message: str, now_ns: int,
              state: BatchState = BatchState.FAILED) -> None:
        if b.is_done:
            return
        self._in_flight.discard(b)
        if self.idempotence is not None:
            self.idempotence.on_failed(b)
        b.complete(state, BatchResult(-1, -1, error, message))
        self.metrics.records_failed += b.record_count
        self.metrics.failed_by_error[error] += b.record_count
        self._done(b)

    def _done(self, b: ProducerBatch) -> None:
        if self.guarantee_order:
            self.accumulator.unmute(b.tp)
        self.accumulator.deallocate(b)
        if self.on_batch_done is not None:
            self.on_batch_done(b)

    def _expire(self, now_ns: int) -> None:
        timeout_ms = self.config.delivery_timeout_ms
        for b in self.accumulator.expired_batches(now_ns):
            self.metrics.errors_by_name["DELIVERY_TIMEOUT"] += 1
            self._fail(b, "DELIVERY_TIMEOUT",
                       f"{b.record_count} record(s) for {b.tp} expired: {timeout_ms} ms "
                       "(delivery.timeout.ms) passed since the batch was created",
                       now_ns, BatchState.EXPIRED)
        if self._in_flight:
            limit = now_ns - self.delivery_timeout_ns
            for b in [b for b in self._in_flight if b.created_ns <= limit]:
                self.metrics.errors_by_name["DELIVERY_TIMEOUT"] += 1
                self._fail(b, "DELIVERY_TIMEOUT",
                           f"{b.record_count} record(s) for {b.tp} expired in flight: {timeout_ms} ms "
                           "(delivery.timeout.ms) passed since the batch was created",
                           now_ns, BatchState.EXPIRED)

    def _fail_topic(self, topic: str, error: str, now_ns: int) -> None:
        for b in self.accumulator.remove_topic(topic):
            self.metrics.errors_by_name[error] += 1
            self._fail(b, error, f"topic {topic!r}: {error}", now_ns)

    def _fail_everything(self, error: str, now_ns: int) -> None:
        for b in self.accumulator.remove_all():
            self.metrics.errors_by_name[error] += 1
            self._fail(b, error, f"producer cannot continue: {error}", now_ns)

    def fail_in_flight(self, error: str, message: str, now_ns: int) -> None:
        """Resolves every in-flight batch as failed (closing without waiting)."""
        for b in list(self._in_flight):
            self._fail(b, error, message, now_ns)

    def _throttle(self, node: int, throttle_ms: int, now_ns: int) -> None:
        self.network.throttle(node, throttle_ms, now_ns)
        self.metrics.throttle_time_ms += throttle_ms
        self.metrics.throttled_requests += 1

    @property
    def in_flight_batches(self) -> int:
        return len(self._in_flight)
