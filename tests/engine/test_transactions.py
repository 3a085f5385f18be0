"""The transactional producer, the sender stepped with a fake clock over the fake
network. Each test mirrors a case of the Java client's TransactionManagerTest or
SenderTest (named in its name and docstring): the coordinator requests in Java's
order, and the sequence-error rules of a transactional producer (abortable errors
abort the transaction and bump the epoch; fencing is fatal)."""

import pytest

from kctl.engine.transactions import TransactionState

from .sender_harness import EndTxnResponse, Harness

TXN = {"transactional.id": "txn", "linger.ms": "0", "retry.backoff.ms": "10",
       "retry.backoff.max.ms": "10"}


def transactional(**props):
    """A producer past init_transactions (FindCoordinator, InitProducerId) and metadata."""
    h = Harness(**{**TXN, **props})
    h.step()
    h.answer_metadata()
    txn = h.producer.transactions
    init = txn.initialize()
    h.step()
    h.answer_find_coordinator()
    r = h.answer_init(producer_id=42, epoch=0)
    assert r.body.transactional_id == "txn"
    assert init.done and init.error is None and txn.state is TransactionState.READY
    return h, txn


def begin_and_send(h, txn, n=1, partition=0):
    txn.begin()
    handles = h.send(n, partition=partition)
    h.step()
    add = h.answer_add_partitions()
    assert [(t.name, list(t.partitions)) for t in add.body.v3_and_below_topics] == [("t", [partition])]
    h.step()
    return handles


def test_basic_transaction():
    """TransactionManagerTest.testBasicTransaction: AddPartitionsToTxn before the first
    Produce to a partition; the batch is transactional under the coordinator's id and
    epoch; commit sends EndTxn(commit) once the batch is acknowledged."""
    h, txn = transactional()
    handles = begin_and_send(h, txn, 3)
    (r,) = h.produce_requests()
    assert r.body.transactional_id == "txn"
    b = h.batch(r)
    assert (b.producer_id, b.producer_epoch, b.base_sequence, b.is_transactional) == (42, 0, 0, True)
    result = txn.begin_commit()
    h.step()
    assert not h.net.pending("EndTxn"), "EndTxn waits for the batch"
    h.respond(r, base_offset=0)
    h.step()
    h.step()
    end = h.answer_end_txn()
    assert end.body.committed is True and (end.body.producer_id, end.body.producer_epoch) == (42, 0)
    assert result.done and result.error is None and txn.state is TransactionState.READY
    assert [x.offset for x in handles] == [0, 1, 2]
    assert h.producer.metrics.transactions_committed == 1


def test_end_txn_not_sent_if_incomplete_batches():
    """TransactionManagerTest.testEndTxnNotSentIfIncompleteBatches."""
    h, txn = transactional()
    begin_and_send(h, txn)
    txn.begin_commit()
    for _ in range(3):
        h.step(ms=5)
    assert not h.net.requests("EndTxn")


def test_disallow_commit_on_produce_failure():
    """TransactionManagerTest.testDisallowCommitOnProduceFailure: OUT_OF_ORDER_SEQUENCE_NUMBER
    fails a transactional batch (no retry, no epoch bump of its own); the commit under
    way fails with an abortable error and EndTxn(commit) is never sent; the abort
    (EndTxn(abort)) leaves the producer ready. The failure came while completing, so no
    epoch bump is asked (Java: ``canBumpEpoch() && !isCompleting()``)."""
    h, txn = transactional()
    handles = begin_and_send(h, txn)
    commit = txn.begin_commit()
    (r,) = h.produce_requests()
    h.respond(r, errors={0: "OUT_OF_ORDER_SEQUENCE_NUMBER"})
    h.step()
    assert handles[0].error == "OUT_OF_ORDER_SEQUENCE_NUMBER"
    h.step()
    assert commit.done and commit.error is not None and txn.has_abortable_error
    assert not h.net.requests("EndTxn"), "the commit is never sent"
    abort = txn.begin_abort()
    end = h.answer_end_txn()
    assert end.body.committed is False
    assert abort.done and abort.error is None and txn.state is TransactionState.READY
    m = h.producer.metrics
    assert m.transactions_aborted == 1 and m.errors_by_name["OUT_OF_ORDER_SEQUENCE_NUMBER"] == 1
    assert m.records_failed == 1 and m.failed_by_error == {"OUT_OF_ORDER_SEQUENCE_NUMBER": 1}


