"""The sequence-error rules of an idempotent (not transactional) producer, the sender
stepped with a fake clock over the fake network. Each test mirrors a case of the Java
client's SenderTest (named in its name and docstring) and checks kctl does what the
Java producer does: retry, bump the epoch, succeed, or fail.

One deliberate difference, stated where it shows: Java's idempotent producer bumps its
epoch locally and at once; kctl asks the broker (InitProducerId with the current id and
epoch) once no Produce request is in flight (idempotence.py says why). The outcome the
tests check is the same: which batches are retried, with which epoch and sequences, in
which order, and that nothing fails."""

from kctl.engine.producer import ProducerFatalError

import pytest

from .sender_harness import Harness, sent_batches

ONE = {"linger.ms": "0", "retry.backoff.ms": "10", "retry.backoff.max.ms": "10"}


def idempotent(**props):
    h = Harness(**{**ONE, **props})
    h.start()
    return h


def bump(h, epoch=1, producer_id=42):
    """Answers the epoch bump's InitProducerId; the retries' backoff passes."""
    r = h.answer_init(producer_id=producer_id, epoch=epoch)
    h.step(ms=10)
    return r


def seqs(h, requests, partition=0):
    return [(h.batch(r, partition).producer_epoch, h.batch(r, partition).base_sequence)
            for r in requests]


def test_epoch_bump_on_out_of_order_sequence_for_next_batch():
    """SenderTest.testEpochBumpOnOutOfOrderSequenceForNextBatch: OUT_OF_ORDER_SEQUENCE_NUMBER
    for the batch right after the last acknowledged one is a real gap: the epoch is bumped
    and the batch retried from sequence 0. Nothing fails (issue 12, item 1)."""
    h = idempotent(**{"linger.ms": "5"})
    first = h.send(2)
    h.step(ms=5)
    (r1,) = h.produce_requests()
    assert seqs(h, [r1]) == [(0, 0)]
    h.respond(r1, base_offset=0)
    h.step()
    assert [x.offset for x in first] == [0, 1]
    idem = h.producer.idempotence
    assert idem.last_acked_sequence(first[0].tp) == 1 and idem.next_sequence(first[0].tp) == 2
    second = h.send(1)
    h.step(ms=5)
    r2 = h.produce_requests()[-1]
    assert seqs(h, [r2]) == [(0, 2)]
    h.respond(r2, errors={0: "OUT_OF_ORDER_SEQUENCE_NUMBER"})
    h.step()
    assert not second[0].done, "retried, not failed"
    init = bump(h)
    assert (init.body.producer_id, init.body.producer_epoch) == (42, 0), "KIP-360: names the id and epoch"
    r3 = h.produce_requests()[-1]
    assert seqs(h, [r3]) == [(1, 0)]
    assert idem.next_sequence(second[0].tp) == 1 and idem.last_acked_sequence(second[0].tp) == -1
    h.respond(r3, base_offset=2)
    h.step()
    assert second[0].offset == 2 and second[0].error is None
    m = h.producer.metrics
    assert m.failed_by_error == {} and m.records_failed == 0
    assert m.errors_by_name["OUT_OF_ORDER_SEQUENCE_NUMBER"] == 1 and m.epoch_bumps == 1
    assert m.retries == 1


def test_epoch_bump_on_out_of_order_sequence_for_next_batch_when_there_is_no_batch_in_flight():
    """SenderTest.testEpochBumpOnOutOfOrderSequenceForNextBatchWhenThereIsNoBatchInFlight: a
    partition that did not ask for the bump keeps its sequences until its next batch,
    which starts at 0 under the new epoch."""
    h = idempotent()
    a0 = h.send(1, partition=0)
    h.step()
    h.respond(h.produce_requests()[-1])
    h.step()
    b0 = h.send(1, partition=1)
    h.step()
    h.respond(h.produce_requests()[-1])
    h.step()
    assert a0[0].offset == 0 and b0[0].offset == 0
    a1 = h.send(1, partition=0)
    h.step()
    r = h.produce_requests()[-1]
    assert seqs(h, [r]) == [(0, 1)]
    h.respond(r, errors={0: "OUT_OF_ORDER_SEQUENCE_NUMBER"})
    h.step()
    bump(h)
    r = h.produce_requests()[-1]
    assert seqs(h, [r]) == [(1, 0)], "the partition that asked restarts at 0"
    idem = h.producer.idempotence
    tp1 = b0[0].tp
    assert idem.last_acked_sequence(tp1) == 0, "partition 1 untouched until its next batch"
    h.respond(r, base_offset=1)
    h.step()
    b1 = h.send(1, partition=1)
    h.step()
    r = h.produce_requests()[-1]
    assert seqs(h, [r], partition=1) == [(1, 0)], "partition 1's next batch: new epoch, sequence 0"
    h.respond(r, base_offset=1)
    h.step()
    assert a1[0].offset == 1 and b1[0].offset == 1


