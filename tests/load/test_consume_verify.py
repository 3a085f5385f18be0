"""Consumer-side --verify (load/consume_verify.py): what the consumers handed out, as runs
of (offset, count, run tag, producer worker, first sequence), checked against the
producers' acknowledgements or against each producer worker's sequence numbers."""

from __future__ import annotations

from kctl.load.consume_verify import verify_against_acks, verify_sequences
from kctl.protocol.identity import run_tag

RUN = "0123456789ab"
TAG = run_tag(RUN)


def test_sequences_all_seen_once_in_order():
    seen = {0: [(0, 100, TAG, 0, 0), (100, 50, TAG, 0, 100)], 1: [(0, 80, TAG, 1, 0)]}
    v = verify_sequences(seen)
    assert (v.expected, v.found, v.lost, v.duplicated, v.reordered) == (230, 230, 0, 0, 0)


def test_sequences_find_a_gap_a_duplicate_and_a_reorder():
    seen = {0: [(0, 10, TAG, 0, 0), (10, 10, TAG, 0, 15),     # 10..14 never seen: lost
                (20, 5, TAG, 0, 15),                            # 15..19 again: duplicated
                (25, 5, TAG, 0, 10)]}                           # 10..14 after 15..24: reordered
    v = verify_sequences(seen)
    # The duplicate run goes back too (15 after 24): it counts as reordered as well.
    assert (v.expected, v.found, v.lost, v.duplicated, v.reordered) == (25, 30, 0, 5, 2)
    gap = verify_sequences({0: [(0, 10, TAG, 0, 0), (10, 10, TAG, 0, 15)]})
    assert gap.lost == 5 and gap.lost_examples[0] == (0, 10)


def test_against_acks_every_acknowledged_record_seen_once():
    # producer worker 0 had partition 0's offsets 0..99 acknowledged, sequences 0..99
    acked = {0: {0: [(0, 100, 0)]}}
    ok = verify_against_acks(RUN, acked, {0: [(0, 60, TAG, 0, 0), (60, 40, TAG, 0, 60)]})
    assert (ok.expected, ok.found, ok.lost, ok.duplicated) == (100, 100, 0, 0)
    short = verify_against_acks(RUN, acked, {0: [(0, 60, TAG, 0, 0)]})
    assert short.lost == 40 and short.found == 60