def test_allow_abort_on_produce_failure():
    """TransactionManagerTest.testAllowAbortOnProduceFailure: OUT_OF_ORDER_SEQUENCE_NUMBER
    inside an open transaction makes it abortable with an epoch bump: the abort sends
    EndTxn(abort), then InitProducerId with the current id and epoch (KIP-360); the next
    transaction's batches start at sequence 0 under the new epoch."""
    h, txn = transactional()
    handles = begin_and_send(h, txn)
    h.respond(h.produce_requests()[-1], errors={0: "OUT_OF_ORDER_SEQUENCE_NUMBER"})
    h.step()
    assert handles[0].error == "OUT_OF_ORDER_SEQUENCE_NUMBER" and txn.has_abortable_error
    abort = txn.begin_abort()
    end = h.answer_end_txn()
    assert end.body.committed is False
    bump = h.answer_init(producer_id=42, epoch=1)
    assert (bump.body.producer_id, bump.body.producer_epoch) == (42, 0)
    assert abort.done and abort.error is None and txn.state is TransactionState.READY
    more = begin_and_send(h, txn)
    b = h.batch(h.produce_requests()[-1])
    assert (b.producer_epoch, b.base_sequence) == (1, 0)
    assert not more[0].done


def test_records_acknowledged_in_an_aborted_transaction_count_as_failed():
    """kctl's accounting: a read_committed consumer never sees an aborted transaction's
    records, so those the broker had acknowledged move from acked to failed
    (TRANSACTION_ABORTED) when the abort completes; every record is still counted once."""
    h, txn = transactional()
    first = begin_and_send(h, txn, 2)
    h.respond(h.produce_requests()[-1], base_offset=0)
    h.step()
    assert [x.offset for x in first] == [0, 1]
    second = h.send(1)
    h.step()
    h.respond(h.produce_requests()[-1], errors={0: "OUT_OF_ORDER_SEQUENCE_NUMBER"})
    h.step()
    assert second[0].error == "OUT_OF_ORDER_SEQUENCE_NUMBER" and txn.has_abortable_error
    txn.begin_abort()
    h.answer_end_txn()
    m = h.producer.metrics
    assert m.records_acked == 0 and m.records_failed == 3
    assert m.failed_by_error == {"OUT_OF_ORDER_SEQUENCE_NUMBER": 1, "TRANSACTION_ABORTED": 2}


def test_invalid_producer_epoch_from_produce():
    """TransactionManagerTest.testInvalidProducerEpochFromProduce (KIP-588):
    INVALID_PRODUCER_EPOCH in a Produce response makes the transaction abortable (not
    fatal); the abort is EndTxn then an InitProducerId that bumps the epoch."""
    h, txn = transactional()
    handles = begin_and_send(h, txn)
    h.respond(h.produce_requests()[-1], errors={0: "INVALID_PRODUCER_EPOCH"})
    h.step()
    assert handles[0].error == "INVALID_PRODUCER_EPOCH"
    assert txn.has_abortable_error and not txn.has_fatal_error
    txn.begin_abort()
    h.step()
    h.answer_end_txn()
    assert h.net.pending("InitProducerId"), "the epoch bump follows the abort"


def test_producer_fenced_in_produce_is_fatal():
    """TransactionManager.maybeTransitionToErrorState: PRODUCER_FENCED is fatal; the
    transaction can be neither committed nor aborted."""
    h, txn = transactional()
    begin_and_send(h, txn)
    h.respond(h.produce_requests()[-1], errors={0: "PRODUCER_FENCED"})
    h.step()
    assert txn.has_fatal_error
    with pytest.raises(Exception):
        txn.begin_abort()


def test_records_acknowledged_in_a_transaction_a_fatal_error_left_open_count_as_failed():
    """kctl's accounting: after PRODUCER_FENCED the open transaction can never commit, so
    the records the broker acknowledged in it are counted failed
    (TRANSACTION_NOT_COMMITTED), per partition too; the fatal line says why."""
    h, txn = transactional()
    first = begin_and_send(h, txn, 2)
    h.respond(h.produce_requests()[-1], base_offset=0)
    h.step()
    assert [x.offset for x in first] == [0, 1]
    second = h.send(3)
    h.step()
    h.respond(h.produce_requests()[-1], errors={0: "PRODUCER_FENCED"})
    h.step()
    h.step()
    assert txn.has_fatal_error and second[0].error == "PRODUCER_FENCED"
    m = h.producer.metrics
    assert (m.records_acked, m.records_failed) == (0, 5)
    assert m.failed_by_error == {"PRODUCER_FENCED": 3, "TRANSACTION_NOT_COMMITTED": 2}
    assert sum(m.records_by_partition.values()) == 0 and m.value_bytes_acked == 0
    fatal = h.producer.fatal_error
    assert fatal.startswith("PRODUCER_FENCED: another producer with the same transactional.id")