def test_epoch_bump_on_out_of_order_sequence_for_next_batch_when_batch_in_flight_fails():
    """SenderTest.testEpochBumpOnOutOfOrderSequenceForNextBatchWhenBatchInFlightFails: a
    batch of another partition in flight under the old epoch is retried under the old
    epoch and its sequence (the broker may have it); that partition moves to the new
    epoch with its next batch. (kctl bumps once that request has answered.)"""
    h = idempotent()
    for p in (0, 1):
        h.send(1, partition=p)
        h.step()
        h.respond(h.produce_requests()[-1])
        h.step()
    a = h.send(1, partition=0)
    h.step()
    ra = h.produce_requests()[-1]
    b = h.send(1, partition=1)
    h.step()
    rb = h.produce_requests()[-1]
    assert seqs(h, [ra]) == [(0, 1)] and seqs(h, [rb], 1) == [(0, 1)]
    h.respond(ra, errors={0: "OUT_OF_ORDER_SEQUENCE_NUMBER"})
    h.step()
    assert not h.net.pending("InitProducerId"), "kctl bumps once nothing is in flight"
    h.respond(rb, errors={1: "NOT_LEADER_OR_FOLLOWER"})
    h.step()
    bump(h)
    h.step(ms=200)
    by_partition = {p: (b.producer_epoch, b.base_sequence)
                    for r in h.produce_requests()[4:] for p, b in sent_batches(r, h.net).items()}
    assert by_partition == {0: (1, 0), 1: (0, 1)}
    for r in h.net.pending("Produce"):
        h.respond(r, base_offset=1)
    h.step()
    assert a[0].offset == 1 and b[0].offset == 1
    c = h.send(1, partition=1)
    h.step()
    assert seqs(h, [h.produce_requests()[-1]], 1) == [(1, 0)]
    assert not c[0].done


def test_correct_handling_of_out_of_order_responses():
    """SenderTest.testCorrectHandlingOfOutOfOrderResponses: OUT_OF_ORDER_SEQUENCE_NUMBER for
    a batch that is not the next one (its predecessor failed) is retried without a bump;
    both go again, one at a time, in sequence order."""
    h = idempotent()
    first = h.send(1)
    h.step()
    second = h.send(1)
    h.step()
    r1, r2 = h.produce_requests()
    h.respond(r2, errors={0: "OUT_OF_ORDER_SEQUENCE_NUMBER"})
    h.step()
    h.respond(r1, errors={0: "NOT_LEADER_OR_FOLLOWER"})
    h.step()
    h.answer_metadata()
    assert not h.net.pending("InitProducerId") and h.producer.metrics.epoch_bumps == 0
    h.step(ms=200)
    (r3,) = h.net.pending("Produce")
    assert seqs(h, [r3]) == [(0, 0)], "only one in flight while retrying, the first first"
    h.respond(r3, base_offset=0)
    h.step(ms=200)
    (r4,) = h.net.pending("Produce")
    assert seqs(h, [r4]) == [(0, 1)]
    h.respond(r4, base_offset=1)
    h.step()
    assert [first[0].offset, second[0].offset] == [0, 1]
    assert h.producer.idempotence.last_acked_sequence(first[0].tp) == 1


def test_correct_handling_of_duplicate_sequence_error():
    """SenderTest.testCorrectHandlingOfDuplicateSequenceError: DUPLICATE_SEQUENCE_NUMBER is
    success without an offset; the last acknowledged sequence does not move back."""
    h = idempotent()
    first = h.send(1)
    h.step()
    second = h.send(1)
    h.step()
    r1, r2 = h.produce_requests()
    h.respond(r2, base_offset=1000)
    h.step()
    h.respond(r1, errors={0: "DUPLICATE_SEQUENCE_NUMBER"})
    h.step()
    assert first[0].done and first[0].error is None and first[0].offset == -1
    assert second[0].offset == 1000
    assert h.producer.idempotence.last_acked_sequence(first[0].tp) == 1
    assert h.producer.metrics.errors_by_name["DUPLICATE_SEQUENCE_NUMBER"] == 1
    assert h.producer.metrics.records_failed == 0


