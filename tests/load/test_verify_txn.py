"""``--verify`` of a transactional run reads as a read_committed consumer: the records of
aborted transactions are left out of ``found`` and counted apart (``aborted``), by the
Fetch answer's ``aborted_transactions`` (as Java's consumer) or, where the broker lists
none (Tansu), by the ABORT/COMMIT markers in the log. Fed fake Fetch answers."""

from __future__ import annotations

from kctl.load.verify import AbortedFilter, Verification
from kctl.protocol.identity import CONTROL_ABORT, CONTROL_COMMIT, RecordIdentity, ScannedBatch, run_tag

RUN = "abcd1234" * 4
TAG = run_tag(RUN)
PID = 7


def data(offset, first_seq, count, worker=0):
    ids = b"".join(RecordIdentity(TAG, worker, first_seq + i, 0).encode() for i in range(count))
    return ScannedBatch(offset, offset + count, ids, (), PID, True)


def marker(offset, control):
    return ScannedBatch(offset, offset + 1, None, (), PID, True, control)


# Offsets 0-2: committed (seq 0-2); 4-5: aborted (seq 3-4); 7-8: committed (seq 5-6).
LOG = [data(0, 0, 3), marker(3, CONTROL_COMMIT), data(4, 3, 2), marker(6, CONTROL_ABORT),
       data(7, 5, 2), marker(9, CONTROL_COMMIT)]
ACKED = {0: {0: [(0, 3, 0), (7, 2, 5)]}}


def verify(aborted_transactions=(), chunks=((0, 6),)):
    v = Verification(RUN, ACKED)
    lo, hi = v.ranges[0]
    f = AbortedFilter(TAG, hi)
    for a, b in chunks:
        v.add(0, f.feed(LOG[a:b], aborted_transactions))
    v.add(0, f.rest())
    v.add_aborted(0, f.aborted)
    return v.result(0.0)


def test_an_aborted_transaction_found_by_its_abort_marker_is_left_out():
    """No aborted_transactions in the answer (Tansu): the markers decide; the aborted
    records are neither found nor misplaced, counted apart."""
    r = verify()
    assert (r.expected, r.found, r.aborted, r.lost, r.misplaced) == (5, 5, 2, 0, 0)
    assert r.ok and r.partitions[0]["aborted"] == 2


def test_a_transaction_held_across_fetches_comes_out_at_its_commit_marker():
    r = verify(chunks=((0, 1), (1, 3), (3, 5), (5, 6)))
    assert (r.found, r.aborted, r.reordered) == (5, 2, 0) and r.ok


def test_an_aborted_transaction_listed_in_the_fetch_answer_is_dropped():
    """FetchResponse.aborted_transactions (producer 7 from offset 4), as Java's
    consumer reads it: dropped without waiting for the marker."""
    r = verify(aborted_transactions=((PID, 4),))
    assert (r.found, r.aborted, r.misplaced) == (5, 2, 0) and r.ok


def test_without_a_marker_held_batches_count_as_read():
    """The read ends before a transaction's marker: its batches count as read."""
    r = verify(chunks=((0, 5),))
    assert (r.found, r.aborted, r.lost) == (5, 2, 0)
