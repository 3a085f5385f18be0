"""The Sender stepped with a fake clock and a fake network: producer id first,
linger, retries with backoff, fatal errors, splitting, throttling, expiry,
disconnects and idempotent sequence handling. Every record resolves exactly once."""

import uuid

import pytest

from kctl.config import ProducerConfig
from kctl.engine.clock import NS_PER_MS, FakeClock
from kctl.engine.producer import Producer
from kctl.protocol import messages
from kctl.protocol.error_codes import ERRORS_BY_NAME
from kctl.protocol.records import decode_batches

from .fake_network import FakeNetwork

MetadataResponse = messages.message_class("MetadataResponse")
ProduceResponse = messages.message_class("ProduceResponse")
InitProducerIdResponse = messages.message_class("InitProducerIdResponse")


def code(name):
    return ERRORS_BY_NAME[name].code


TOPIC_ID = uuid.UUID(int=0xC0FFEE)


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


def produce_body(request, errors=None, base_offset=0, throttle_ms=0, log_start_offset=0):
    """Answers every partition of ``request``; ``errors`` maps partition -> error name."""
    errors = errors or {}
    topics = []
    for t in request.body.topic_data:
        parts = [ProduceResponse.PartitionProduceResponse(
            index=p.index, error_code=code(errors[p.index]) if p.index in errors else 0,
            base_offset=-1 if p.index in errors else base_offset, log_append_time_ms=-1,
            log_start_offset=log_start_offset, record_errors=[], error_message=None)
            for p in t.partition_data]
        topics.append(ProduceResponse.TopicProduceResponse(name=t.name, topic_id=t.topic_id,
                                                           partition_responses=parts))
    return ProduceResponse(responses=topics, throttle_time_ms=throttle_ms)


def sent_batches(request):
    body = NET.wire_bodies[request.correlation_id]
    return {p.index: decode_batches(p.records).batches[0]
            for t in body.topic_data for p in t.partition_data}


NET = None


class Harness:
    def __init__(self, nodes=(0,), partitions=2, leaders=None, **props):
        self.clock = FakeClock(now_ns=10**12)
        settings = {"bootstrap.servers": "127.0.0.1:9000", "linger.ms": "5", **props}
        self.config = ProducerConfig.from_properties(settings)
        global NET
        self.net = NET = FakeNetwork(self.clock, nodes,
                                     max_in_flight=self.config.max_in_flight_requests_per_connection)
        self.done = []
        self.producer = Producer(self.config, clock=self.clock, network=self.net,
                                 on_batch_done=self.done.append)
        self.meta = metadata_body(partitions=partitions, leaders=leaders, nodes=nodes)

    def step(self, ms=0):
        """Time passes (and the answers queued meanwhile arrive), then one loop turn."""
        self.clock.advance(ms=ms)
        self.net.poll(0, self.clock.now_ns())
        self.producer._step(0)

    def answer_metadata(self):
        for r in self.net.pending("Metadata"):
            self.net.respond(r, self.meta)
        self.step()

    def answer_init(self, producer_id=42, epoch=0):
        for r in self.net.pending("InitProducerId"):
            self.net.respond(r, InitProducerIdResponse(throttle_time_ms=0, error_code=0,
                                                       producer_id=producer_id, producer_epoch=epoch))
        self.step()

    def start(self):
        """Runs until metadata is known (and a producer id, with idempotence)."""
        self.step()
        self.answer_metadata()
        if self.producer.idempotence is not None:
            self.answer_init()

    def send(self, n, partition=0, value=b"v"):
        return [self.producer.send("t", value + str(i).encode(), partition=partition) for i in range(n)]


def test_idempotent_producer_gets_an_id_before_producing():
    h = Harness()
    h.step()
    h.answer_metadata()
    assert h.net.requests("InitProducerId") and not h.net.requests("Produce")
    handles = h.send(3)
    h.step(ms=10)
    assert not h.net.requests("Produce"), "nothing is produced before the producer id is known"
    h.answer_init(producer_id=7, epoch=3)
    (req,) = h.net.requests("Produce")
    batch = sent_batches(req)[0]
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (7, 3, 0)
    h.net.respond(req, produce_body(req, base_offset=100))
    h.step()
    assert [x.offset for x in handles] == [100, 101, 102]


def test_linger_holds_a_small_batch_then_sends_it():
    h = Harness(**{"enable.idempotence": "false", "acks": "1", "linger.ms": "20"})
    h.start()
    h.send(2)
    h.step(ms=10)
    assert not h.net.requests("Produce")
    h.step(ms=10)
    assert len(h.net.requests("Produce")) == 1


