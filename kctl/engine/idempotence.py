"""Idempotent production: producer id, epoch and per-partition sequence numbers, and
the rules for sequence errors (the idempotence half of the Java client's
TransactionManager; transactions.py holds the other half).

How this works
--------------
- The producer id and epoch come from InitProducerId: the sender asks for them
  (idempotent producer) or transactions.py does (transactional one, through the
  transaction coordinator), and hands the answer to ``on_producer_id``. Their
  lifecycle is a table (``TRANSITIONS``).
- Per partition (``_Partition``, Java's TopicPartitionEntry): the producer id and
  epoch its sequences belong to, the next sequence, the last acknowledged sequence
  and offset, and the batches that have a sequence and are not resolved yet
  (``in_flight``: on the wire or waiting to be retried), in sequence order.
- Draining (``may_drain``/``assign_sequence``, called by the accumulator): a batch
  gets the partition's next sequence when first drained. A batch that has one is
  only sent when it is the partition's first unresolved batch, so retries go out
  in order. New batches wait while the partition has unresolved sequences or
  batches in flight under an older producer id or epoch.
- A Produce error goes through ``can_retry`` (Java's ``TransactionManager.canRetry``),
  which may ask for an epoch bump; a batch that fails goes through ``on_failed``
  (``handleFailedBatch``). The rules, as the Java client's:
  * DUPLICATE_SEQUENCE_NUMBER: the broker has the batch already; success
    (``can_retry`` is False and the sender acknowledges it without an offset).
  * OUT_OF_ORDER_SEQUENCE_NUMBER for a batch that is not the partition's next (its
    base sequence is not last acknowledged + 1), or whose sequence was reset by a
    bump: an earlier batch failed first; retry. For the next batch (a real gap):
    an idempotent producer bumps the epoch and retries (KIP-360); a transactional
    one fails the batch (an abortable error: the transaction must abort).
  * UNKNOWN_PRODUCER_ID: retry while the broker does not say its log start offset
    (-1) or after a reset; when the log start offset is past the last acknowledged
    offset (the log head was deleted with the producer's state), an idempotent
    producer bumps the epoch and a transactional one restarts the partition's
    sequences at 0, then retry; otherwise an idempotent producer bumps and retries,
    and a transactional one fails the batch.
  * Any other error: retry when Kafka marks it retriable.
  * A batch that fails (``on_failed``): CLUSTER_AUTHORIZATION_FAILED,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED, PRODUCER_FENCED and UNSUPPORTED_VERSION
    are fatal for the producer. Otherwise, if its sequence may have been used
    (retries not exhausted) an idempotent producer bumps the epoch, a
    transactional one moves the partition's later sequences down over the gap;
    INVALID_PRODUCER_EPOCH is one of these (KIP-588: abortable, not fatal).
  * A batch that expires after being sent leaves its partition *unresolved*
    (``mark_unresolved``): nothing new is drained there until every batch in
    flight for it has resolved; then (``maybe_resolve_sequences``) the partition is
    fine if a later batch was acknowledged, otherwise the epoch is bumped
    (idempotent) or the transaction must abort (transactional).
- An idempotent producer's epoch bump (``BUMP_NEEDED``) is carried out by the
  sender once no Produce request is in flight: InitProducerId naming the current id
  and epoch (v3+), or for a new id. Java's idempotent producer bumps the epoch
  locally instead; kctl asks the broker, because a broker that tracks only the
  epochs it handed out refuses a local bump (Tansu answers PRODUCER_FENCED), while
  every broker accepts the asked-for one (Kafka gives a non-transactional producer
  a new id). Either way: the partitions that asked for the bump restart their
  unresolved batches at sequence 0 under the new id and epoch, in order; the other
  partitions keep theirs (they may have been written) and start at 0 once those
  have resolved.

Time plays no part here; no I/O (conventions rules 1 and 3).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Final

from kctl.engine.batch import ProducerBatch, TopicPartition
from kctl.engine.metrics import ProducerMetrics
from kctl.protocol.records import NO_SEQUENCE

__all__ = ["FATAL_ERRORS", "Idempotence", "ProducerIdState", "TRANSITIONS"]

_SEQ_MASK: Final = 0x7FFFFFFF
_MAX_EPOCH: Final = 0x7FFF

#: Errors that end the producer (Java's maybeTransitionToErrorState: the exceptions that
#: go to FATAL_ERROR). Every other failure is the batch's alone (idempotent) or makes the
#: transaction abortable (transactional).
FATAL_ERRORS: Final = frozenset({
    "CLUSTER_AUTHORIZATION_FAILED", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "PRODUCER_FENCED",
    "UNSUPPORTED_VERSION",
})


class ProducerIdState(enum.Enum):
    UNINITIALIZED = "uninitialized"   # no producer id yet
    INITIALIZING = "initializing"     # InitProducerId in flight
    READY = "ready"
    BUMP_NEEDED = "bump_needed"       # an epoch bump is due (idempotent producer)
    FATAL = "fatal"


_S = ProducerIdState
#: Allowed moves (conventions rule 5). BUMP_NEEDED -> UNINITIALIZED: the broker could not
#: bump (or the epoch is exhausted), so a new id is asked for.
TRANSITIONS: Final[dict[ProducerIdState, frozenset[ProducerIdState]]] = {
    _S.UNINITIALIZED: frozenset({_S.INITIALIZING, _S.FATAL}),
    _S.INITIALIZING: frozenset({_S.READY, _S.UNINITIALIZED, _S.BUMP_NEEDED, _S.FATAL}),
    _S.READY: frozenset({_S.BUMP_NEEDED, _S.INITIALIZING, _S.UNINITIALIZED, _S.FATAL}),
    _S.BUMP_NEEDED: frozenset({_S.INITIALIZING, _S.UNINITIALIZED, _S.FATAL}),
    _S.FATAL: frozenset({_S.FATAL}),
}


class _Partition:
    """One partition's sequence state (Java's TopicPartitionEntry)."""

    __slots__ = ("producer_id", "producer_epoch", "next_sequence", "last_acked_sequence",
                 "last_acked_offset", "in_flight")

    def __init__(self, producer_id: int, producer_epoch: int) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.next_sequence = 0
        self.last_acked_sequence = -1
        self.last_acked_offset = -1
        # Batches with a sequence not yet resolved (on the wire, or waiting to be
        # retried), in sequence order.
        self.in_flight: list[ProducerBatch] = []

    def restart_at_zero(self, producer_id: int, producer_epoch: int) -> None:
        """Java's startSequencesAtBeginning: the unresolved batches, in order, take
        sequences from 0 under the new id and epoch."""
        seq = 0
        for b in self.in_flight:
            b.reset_producer_state(producer_id, producer_epoch, seq)
            seq = (seq + b.record_count) & _SEQ_MASK
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.next_sequence = seq
        self.last_acked_sequence = -1


class Idempotence:
    def __init__(self, *, transactional: bool = False, metrics: ProducerMetrics | None = None,
                 on_abortable_error: Callable[[str, bool], None] | None = None) -> None:
        self.transactional = transactional
        self.metrics = metrics
        # Transactional: a failure that makes the transaction abortable is reported
        # here (error name, whether the epoch must be bumped); transactions.py listens.
        self.on_abortable_error = on_abortable_error
        self.producer_id = -1
        self.producer_epoch = -1
        self.state = ProducerIdState.UNINITIALIZED
        self.fatal_error: str | None = None
        self.epoch_bumps = 0
        self._partitions: dict[TopicPartition, _Partition] = {}
        self._unresolved: dict[TopicPartition, int] = {}   # partition -> sequence after the expired batch
        self._rewrite: set[TopicPartition] = set()          # partitions restarting at 0 with the bump
        self._bumping = False                                # the InitProducerId in flight is a bump
        # Transactional: may a batch go to this partition yet (transactions.py adds it)?
        self.partition_gate: Callable[[TopicPartition], bool] | None = None

    # -- the producer id's lifecycle ---------------------------------------------------------
    def _move(self, new: ProducerIdState) -> None:
        if new not in TRANSITIONS[self.state]:
            raise AssertionError(f"producer id state cannot go from {self.state.value} to {new.value}")
        self.state = new

    def has_producer_id(self) -> bool:
        return self.state is ProducerIdState.READY

    def needs_producer_id(self) -> bool:
        """An idempotent producer's sender should send InitProducerId (once nothing is
        in flight, for a bump)."""
        return self.state in (ProducerIdState.UNINITIALIZED, ProducerIdState.BUMP_NEEDED)

    @property
    def bump_pending(self) -> bool:
        return self.state is ProducerIdState.BUMP_NEEDED

    def begin_init(self) -> tuple[int, int]:
        """InitProducerId is being sent: (producer id, epoch) to name, (-1, -1) for a new id."""
        bump = self.state is ProducerIdState.BUMP_NEEDED and self.producer_id >= 0 \
            and self.producer_epoch < _MAX_EPOCH
        self._bumping = bump
        self._move(ProducerIdState.INITIALIZING)
        return (self.producer_id, self.producer_epoch) if bump else (-1, -1)

    def init_failed(self, error: str | None, *, retriable: bool) -> None:
        """InitProducerId did not give an id. A connection problem or retriable error:
        ask again. A broker that cannot bump the epoch: ask for a new id (as Java resets
        an idempotent producer it cannot bump). Anything else is fatal."""
        if error is None or retriable:
            self._move(ProducerIdState.BUMP_NEEDED if self._bumping else ProducerIdState.UNINITIALIZED)
        elif self._bumping:
            self._move(ProducerIdState.UNINITIALIZED)
        else:
            self.set_fatal(error)
        self._bumping = False

    def on_producer_id(self, producer_id: int, producer_epoch: int, *, reset_all: bool = False) -> None:
        """A new producer id and/or epoch. The partitions that asked for the bump (all of
        them with ``reset_all``, as Java's transactional bump) restart their unresolved
        batches at 0; the others keep their sequences until those have resolved."""
        self._bumping = False
        if self.state is not ProducerIdState.INITIALIZING:
            self._move(ProducerIdState.INITIALIZING)
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self._move(ProducerIdState.READY)
        if reset_all:
            self._partitions.clear()
            self._unresolved.clear()
        for tp in self._rewrite:
            entry = self._partitions.get(tp)
            if entry is not None:
                entry.restart_at_zero(producer_id, producer_epoch)
            self._unresolved.pop(tp, None)
        self._rewrite.clear()

    def request_bump(self, tp: TopicPartition) -> None:
        """Java's requestEpochBumpForPartition: ``tp``'s sequences restart with a new epoch."""
        self._rewrite.add(tp)
        if self.transactional:
            return   # the transaction's abort bumps the epoch (transactions.py)
        if self.state is ProducerIdState.READY:
            self._move(ProducerIdState.BUMP_NEEDED)
            self.epoch_bumps += 1
            if self.metrics is not None:
                self.metrics.epoch_bumps += 1

    def set_fatal(self, error: str) -> None:
        if self.fatal_error is None:
            self.fatal_error = error
        self._move(ProducerIdState.FATAL)

    # -- draining --------------------------------------------------------------------------
    def _entry(self, tp: TopicPartition) -> _Partition:
        e = self._partitions.get(tp)
        if e is None:
            e = self._partitions[tp] = _Partition(self.producer_id, self.producer_epoch)
        return e

    def _stale(self, e: _Partition) -> bool:
        return e.producer_id != self.producer_id or e.producer_epoch != self.producer_epoch

    def needs_sequence(self, batch: ProducerBatch) -> bool:
        return batch.base_sequence == NO_SEQUENCE

    def may_drain(self, batch: ProducerBatch) -> bool:
        """Java's shouldStopDrainBatchesForPartition, inverted."""
        tp = batch.tp
        if self.partition_gate is not None and not self.partition_gate(tp):
            return False
        e = self._partitions.get(tp)
        if batch.base_sequence == NO_SEQUENCE:
            if e is not None and e.in_flight and self._stale(e):
                return False   # older id/epoch batches first, or a new epoch's 0 overtakes them
            return tp not in self._unresolved   # nothing new while earlier sequences are unknown
        return e is None or not e.in_flight or e.in_flight[0] is batch

    def assign_sequence(self, batch: ProducerBatch) -> None:
        e = self._entry(batch.tp)
        if self._stale(e) and not e.in_flight:
            # Java's maybeUpdateProducerIdAndEpoch: the partition moves to the new id/epoch.
            e.producer_id, e.producer_epoch = self.producer_id, self.producer_epoch
            e.next_sequence, e.last_acked_sequence = 0, -1
        seq = e.next_sequence
        batch.set_producer_state(self.producer_id, self.producer_epoch, seq, self.transactional)
        e.next_sequence = (seq + batch.record_count) & _SEQ_MASK
        e.in_flight.append(batch)

    def replace_split(self, big: ProducerBatch, parts: list[ProducerBatch]) -> None:
        """The parts of a split batch take over its sequence range, in order (Java's
        splitAndReenqueue), and its place among the partition's unresolved batches."""
        seq = big.base_sequence
        for p in parts:
            p.set_producer_state(big.producer_id, big.producer_epoch, seq, big.is_transactional)
            seq = (seq + p.record_count) & _SEQ_MASK
        e = self._partitions.get(big.tp)
        if e is not None and big in e.in_flight:
            i = e.in_flight.index(big)
            e.in_flight[i:i + 1] = parts

    # -- outcomes ---------------------------------------------------------------------------
    def on_acked(self, batch: ProducerBatch, base_offset: int) -> None:
        """Java's handleCompletedBatch (also for a late answer to an expired batch)."""
        e = self._partitions.get(batch.tp)
        if e is None:
            if self.transactional:
                return
            e = self._entry(batch.tp)
        last = batch.last_sequence
        if last > e.last_acked_sequence:
            e.last_acked_sequence = last
        if base_offset >= 0:
            e.last_acked_offset = max(e.last_acked_offset, base_offset + batch.record_count - 1)
        self._forget(e, batch)

    def _forget(self, e: _Partition, batch: ProducerBatch) -> None:
        try:
            e.in_flight.remove(batch)
        except ValueError:
            pass

    def _is_next_sequence(self, tp: TopicPartition, sequence: int) -> bool:
        e = self._partitions.get(tp)
        last = e.last_acked_sequence if e is not None else -1
        return sequence - last == 1

    def can_retry(self, batch: ProducerBatch, error: str, log_start_offset: int, retriable: bool) -> bool:
        """Java's TransactionManager.canRetry; may ask for an epoch bump."""
        tp = batch.tp
        if error == "UNKNOWN_PRODUCER_ID":
            if log_start_offset == -1:
                return True   # the broker does not know its log start yet: ask again
            if batch.sequence_reset:
                return True
            e = self._partitions.get(tp)
            last_offset = e.last_acked_offset if e is not None else -1
            if last_offset < log_start_offset:
                # The log head (and the producer's state with it) was deleted.
                if self.transactional:
                    if e is not None:
                        e.restart_at_zero(self.producer_id, self.producer_epoch)
                else:
                    self.request_bump(tp)
                return True
            if not self.transactional:
                self.request_bump(tp)
                return True
            return False
        if error == "OUT_OF_ORDER_SEQUENCE_NUMBER":
            unresolved = tp in self._unresolved
            if not unresolved and (batch.sequence_reset
                                   or not self._is_next_sequence(tp, batch.base_sequence)):
                return True   # an earlier batch failed first
            if not self.transactional:
                if not unresolved or self._unresolved[tp] == batch.base_sequence:
                    self.request_bump(tp)
                return True
            return False
        return retriable

    def on_failed(self, batch: ProducerBatch, error: str, *, adjust_sequences: bool) -> None:
        """Java's handleFailedBatch: a batch that will not be retried."""
        if error in FATAL_ERRORS:
            self.set_fatal(error)
        elif self.transactional and self.on_abortable_error is not None:
            self.on_abortable_error(error, True)
        e = self._partitions.get(batch.tp)
        if e is not None:
            self._forget(e, batch)
        if self.state is ProducerIdState.FATAL or batch.base_sequence == NO_SEQUENCE:
            return
        if error == "OUT_OF_ORDER_SEQUENCE_NUMBER" and not self.transactional:
            self.request_bump(batch.tp)
        elif error == "UNKNOWN_PRODUCER_ID":
            if self.transactional:
                self._partitions.pop(batch.tp, None)   # the broker will take sequence 0
                self._unresolved.pop(batch.tp, None)
            else:
                self.request_bump(batch.tp)
        elif adjust_sequences:
            if self.transactional:
                self._close_gap(batch)
            else:
                self.request_bump(batch.tp)

    def _close_gap(self, batch: ProducerBatch) -> None:
        """Java's adjustSequencesDueToFailedBatch: the broker surely rejected ``batch``,
        so the partition's later sequences move down by its record count."""
        e = self._partitions.get(batch.tp)
        if e is None:
            return
        e.next_sequence = (e.next_sequence - batch.record_count) & _SEQ_MASK
        for b in e.in_flight:
            if b.base_sequence > batch.base_sequence:
                b.reset_producer_state(b.producer_id, b.producer_epoch,
                                       b.base_sequence - batch.record_count)

    def mark_unresolved(self, batch: ProducerBatch) -> None:
        """A batch expired after it was sent: whether the broker has it is unknown."""
        if batch.base_sequence == NO_SEQUENCE:
            return
        nxt = (batch.last_sequence + 1) & _SEQ_MASK
        self._unresolved[batch.tp] = max(self._unresolved.get(batch.tp, nxt), nxt)

    def maybe_resolve_sequences(self) -> None:
        """Java's maybeResolveSequences: an unresolved partition with nothing in flight
        is resolved when the last acknowledged sequence reached its next sequence (a
        later batch made it, so the expired one did); otherwise an idempotent producer
        bumps the epoch and a transactional one must abort (with a bump)."""
        if not self._unresolved:
            return
        for tp in list(self._unresolved):
            e = self._partitions.get(tp)
            if e is not None and e.in_flight:
                continue
            del self._unresolved[tp]
            if e is None or self._is_next_sequence(tp, e.next_sequence):
                continue
            if self.transactional:
                self._rewrite.add(tp)
                if self.on_abortable_error is not None:
                    self.on_abortable_error(
                        "DELIVERY_TIMEOUT: the client has no acknowledgement for records it can no "
                        "longer retry", True)
            else:
                self.request_bump(tp)

    # -- questions ------------------------------------------------------------------------------
    def has_unresolved(self, tp: TopicPartition | None = None) -> bool:
        return bool(self._unresolved) if tp is None else tp in self._unresolved

    def last_acked_sequence(self, tp: TopicPartition) -> int:
        e = self._partitions.get(tp)
        return e.last_acked_sequence if e is not None else -1

    def next_sequence(self, tp: TopicPartition) -> int:
        e = self._partitions.get(tp)
        return e.next_sequence if e is not None else 0

    def unacked_count(self) -> int:
        return sum(len(e.in_flight) for e in self._partitions.values())
