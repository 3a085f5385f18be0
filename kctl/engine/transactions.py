"""Transactions: the transactional half of the Java client's TransactionManager
(idempotence.py holds the producer id and the sequences).

How this works
--------------
- The state of the producer's transaction is a table (``TRANSITIONS``, Java's
  ``State.isTransitionValid``): UNINITIALIZED -> INITIALIZING -> READY ->
  IN_TRANSACTION -> COMMITTING_TRANSACTION -> READY, or -> ABORTABLE_ERROR ->
  ABORTING_TRANSACTION -> READY; FATAL_ERROR from anywhere, for good.
- The application side (``Producer.init_transactions`` / ``begin_transaction`` /
  ``commit_transaction`` / ``abort_transaction``) calls ``initialize``, ``begin``,
  ``begin_commit`` and ``begin_abort``; each returns a ``TransactionResult`` that
  completes when the coordinator has answered (the producer runs its loop until then).
- Requests to the transaction coordinator wait in a queue ordered as Java's
  (FindCoordinator, InitProducerId, AddPartitionsToTxn, EndTxn, epoch bump); the
  sender takes one at a time (``next_request``), builds it at the version it
  negotiated (``build``), sends it (to the coordinator, or to any broker for
  FindCoordinator) and hands the answer back (``on_response``, ``on_disconnect``).
  While one is in flight the sender sends no Produce requests (as Java's Sender).
- A partition may take batches only once it is in the transaction: the accumulator's
  drain asks ``may_send_to`` (through idempotence's ``may_drain``), which notes a new
  partition; the next request is an AddPartitionsToTxn for every partition noted.
  (KIP-890's implicit add of the transaction protocol v2 is not used: kctl speaks v1,
  which Kafka 4 brokers still accept; Produce stays at v11 inside a transaction.)
- EndTxn is sent only when no batch is incomplete (a commit flushes first).
- Errors, as Java's handlers (trunk): a coordinator that moved is looked up again,
  and any retriable error (COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR answering
  FindCoordinator, ...) is asked again after ``retry.backoff.ms``; PRODUCER_FENCED (and
  INVALID_PRODUCER_EPOCH from the coordinator), TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
  INVALID_TXN_STATE, an unsupported version and anything unexpected are fatal;
  UNKNOWN_PRODUCER_ID and INVALID_PRODUCER_ID_MAPPING are abortable with an epoch
  bump when the coordinator can bump (InitProducerId v3+, KIP-360), else fatal; a
  failed batch makes the transaction abortable (idempotence.py reports it through
  ``on_abortable_error``), and the abort then bumps the epoch when it can.
  TRANSACTION_ABORTABLE (KIP-890) answering FindCoordinator, InitProducerId,
  AddPartitionsToTxn or EndTxn is abortable. InitProducerId refused for authorization
  (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED) is abortable, and
  the sender's next turn undoes it (``on_authorization_error``, Java's
  Sender.shouldHandleAuthorizationError): pending requests and held batches fail with
  it and the producer is UNINITIALIZED again, free to ask init_transactions again. A
  coordinator that refuses the
  epoch bump with anything but fencing or a retriable error is asked again with the
  transactional id alone, as a freshly built producer would ask (Java's producer goes
  fatal there and its application builds that new producer).
- Accounting: a record of a transaction counts as acknowledged (records, value bytes,
  batches, per partition and per broker) only when its transaction commits: until then
  the sender hands each acknowledged batch here (``on_batch_acked``) and it waits in
  ``PendingAcks``. The commit moves them into the acked counts; an abort counts them
  failed (``TRANSACTION_ABORTED``), and a fatal error inside the transaction (it can
  never commit) failed ``TRANSACTION_NOT_COMMITTED``: a read_committed consumer never
  sees them. So no figure ever counts as acked a record that ends failed (the load
  worker holds the records' latencies back the same way). Their handles keep their
  offsets, as Java's callbacks have already run.

Time is passed in (``now_ns``); no I/O (conventions rules 1 and 3).
"""

from __future__ import annotations

import enum
import heapq
import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final

