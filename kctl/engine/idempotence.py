"""Idempotent production: producer id, epoch and per-partition sequence numbers
(the idempotence part of the Java client's TransactionManager, and only that).

How this works
--------------
- Before any Produce, the sender obtains a producer id and epoch with
  InitProducerId (``needs_producer_id`` / ``build_init_request`` /
  ``handle_init_response``).
- When a batch is drained for the first time (or again after an epoch bump),
  ``assign_sequence`` gives it the partition's next sequence and the batch joins
  that partition's *unacknowledged* list, which stays in sequence order.
- ``may_drain`` keeps order across retries (up to 5 requests in flight): a batch
  that already has a sequence is only sent when it is the oldest
  unacknowledged batch of its partition, so a retry never overtakes or trails
  its neighbours out of order.
- ``on_error`` decides what a sequence error means, as the Java client does:
  * DUPLICATE_SEQUENCE_NUMBER: the broker already has the batch: success.
  * OUT_OF_ORDER_SEQUENCE_NUMBER for a batch that does not directly follow the
    partition's last acknowledged sequence: an earlier batch failed first:
    retry in order.
  * OUT_OF_ORDER_SEQUENCE_NUMBER for the batch that does: the broker lost the
    sequence; the batch fails and the epoch is bumped (KIP-360), which restarts
    every partition's sequences at 0 for the batches not yet acknowledged. A
    broker that cannot bump the epoch (it lost the producer altogether) gets
    asked for a new producer id instead.
  * UNKNOWN_PRODUCER_ID: the broker no longer knows the producer (its state
    was removed with the log). Safe to retry after an epoch bump when the
    broker's log start offset is past everything acknowledged; otherwise as
    an unresolvable out-of-order error.
  * INVALID_PRODUCER_EPOCH for a batch sent before a bump: retry with the new epoch.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kctl.config import IdempotenceConfig
from kctl.engine.batch import ProducerBatch, TopicPartition
from kctl.protocol import messages
from kctl.protocol.records import NO_SEQUENCE

_SEQ_MASK = 0x7FFFFFFF


class ErrorAction(enum.Enum):
    RETRY = "retry"
    RETRY_AFTER_BUMP = "retry_after_bump"
    FAIL = "fail"
    FAIL_AND_BUMP = "fail_and_bump"
    SUCCEED = "succeed"
    NOT_MINE = "not_mine"   # not a sequence error: the sender's ordinary rules apply


class ProducerIdState(enum.Enum):
    UNINITIALIZED = "uninitialized"
    INITIALIZING = "initializing"
    READY = "ready"
    BUMP_NEEDED = "bump_needed"
    FATAL = "fatal"


@dataclass(frozen=True, slots=True)
class InitResult:
    error: str | None
    retriable: bool


class Idempotence:
    def __init__(self, config: IdempotenceConfig) -> None:
        self.config = config
        self.producer_id = -1
        self.producer_epoch = -1
        self.state = ProducerIdState.UNINITIALIZED
        self.fatal_error: str | None = None
        self._next_sequence: dict[TopicPartition, int] = {}
        self._unacked: dict[TopicPartition, list[ProducerBatch]] = {}
        self._last_acked_offset: dict[TopicPartition, int] = {}
        self._last_acked_sequence: dict[TopicPartition, int] = {}
        self.epoch_bumps = 0
        self._bumping = False     # the InitProducerId in flight asks to bump the current epoch

    # -- producer id -----------------------------------------------------------------
    def has_producer_id(self) -> bool:
        return self.state is ProducerIdState.READY

    def needs_producer_id(self) -> bool:
        return self.state in (ProducerIdState.UNINITIALIZED, ProducerIdState.BUMP_NEEDED)

    def build_init_request(self, version: int):
        """InitProducerId for a new id, or (v3+, KIP-360) to bump the current epoch."""
        bump = self.state is ProducerIdState.BUMP_NEEDED and version >= 3 and self.producer_id >= 0
        self._bumping = bump
        self.state = ProducerIdState.INITIALIZING
        cls = messages.message_class("InitProducerIdRequest")
        return cls(transactional_id=self.config.transactional_id,
                   transaction_timeout_ms=self.config.transaction_timeout_ms,
                   producer_id=self.producer_id if bump else -1,
                   producer_epoch=self.producer_epoch if bump else -1)

    def handle_init_response(self, error: str | None, retriable: bool, producer_id: int,
                             producer_epoch: int) -> InitResult:
        if error is not None:
            if retriable:
                self.state = (ProducerIdState.BUMP_NEEDED if self.producer_id >= 0
                              else ProducerIdState.UNINITIALIZED)
            elif self._bumping:
                # The broker cannot bump this producer's epoch (it may have lost the
                # producer's state altogether): start over with a new producer id,
                # as the Java client resets an idempotent producer it cannot bump.
                self.producer_id = -1
                self.producer_epoch = -1
                self.state = ProducerIdState.UNINITIALIZED
            else:
                self.state = ProducerIdState.FATAL
                self.fatal_error = error
            self._bumping = False
            return InitResult(error, retriable)
        self._bumping = False
        new_id = producer_id != self.producer_id
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.state = ProducerIdState.READY
        # Whether a bump or a new id: every not-yet-acknowledged batch is
        # re-sequenced from 0 when it is next drained.
        self._next_sequence.clear()
        self._last_acked_sequence.clear()
        for batches in self._unacked.values():
            for b in batches:
                b.base_sequence = NO_SEQUENCE if new_id or b.producer_epoch != producer_epoch else b.base_sequence
        self._unacked = {tp: [] for tp in self._unacked}
        return InitResult(None, False)

    def request_bump(self) -> None:
        if self.state is not ProducerIdState.FATAL:
            self.state = ProducerIdState.BUMP_NEEDED
            self.epoch_bumps += 1

    def producer_init_failed(self, error: str) -> None:
        """A connection problem while asking: ask again."""
        if self.state is ProducerIdState.INITIALIZING:
            self.state = (ProducerIdState.BUMP_NEEDED if self.producer_id >= 0
                          else ProducerIdState.UNINITIALIZED)

    # -- sequences ---------------------------------------------------------------------
    def assign_sequence(self, batch: ProducerBatch) -> None:
        tp = batch.tp
        seq = self._next_sequence.get(tp, 0)
        batch.set_producer_state(self.producer_id, self.producer_epoch, seq)
        self._next_sequence[tp] = (seq + batch.record_count) & _SEQ_MASK
        unacked = self._unacked.setdefault(tp, [])
        unacked.append(batch)

    def needs_sequence(self, batch: ProducerBatch) -> bool:
        return (batch.base_sequence == NO_SEQUENCE or batch.producer_epoch != self.producer_epoch
                or batch.producer_id != self.producer_id)

    def may_drain(self, batch: ProducerBatch) -> bool:
        if self.needs_sequence(batch):
            # A new batch may only start while no older batch of the partition is
            # waiting to be retried ahead of it (those are queued in front of it).
            return True
        unacked = self._unacked.get(batch.tp)
        return not unacked or unacked[0] is batch

    def replace_split(self, big: ProducerBatch, parts: list[ProducerBatch]) -> None:
        """The parts of a split batch take over its sequence range, in order (as Java)."""
        seq = big.base_sequence
        for p in parts:
            p.set_producer_state(big.producer_id, big.producer_epoch, seq, big.is_transactional)
            seq = (seq + p.record_count) & _SEQ_MASK
        unacked = self._unacked.get(big.tp)
        if unacked and big in unacked:
            i = unacked.index(big)
            unacked[i:i + 1] = parts

    def on_acked(self, batch: ProducerBatch, last_offset: int) -> None:
        self._forget(batch)
        if last_offset >= 0:
            self._last_acked_offset[batch.tp] = last_offset
        if self._is_current(batch):
            self._last_acked_sequence[batch.tp] = batch.last_sequence

    def _is_current(self, batch: ProducerBatch) -> bool:
        return (batch.producer_id, batch.producer_epoch) == (self.producer_id, self.producer_epoch)

    def is_next_sequence(self, batch: ProducerBatch) -> bool:
        """The batch directly follows the partition's last acknowledged one: if the
        broker rejects *it* for its sequence, the broker really lost the sequence
        (otherwise an earlier batch failed first and this one just has to retry)."""
        expected = (self._last_acked_sequence.get(batch.tp, -1) + 1) & _SEQ_MASK
        return batch.base_sequence == expected

    def on_failed(self, batch: ProducerBatch) -> None:
        """A batch that will not be retried: its sequence range is lost, so the
        partition's later batches could never be accepted: bump the epoch."""
        was_sequenced = batch in self._unacked.get(batch.tp, ())
        self._forget(batch)
        if was_sequenced and self.state is ProducerIdState.READY:
            self.request_bump()

    def _forget(self, batch: ProducerBatch) -> None:
        unacked = self._unacked.get(batch.tp)
        if unacked and batch in unacked:
            unacked.remove(batch)

    def on_error(self, batch: ProducerBatch, error: str, log_start_offset: int = -1) -> ErrorAction:
        if not self._is_current(batch) and error in (
                "INVALID_PRODUCER_EPOCH", "OUT_OF_ORDER_SEQUENCE_NUMBER", "UNKNOWN_PRODUCER_ID",
                "PRODUCER_FENCED"):
            return ErrorAction.RETRY  # sent under an epoch we have since bumped
        if error == "DUPLICATE_SEQUENCE_NUMBER":
            return ErrorAction.SUCCEED
        if error == "OUT_OF_ORDER_SEQUENCE_NUMBER":
            return ErrorAction.FAIL_AND_BUMP if self.is_next_sequence(batch) else ErrorAction.RETRY
        if error == "UNKNOWN_PRODUCER_ID":
            if not self.is_next_sequence(batch):
                return ErrorAction.RETRY
            last = self._last_acked_offset.get(batch.tp, -1)
            if log_start_offset >= 0 and log_start_offset > last:
                return ErrorAction.RETRY_AFTER_BUMP
            return ErrorAction.FAIL_AND_BUMP
        if error in ("INVALID_PRODUCER_EPOCH", "PRODUCER_FENCED", "INVALID_PRODUCER_ID_MAPPING",
                     "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED"):
            self.state = ProducerIdState.FATAL
            self.fatal_error = error
            return ErrorAction.FAIL
        return ErrorAction.NOT_MINE

    def unacked_count(self) -> int:
        return sum(len(v) for v in self._unacked.values())