def test_producer_fenced_exception_in_init_producer_id():
    """TransactionManagerTest.testProducerFencedExceptionInInitProducerId."""
    h = Harness(**TXN)
    h.step()
    h.answer_metadata()
    txn = h.producer.transactions
    init = txn.initialize()
    h.step()
    h.answer_find_coordinator()
    h.answer_init(error="PRODUCER_FENCED")
    assert init.done and init.error == "PRODUCER_FENCED" and txn.has_fatal_error


def test_duplicate_sequence_in_a_transaction_is_success():
    """SenderTest.testCorrectHandlingOfDuplicateSequenceError, transactional: the broker
    has the batch already; success without an offset, the transaction commits."""
    h, txn = transactional()
    handles = begin_and_send(h, txn)
    h.respond(h.produce_requests()[-1], errors={0: "DUPLICATE_SEQUENCE_NUMBER"})
    h.step()
    assert handles[0].done and handles[0].error is None
    txn.begin_commit()
    h.step()
    h.answer_end_txn()
    assert txn.state is TransactionState.READY


def test_transactional_unknown_producer_handling_when_retention_limit_reached():
    """SenderTest.testTransactionalUnknownProducerHandlingWhenRetentionLimitReached:
    UNKNOWN_PRODUCER_ID with the log start offset past the last acknowledged offset: the
    partition's sequences restart at 0 (same epoch) and the batch is retried; the
    transaction goes on."""
    h, txn = transactional()
    begin_and_send(h, txn)
    h.respond(h.produce_requests()[-1], base_offset=1000, log_start_offset=10)
    h.step()
    second = h.send(1)
    h.step()
    r = h.produce_requests()[-1]
    assert (h.batch(r).producer_epoch, h.batch(r).base_sequence) == (0, 1)
    h.respond(r, errors={0: "UNKNOWN_PRODUCER_ID"}, log_start_offset=1010)
    h.step(ms=20)
    r = h.produce_requests()[-1]
    assert (h.batch(r).producer_epoch, h.batch(r).base_sequence) == (0, 0)
    h.respond(r, base_offset=1011, log_start_offset=1010)
    h.step()
    assert second[0].offset == 1011 and not txn.has_error


def test_unknown_producer_id_with_unknown_log_start_offset_is_retried():
    """SenderTest.testUnknownProducerErrorShouldBeRetriedWhenLogStartOffsetIsUnknown, for a
    transactional producer: retried as is, same epoch and sequence."""
    h, txn = transactional()
    begin_and_send(h, txn)
    h.respond(h.produce_requests()[-1], base_offset=1000, log_start_offset=10)
    h.step()
    second = h.send(1)
    h.step()
    h.respond(h.produce_requests()[-1], errors={0: "UNKNOWN_PRODUCER_ID"}, log_start_offset=-1)
    h.step(ms=20)
    r = h.produce_requests()[-1]
    assert (h.batch(r).producer_epoch, h.batch(r).base_sequence) == (0, 1)
    h.respond(r, base_offset=1001)
    h.step()
    assert second[0].offset == 1001 and not txn.has_error


def test_unknown_producer_id_when_the_log_was_not_truncated_aborts():
    """SenderTest.testShouldRaiseOutOfOrderSequenceExceptionToUserIfLogWasNotTruncated:
    for a transactional producer, UNKNOWN_PRODUCER_ID with a known log start offset that
    is not past the last acknowledged one fails the batch; the transaction is abortable."""
    h, txn = transactional()
    begin_and_send(h, txn)
    h.respond(h.produce_requests()[-1], base_offset=1000, log_start_offset=10)
    h.step()
    second = h.send(1)
    h.step()
    h.respond(h.produce_requests()[-1], errors={0: "UNKNOWN_PRODUCER_ID"}, log_start_offset=10)
    h.step()
    assert second[0].error == "UNKNOWN_PRODUCER_ID" and txn.has_abortable_error


