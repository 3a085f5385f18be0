"""A producer over the fake network with a fake clock, stepped one loop turn at a time
(Java's SenderTest with MockClient and MockTime): the tests answer each request by hand."""

from __future__ import annotations

import uuid

from kctl.config import ProducerConfig
from kctl.engine.clock import FakeClock
from kctl.engine.producer import Producer
from kctl.protocol import messages
from kctl.protocol.error_codes import ERRORS_BY_NAME
from kctl.protocol.records import decode_batches

from .fake_network import FakeNetwork

MetadataResponse = messages.message_class("MetadataResponse")
ProduceResponse = messages.message_class("ProduceResponse")
InitProducerIdResponse = messages.message_class("InitProducerIdResponse")
FindCoordinatorResponse = messages.message_class("FindCoordinatorResponse")
AddPartitionsToTxnResponse = messages.message_class("AddPartitionsToTxnResponse")
EndTxnResponse = messages.message_class("EndTxnResponse")

TOPIC_ID = uuid.UUID(int=0xC0FFEE)
_CURRENT: list[FakeNetwork] = []


def code(name: str | None) -> int:
    return 0 if name is None else ERRORS_BY_NAME[name].code


def metadata_body(topic="t", partitions=2, leaders=None, nodes=(0,), topic_id=TOPIC_ID):
    leaders = leaders or {p: nodes[p % len(nodes)] for p in range(partitions)}
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=[MetadataResponse.MetadataResponseBroker(node_id=n, host="127.0.0.1", port=9000 + n)
                 for n in nodes],
        cluster_id="c", controller_id=nodes[0],
        topics=[MetadataResponse.MetadataResponseTopic(
            error_code=0, name=topic, topic_id=topic_id, is_internal=False,
            partitions=[MetadataResponse.MetadataResponsePartition(
                error_code=0, partition_index=p, leader_id=leaders[p], leader_epoch=1,
                replica_nodes=[leaders[p]], isr_nodes=[leaders[p]], offline_replicas=[])
                for p in range(partitions)])])


def produce_body(request, errors=None, base_offset=0, throttle_ms=0, log_start_offset=0,
                 offsets=None):
    """Answers every partition of ``request``; ``errors`` maps partition -> error name,
    ``offsets`` partition -> base offset (default ``base_offset``)."""
    errors = errors or {}
    offsets = offsets or {}
    topics = []
    for t in request.body.topic_data:
        parts = [ProduceResponse.PartitionProduceResponse(
            index=p.index, error_code=code(errors.get(p.index)),
            base_offset=-1 if p.index in errors else offsets.get(p.index, base_offset),
            log_append_time_ms=-1, log_start_offset=log_start_offset, record_errors=[],
            error_message=None)
            for p in t.partition_data]
        topics.append(ProduceResponse.TopicProduceResponse(name=t.name, topic_id=t.topic_id,
                                                           partition_responses=parts))
    return ProduceResponse(responses=topics, throttle_time_ms=throttle_ms)


def sent_batches(request, net: FakeNetwork | None = None):
    """The batches a Produce request carried, per partition, as the wire had them."""
    body = (net or _CURRENT[-1]).wire_bodies[request.correlation_id]
    return {p.index: decode_batches(p.records).batches[0]
            for t in body.topic_data for p in t.partition_data}


class Harness:
    def __init__(self, nodes=(0,), partitions=2, leaders=None, **props):
        self.clock = FakeClock(now_ns=10**12)
        settings = {"bootstrap.servers": "127.0.0.1:9000", "linger.ms": "5", **props}
        self.config = ProducerConfig.from_properties(settings)
        self.net = FakeNetwork(self.clock, nodes,
                               max_in_flight=self.config.max_in_flight_requests_per_connection)
        _CURRENT.append(self.net)
        self.done = []
        # The retry backoff's jitter pinned at a factor of 1: retry.backoff.ms exactly.
        self.producer = Producer(self.config, clock=self.clock, network=self.net,
                                 on_batch_done=self.done.append, random=lambda: 0.5)
        self.meta = metadata_body(partitions=partitions, leaders=leaders, nodes=nodes)

    # -- time and turns ----------------------------------------------------------------
    def step(self, ms=0):
        """Time passes (and the answers queued meanwhile arrive), then one loop turn."""
        self.clock.advance(ms=ms)
        self.net.poll(0, self.clock.now_ns())
        self.producer.poll(0)   # one loop turn (the fake clock stands still)

    def await_request(self, api_name, turns=50, ms=1):
        """Loop turns (``ms`` apart) until exactly one ``api_name`` request is pending."""
        for _ in range(turns):
            pending = self.net.pending(api_name)
            if pending:
                (r,) = pending
                return r
            self.step(ms=ms)
        raise AssertionError(f"no {api_name} request after {turns} turns")

    # -- answers ---------------------------------------------------------------------------
    def answer_metadata(self):
        for r in self.net.pending("Metadata"):
            self.net.respond(r, self.meta)
        self.step()

    def answer_init(self, producer_id=42, epoch=0, error=None):
        r = self.await_request("InitProducerId")
        self.net.respond(r, InitProducerIdResponse(throttle_time_ms=0, error_code=code(error),
                                                   producer_id=producer_id if error is None else -1,
                                                   producer_epoch=epoch if error is None else -1))
        self.step()
        return r

    def start(self):
        """Runs until metadata is known (and a producer id, for an idempotent producer)."""
        self.step()
        self.answer_metadata()
        if self.producer.idempotence is not None and self.producer.transactions is None:
            self.answer_init()

    def send(self, n, partition=0, value=b"v"):
        return [self.producer.send("t", value + str(i).encode(), partition=partition)
                for i in range(n)]

    def produce_requests(self):
        return self.net.requests("Produce")

    def respond(self, request, **kw):
        self.net.respond(request, produce_body(request, **kw))

    def batch(self, request, partition=0):
        return sent_batches(request, self.net)[partition]

    # -- the transaction coordinator ----------------------------------------------------------
    def answer_find_coordinator(self, node=0, error=None):
        r = self.await_request("FindCoordinator")
        c = FindCoordinatorResponse.Coordinator(key="txn", node_id=node, host="127.0.0.1",
                                                port=9000 + node, error_code=code(error),
                                                error_message=None)
        if r.api_version >= 4:   # v4+: one entry per key asked for
            body = FindCoordinatorResponse(throttle_time_ms=0, coordinators=[c])
        else:
            body = FindCoordinatorResponse(throttle_time_ms=0, error_code=code(error), node_id=node,
                                           host="127.0.0.1", port=9000 + node)
        self.net.respond(r, body)
        self.step()
        return r

    def answer_add_partitions(self, error=None, errors=None):
        r = self.await_request("AddPartitionsToTxn")
        errors = errors or {}
        res = AddPartitionsToTxnResponse
        topics = [res.AddPartitionsToTxnTopicResult(
            name=t.name, results_by_partition=[
                res.AddPartitionsToTxnPartitionResult(
                    partition_index=p, partition_error_code=code(errors.get((t.name, p), error)))
                for p in t.partitions])
            for t in r.body.v3_and_below_topics]
        self.net.respond(r, res(throttle_time_ms=0, results_by_topic_v3_and_below=topics))
        self.step()
        return r

    def answer_end_txn(self, error=None):
        r = self.await_request("EndTxn")
        self.net.respond(r, EndTxnResponse(throttle_time_ms=0, error_code=code(error)))
        self.step()
        return r
