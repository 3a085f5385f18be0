"""Sender: one step of the producer's I/O loop (the Java client's Sender.runOnce).

How this works
--------------
``run_once(now_ns)`` makes every decision for one turn of the loop and sends
what it decided, without waiting; it returns the monotonic time at which it
next needs to run. The caller then waits on the sockets
(``NetworkClient.poll``) at most until then; responses arrive through request
callbacks (``_on_produce``, ``_on_metadata_update``, ``_on_init_producer_id``,
``_on_txn_response``). In one turn:

1. Refresh metadata when due (metadata_updater.py: the least-loaded node that speaks
   Metadata; a topic's error in the answer fails its batches).
2. With idempotence: resolve sequences left unknown by expired batches
   (idempotence.py); after a fatal producer error, fail everything and stop.
3. Transactional: if a request to the transaction coordinator is in flight, or
   one can be sent now (transactions.py's queue: FindCoordinator, InitProducerId,
   AddPartitionsToTxn, EndTxn), send it and produce nothing this turn (as Java's
   Sender). Batches queued while the transaction is aborting fail.
   Idempotent: without a producer id (or with an epoch bump pending, once no
   Produce request is in flight) send InitProducerId and produce nothing.
4. Ask the accumulator which leaders have sendable batches; drop those the
   network cannot send to now (connecting, backing off, throttled, at
   max.in.flight.requests.per.connection) and remember when they will be.
   Each ready node's "could drain or not" goes back to the accumulator
   (``partitioner.availability.timeout.ms``), and the topics' queue sizes to
   the partitioner (``on_partition_load``, adaptive partitioning, KIP-794).
5. Drain up to max.request.size per node, build one ProduceRequest per node
   (``protocol/requests.produce``, at the version negotiated with it) and send it.
6. Fail batches whose delivery.timeout.ms passed, queued or in flight.

Responses, per partition (Java's ``completeBatch``): every error code is counted
in ``errors_by_name``; MESSAGE_TOO_LARGE splits a batch of several records (the
parts keep its sequence range); a batch is retried when delivery.timeout.ms and
``retries`` allow and the error is retriable (with idempotence, idempotence.py's
sequence rules decide, and may bump the epoch); DUPLICATE_SEQUENCE_NUMBER is
success; anything else fails the batch with the error's name. Leadership errors
refresh metadata. A broken connection or a request timeout counts as
NETWORK_EXCEPTION / REQUEST_TIMED_OUT for each batch it carried. Every batch
resolves exactly once: a late answer for a batch that already expired only
updates the sequence bookkeeping. throttle_time_ms mutes the broker for that long
(KIP-219) and is counted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kctl.config import SenderConfig
from kctl.engine.accumulator import PartitionLoad, RecordAccumulator
from kctl.engine.batch import BatchResult, BatchState, ProducerBatch, TopicPartition
from kctl.engine.clock import NS_PER_MS
from kctl.engine.idempotence import Idempotence
from kctl.engine.metadata import Metadata, MetadataUpdate, NodeAddress
from kctl.engine.metadata_updater import MetadataUpdater
from kctl.engine.metrics import ProducerMetrics
from kctl.engine.network import ClientRequest, ClientResponse, NetworkClient
from kctl.engine.transactions import (
    AUTHORIZATION_ERRORS,
    TransactionState,
    Transactions,
    TxnRequest,
    TxnRequestKind,
)
from kctl.protocol import requests, schema
from kctl.protocol.error_codes import ERRORS_BY_NAME, error_for

PRODUCE = schema.API_BY_NAME["Produce"].api_key
INIT_PRODUCER_ID = schema.API_BY_NAME["InitProducerId"].api_key

#: Errors after which the client's view of leaders is stale (Java's InvalidMetadataException family).
METADATA_ERRORS = frozenset({
    "NOT_LEADER_OR_FOLLOWER", "UNKNOWN_TOPIC_OR_PARTITION", "LEADER_NOT_AVAILABLE",
    "KAFKA_STORAGE_ERROR", "UNKNOWN_TOPIC_ID", "FENCED_LEADER_EPOCH", "UNKNOWN_LEADER_EPOCH",
    "NOT_CONTROLLER", "NETWORK_EXCEPTION", "INCONSISTENT_TOPIC_ID",
})

#: Wall-clock milliseconds, for record timestamps (injected; tests fix it).
WallClock = Callable[[], int]

_IDLE_NS = 1_000 * NS_PER_MS


class Sender:
    def __init__(self, config: SenderConfig, accumulator: RecordAccumulator, metadata: Metadata,
                 network: NetworkClient, *, idempotence: Idempotence | None,
                 metrics: ProducerMetrics, wall_ms: WallClock,
                 on_batch_done: Callable[[ProducerBatch], None] | None = None,
                 batch_size: int = 16384,
                 on_partition_load: Callable[[Sequence[PartitionLoad]], None] | None = None,
                 transactions: Transactions | None = None,
                 transaction_timeout_ms: int = 60000) -> None:
        self.config = config
        self.accumulator = accumulator
        self.metadata = metadata
        self.network = network
        self.idempotence = idempotence
        self.transactions = transactions
        self.transaction_timeout_ms = transaction_timeout_ms
        self.metrics = metrics
        self.wall_ms = wall_ms
        self.on_batch_done = on_batch_done
        self.batch_size = batch_size
        self.on_partition_load = on_partition_load
        self.delivery_timeout_ns = config.delivery_timeout_ms * NS_PER_MS
        self.guarantee_order = config.max_in_flight_requests_per_connection == 1
        self._in_flight: set[ProducerBatch] = set()
        self._produce_requests_in_flight = 0   # Produce requests on the wire (expired batches' too)
        self.metadata_updater = MetadataUpdater(metadata, network, self._on_metadata_update)
        self._init_in_flight = False
        self._init_not_before_ns = 0      # InitProducerId refused for authorization: not before
        self.fatal_error: str | None = None

    # -- one turn ------------------------------------------------------------------------
    def run_once(self, now_ns: int) -> int:
        wake = now_ns + _IDLE_NS
        auth_error = self.network.authentication_error()
        if auth_error is not None:
            # TLS or SASL refused: retrying with the same settings cannot help (Java fails
            # the pending sends with the AuthenticationException).
            self._set_fatal(str(auth_error))
        if self.fatal_error is not None:
            self._fail_everything(self.fatal_error, now_ns)
            return wake
        wake = min(wake, self.metadata_updater.maybe_update(now_ns))
        idem = self.idempotence
        if idem is not None:
            idem.maybe_resolve_sequences()
            if idem.fatal_error is not None:
                self._set_fatal(idem.fatal_error)
                self._fail_everything(idem.fatal_error, now_ns)
                return wake
            if self.transactions is not None:
                hold, txn_wake = self._maybe_send_transactional_request(now_ns)
                wake = min(wake, txn_wake)
                if hold:
                    self._expire(now_ns)
                    return max(now_ns, wake)
            elif not idem.has_producer_id():
                self._expire(now_ns)
                return max(now_ns, min(wake, self._maybe_init_producer_id(now_ns)))
        return max(now_ns, min(wake, self._send_producer_data(now_ns)))

    def _send_producer_data(self, now_ns: int) -> int:
        wake = now_ns + _IDLE_NS
        check = self.accumulator.ready(self.metadata, now_ns)
        if self.on_partition_load is not None:
            self.on_partition_load(check.partition_load)
        if check.unknown_leader_topics:
            self.metadata.add_topics(check.unknown_leader_topics, now_ns)   # Java: metadata.add(topic, now)
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
            drained = self.accumulator.drain(self.metadata, nodes, self.config.max_request_size,
                                             now_ns)
            for node, batches in drained.items():
                self._send_produce(node, batches, now_ns)
        self._expire(now_ns)
        wake = min(wake, check.next_ready_check_ns)
        if self._in_flight:
            oldest = min(b.created_ns for b in self._in_flight)
            wake = min(wake, oldest + self.delivery_timeout_ns)
        return wake

    # -- metadata and producer id ------------------------------------------------------------
    def _on_metadata_update(self, update: MetadataUpdate, now_ns: int) -> None:
        for topic, error in update.topic_errors.items():
            self._fail_topic(topic, error, now_ns)

    def _maybe_init_producer_id(self, now_ns: int) -> int:
        """An idempotent producer's InitProducerId: a first id, or an epoch bump once
        no Produce request is in flight (idempotence.py)."""
        idem = self.idempotence
        assert idem is not None
        if self._init_in_flight or not idem.needs_producer_id():
            return now_ns + _IDLE_NS
        if now_ns < self._init_not_before_ns:
            return self._init_not_before_ns
        if idem.bump_pending and self._produce_requests_in_flight:
            return now_ns + _IDLE_NS   # an answer wakes the loop
        # A node that offers InitProducerId; if no node known does, one that will say so.
        node = self.network.least_loaded_node(now_ns, api_key=INIT_PRODUCER_ID, any_node_if_none=True)
        if node is None or not self.network.ready(node, now_ns):
            return now_ns + max(NS_PER_MS, self.network.connection_delay_ns(node, now_ns)
                                if node is not None else 50 * NS_PER_MS)
        version = self.network.api_version(node, INIT_PRODUCER_ID)
        if version is None:
            idem.begin_init()
            idem.init_failed("UNSUPPORTED_VERSION", retriable=False)
            return now_ns
        producer_id, epoch = idem.begin_init()
        req = requests.init_producer_id(version, transactional_id=None,
                                        transaction_timeout_ms=self.transaction_timeout_ms,
                                        producer_id=producer_id, producer_epoch=epoch)
        self._init_in_flight = True
        self.network.send(ClientRequest(node, INIT_PRODUCER_ID, req, api_version=version,
                                        callback=self._on_init_producer_id), now_ns)
        return now_ns + _IDLE_NS

    def _on_init_producer_id(self, resp: ClientResponse) -> None:
        idem = self.idempotence
        assert idem is not None
        self._init_in_flight = False
        if resp.body is None or resp.error is not None:
            idem.init_failed(None, retriable=True)
            return
        body = resp.body
        if body.throttle_time_ms:
            self._throttle(resp.node, body.throttle_time_ms, resp.received_ns)
        if body.error_code:
            err = error_for(body.error_code)
            if err.name in AUTHORIZATION_ERRORS:
                # Java (trunk): abortable, then Sender.shouldHandleAuthorizationError fails
                # every batch held with it and the producer asks for an id again (here
                # after retry.backoff.ms, not at once).
                now = resp.received_ns
                idem.init_failed(None, retriable=True)
                self.metrics.errors_by_name[err.name] += 1
                self._abort_held(err.name, f"InitProducerId refused: {err.name}", now)
                self._init_not_before_ns = now + self.config.retry_backoff_ms * NS_PER_MS
                return
            idem.init_failed(err.name, retriable=err.retriable)
            return
        idem.on_producer_id(body.producer_id, body.producer_epoch)

    # -- the transaction coordinator ------------------------------------------------------------
    def _maybe_send_transactional_request(self, now_ns: int) -> tuple[bool, int]:
        """Java's maybeSendAndPollTransactionalRequest: (hold, wake): ``hold`` when a
        coordinator request is in flight or was just sent, or the producer has no id
        yet (no Produce this turn); ``wake``: when to run again for the coordinator."""
        txn = self.transactions
        assert txn is not None
        idle = now_ns + _IDLE_NS
        if txn.has_in_flight_request:
            return True, idle
        if txn.has_abortable_error:
            error = txn.last_error or ""
            if txn.on_authorization_error():
                # Java's shouldHandleAuthorizationError: InitProducerId was refused for
                # authorization; what the producer holds fails, and it is UNINITIALIZED.
                self._abort_held(error, f"InitProducerId refused: {error}", now_ns)
                return True, idle
        if txn.has_abortable_error or txn.is_aborting:
            # Batches that never got a sequence fail; those that did must resolve
            # before EndTxn (Java's abortUndrainedBatches).
            error = txn.last_error or "TRANSACTION_ABORTED"
            for b in self.accumulator.remove_if(lambda b: b.base_sequence < 0):
                self._fail(b, _error_name(error), f"the transaction is aborting: {error}", now_ns,
                           count_error=True)
        req = txn.next_request(self.accumulator.incomplete_count > 0, now_ns)
        no_id = txn.state in (TransactionState.UNINITIALIZED, TransactionState.INITIALIZING)
        if req is None:
            nxt = txn.next_wake_ns(now_ns)
            return no_id, min(idle, nxt) if nxt is not None else idle
        if req.needs_coordinator:
            node = txn.coordinator
            if node is None:
                # Java's maybeFindCoordinatorAndRetry: the request goes back as a retry, so
                # it waits retry.backoff.ms once the coordinator is known (Java's Sender
                # sleeps retryBackoffMs before sending a request that isRetry()).
                txn.lookup_coordinator()
                txn.retry(req, now_ns)
                return True, now_ns
        else:
            node = self.network.least_loaded_node(now_ns, api_key=req.api_key, any_node_if_none=True)
            if node is None:
                self.metadata.request_update()
                txn.retry(req, now_ns)
                return True, now_ns + self.config.retry_backoff_ms * NS_PER_MS
        if not self.network.ready(node, now_ns):
            txn.requeue(req)
            return True, now_ns + max(NS_PER_MS, self.network.connection_delay_ns(node, now_ns))
        if req.needs_coordinator:
            txn.coordinator_ready(self.network.api_version(node, INIT_PRODUCER_ID))
        version = self.network.api_version(node, req.api_key)
        if version is None:
            name = schema.API_BY_KEY[req.api_key].name
            txn.on_unsupported(req, f"broker {node} does not offer {name} at a version kctl speaks")
            return True, now_ns
        body = txn.build(req, version)
        self.network.send(ClientRequest(node, req.api_key, body, api_version=version,
                                        callback=self._on_txn_response, user=req), now_ns)
        txn.on_sent(req, now_ns)
        return True, idle

    def _on_txn_response(self, resp: ClientResponse) -> None:
        txn = self.transactions
        assert txn is not None
        req: TxnRequest = resp.request.user
        now = resp.received_ns
        if resp.version_mismatch:
            txn.on_unsupported(req, str(resp.error))
            return
        if resp.body is None or resp.error is not None:
            txn.on_disconnect(req, now)
            return
        body = resp.body
        throttle = getattr(body, "throttle_time_ms", 0)
        if throttle:
            self._throttle(resp.node, throttle, now)
        txn.on_response(req, body, now)
        if req.kind is TxnRequestKind.FIND_COORDINATOR and txn.coordinator is not None \
                and txn.coordinator not in self.metadata.nodes:
            host, port = txn.coordinator_address
            self.metadata.add_node(NodeAddress(txn.coordinator, host, port))
            self.metadata_updater.set_network_nodes()

    # -- produce -----------------------------------------------------------------------------
    def _send_produce(self, node: int, batches: Sequence[ProducerBatch], now_ns: int) -> None:
        wall = self.wall_ms()
        metrics = self.metrics
        compressed = self.accumulator.compression
        by_topic: dict[str, list] = {}
        for b in batches:
            by_topic.setdefault(b.tp.topic, []).append((b.tp.partition, b.encode(wall)))
            if compressed:
                # Java's compression-rate-avg: every batch of every request.
                metrics.compression_rate_total += b.compression_rate
                metrics.compression_rate_batches += 1
            if b.state is BatchState.RETRY:
                metrics.retries += 1
            else:
                self.accumulator.batch_encoded(b)
                metrics.records_sent += b.record_count
                metrics.queue_time_ns_total += now_ns - b.created_ns
                metrics.batch_fill_total += min(1.0, b.estimated_bytes / max(self.batch_size, 1))
            b.transition(BatchState.IN_FLIGHT)
            b.attempts += 1
            b.node_id = node
            b.sent_ns = -1
            metrics.batches_sent += 1
            metrics.bytes_sent += b.encoded_size
            self._in_flight.add(b)
            if self.guarantee_order:
                self.accumulator.mute(b.tp)
        topic_ids = self.metadata.topic_ids
        acks = self.config.acks
        out = requests.produce(
            self.network.api_version(node, PRODUCE) or 0, acks=acks,
            timeout_ms=self.config.request_timeout_ms,
            transactional_id=self.transactions.transactional_id if self.transactions else None,
            topics=[requests.ProduceTopic(t, topic_ids.get(t), parts) for t, parts in by_topic.items()])
        metrics.requests_sent += 1
        if acks != 0:
            self._produce_requests_in_flight += 1
        self.network.send(ClientRequest(node, PRODUCE, out.body, api_version=out.version,
                                        expects_response=acks != 0,
                                        callback=self._on_produce, user=list(batches),
                                        created_ns=now_ns), now_ns)

    def _on_produce(self, resp: ClientResponse) -> None:
        batches: list[ProducerBatch] = resp.request.user
        now_ns = resp.received_ns
        sent_ns = resp.request.sent_ns
        if resp.request.expects_response:
            self._produce_requests_in_flight -= 1
        for b in batches:
            b.sent_ns = sent_ns
        if resp.error is not None or (resp.body is None and resp.request.expects_response):
            if resp.version_mismatch:
                for b in batches:
                    self._complete(b, "UNSUPPORTED_VERSION", str(resp.error), -1, -1, -1, now_ns)
                return
            error = "REQUEST_TIMED_OUT" if resp.timed_out else "NETWORK_EXCEPTION"
            if not resp.disconnected:
                error = "CORRUPT_MESSAGE" if resp.error is not None else "NETWORK_EXCEPTION"
            self.metadata.request_update()
            for b in batches:
                self._complete(b, error, str(resp.error or ""), -1, -1, -1, now_ns)
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
                leader = getattr(p, "current_leader", None)
                if p.error_code and leader is not None and leader.leader_id >= 0:
                    self.metadata.update_leader(b.tp, leader.leader_id, leader.leader_epoch)
                name = error_for(p.error_code).name if p.error_code else None
                self._complete(b, name, p.error_message or "", p.base_offset, p.log_append_time_ms,
                               p.log_start_offset, now_ns)
        for b in by_tp.values():  # the broker left a partition out of its answer
            self._complete(b, "NETWORK_EXCEPTION", "partition missing from the Produce response",
                           -1, -1, -1, now_ns)

    def _complete(self, b: ProducerBatch, error: str | None, message: str, base_offset: int,
                  log_append_time_ms: int, log_start_offset: int, now_ns: int) -> None:
        """One batch's outcome in a Produce response (Java's Sender.completeBatch)."""
        idem = self.idempotence
        if error is not None:
            self.metrics.errors_by_name[error] += 1
        if b.is_done:
            # Expired while in flight and already resolved; a success still tells the
            # sequence bookkeeping that the broker has it (Java's handleCompletedBatch).
            if error is None and idem is not None:
                idem.on_acked(b, base_offset)
            return
        if error is None:
            self._ack(b, base_offset, log_append_time_ms, now_ns)
            return
        if error == "MESSAGE_TOO_LARGE" and b.record_count > 1:
            self._split(b, now_ns)
            return
        info = ERRORS_BY_NAME.get(error)
        retriable = info is not None and info.retriable
        within = now_ns < b.created_ns + self.delivery_timeout_ns and b.attempts <= self.config.retries
        if within and (idem.can_retry(b, error, log_start_offset, retriable) if idem is not None
                       else retriable):
            self._reenqueue(b, now_ns)
        elif error == "DUPLICATE_SEQUENCE_NUMBER":
            # The broker has it already (an earlier attempt was written) but no longer
            # knows its offset: success without one.
            self._ack(b, -1, -1, now_ns)
        else:
            if not within and retriable:
                message = (f"{error} and delivery.timeout.ms ({self.config.delivery_timeout_ms} ms) "
                           f"or retries ({self.config.retries}) ran out: {message}").rstrip(": ")
            self._fail(b, error, message, now_ns, adjust_sequences=b.attempts <= self.config.retries)
        if error in METADATA_ERRORS:
            self.metadata.request_update()

    def _reenqueue(self, b: ProducerBatch, now_ns: int) -> None:
        self._in_flight.discard(b)
        b.transition(BatchState.RETRY)
        self.accumulator.reenqueue(b, now_ns)
        if self.guarantee_order:
            self.accumulator.unmute(b.tp)

    def _split(self, b: ProducerBatch, now_ns: int) -> None:
        self.accumulator.batch_too_large(b)
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

    # -- resolution ------------------------------------------------------------------------
    def _ack(self, b: ProducerBatch, base_offset: int, log_append_time_ms: int, now_ns: int) -> None:
        self._in_flight.discard(b)
        if self.idempotence is not None:
            self.idempotence.on_acked(b, base_offset)
        b.complete(BatchState.ACKED, BatchResult(base_offset, log_append_time_ms))
        if self.transactions is not None:
            # Counted acked when its transaction commits, failed if it never does.
            self.transactions.on_batch_acked(b.tp, b.node_id, b.record_count, b.value_bytes)
        else:
            m = self.metrics
            m.records_acked += b.record_count
            m.value_bytes_acked += b.value_bytes
            m.batches_acked += 1
            m.records_by_partition[b.tp] += b.record_count
            m.records_by_node[b.node_id] += b.record_count
        self._done(b)

    def _fail(self, b: ProducerBatch, error: str, message: str, now_ns: int,
              state: BatchState = BatchState.FAILED, *, adjust_sequences: bool = False,
              count_error: bool = False, aborted: bool = False) -> None:
        """Fails a batch with ``error`` (counted in failed_by_error per record; in
        errors_by_name too with ``count_error``, for a failure no response carried).
        ``aborted``: the producer gives it up (Java's abortBatches), its failure is no
        verdict on the producer's state."""
        if b.is_done:
            return
        self._in_flight.discard(b)
        if count_error:
            self.metrics.errors_by_name[error] += 1
        if self.idempotence is not None and not aborted:
            self.idempotence.on_failed(b, error, adjust_sequences=adjust_sequences)
        b.complete(state, BatchResult(-1, -1, error, message))
        self.metrics.records_failed += b.record_count
        self.metrics.failed_by_error[error] += b.record_count
        self._done(b)

    def _abort_held(self, error: str, message: str, now_ns: int) -> None:
        """Java's maybeAbortBatches after an authorization refusal of InitProducerId:
        every batch not yet sent fails with ``error`` (none can be in flight: there was
        no producer id, or a bump waits for the requests in flight)."""
        for b in self.accumulator.remove_all():
            self._fail(b, error, message, now_ns, aborted=True)

    def abandon(self, b: ProducerBatch, reason: str) -> None:
        """Gives up on a batch without a verdict (the run stopped before it resolved):
        its records are counted as abandoned with ``reason``, not as failed."""
        if b.is_done:
            return
        self._in_flight.discard(b)
        b.complete(BatchState.FAILED, BatchResult(-1, -1, "ABANDONED", reason))
        self.metrics.records_abandoned += b.record_count
        self.metrics.abandoned_by_reason[reason] += b.record_count
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
            self._fail(b, "DELIVERY_TIMEOUT",
                       f"{b.record_count} record(s) for {b.tp} expired: {timeout_ms} ms "
                       "(delivery.timeout.ms) passed since the batch was created",
                       now_ns, BatchState.EXPIRED, count_error=True)
            if b.attempts and self.idempotence is not None:
                self.idempotence.mark_unresolved(b)
        if self._in_flight:
            limit = now_ns - self.delivery_timeout_ns
            for b in [b for b in self._in_flight if b.created_ns <= limit]:
                self._fail(b, "DELIVERY_TIMEOUT",
                           f"{b.record_count} record(s) for {b.tp} expired in flight: {timeout_ms} ms "
                           "(delivery.timeout.ms) passed since the batch was created",
                           now_ns, BatchState.EXPIRED, count_error=True)
                if self.idempotence is not None:
                    # Sent, not answered: whether the broker has it is unknown (Java marks
                    # the partition's sequences unresolved).
                    self.idempotence.mark_unresolved(b)

    def _fail_topic(self, topic: str, error: str, now_ns: int) -> None:
        for b in self.accumulator.remove_topic(topic):
            self._fail(b, error, f"topic {topic!r}: {error}", now_ns, count_error=True)

    def _set_fatal(self, error: str) -> None:
        if self.fatal_error is None:
            txn = self.transactions
            self.fatal_error = error if txn is None else txn.explain(error)
            if txn is not None and not txn.has_fatal_error:
                txn.fatal(error)

    def _fail_everything(self, error: str, now_ns: int) -> None:
        """A fatal producer error: every batch fails, queued or in flight (Java's
        abortBatches)."""
        for b in self.accumulator.remove_all():
            self._fail(b, _error_name(error), f"producer cannot continue: {error}", now_ns,
                       count_error=True)
        self.fail_in_flight(_error_name(error), f"producer cannot continue: {error}", now_ns)

    def fail_in_flight(self, error: str, message: str, now_ns: int) -> None:
        """Resolves every in-flight batch as failed (closing without waiting)."""
        for b in list(self._in_flight):
            self._fail(b, error, message, now_ns, count_error=True)

    def abandon_everything(self, reason: str) -> None:
        """Every batch, queued or in flight, is abandoned with ``reason``."""
        for b in self.accumulator.remove_all():
            self.abandon(b, reason)
        for b in list(self._in_flight):
            self.abandon(b, reason)

    def _throttle(self, node: int, throttle_ms: int, now_ns: int) -> None:
        self.network.throttle(node, throttle_ms, now_ns)
        self.metrics.throttle_time_ms += throttle_ms
        self.metrics.throttled_requests += 1

    @property
    def in_flight_batches(self) -> int:
        return len(self._in_flight)


def _error_name(error: str) -> str:
    """The Kafka error name at the head of a message such as ``"PRODUCER_FENCED: ..."``."""
    head = error.split(":", 1)[0].strip()
    return head if head and head.replace("_", "").isalnum() and head.isupper() else error