def test_transition_to_abortable_error_on_batch_expiry():
    """TransactionManagerTest.testTransitionToAbortableErrorOnBatchExpiry: a batch sent
    and expired (delivery.timeout.ms) leaves its sequence unresolved; once nothing is in
    flight the transaction is abortable (and the abort bumps the epoch)."""
    h, txn = transactional(**{"delivery.timeout.ms": "1500", "request.timeout.ms": "1000"})
    handles = begin_and_send(h, txn)
    (r,) = h.produce_requests()
    h.step(ms=1600)
    assert handles[0].error == "DELIVERY_TIMEOUT"
    h.step()
    assert txn.has_abortable_error
    txn.begin_abort()
    h.step()
    h.answer_end_txn()
    assert h.net.pending("InitProducerId"), "the abort bumps the epoch"


def test_transactional_split_batch_and_send():
    """SenderTest.testTransactionalSplitBatchAndSend: MESSAGE_TOO_LARGE splits a
    transactional batch; the parts keep its id, epoch and contiguous sequences."""
    h, txn = transactional(**{"linger.ms": "20"})
    txn.begin()
    handles = h.send(10)
    h.step(ms=20)
    h.answer_add_partitions()
    h.step()
    big = h.produce_requests()[-1]
    assert h.batch(big).base_sequence == 0 and len(h.batch(big).records) == 10
    h.respond(big, errors={0: "MESSAGE_TOO_LARGE"})
    h.step()
    parts, offset = [], 0
    for _ in range(10):
        h.step(ms=200)
        pending = h.net.pending("Produce")
        if not pending:
            break
        for r in pending:
            b = h.batch(r)
            parts.append((b.producer_epoch, b.base_sequence, len(b.records), b.is_transactional))
            h.respond(r, base_offset=offset)
            offset += len(b.records)
    assert parts == [(0, 0, 5, True), (0, 5, 5, True)]
    assert [x.offset for x in handles] == list(range(10)) and not txn.has_error


def test_a_refused_epoch_bump_is_asked_again_with_the_transactional_id_alone():
    """Not in Java (its producer goes fatal and the application builds a new one): a
    coordinator that offers InitProducerId v3+ but refuses the bump (Tansu answers
    UNKNOWN_SERVER_ERROR) is asked again as a new producer would ask; the abort then
    completes and the next transaction starts at sequence 0 under the answer's epoch."""
    h, txn = transactional()
    begin_and_send(h, txn)
    h.respond(h.produce_requests()[-1], errors={0: "OUT_OF_ORDER_SEQUENCE_NUMBER"})
    h.step()
    abort = txn.begin_abort()
    h.answer_end_txn()
    bump = h.answer_init(error="UNKNOWN_SERVER_ERROR")
    assert (bump.body.producer_id, bump.body.producer_epoch) == (42, 0)
    fresh = h.answer_init(producer_id=42, epoch=1)
    assert (fresh.body.producer_id, fresh.body.producer_epoch) == (-1, -1)
    assert fresh.body.transactional_id == "txn"
    assert abort.done and abort.error is None and txn.state is TransactionState.READY
    begin_and_send(h, txn)
    b = h.batch(h.produce_requests()[-1])
    assert (b.producer_epoch, b.base_sequence) == (1, 0)


@pytest.mark.parametrize("error", ["NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS",
                                   "COORDINATOR_NOT_AVAILABLE"])
def test_retriable_error_in_find_coordinator_is_retried(error):
    """TransactionManager.FindCoordinatorHandler (trunk): any retriable error
    (``RetriableException``) is asked again after ``retry.backoff.ms``, not fatal."""
    h = Harness(**TXN)
    h.step()
    h.answer_metadata()
    txn = h.producer.transactions
    init = txn.initialize()
    h.step()
    h.answer_find_coordinator(error=error)
    assert not txn.has_error and not init.done
    h.answer_find_coordinator()
    h.answer_init(producer_id=42, epoch=0)
    assert init.done and init.error is None and txn.state is TransactionState.READY


