"""Consumer-side --verify (load/consume_verify.py): what the consumers handed out, as runs
of (offset, count, run tag, producer worker, first sequence), checked against the
producers' acknowledgements or against each producer worker's sequence numbers."""

from __future__ import annotations

from kctl.load.consume_verify import ReadExtent, verify_against_acks, verify_sequences
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


def _topic(workers: int, partitions: int, per_worker: int) -> dict[int, list[tuple[int, int, bytes, int, int]]]:
    """Each worker's sequences dealt round-robin over the partitions, workers interleaved:
    partition -> [(offset, 1, tag, worker, seq)] in offset order."""
    logs: dict[int, list] = {p: [] for p in range(partitions)}
    for seq in range(per_worker):
        for w in range(workers):
            log = logs[(seq + w) % partitions]
            log.append((len(log), 1, TAG, w, seq))
    return logs


def test_sequences_partial_reads_expect_only_what_the_read_covers():
    # kctl consume --verify --from 3 --num-records N: every partition read from offset 3
    # and stopped part-way, one partition never fetched. Nothing is lost.
    logs = _topic(2, 5, 100)
    seen = {p: log[3:3 + 10 * (p + 1)] for p, log in logs.items() if p != 2}
    extents = {p: ReadExtent() for p in logs}
    v = verify_sequences(seen, extents)
    assert v.lost == 0 and v.ok
    assert v.found == sum(len(r) for r in seen.values()) and v.expected == v.found
    # The same reads taken as whole partitions (the old reading) would report losses.
    assert verify_sequences(seen).lost > 0


def test_sequences_a_gap_inside_every_read_range_is_lost():
    logs = _topic(2, 5, 100)
    hole = logs[1].pop(20)               # one record of partition 1 deleted mid-read
    seen = {p: log[5:35] for p, log in logs.items()}
    v = verify_sequences(seen, {p: ReadExtent() for p in logs})
    assert v.lost == 1 and v.lost_examples == ((hole[3], hole[4]),)
    assert v.expected == v.found + 1


def test_sequences_from_the_log_start_to_the_end_expect_the_edges():
    # A record before a worker's first one in its partition is inside the read only when
    # the partition was read from its log start.
    logs = _topic(1, 5, 100)
    first = logs[3].pop(0)               # sequence 3: below worker 0's first read in partition 3
    seen = dict(logs)
    assert verify_sequences(seen, {p: ReadExtent(True, True) for p in logs}).lost_examples == ((0, first[4]),)
    assert verify_sequences(seen, {p: ReadExtent(False, True) for p in logs}).lost == 0
    # One after the worker's last in its partition (sequence 98 of partition 3) only when
    # the partition was read to its end.
    last = logs[3].pop()
    seen = dict(logs)
    assert (0, last[4]) in verify_sequences(seen, {p: ReadExtent(True, True) for p in logs}).lost_examples
    assert (0, last[4]) not in verify_sequences(seen, {p: ReadExtent(True, False) for p in logs}).lost_examples