from kctl.engine.batch import TopicPartition
from kctl.engine.clock import NS_PER_MS
from kctl.engine.idempotence import Idempotence, ProducerIdState
from kctl.engine.metrics import ProducerMetrics
from kctl.errors import KctlError
from kctl.protocol import requests, schema
from kctl.protocol.error_codes import ERRORS_BY_NAME, error_for

__all__ = ["AUTHORIZATION_ERRORS", "TRANSACTION_ABORTED", "TRANSACTION_END_UNKNOWN",
           "TRANSACTION_NOT_COMMITTED", "TRANSITIONS", "PendingAcks", "TransactionConfig",
           "TransactionResult", "TransactionState", "Transactions", "TxnRequest", "TxnRequestKind"]

FIND_COORDINATOR: Final = schema.API_BY_NAME["FindCoordinator"].api_key
INIT_PRODUCER_ID: Final = schema.API_BY_NAME["InitProducerId"].api_key
ADD_PARTITIONS_TO_TXN: Final = schema.API_BY_NAME["AddPartitionsToTxn"].api_key
END_TXN: Final = schema.API_BY_NAME["EndTxn"].api_key

#: How records of an aborted transaction that the broker had acknowledged are counted:
#: failed, since no read_committed consumer will see them.
TRANSACTION_ABORTED: Final = "TRANSACTION_ABORTED"

#: How records the broker acknowledged in a transaction that can no longer commit (the
#: producer hit a fatal error inside it) are counted: failed, for the same reason.
TRANSACTION_NOT_COMMITTED: Final = "TRANSACTION_NOT_COMMITTED"

#: Why the records of a transaction whose end the producer never learnt (it closed while
#: the commit had no answer) are abandoned: the broker may have committed them or not.
TRANSACTION_END_UNKNOWN: Final = "producer closed before the transaction's end was known"

#: Why a fatal error is fatal, for its one line (Java's ProducerFencedException message).
_FATAL_REASONS: Final = {
    "PRODUCER_FENCED": "another producer with the same transactional.id fenced this one, or "
                       "the coordinator did (it aborts a transaction older than "
                       "transaction.timeout.ms and bumps the epoch)",
}

#: The first AddPartitionsToTxn of a transaction retries CONCURRENT_TRANSACTIONS this fast:
#: the previous transaction's markers are usually almost written (Java's 20 ms).
ADD_PARTITIONS_RETRY_BACKOFF_MS: Final = 20


class TransactionState(enum.Enum):
    UNINITIALIZED = "uninitialized"
    INITIALIZING = "initializing"
    READY = "ready"
    IN_TRANSACTION = "in_transaction"
    COMMITTING_TRANSACTION = "committing_transaction"
    ABORTING_TRANSACTION = "aborting_transaction"
    ABORTABLE_ERROR = "abortable_error"
    FATAL_ERROR = "fatal_error"


_T = TransactionState
#: target state -> the states it may be entered from (Java's isTransitionValid; rule 5).
TRANSITIONS: Final[dict[TransactionState, frozenset[TransactionState]]] = {
    _T.UNINITIALIZED: frozenset({_T.READY, _T.ABORTABLE_ERROR}),
    _T.INITIALIZING: frozenset({_T.UNINITIALIZED, _T.ABORTING_TRANSACTION, _T.COMMITTING_TRANSACTION}),
    _T.READY: frozenset({_T.INITIALIZING, _T.COMMITTING_TRANSACTION, _T.ABORTING_TRANSACTION}),
    _T.IN_TRANSACTION: frozenset({_T.READY}),
    _T.COMMITTING_TRANSACTION: frozenset({_T.IN_TRANSACTION}),
    _T.ABORTING_TRANSACTION: frozenset({_T.IN_TRANSACTION, _T.ABORTABLE_ERROR}),
    _T.ABORTABLE_ERROR: frozenset({_T.IN_TRANSACTION, _T.COMMITTING_TRANSACTION, _T.ABORTABLE_ERROR,
                                   _T.INITIALIZING}),
    _T.FATAL_ERROR: frozenset(TransactionState),
}


class TxnRequestKind(enum.IntEnum):
    """What a coordinator request is for; the value is its priority (lower first)."""

    FIND_COORDINATOR = 0
    INIT_PRODUCER_ID = 1
    ADD_PARTITIONS = 2
    END_TXN = 3
    EPOCH_BUMP = 4