def test_idempotent_unknown_producer_handling_when_retention_limit_reached():
    """SenderTest.testIdempotentUnknownProducerHandlingWhenRetentionLimitReached:
    UNKNOWN_PRODUCER_ID with a log start offset past the last acknowledged offset (the
    log head went with the producer's state): bump the epoch, retry from sequence 0."""
    h = idempotent(**{"linger.ms": "5"})
    h.send(1)
    h.step(ms=5)
    h.respond(h.produce_requests()[-1], base_offset=1000, log_start_offset=10)
    h.step()
    second = h.send(2)
    h.step(ms=5)
    r = h.produce_requests()[-1]
    assert seqs(h, [r]) == [(0, 1)]
    h.respond(r, errors={0: "UNKNOWN_PRODUCER_ID"}, log_start_offset=1010)
    h.step()
    bump(h)
    r = h.produce_requests()[-1]
    assert seqs(h, [r]) == [(1, 0)]
    idem = h.producer.idempotence
    assert idem.last_acked_sequence(second[0].tp) == -1 and idem.next_sequence(second[0].tp) == 2
    h.respond(r, base_offset=1011, log_start_offset=1010)
    h.step()
    assert [x.offset for x in second] == [1011, 1012]
    assert idem.last_acked_sequence(second[0].tp) == 1


def test_unknown_producer_error_should_be_retried_when_log_start_offset_is_unknown():
    """SenderTest.testUnknownProducerErrorShouldBeRetriedWhenLogStartOffsetIsUnknown: with
    log start offset -1, retry as is: same epoch, same sequence, no bump."""
    h = idempotent()
    h.send(1)
    h.step()
    h.respond(h.produce_requests()[-1], base_offset=1000, log_start_offset=10)
    h.step()
    second = h.send(1)
    h.step()
    h.respond(h.produce_requests()[-1], errors={0: "UNKNOWN_PRODUCER_ID"}, log_start_offset=-1)
    h.step(ms=200)
    assert not h.net.requests("InitProducerId")[1:], "no bump"
    r = h.produce_requests()[-1]
    assert seqs(h, [r]) == [(0, 1)]
    h.respond(r, base_offset=1011)
    h.step()
    assert second[0].offset == 1011


def test_unknown_producer_error_is_retried_after_a_bump_when_the_log_was_not_truncated():
    """SenderTest.testShouldRaiseOutOfOrderSequenceExceptionToUserIfLogWasNotTruncated: for a
    (non-transactional) idempotent producer, UNKNOWN_PRODUCER_ID with a known log start
    offset that is not past the last acknowledged one still bumps and retries (Java's
    TransactionManager.canRetry: "always retry UNKNOWN_PRODUCER_ID errors"); the record
    does not fail (issue 12, item 1)."""
    h = idempotent()
    h.send(1)
    h.step()
    h.respond(h.produce_requests()[-1], base_offset=1000, log_start_offset=10)
    h.step()
    second = h.send(1)
    h.step()
    h.respond(h.produce_requests()[-1], errors={0: "UNKNOWN_PRODUCER_ID"}, log_start_offset=10)
    h.step()
    assert not second[0].done
    bump(h)
    r = h.produce_requests()[-1]
    assert seqs(h, [r]) == [(1, 0)]
    h.respond(r, base_offset=1001)
    h.step()
    assert second[0].offset == 1001 and h.producer.metrics.records_failed == 0


def test_unknown_producer_error_should_be_retried_for_future_batches_when_first_fails():
    """SenderTest.testUnknownProducerErrorShouldBeRetriedForFutureBatchesWhenFirstFails: two
    batches in flight both get UNKNOWN_PRODUCER_ID: one bump, both retried from 0 in order."""
    h = idempotent()
    h.send(1)
    h.step()
    h.respond(h.produce_requests()[-1], base_offset=1000, log_start_offset=10)
    h.step()
    second = h.send(1)
    h.step()
    third = h.send(1)
    h.step()
    r2, r3 = h.produce_requests()[1:]
    assert seqs(h, [r2, r3]) == [(0, 1), (0, 2)]
    h.respond(r2, errors={0: "UNKNOWN_PRODUCER_ID"}, log_start_offset=1010)
    h.step()
    h.respond(r3, errors={0: "UNKNOWN_PRODUCER_ID"}, log_start_offset=1010)
    h.step()
    bump(h)
    assert len(h.net.requests("InitProducerId")) == 2, "one bump for both"
    (r4,) = h.net.pending("Produce")
    assert seqs(h, [r4]) == [(1, 0)]
    h.respond(r4, base_offset=1011)
    h.step()
    (r5,) = h.net.pending("Produce")
    assert seqs(h, [r5]) == [(1, 1)]
    h.respond(r5, base_offset=1012)
    h.step()
    assert (second[0].offset, third[0].offset) == (1011, 1012)