def test_transaction_abortable_exception_in_end_txn():
    """TransactionManagerTest.testTransactionAbortableExceptionInEndTxn (KIP-890):
    TRANSACTION_ABORTABLE answering EndTxn(commit) fails the commit and leaves the
    transaction abortable (not fatal); the abort then completes it."""
    h, txn = transactional()
    handles = begin_and_send(h, txn)
    commit = txn.begin_commit()
    h.respond(h.produce_requests()[-1], base_offset=0)
    h.step()
    h.answer_end_txn(error="TRANSACTION_ABORTABLE")
    assert commit.done and commit.error == "TRANSACTION_ABORTABLE"
    assert txn.has_abortable_error and not txn.has_fatal_error and handles[0].offset == 0
    abort = txn.begin_abort()
    end = h.answer_end_txn()
    assert end.body.committed is False and abort.done and abort.error is None
    assert txn.state is TransactionState.READY


def test_init_producer_id_after_the_coordinator_lookup_waits_retry_backoff():
    """Sender.maybeSendAndPollTransactionalRequest (Java trunk): InitProducerId picked while
    the coordinator is unknown goes back as a retry (maybeFindCoordinatorAndRetry), and a
    retried request is sent only after ``retry.backoff.ms`` (``time.sleep(retryBackoffMs)``
    when ``isRetry()``): the wait between FindCoordinator's answer and InitProducerId is
    Java's, not kctl's (``retry.backoff.ms`` is that wait)."""
    h = Harness(**{**TXN, "retry.backoff.ms": "50", "retry.backoff.max.ms": "50"})
    h.step()
    h.answer_metadata()
    init = h.producer.transactions.initialize()
    h.step()
    picked = h.clock.now_ns()
    h.answer_find_coordinator()
    while h.clock.now_ns() - picked < 49_000_000:
        assert not h.net.pending("InitProducerId")
        h.step(ms=1)
    h.step(ms=1)
    assert h.net.pending("InitProducerId") and not init.done


def test_transaction_abortable_exception_in_find_coordinator():
    """TransactionManagerTest.testTransactionAbortableExceptionInFindCoordinator (KIP-890),
    here while initializing (Java's table lets INITIALIZING go to ABORTABLE_ERROR): the
    request under way fails with TRANSACTION_ABORTABLE, the producer is abortable, not
    fatal, and nothing raises."""
    h = Harness(**TXN)
    h.step()
    h.answer_metadata()
    txn = h.producer.transactions
    init = txn.initialize()
    h.step()
    h.answer_find_coordinator(error="TRANSACTION_ABORTABLE")
    assert txn.has_abortable_error and not init.done
    h.step(ms=10)   # InitProducerId's retry comes due: it fails with the error
    assert txn.has_abortable_error and not txn.has_fatal_error
    assert init.done and init.error == "TRANSACTION_ABORTABLE"


def test_records_count_as_acked_only_when_their_transaction_commits():
    """kctl's accounting: a transaction's records are acknowledged for good only when it
    commits (until then an abort can still take them back), so records, value bytes,
    batches and the per-partition and per-broker counts move to acked at the commit,
    not at the Produce answer."""
    h, txn = transactional()
    begin_and_send(h, txn, 3)
    h.respond(h.produce_requests()[-1], base_offset=0)
    h.step()
    m = h.producer.metrics
    assert (m.records_acked, m.batches_acked, m.value_bytes_acked) == (0, 0, 0)
    assert sum(m.records_by_partition.values()) == 0 and sum(m.records_by_node.values()) == 0
    txn.begin_commit()
    h.step()
    h.answer_end_txn()
    assert (m.records_acked, m.batches_acked, m.value_bytes_acked) == (3, 1, 6)
    assert dict(m.records_by_node) == {0: 3} and sum(m.records_by_partition.values()) == 3
    assert m.records_failed == 0


def test_an_aborted_transaction_leaves_no_acked_batch_partition_or_broker_count():
    """kctl's accounting: after the abort, the batch the broker had acknowledged is in
    no acked figure (batches, hence records per batch, per partition, per broker)."""
    h, txn = transactional()
    begin_and_send(h, txn, 2)
    h.respond(h.produce_requests()[-1], base_offset=0)
    h.step()
    txn.begin_abort()
    h.step()
    h.answer_end_txn()
    m = h.producer.metrics
    assert (m.records_acked, m.batches_acked, m.value_bytes_acked) == (0, 0, 0)
    assert sum(m.records_by_partition.values()) == 0 and sum(m.records_by_node.values()) == 0
    assert m.failed_by_error == {"TRANSACTION_ABORTED": 2} and m.transactions_aborted == 1