_API_OF: Final = {TxnRequestKind.FIND_COORDINATOR: FIND_COORDINATOR,
                  TxnRequestKind.INIT_PRODUCER_ID: INIT_PRODUCER_ID,
                  TxnRequestKind.EPOCH_BUMP: INIT_PRODUCER_ID,
                  TxnRequestKind.ADD_PARTITIONS: ADD_PARTITIONS_TO_TXN,
                  TxnRequestKind.END_TXN: END_TXN}


@dataclass(frozen=True, slots=True)
class TransactionConfig:
    transactional_id: str
    transaction_timeout_ms: int
    retry_backoff_ms: int


@dataclass(slots=True)
class TransactionResult:
    """Java's TransactionalRequestResult: done, with the error name when it failed."""

    operation: str
    done: bool = False
    error: str | None = None

    def complete(self, error: str | None = None) -> None:
        if not self.done:
            self.done = True
            self.error = error


@dataclass(slots=True, eq=False)
class TxnRequest:
    kind: TxnRequestKind
    result: TransactionResult
    committed: bool = False                                 # EndTxn
    partitions: frozenset[TopicPartition] = frozenset()     # AddPartitionsToTxn
    retry: bool = False
    not_before_ns: int = 0
    backoff_ms: int | None = None                           # AddPartitions' shorter retry backoff
    retry_fresh: bool = False                               # InitProducerId after a refused bump
    sent_ns: int = -1
    order: int = field(default=0)

    @property
    def api_key(self) -> int:
        return _API_OF[self.kind]

    @property
    def needs_coordinator(self) -> bool:
        return self.kind is not TxnRequestKind.FIND_COORDINATOR

    @property
    def is_end_txn(self) -> bool:
        return self.kind is TxnRequestKind.END_TXN


@dataclass(slots=True)
class PendingAcks:
    """The batches the broker acknowledged in the open transaction, not yet counted:
    records, value bytes and batches, records per (partition, broker)."""

    records: int = 0
    value_bytes: int = 0
    batches: int = 0
    by_place: Counter[tuple[TopicPartition, int]] = field(default_factory=Counter)

    def add(self, tp: TopicPartition, node_id: int, records: int, value_bytes: int) -> None:
        self.records += records
        self.value_bytes += value_bytes
        self.batches += 1
        self.by_place[(tp, node_id)] += records

    def count_acked(self, m: ProducerMetrics) -> None:
        """The transaction committed: its records count as acknowledged."""
        m.records_acked += self.records
        m.value_bytes_acked += self.value_bytes
        m.batches_acked += self.batches
        for (tp, node_id), n in self.by_place.items():
            m.records_by_partition[tp] += n
            m.records_by_node[node_id] += n
        self.clear()

    def count_failed(self, m: ProducerMetrics, reason: str) -> None:
        """The transaction will never commit: its records count as failed with ``reason``."""
        if self.records:
            m.records_failed += self.records
            m.failed_by_error[reason] += self.records
        self.clear()

    def count_abandoned(self, m: ProducerMetrics, reason: str) -> None:
        """The producer closed before the transaction's end was known (a commit with no
        answer): committed or not, nobody can say; counted abandoned with ``reason``."""
        if self.records:
            m.records_abandoned += self.records
            m.abandoned_by_reason[reason] += self.records
        self.clear()

    def clear(self) -> None:
        self.records = self.value_bytes = self.batches = 0
        self.by_place.clear()


_COORDINATOR_MOVED = frozenset({"NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE"})
_TRY_AGAIN = frozenset({"COORDINATOR_LOAD_IN_PROGRESS", "CONCURRENT_TRANSACTIONS"})
_FENCED = frozenset({"INVALID_PRODUCER_EPOCH", "PRODUCER_FENCED"})
_ABORTABLE_IF_BUMP = frozenset({"UNKNOWN_PRODUCER_ID", "INVALID_PRODUCER_ID_MAPPING"})
#: Answering InitProducerId, abortable and then undone by the sender (Java's
#: Sender.shouldHandleAuthorizationError): the producer goes back to UNINITIALIZED.
AUTHORIZATION_ERRORS: Final = frozenset({"TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
                                         "CLUSTER_AUTHORIZATION_FAILED"})


