"""The Sender stepped with a fake clock and a fake network: producer id first,
linger, retries with backoff, fatal errors, splitting, throttling, expiry,
disconnects and idempotent sequence handling. Every record resolves exactly once."""

import uuid

import pytest

from kctl.engine.batch import TopicPartition
from kctl.engine.clock import NS_PER_MS
from kctl.engine.compression_ratio import COMPRESSION_RATIO_IMPROVING_STEP

from .sender_harness import TOPIC_ID, Harness, metadata_body, produce_body, sent_batches


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


def test_producer_id_is_asked_of_a_node_that_offers_init_producer_id():
    """A node without InitProducerId at a version kctl speaks (a mixed-version cluster) is
    passed over for one that has it; Java's leastLoadedNode does not look, and the request
    fails there with UnsupportedVersionException. With no such node, the error is fatal."""
    from kctl.engine.sender import INIT_PRODUCER_ID
    h = Harness(nodes=(0, 1))
    h.net.node_versions[1] = {k: v for k, v in h.net.versions.items() if k != INIT_PRODUCER_ID}
    h.step()
    h.answer_metadata()
    assert [r.node for r in h.net.requests("InitProducerId")] == [0]
    h.answer_init(producer_id=7)
    assert h.producer.idempotence.producer_id == 7
    alone = Harness()
    del alone.net.versions[INIT_PRODUCER_ID]
    alone.step()
    alone.answer_metadata()
    assert not alone.net.requests("InitProducerId")
    assert alone.producer.idempotence.fatal_error == "UNSUPPORTED_VERSION"


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
    _answer_the_split_batches(h)
    assert [x.offset for x in handles] == list(range(10))
    assert h.producer.metrics.splits == 1


def _answer_the_split_batches(h, codec=None):
    """Answers the Produce requests as they come, one partition's offsets in order."""
    offset = 0
    while (pending := h.net.pending("Produce")):
        for r in pending:
            b = sent_batches(r)[0]
            if codec is not None:
                assert b.compression.name == codec
            h.net.respond(r, produce_body(r, base_offset=offset))
            offset += len(b.records)
        h.step(ms=200)


def test_message_too_large_splits_a_compressed_batch_and_resets_the_estimate():
    # RecordAccumulatorTest.testSplitAndReenqueue with compression: the split batches
    # go out in order, and the topic's ratio estimate becomes max(1.0, the big
    # batch's ratio) so the next batches are sized conservatively.
    h = Harness(**{"enable.idempotence": "false", "acks": "1", "compression.type": "gzip"})
    h.start()
    acc = h.producer.accumulator
    acc.estimator.set_estimation("t", acc.compression, 0.2)
    handles = h.send(10, value=b"v" * 200)
    h.step(ms=5)
    (req,) = h.net.requests("Produce")
    # The first send taught the estimate (compressible values: it improved) and
    # counted the batch's compression rate.
    assert acc.estimator.estimation("t", acc.compression) < 0.2
    m = h.producer.metrics
    assert m.compression_rate_batches == 1 and 0 < m.compression_rate_total < 0.5
    h.net.respond(req, produce_body(req, errors={0: "MESSAGE_TOO_LARGE"}))
    h.step()
    # The split set the estimate to 1.0; the first split batch went out in the same turn
    # (split batches are new batches, with no retry backoff, as in Java) and its send
    # moved the estimate one improving step down.
    (first_part,) = h.net.pending("Produce")
    assert first_part is not req
    assert acc.estimator.estimation("t", acc.compression) == pytest.approx(
        1.0 - COMPRESSION_RATIO_IMPROVING_STEP)
    h.step(ms=200)
    _answer_the_split_batches(h, "GZIP")
    assert [x.offset for x in handles] == list(range(10))
    assert h.producer.metrics.splits == 1


def test_retry_to_the_new_leader_a_produce_response_names_skips_the_backoff():
    """KIP-951 end to end (Java's Sender with RecordAccumulator.shouldBackoff): a
    NOT_LEADER_OR_FOLLOWER answer naming the new leader with a newer epoch moves the
    partition there, and the retry goes to it at once, not after retry.backoff.ms; a
    second failure from that same leader waits its backoff (200 ms: the 2nd retry)."""
    h = Harness(nodes=(0, 1), partitions=1, leaders={0: 0}, **{
        "enable.idempotence": "false", "acks": "1", "retry.backoff.ms": "100",
        "retry.backoff.max.ms": "1000"})
    h.start()
    (handle,) = h.send(1)
    h.step(ms=5)
    (req,) = h.net.requests("Produce")
    assert req.node == 0
    body = produce_body(req, errors={0: "NOT_LEADER_OR_FOLLOWER"})
    leader = body.LeaderIdAndEpoch(leader_id=1, leader_epoch=2)
    body.responses[0].partition_responses[0].current_leader = leader
    h.net.respond(req, body)
    h.step()
    assert h.producer.metadata.leader_for(TopicPartition("t", 0)) == 1
    retry = h.await_request("Produce", turns=20, ms=1)
    assert retry.node == 1 and h.clock.now_ns() - req.sent_ns < 100 * NS_PER_MS
    h.net.respond(retry, produce_body(retry, errors={0: "NOT_LEADER_OR_FOLLOWER"}))
    h.step()
    h.step(ms=150)
    assert len(h.net.requests("Produce")) == 2, "same leader: the backoff holds"
    h.step(ms=60)
    third = h.net.pending("Produce")
    assert len(third) == 1 and third[0].node == 1
    h.respond(third[0], base_offset=7)
    h.step()
    assert (handle.offset, handle.error) == (7, None)


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