def uninitialized():
    h = Harness(**TXN)
    h.step()
    h.answer_metadata()
    txn = h.producer.transactions
    init = txn.initialize()
    h.step()
    h.answer_find_coordinator()
    return h, txn, init


@pytest.mark.parametrize("error", ["TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED"])
def test_transactional_id_authorization_failure_in_init_producer_id(error):
    """TransactionManagerTest.testTransactionalIdAuthorizationFailureInInitProducerId and
    SenderTest.testClusterAuthorizationExceptionInInitProducerIdRequest (Java trunk): the
    error is abortable, not fatal; init_transactions fails with it, the sender's next turn
    (Sender.shouldHandleAuthorizationError) takes the producer back to UNINITIALIZED, and
    init_transactions may be called again: it gets the producer id."""
    h, txn, init = uninitialized()
    h.answer_init(error=error)
    assert init.done and init.error == error
    assert not txn.has_fatal_error and not h.producer.sender.fatal_error
    h.step()
    assert txn.state is TransactionState.UNINITIALIZED and not txn.has_error
    again = txn.initialize()
    r = h.answer_init(producer_id=43, epoch=0)
    assert r.body.transactional_id == "txn"
    assert again.done and again.error is None and txn.state is TransactionState.READY
    begin_and_send(h, txn)
    assert h.batch(h.produce_requests()[-1]).producer_id == 43