def test_expiry_of_unsent_batches_should_not_cause_unresolved_sequences():
    """SenderTest.testExpiryOfUnsentBatchesShouldNotCauseUnresolvedSequences."""
    h = idempotent(**{"delivery.timeout.ms": "1500", "request.timeout.ms": "1000"})
    h.net.down.add(0)
    handles = h.send(1)
    h.step(ms=1600)
    assert handles[0].error == "DELIVERY_TIMEOUT"
    assert not h.producer.idempotence.has_unresolved(handles[0].tp)


def test_expiry_of_first_batch_should_not_cause_unresolved_sequences_if_future_batches_succeed():
    """SenderTest.testExpiryOfFirstBatchShouldNotCauseUnresolvedSequencesIfFutureBatchesSucceed:
    a sent batch that expires leaves the partition unresolved; nothing new is drained
    there until the batches in flight resolve; a later batch acknowledged means the
    expired one was written: resolved, no bump."""
    h = idempotent(**{"delivery.timeout.ms": "1500", "request.timeout.ms": "1000",
                      "retry.backoff.ms": "2000", "retry.backoff.max.ms": "2000"})
    first = h.send(1)
    h.step()
    h.step(ms=1000)
    second = h.send(1)
    h.step()
    r1, r2 = h.produce_requests()
    h.respond(r1, errors={0: "REQUEST_TIMED_OUT"})
    h.step()
    h.step(ms=600)   # the first batch (waiting to retry) expires, the second does not
    assert first[0].error == "DELIVERY_TIMEOUT"
    idem = h.producer.idempotence
    assert idem.has_unresolved(first[0].tp)
    third = h.send(1)
    h.step(ms=20)
    assert h.produce_requests() == [r1, r2], "nothing new while the sequence is unresolved"
    h.respond(r2, base_offset=1)
    h.step()
    assert second[0].offset == 1
    h.step()
    assert not idem.has_unresolved(first[0].tp) and h.producer.metrics.epoch_bumps == 0
    r3 = h.produce_requests()[-1]
    assert seqs(h, [r3]) == [(0, 2)]
    assert not third[0].done


def test_expiry_of_first_batch_should_cause_epoch_bump_if_future_batches_fail():
    """SenderTest.testExpiryOfFirstBatchShouldCauseEpochBumpIfFutureBatchesFail: the batch
    after the expired one gets OUT_OF_ORDER_SEQUENCE_NUMBER: it directly follows the
    unresolved sequence, so the epoch is bumped and it is retried from 0."""
    h = idempotent(**{"delivery.timeout.ms": "1500", "request.timeout.ms": "1000",
                      "retry.backoff.ms": "700", "retry.backoff.max.ms": "700"})
    first = h.send(1)
    h.step()
    h.step(ms=1000)
    second = h.send(1)
    h.step()
    r1, r2 = h.produce_requests()
    h.respond(r1, errors={0: "NOT_LEADER_OR_FOLLOWER"})
    h.step()
    h.answer_metadata()
    h.step(ms=600)
    assert first[0].error == "DELIVERY_TIMEOUT"
    h.send(1)
    h.respond(r2, errors={0: "OUT_OF_ORDER_SEQUENCE_NUMBER"})
    h.step()
    assert not second[0].done
    bump(h)
    idem = h.producer.idempotence
    assert not idem.has_unresolved(second[0].tp) and idem.next_sequence(second[0].tp) == 1
    h.step(ms=700)    # retry.backoff.ms
    r3 = h.produce_requests()[-1]
    assert seqs(h, [r3]) == [(1, 0)]
    h.respond(r3, base_offset=1)
    h.step()
    assert second[0].offset == 1