class Transactions:
    def __init__(self, config: TransactionConfig, idempotence: Idempotence,
                 metrics: ProducerMetrics) -> None:
        self.config = config
        self.transactional_id = config.transactional_id
        self.idempotence = idempotence
        self.metrics = metrics
        idempotence.on_abortable_error = self.on_batch_failed
        idempotence.partition_gate = self.may_send_to
        self.state = TransactionState.UNINITIALIZED
        self.last_error: str | None = None
        self.coordinator: int | None = None       # node id of the transaction coordinator
        self.coordinator_address: tuple[str, int] = ("", 0)
        self.coordinator_can_bump = False         # its InitProducerId takes id and epoch (v3+)
        self.epoch_bump_required = False
        self.transaction_started = False          # a partition joined (EndTxn needed)
        self.commit_sent = False                  # this transaction's EndTxn(commit) went out
        self.new_partitions: set[TopicPartition] = set()
        self.pending_partitions: set[TopicPartition] = set()
        self.partitions: set[TopicPartition] = set()
        self.in_flight: TxnRequest | None = None
        self._queue: list[tuple[int, int, TxnRequest]] = []
        self._order = itertools.count()
        self._pending_result: TransactionResult | None = None
        # What the broker acknowledged in the open transaction: counted acked at its
        # commit, failed at its abort or at a fatal error (module docstring).
        self.pending_acks = PendingAcks()

    # -- state ------------------------------------------------------------------------------
    def _move(self, target: TransactionState, error: str | None = None) -> None:
        if self.state not in TRANSITIONS[target]:
            raise AssertionError(f"transaction {self.transactional_id!r}: invalid transition "
                                 f"{self.state.value} -> {target.value}")
        self.last_error = error if target in (_T.ABORTABLE_ERROR, _T.FATAL_ERROR) else None
        self.state = target

    @property
    def has_fatal_error(self) -> bool:
        return self.state is _T.FATAL_ERROR

    @property
    def has_abortable_error(self) -> bool:
        return self.state is _T.ABORTABLE_ERROR

    @property
    def has_error(self) -> bool:
        return self.state in (_T.ABORTABLE_ERROR, _T.FATAL_ERROR)

    @property
    def is_completing(self) -> bool:
        return self.state in (_T.COMMITTING_TRANSACTION, _T.ABORTING_TRANSACTION)

    @property
    def is_aborting(self) -> bool:
        return self.state is _T.ABORTING_TRANSACTION

    @property
    def in_transaction(self) -> bool:
        return self.state is _T.IN_TRANSACTION

    def explain(self, error: str) -> str:
        """``error`` with why it is fatal, for its one line."""
        name = error.split(":", 1)[0]
        reason = _FATAL_REASONS.get(name)
        if reason is None or ":" in error:
            return error
        return f"{name}: {reason}"

    def fatal(self, error: str) -> None:
        # The open transaction can never commit now (no EndTxn can follow): what the
        # broker acknowledged in it stays invisible to read_committed consumers.
        self.pending_acks.count_failed(self.metrics, TRANSACTION_NOT_COMMITTED)
        self._move(_T.FATAL_ERROR, error)
        if self.idempotence.state is not ProducerIdState.FATAL:
            self.idempotence.set_fatal(error)
        if self._pending_result is not None:
            self._pending_result.complete(error)
        for _, _, req in self._queue:
            req.result.complete(error)
        self._queue.clear()

    def abortable(self, error: str) -> None:
        if self.state is _T.ABORTING_TRANSACTION:
            return   # already aborting (Java skips the transition)
        if self.state is _T.FATAL_ERROR:
            return
        if self.state not in TRANSITIONS[_T.ABORTABLE_ERROR]:
            self.fatal(error)   # nothing to abort here (Java's invalid transition is fatal too)
            return
        self._move(_T.ABORTABLE_ERROR, error)

    def _abortable_if_possible(self, error: str) -> None:
        if self.coordinator_can_bump:
            self.epoch_bump_required = True
            self.abortable(error)
        else:
            self.fatal(error)

    def on_batch_failed(self, error: str, bump: bool) -> None:
        """A batch failed or a sequence cannot be resolved (idempotence.py): the
        transaction must be aborted, bumping the epoch when the coordinator can."""
        if self.state in (_T.UNINITIALIZED, _T.INITIALIZING, _T.READY, _T.FATAL_ERROR):
            return
        if bump and self.coordinator_can_bump and not self.is_completing:
            self.epoch_bump_required = True
        self.abortable(error)

    def on_authorization_error(self) -> bool:
        """Java's Sender.shouldHandleAuthorizationError, the transactional half: when
        InitProducerId was refused for authorization (abortable), every request waiting
        fails with that error and the producer goes back to UNINITIALIZED with no error
        (init_transactions may be called again). True when it did so (the sender then
        fails the batches it holds)."""
        if self.state is not _T.ABORTABLE_ERROR or self.last_error not in AUTHORIZATION_ERRORS:
            return False
        error = self.last_error
        for _, _, req in self._queue:
            req.result.complete(error)
        self._queue.clear()
        if self._pending_result is not None:
            self._pending_result.complete(error)
        self._move(_T.UNINITIALIZED)
        self.last_error = None
        self.epoch_bump_required = False
        return True

    def close(self) -> None:
        """The producer closes: records acknowledged in a transaction that did not end
        are counted. One whose EndTxn(commit) went out with no answer may have committed
        or not: abandoned (``TRANSACTION_END_UNKNOWN``); any other, a commit whose EndTxn
        never went out (its records still had no answer) included, can no longer commit
        (the coordinator aborts it at ``transaction.timeout.ms``): failed
        ``TRANSACTION_NOT_COMMITTED``."""
        if self.state is _T.COMMITTING_TRANSACTION and self.commit_sent:
            self.pending_acks.count_abandoned(self.metrics, TRANSACTION_END_UNKNOWN)
        else:
            self.pending_acks.count_failed(self.metrics, TRANSACTION_NOT_COMMITTED)

    # -- the application's calls -----------------------------------------------------------
    def initialize(self) -> TransactionResult:
        """InitProducerId with the transactional id (after finding the coordinator)."""
        self._fail_if_error()   # Java's maybeFailWithError
        if self._pending_result is not None and self.state is _T.INITIALIZING:
            return self._pending_result
        self._move(_T.INITIALIZING)
        return self._enqueue_init(bump=False)

    def _enqueue_init(self, *, bump: bool) -> TransactionResult:
        result = TransactionResult("InitProducerId")
        kind = TxnRequestKind.EPOCH_BUMP if bump else TxnRequestKind.INIT_PRODUCER_ID
        self._enqueue(TxnRequest(kind, result))
        self._pending_result = result
        return result

    def begin(self) -> None:
        self._fail_if_error()
        self._move(_T.IN_TRANSACTION)

    def begin_commit(self) -> TransactionResult:
        if self._pending_result is not None and self.state is _T.COMMITTING_TRANSACTION:
            return self._pending_result
        self._fail_if_error()
        self._move(_T.COMMITTING_TRANSACTION)
        return self._begin_completing(committed=True)

    def begin_abort(self) -> TransactionResult:
        if self._pending_result is not None and self.state is _T.ABORTING_TRANSACTION:
            return self._pending_result
        if self.state is not _T.ABORTABLE_ERROR:
            self._fail_if_error()
        self._move(_T.ABORTING_TRANSACTION)
        self.new_partitions.clear()
        return self._begin_completing(committed=False)

    def _begin_completing(self, *, committed: bool) -> TransactionResult:
        if self.new_partitions:
            self._enqueue_add_partitions()
        result = TransactionResult("EndTxn(commit)" if committed else "EndTxn(abort)")
        if self.last_error != "INVALID_PRODUCER_ID_MAPPING":
            self._enqueue(TxnRequest(TxnRequestKind.END_TXN, result, committed=committed))
            if not self.epoch_bump_required:
                self._pending_result = result
                return result
        return self._enqueue_init(bump=True)

    def _fail_if_error(self) -> None:
        if self.has_error:
            raise KctlError(f"transaction {self.transactional_id!r} cannot go on: "
                            f"{self.explain(self.last_error or '')}")

    # -- partitions ----------------------------------------------------------------------------
    def may_send_to(self, tp: TopicPartition) -> bool:
        """Java's isSendToPartitionAllowed; a partition not in the transaction yet is
        noted for the next AddPartitionsToTxn."""
        if tp in self.partitions:
            return True
        if (self.state is _T.IN_TRANSACTION or self.state is _T.COMMITTING_TRANSACTION) \
                and tp not in self.pending_partitions:
            self.new_partitions.add(tp)
        return False

    def _enqueue_add_partitions(self) -> None:
        self.pending_partitions |= self.new_partitions
        parts = frozenset(self.pending_partitions)
        self.new_partitions.clear()
        self._enqueue(TxnRequest(TxnRequestKind.ADD_PARTITIONS, TransactionResult("AddPartitionsToTxn"),
                                 partitions=parts))

    # -- the sender's calls -----------------------------------------------------------------------
    def _enqueue(self, req: TxnRequest) -> None:
        req.order = next(self._order)
        heapq.heappush(self._queue, (int(req.kind), req.order, req))

    @property
    def has_in_flight_request(self) -> bool:
        return self.in_flight is not None

    def has_pending_requests(self) -> bool:
        return bool(self._queue) or self.in_flight is not None or bool(self.new_partitions)

    def next_request(self, has_incomplete_batches: bool, now_ns: int) -> TxnRequest | None:
        """Java's nextRequest: the request to send now, if any."""
        if self.new_partitions and self.state in (_T.IN_TRANSACTION, _T.COMMITTING_TRANSACTION):
            self._enqueue_add_partitions()
        while self._queue:
            req = self._queue[0][2]
            if req.is_end_txn and has_incomplete_batches:
                return None
            if req.not_before_ns > now_ns:
                return None
            heapq.heappop(self._queue)
            if self.has_error and not (self.has_abortable_error
                                       and req.kind is TxnRequestKind.FIND_COORDINATOR):
                req.result.complete(self.last_error)
                continue
            if req.is_end_txn and not self.transaction_started:
                # Nothing joined the transaction: nothing to end on the coordinator.
                req.result.complete()
                self._complete_transaction()
                continue
            return req
        return None

    def next_wake_ns(self, now_ns: int) -> int | None:
        if self._queue:
            return max(now_ns, self._queue[0][2].not_before_ns)
        return None

    def lookup_coordinator(self) -> None:
        self.coordinator = None
        if not any(r.kind is TxnRequestKind.FIND_COORDINATOR for _, _, r in self._queue):
            self._enqueue(TxnRequest(TxnRequestKind.FIND_COORDINATOR, TransactionResult("FindCoordinator")))

    def requeue(self, req: TxnRequest) -> None:
        """Back in the queue as it was (its node was not ready): no backoff."""
        self._enqueue(req)

    def retry(self, req: TxnRequest, now_ns: int) -> None:
        req.retry = True
        backoff = self.config.retry_backoff_ms if req.backoff_ms is None else req.backoff_ms
        req.not_before_ns = now_ns + backoff * NS_PER_MS
        self._enqueue(req)

    def coordinator_ready(self, init_producer_id_version: int | None) -> None:
        """Java's handleCoordinatorReady: can the coordinator bump epochs (KIP-360)?"""
        self.coordinator_can_bump = requests.can_bump_epoch(init_producer_id_version)

    def build(self, req: TxnRequest, version: int) -> Any:
        """The request body at ``version`` (``protocol/requests.py`` builders)."""
        tid = self.transactional_id
        idem = self.idempotence
        if req.kind is TxnRequestKind.FIND_COORDINATOR:
            return requests.find_coordinator(version, tid, requests.COORDINATOR_TRANSACTION)
        if req.kind is TxnRequestKind.INIT_PRODUCER_ID:
            return requests.init_producer_id(version, transactional_id=tid,
                                             transaction_timeout_ms=self.config.transaction_timeout_ms)
        if req.kind is TxnRequestKind.EPOCH_BUMP:
            return requests.init_producer_id(version, transactional_id=tid,
                                             transaction_timeout_ms=self.config.transaction_timeout_ms,
                                             producer_id=idem.producer_id,
                                             producer_epoch=idem.producer_epoch)
        if req.kind is TxnRequestKind.ADD_PARTITIONS:
            by_topic: dict[str, list[int]] = {}
            for tp in sorted(req.partitions):
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            return requests.add_partitions_to_txn(version, transactional_id=tid,
                                                  producer_id=idem.producer_id,
                                                  producer_epoch=idem.producer_epoch,
                                                  partitions=by_topic)
        return requests.end_txn(version, transactional_id=tid, producer_id=idem.producer_id,
                                producer_epoch=idem.producer_epoch, committed=req.committed)

    def on_sent(self, req: TxnRequest, now_ns: int) -> None:
        self.in_flight = req
        req.sent_ns = now_ns
        if req.is_end_txn and req.committed:
            self.commit_sent = True

    def on_disconnect(self, req: TxnRequest, now_ns: int) -> None:
        self.in_flight = None
        if req.needs_coordinator:
            self.lookup_coordinator()
        self.retry(req, now_ns)

    def on_unsupported(self, req: TxnRequest, message: str) -> None:
        self.in_flight = None
        req.result.complete("UNSUPPORTED_VERSION")
        self.fatal(f"UNSUPPORTED_VERSION: {message}")

    def on_response(self, req: TxnRequest, body: Any, now_ns: int) -> None:
        self.in_flight = None
        handler = {TxnRequestKind.FIND_COORDINATOR: self._on_find_coordinator,
                   TxnRequestKind.INIT_PRODUCER_ID: self._on_init_producer_id,
                   TxnRequestKind.EPOCH_BUMP: self._on_init_producer_id,
                   TxnRequestKind.ADD_PARTITIONS: self._on_add_partitions,
                   TxnRequestKind.END_TXN: self._on_end_txn}[req.kind]
        handler(req, body, now_ns)

    # -- answers (Java's TxnRequestHandler subclasses) ----------------------------------------
    def _on_find_coordinator(self, req: TxnRequest, body: Any, now_ns: int) -> None:
        c = requests.read_find_coordinator(body)
        name = error_for(c.error_code).name if c.error_code else None
        if name is None:
            self.coordinator = c.node_id
            self.coordinator_address = (c.host, c.port)
            req.result.complete()
        elif error_for(c.error_code).retriable:
            # Java retries any retriable error (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, ...).
            self.retry(req, now_ns)
        elif name == "TRANSACTION_ABORTABLE":
            req.result.complete(name)
            self.abortable(name)
        else:
            self._fail(req, name if name == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" else
                       f"{name}: could not find the transaction coordinator of "
                       f"{self.transactional_id!r} ({c.error_message or 'no message'})")

    def _on_init_producer_id(self, req: TxnRequest, body: Any, now_ns: int) -> None:
        name = error_for(body.error_code).name if body.error_code else None
        if name is None:
            bump = req.kind is TxnRequestKind.EPOCH_BUMP or req.retry_fresh
            # A new epoch (or id): every partition's sequences start again at 0.
            self.idempotence.on_producer_id(body.producer_id, body.producer_epoch, reset_all=True)
            if bump:
                self.metrics.epoch_bumps += 1
            self._move(_T.READY)
            self.epoch_bump_required = False
            req.result.complete()
        elif name in _COORDINATOR_MOVED:
            self.lookup_coordinator()
            self.retry(req, now_ns)
        elif self._retriable(name):
            self.retry(req, now_ns)
        elif name in AUTHORIZATION_ERRORS:
            # Java (trunk) makes these abortable; the sender's next turn then fails what
            # is pending and goes back to UNINITIALIZED (``on_authorization_error``), so
            # init_transactions may be called again once the principal is authorized.
            req.result.complete(name)
            self.abortable(name)
        elif name in _FENCED:
            self._fail(req, "PRODUCER_FENCED")
        elif name == "TRANSACTION_ABORTABLE":
            req.result.complete(name)   # KIP-890: abortable, as Java's
            self.abortable(name)
        elif req.kind is TxnRequestKind.EPOCH_BUMP:
            # The coordinator offers InitProducerId v3+ yet refused the bump (Tansu answers
            # UNKNOWN_SERVER_ERROR). Java's producer would be fatal here and its application
            # would build a new one; kctl does what that new producer does: InitProducerId
            # with the transactional id alone (the previous transaction is aborted already).
            fresh = TxnRequest(TxnRequestKind.INIT_PRODUCER_ID, req.result, retry_fresh=True)
            self._enqueue(fresh)
        else:
            self._fail(req, name)

    def _on_add_partitions(self, req: TxnRequest, body: Any, now_ns: int) -> None:
        errors = requests.read_add_partitions_to_txn(body)
        failed: dict[TopicPartition, str] = {}
        for (topic, partition), code in errors.items():
            if not code:
                continue
            name = error_for(code).name
            if name in _COORDINATOR_MOVED:
                self.lookup_coordinator()
                self.retry(req, now_ns)
                return
            if name == "CONCURRENT_TRANSACTIONS":
                if not self.partitions:   # the previous transaction is still finishing
                    req.backoff_ms = ADD_PARTITIONS_RETRY_BACKOFF_MS
                self.retry(req, now_ns)
                return
            if self._retriable(name):   # COORDINATOR_LOAD_IN_PROGRESS, UNKNOWN_TOPIC_OR_PARTITION, ...
                self.retry(req, now_ns)
                return
            if name in _FENCED:
                self._fail(req, "PRODUCER_FENCED")
                return
            if name in ("TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "INVALID_TXN_STATE"):
                self._fail(req, name)
                return
            if name in _ABORTABLE_IF_BUMP:
                req.result.complete(name)
                self._abortable_if_possible(name)
                return
            if name == "TRANSACTION_ABORTABLE":
                req.result.complete(name)
                self.abortable(name)
                return
            failed[TopicPartition(topic, partition)] = name
        self.pending_partitions -= req.partitions
        if failed:
            # TOPIC_AUTHORIZATION_FAILED, OPERATION_NOT_ATTEMPTED, anything unexpected
            first = sorted(failed.items())[0]
            message = f"{first[1]}: could not add {first[0]} to the transaction"
            req.result.complete(message)
            self.abortable(message)
            return
        self.partitions |= req.partitions
        self.transaction_started = True
        req.result.complete()

    def on_batch_acked(self, tp: TopicPartition, node_id: int, records: int, value_bytes: int) -> None:
        """The broker acknowledged a batch of the open transaction: counted at its end."""
        if self.state is _T.FATAL_ERROR:
            # Acknowledged after the fatal error (a late answer): never committed either.
            m = self.metrics
            m.records_failed += records
            m.failed_by_error[TRANSACTION_NOT_COMMITTED] += records
            return
        self.pending_acks.add(tp, node_id, records, value_bytes)

    def _on_end_txn(self, req: TxnRequest, body: Any, now_ns: int) -> None:
        name = error_for(body.error_code).name if body.error_code else None
        if name is None:
            m = self.metrics
            if req.committed:
                m.transactions_committed += 1
                self.pending_acks.count_acked(m)
            else:
                m.transactions_aborted += 1
                self.pending_acks.count_failed(m, TRANSACTION_ABORTED)
            self._complete_transaction()
            req.result.complete()
        elif name in _COORDINATOR_MOVED:
            self.lookup_coordinator()
            self.retry(req, now_ns)
        elif self._retriable(name):
            self.retry(req, now_ns)
        elif name in _FENCED:
            self._fail(req, "PRODUCER_FENCED")
        elif name in _ABORTABLE_IF_BUMP:
            req.result.complete(name)
            self._abortable_if_possible(name)
        elif name == "TRANSACTION_ABORTABLE":
            # KIP-890: the coordinator cannot complete this transaction; aborting it can.
            req.result.complete(name)
            self.abortable(name)
        else:
            self._fail(req, name)

    @staticmethod
    def _retriable(name: str) -> bool:
        """Java's ``error.exception() instanceof RetriableException`` (CONCURRENT_TRANSACTIONS,
        COORDINATOR_LOAD_IN_PROGRESS, ...): asked again after ``retry.backoff.ms``."""
        error = ERRORS_BY_NAME.get(name)
        return name in _TRY_AGAIN or (error is not None and error.retriable)

    def _fail(self, req: TxnRequest, error: str) -> None:
        req.result.complete(error)
        self.fatal(error)

    def _complete_transaction(self) -> None:
        """Java's completeTransaction."""
        self._move(_T.INITIALIZING if self.epoch_bump_required else _T.READY)
        self.last_error = None
        self.epoch_bump_required = False
        self.transaction_started = False
        self.commit_sent = False
        self.new_partitions.clear()
        self.pending_partitions.clear()
        self.partitions.clear()