def test_retriable_error_retries_after_backoff_and_refreshes_metadata():
    h = Harness(**{"enable.idempotence": "false", "acks": "1", "retry.backoff.ms": "100"})
    h.start()
    handles = h.send(2)
    h.step(ms=5)
    (req,) = h.net.requests("Produce")
    h.net.respond(req, produce_body(req, errors={0: "NOT_LEADER_OR_FOLLOWER"}))
    h.step()
    assert h.producer.metadata.update_requested or h.net.pending("Metadata")
    assert not any(x.done for x in handles)
    h.answer_metadata()
    h.step(ms=50)
    assert len(h.net.requests("Produce")) == 1, "no retry before retry.backoff.ms"
    h.step(ms=60)
    reqs = h.net.requests("Produce")
    assert len(reqs) == 2
    h.net.respond(reqs[1], produce_body(reqs[1], base_offset=5))
    h.step()
    assert [(x.offset, x.error) for x in handles] == [(5, None), (6, None)]
    assert h.producer.metrics.retries == 1
    assert h.producer.metrics.errors_by_name["NOT_LEADER_OR_FOLLOWER"] == 1


def test_fatal_error_fails_every_record_of_the_batch_by_name():
    h = Harness(**{"enable.idempotence": "false", "acks": "1"})
    h.start()
    handles = h.send(3)
    h.step(ms=5)
    (req,) = h.net.requests("Produce")
    h.net.respond(req, produce_body(req, errors={0: "TOPIC_AUTHORIZATION_FAILED"}))
    h.step()
    assert {(x.error, x.offset) for x in handles} == {("TOPIC_AUTHORIZATION_FAILED", -1)}
    assert h.producer.metrics.failed_by_error == {"TOPIC_AUTHORIZATION_FAILED": 3}


def test_message_too_large_splits_the_batch_in_order():
    h = Harness(**{"enable.idempotence": "false", "acks": "1"})
    h.start()
    handles = h.send(10)
    h.step(ms=5)
    (req,) = h.net.requests("Produce")
    h.net.respond(req, produce_body(req, errors={0: "MESSAGE_TOO_LARGE"}))
    h.step()
    h.step(ms=200)
    offset = 0
    while (pending := h.net.pending("Produce")):
        for r in pending:
            b = sent_batches(r)[0]
            h.net.respond(r, produce_body(r, base_offset=offset))
            offset += len(b.records)
        h.step(ms=200)
    assert [x.offset for x in handles] == list(range(10))
    assert h.producer.metrics.splits == 1


def test_throttle_mutes_the_broker_for_that_long():
    h = Harness(**{"enable.idempotence": "false", "acks": "1", "linger.ms": "0"})
    h.start()
    h.send(1)
    h.step()
    (req,) = h.net.requests("Produce")
    h.net.respond(req, produce_body(req, throttle_ms=100))
    h.step()
    assert h.net.throttle_calls == [(0, 100)]
    h.send(1)
    h.step(ms=50)
    assert len(h.net.requests("Produce")) == 1, "muted while throttled"
    h.step(ms=51)
    assert len(h.net.requests("Produce")) == 2
    m = h.producer.metrics
    assert (m.throttle_time_ms, m.throttled_requests) == (100, 1)


def test_queued_batch_expires_after_delivery_timeout():
    h = Harness(**{"enable.idempotence": "false", "acks": "1", "delivery.timeout.ms": "1000",
                   "request.timeout.ms": "500", "linger.ms": "0"})
    h.start()
    h.net.down.add(0)
    handles = h.send(2)
    h.step(ms=999)
    assert not any(x.done for x in handles)
    h.step(ms=1)
    assert {x.error for x in handles} == {"DELIVERY_TIMEOUT"}


def test_in_flight_batch_expires_and_its_late_answer_is_ignored():
    h = Harness(**{"enable.idempotence": "false", "acks": "1", "delivery.timeout.ms": "1000",
                   "request.timeout.ms": "500", "linger.ms": "0"})
    h.start()
    handles = h.send(1)
    h.step()
    (req,) = h.net.requests("Produce")
    h.step(ms=1001)
    assert handles[0].error == "DELIVERY_TIMEOUT"
    h.net.respond(req, produce_body(req, base_offset=9))
    h.step()
    assert handles[0].error == "DELIVERY_TIMEOUT" and len(h.done) == 1


def test_disconnect_retries_every_in_flight_batch():
    h = Harness(**{"enable.idempotence": "false", "acks": "1", "linger.ms": "0"})
    h.start()
    handles = h.send(1, partition=0) + h.send(1, partition=1)
    h.step()
    assert len(h.net.pending("Produce")) == 2
    h.net.disconnect(0)
    h.step()
    assert not any(x.done for x in handles)
    h.step(ms=200)
    retries = h.net.pending("Produce")
    assert {p for r in retries for p in sent_batches(r)} == {0, 1}
    for r in retries:
        h.net.respond(r, produce_body(r, base_offset=0))
    h.step()
    assert all(x.offset == 0 and x.error is None for x in handles)