def test_expiry_of_all_sent_batches_should_cause_unresolved_sequences():
    """SenderTest.testExpiryOfAllSentBatchesShouldCauseUnresolvedSequences: the only sent
    batch expires; once nothing is in flight the sequence is still unknown, so the epoch
    is bumped and the unresolved state cleared."""
    h = idempotent(**{"delivery.timeout.ms": "1500", "request.timeout.ms": "1000",
                      "retry.backoff.ms": "5000", "retry.backoff.max.ms": "5000"})
    first = h.send(1)
    h.step()
    (r1,) = h.produce_requests()
    h.respond(r1, errors={0: "NOT_LEADER_OR_FOLLOWER"})
    h.step()
    h.answer_metadata()
    h.step(ms=1600)   # expires the batch waiting to be retried
    assert first[0].error == "DELIVERY_TIMEOUT"
    assert h.producer.idempotence.has_unresolved(first[0].tp)
    h.step()          # the next turn: nothing in flight, the sequence still unknown: bump
    assert h.net.pending("InitProducerId"), "bump asked once nothing is in flight"
    bump(h)
    assert not h.producer.idempotence.has_unresolved(first[0].tp)
    later = h.send(1)
    h.step()
    assert seqs(h, [h.produce_requests()[-1]]) == [(1, 0)]
    assert not later[0].done


def test_expired_in_flight_batch_leaves_its_sequence_unresolved():
    """SenderTest.testInflightBatchesExpireOnDeliveryTimeout with idempotence: a batch that
    expires on the wire is unresolved until its request answers; its late success still
    counts for the sequence bookkeeping (the record keeps its DELIVERY_TIMEOUT)."""
    h = idempotent(**{"delivery.timeout.ms": "1500", "request.timeout.ms": "1000"})
    first = h.send(1)
    h.step()
    (r1,) = h.produce_requests()
    h.step(ms=1600)
    assert first[0].error == "DELIVERY_TIMEOUT"
    idem = h.producer.idempotence
    assert idem.has_unresolved(first[0].tp)
    h.respond(r1, base_offset=0)
    h.step()
    assert first[0].error == "DELIVERY_TIMEOUT"
    assert idem.last_acked_sequence(first[0].tp) == 0 and not idem.has_unresolved(first[0].tp)
    assert h.producer.metrics.epoch_bumps == 0


def test_idempotent_split_batch_and_send():
    """SenderTest.testIdempotentSplitBatchAndSend: MESSAGE_TOO_LARGE splits a batch; the
    parts keep its producer id, epoch and contiguous sequences, and go in order."""
    h = idempotent(**{"linger.ms": "20"})
    before = h.send(3)
    h.step(ms=20)
    h.respond(h.produce_requests()[-1], base_offset=0)
    h.step()
    handles = h.send(10)
    h.step(ms=20)
    big = h.produce_requests()[-1]
    assert seqs(h, [big]) == [(0, 3)]
    h.respond(big, errors={0: "MESSAGE_TOO_LARGE"})
    h.step()
    parts = []
    offset = 3
    for _ in range(10):
        h.step(ms=200)
        pending = h.net.pending("Produce")
        if not pending:
            break
        for r in pending:
            b = h.batch(r)
            parts.append((b.producer_epoch, b.base_sequence, len(b.records)))
            h.respond(r, base_offset=offset)
            offset += len(b.records)
    assert parts == [(0, 3, 5), (0, 8, 5)]
    assert [x.offset for x in before + handles] == list(range(13))
    m = h.producer.metrics
    assert m.splits == 1 and m.errors_by_name["MESSAGE_TOO_LARGE"] == 1 and m.retries == 0
    nxt = h.send(1)
    h.step(ms=20)
    assert seqs(h, [h.produce_requests()[-1]]) == [(0, 13)]
    assert not nxt[0].done


def test_cluster_authorization_exception_in_produce_request():
    """SenderTest.testClusterAuthorizationExceptionInProduceRequest: fatal for the
    producer; later sends fail at once."""
    h = idempotent()
    handles = h.send(1)
    h.step()
    h.respond(h.produce_requests()[-1], errors={0: "CLUSTER_AUTHORIZATION_FAILED"})
    h.step()
    assert handles[0].error == "CLUSTER_AUTHORIZATION_FAILED"
    with pytest.raises(ProducerFatalError, match="CLUSTER_AUTHORIZATION_FAILED"):
        h.send(1)


def test_cancel_in_flight_request_after_fatal_error():
    """SenderTest.testCancelInFlightRequestAfterFatalError: after a fatal error the other
    batches fail too, queued or in flight; a late answer changes nothing."""
    h = idempotent()
    a = h.send(1, partition=0)
    h.step()
    b = h.send(1, partition=1)
    h.step()
    ra, rb = h.produce_requests()
    h.respond(ra, errors={0: "CLUSTER_AUTHORIZATION_FAILED"})
    h.step()
    h.step()
    assert a[0].error == b[0].error == "CLUSTER_AUTHORIZATION_FAILED"
    h.respond(rb, base_offset=0)
    h.step()
    assert b[0].error == "CLUSTER_AUTHORIZATION_FAILED"
    m = h.producer.metrics
    assert m.records_failed == 2 and m.records_acked == 0