def test_init_transactions_raises_an_authorization_error_as_neither_fatal_nor_abortable():
    """KafkaProducer.initTransactions as an application sees it: the authorization error
    is raised, not as fatal nor as an abortable transaction error (nothing to abort: the
    producer is UNINITIALIZED and init_transactions may be called again)."""
    from kctl.engine.producer import ProducerFatalError, TransactionAbortableError
    from kctl.errors import KctlError

    h, txn, init = uninitialized()
    h.answer_init(error="TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
    with pytest.raises(KctlError) as e:
        h.producer._run_until(init, 1.0, "init_transactions")
    assert not isinstance(e.value, ProducerFatalError | TransactionAbortableError)
    assert str(e.value).startswith("init_transactions: TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
    assert txn.state is TransactionState.UNINITIALIZED


def test_transaction_abortable_exception_in_init_producer_id():
    """TransactionManagerTest.testTransactionAbortableExceptionInInitProducerId (KIP-890):
    TRANSACTION_ABORTABLE answering InitProducerId is abortable, not fatal: a commit is
    refused with it (Java's assertAbortableError) and an abort clears it."""
    h, txn, init = uninitialized()
    h.answer_init(error="TRANSACTION_ABORTABLE")
    h.step()
    assert init.done and init.error == "TRANSACTION_ABORTABLE"
    assert txn.has_abortable_error and not txn.has_fatal_error
    from kctl.errors import KctlError
    with pytest.raises(KctlError, match="TRANSACTION_ABORTABLE"):
        txn.begin_commit()
    txn.begin_abort()
    assert not txn.has_error


def test_closing_while_a_commit_has_no_answer_abandons_its_records():
    """kctl's accounting: the producer closes while EndTxn(commit) is unanswered: whether
    the transaction committed is unknown, so its acknowledged records are abandoned (with
    the reason), neither acked nor failed; every record is still counted once."""
    from kctl.engine.transactions import TRANSACTION_END_UNKNOWN

    h, txn = transactional(**{"max.block.ms": "50"})
    begin_and_send(h, txn, 2)
    h.respond(h.produce_requests()[-1], base_offset=0)
    h.step()
    txn.begin_commit()
    h.await_request("EndTxn")
    h.producer.close(0)
    m = h.producer.metrics
    assert (m.records_acked, m.records_failed, m.records_abandoned) == (0, 0, 2)
    assert m.abandoned_by_reason == {TRANSACTION_END_UNKNOWN: 2}


def test_closing_in_an_open_transaction_that_cannot_be_aborted_fails_its_records():
    """kctl's accounting: close aborts the open transaction (as Java's); when the abort has
    no answer either, the transaction can no longer commit (the coordinator aborts it at
    transaction.timeout.ms): its acknowledged records count failed TRANSACTION_NOT_COMMITTED."""
    h, txn = transactional()
    begin_and_send(h, txn, 2)
    h.respond(h.produce_requests()[-1], base_offset=0)
    h.step()
    h.producer.close(0)
    m = h.producer.metrics
    assert (m.records_acked, m.records_failed) == (0, 2)
    assert m.failed_by_error == {"TRANSACTION_NOT_COMMITTED": 2}


def test_commit_of_a_transaction_a_failed_batch_made_abortable_raises_the_abortable_error():
    """KafkaProducer.commitTransaction -> beginCommit's maybeFailWithError: a batch of the
    transaction failed (INVALID_PRODUCER_EPOCH, abortable) before the application commits:
    the commit raises the abortable error (so a load worker aborts and goes on), not a
    plain error that ends the run; the abort then succeeds."""
    from kctl.engine.producer import TransactionAbortableError

    h, txn = transactional()
    begin_and_send(h, txn)
    h.respond(h.produce_requests()[-1], errors={0: "INVALID_PRODUCER_EPOCH"})
    h.step()
    assert txn.has_abortable_error
    with pytest.raises(TransactionAbortableError, match="INVALID_PRODUCER_EPOCH"):
        h.producer.commit_transaction(0.01)
    txn.begin_abort()
    h.step()
    h.answer_end_txn()
    h.answer_init(producer_id=42, epoch=1)
    assert txn.state is TransactionState.READY


def _time_passes_while_waiting(h):
    """The fake network answers nothing by itself: a loop turn's wait lets the clock run."""
    poll = h.net.poll

    def waiting(timeout_ns, now_ns):
        h.clock.advance(ns=max(timeout_ns, 1000))
        return poll(timeout_ns, h.clock.now_ns())
    h.net.poll = waiting


def test_commit_transaction_times_out_and_a_second_call_goes_on_with_the_same_commit():
    """TransactionManagerTest.testRetryCommitTransactionAfterTimeout (KafkaProducer's
    commitTransaction may be called again after its TimeoutException): the commit's flush
    and EndTxn share one deadline; the second call waits for the same EndTxn, sends none
    again, and completes when it is answered."""
    from kctl.engine.producer import TransactionTimeoutError

    h, txn = transactional()
    begin_and_send(h, txn, 2)
    _time_passes_while_waiting(h)
    t0 = h.clock.now_ns()
    with pytest.raises(TransactionTimeoutError, match="still have no answer"):
        h.producer.commit_transaction(0.2)
    assert 0.2e9 <= h.clock.now_ns() - t0 < 0.3e9, "the flush is bounded by the commit's time"
    assert not h.net.requests("EndTxn") and txn.state is TransactionState.COMMITTING_TRANSACTION
    h.respond(h.produce_requests()[-1], base_offset=0)
    t0 = h.clock.now_ns()
    with pytest.raises(TransactionTimeoutError, match="commit_transaction"):
        h.producer.commit_transaction(0.2)   # flushed; EndTxn sent, no answer within the rest
    assert h.clock.now_ns() - t0 < 0.3e9, "one deadline for the flush and the EndTxn"
    (end,) = h.net.pending("EndTxn")
    h.net.respond(end, EndTxnResponse(throttle_time_ms=0, error_code=0))
    h.producer.commit_transaction(0.2)
    assert len(h.net.requests("EndTxn")) == 1 and txn.state is TransactionState.READY
    assert h.producer.metrics.records_acked == 2


def test_closing_while_a_commit_waits_for_its_records_fails_them_not_committed():
    """kctl's accounting: the producer closes in a commit whose EndTxn never went out (a
    record of the transaction still had no answer): the transaction cannot have committed
    (the coordinator aborts it at transaction.timeout.ms), so what the broker acknowledged
    in it counts failed TRANSACTION_NOT_COMMITTED, not abandoned as a commit of unknown end."""
    h, txn = transactional()
    begin_and_send(h, txn, 2)
    (first,) = h.produce_requests()
    h.respond(first, base_offset=0)
    h.step()
    h.send(3, partition=0)
    h.step()
    assert len(h.net.pending("Produce")) == 3, "sent, unanswered (a request each, linger.ms=0)"
    txn.begin_commit()
    h.step(ms=5)
    assert not h.net.requests("EndTxn")
    h.producer.close(0, abandon_reason="stopped")
    m = h.producer.metrics
    assert (m.records_acked, m.records_failed, m.records_abandoned) == (0, 2, 3)
    assert m.failed_by_error == {"TRANSACTION_NOT_COMMITTED": 2}
    assert m.abandoned_by_reason == {"stopped": 3}