def test_acks_zero_completes_on_write():
    h = Harness(**{"enable.idempotence": "false", "acks": "0", "linger.ms": "0"})
    h.start()
    handles = h.send(2)
    h.step()
    h.step()
    assert all(x.done and x.error is None and x.offset == -1 for x in handles)


def test_per_node_drain_with_three_brokers():
    h = Harness(nodes=(0, 1, 2), partitions=6, **{"enable.idempotence": "false", "acks": "1",
                                                  "linger.ms": "50"})
    h.start()
    for p in range(6):
        h.send(1, partition=p)
    h.step(ms=50)
    for node in (0, 1, 2):
        (req,) = h.net.requests("Produce", node=node)
        assert set(sent_batches(req)) == {p for p in range(6) if p % 3 == node}


def test_max_in_flight_limits_requests_per_connection():
    h = Harness(**{"enable.idempotence": "false", "acks": "1", "linger.ms": "0",
                   "max.in.flight.requests.per.connection": "2", "batch.size": "100"})
    h.start()
    for _ in range(6):
        h.send(1, value=b"x" * 90)
        h.step()
    assert len(h.net.pending("Produce")) == 2


class TestIdempotentSequences:
    def test_sequences_advance_per_partition(self):
        h = Harness(**{"linger.ms": "0", "batch.size": "200"})
        h.start()
        h.send(3, value=b"x" * 60)
        h.step()
        h.send(2, value=b"y" * 60)
        h.step()
        seqs = [sent_batches(r)[0].base_sequence for r in h.net.requests("Produce")]
        assert seqs[0] == 0 and seqs[-1] > 0

    def test_duplicate_sequence_counts_as_success(self):
        h = Harness(**{"linger.ms": "0"})
        h.start()
        handles = h.send(1)
        h.step()
        (req,) = h.net.requests("Produce")
        h.net.respond(req, produce_body(req, errors={0: "DUPLICATE_SEQUENCE_NUMBER"}))
        h.step()
        assert handles[0].done and handles[0].error is None

    def test_out_of_order_for_the_oldest_batch_fails_it_and_bumps_the_epoch(self):
        h = Harness(**{"linger.ms": "0"})
        h.start()
        first = h.send(1)
        h.step()
        (req,) = h.net.requests("Produce")
        h.net.respond(req, produce_body(req, errors={0: "OUT_OF_ORDER_SEQUENCE_NUMBER"}))
        h.step()
        assert first[0].error == "OUT_OF_ORDER_SEQUENCE_NUMBER"
        (bump,) = h.net.pending("InitProducerId")
        assert (bump.body.producer_id, bump.body.producer_epoch) == (42, 0)
        h.answer_init(producer_id=42, epoch=1)
        later = h.send(1)
        h.step()
        batch = sent_batches(h.net.requests("Produce")[-1])[0]
        assert (batch.producer_epoch, batch.base_sequence) == (1, 0)
        assert later[0].done is False

    def test_retry_keeps_order_with_five_in_flight(self):
        h = Harness(**{"linger.ms": "0", "batch.size": "100", "retry.backoff.ms": "10"})
        h.start()
        handles = []
        for i in range(5):
            handles += h.send(1, value=b"z" * 80)
            h.step()
        reqs = h.net.pending("Produce")
        assert len(reqs) == 5
        # The second request fails retriably; the three after it are rejected as out of order.
        h.net.respond(reqs[0], produce_body(reqs[0], base_offset=0))
        h.net.respond(reqs[1], produce_body(reqs[1], errors={0: "NOT_ENOUGH_REPLICAS"}))
        for r in reqs[2:]:
            h.net.respond(r, produce_body(r, errors={0: "OUT_OF_ORDER_SEQUENCE_NUMBER"}))
        h.step()
        offset = 1
        for _ in range(20):
            h.step(ms=20)
            pending = h.net.pending("Produce")
            if not pending:
                break
            for r in pending:
                h.net.respond(r, produce_body(r, base_offset=offset))
                offset += 1
        seqs = [sent_batches(r)[0].base_sequence for r in h.net.requests("Produce")[5:]]
        assert seqs == [1, 2, 3, 4], "retries go out one at a time, in sequence order"
        assert [x.offset for x in handles] == [0, 1, 2, 3, 4]


def test_produce_names_topics_by_id_when_known_else_speaks_v12():
    h = Harness(**{"enable.idempotence": "false", "acks": "1", "linger.ms": "0"})
    h.start()
    h.send(1)
    h.step()
    (req,) = h.net.requests("Produce")
    assert req.api_version == 13 and req.body.topic_data[0].topic_id == TOPIC_ID
    h2 = Harness(**{"enable.idempotence": "false", "acks": "1", "linger.ms": "0"})
    h2.meta = metadata_body(topic_id=uuid.UUID(int=0))
    h2.start()
    h2.send(1)
    h2.step()
    (req,) = h2.net.requests("Produce")
    assert req.api_version == 12 and req.body.topic_data[0].name == "t"