def test_unsupported_for_message_format_in_produce_request():
    """SenderTest.testUnsupportedForMessageFormatInProduceRequest: the batch fails; not
    fatal (the epoch is bumped, since its sequence may have been used)."""
    h = idempotent()
    handles = h.send(1)
    h.step()
    h.respond(h.produce_requests()[-1], errors={0: "UNSUPPORTED_FOR_MESSAGE_FORMAT"})
    h.step()
    assert handles[0].error == "UNSUPPORTED_FOR_MESSAGE_FORMAT"
    assert h.producer.fatal_error is None
    bump(h)
    more = h.send(1)
    h.step()
    assert seqs(h, [h.produce_requests()[-1]]) == [(1, 0)]
    assert not more[0].done


def test_invalid_producer_epoch_fails_the_batch_and_bumps_the_epoch():
    """TransactionManager.handleFailedBatch for InvalidProducerEpochException (KIP-588):
    for an idempotent producer it is not fatal; the batch fails (Sender.canRetry: not
    retriable) and its partition's sequences restart under a bumped epoch."""
    h = idempotent()
    handles = h.send(1)
    h.step()
    h.respond(h.produce_requests()[-1], errors={0: "INVALID_PRODUCER_EPOCH"})
    h.step()
    assert handles[0].error == "INVALID_PRODUCER_EPOCH"
    assert h.producer.fatal_error is None and h.net.pending("InitProducerId")


def test_producer_fenced_in_produce_is_fatal():
    """TransactionManager.maybeTransitionToErrorState: ProducerFencedException is fatal."""
    h = idempotent()
    handles = h.send(1)
    h.step()
    h.respond(h.produce_requests()[-1], errors={0: "PRODUCER_FENCED"})
    h.step()
    assert handles[0].error == "PRODUCER_FENCED"
    with pytest.raises(ProducerFatalError):
        h.send(1)


def test_broker_that_cannot_bump_gets_asked_for_a_new_producer_id():
    """Java resets an idempotent producer whose epoch cannot be bumped
    (resetIdempotentProducerId); a broker that refuses InitProducerId with the current id
    (Tansu answers UNKNOWN_SERVER_ERROR) gets asked for a new id."""
    h = idempotent()
    handles = h.send(1)
    h.step()
    h.respond(h.produce_requests()[-1], errors={0: "OUT_OF_ORDER_SEQUENCE_NUMBER"})
    h.step()
    h.answer_init(error="UNKNOWN_SERVER_ERROR")
    fresh = bump(h, producer_id=77, epoch=0)
    assert (fresh.body.producer_id, fresh.body.producer_epoch) == (-1, -1)
    r = h.produce_requests()[-1]
    b = h.batch(r)
    assert (b.producer_id, b.producer_epoch, b.base_sequence) == (77, 0, 0)
    h.respond(r, base_offset=5)
    h.step()
    assert handles[0].offset == 5


@pytest.mark.parametrize("error", ["CLUSTER_AUTHORIZATION_FAILED", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"])
def test_cluster_authorization_exception_in_init_producer_id_request(error):
    """SenderTest.testClusterAuthorizationExceptionInInitProducerIdRequest (Java trunk):
    an idempotent producer's InitProducerId refused for authorization is not fatal: what
    it holds fails with the error (Sender.shouldHandleAuthorizationError), and it asks for
    an id again (here after retry.backoff.ms); then sends succeed."""
    h = Harness(**{"enable.idempotence": "true", "linger.ms": "0", "retry.backoff.ms": "10",
                   "retry.backoff.max.ms": "10"})
    h.step()
    h.answer_metadata()
    held = h.send(2)
    h.answer_init(error=error)
    assert [x.error for x in held] == [error, error]
    assert h.producer.fatal_error is None
    assert h.producer.metrics.failed_by_error == {error: 2}
    assert not h.net.pending("InitProducerId"), "asked again after retry.backoff.ms"
    h.answer_init(producer_id=7, epoch=0)
    handles = h.send(1)
    h.step()
    (r,) = h.net.pending("Produce")
    assert h.batch(r).producer_id == 7
    h.respond(r, base_offset=0)
    h.step()
    assert handles[0].offset == 0 and handles[0].error is None
