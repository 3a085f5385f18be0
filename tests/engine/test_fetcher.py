"""The Fetcher stepped with a fake clock and network (mirrors Java's FetcherTest /
FetchRequestManagerTest): what a Fetch asks for, what its answer hands out, positions,
errors, read_committed and fetch-ahead."""

import uuid

import pytest

from kctl.engine.subscription import FetchState, OffsetOutOfRangeError
from kctl.protocol.identity import IDENTITY
from kctl.protocol.records import ControlRecordType, build_batch, control_record

from .consumer_harness import (
    FetchResponse, ConsumerHarness, fetch_body, list_offsets_body, partition_data, records, tp)


def assigned(partitions=2, offsets=None, **props):
    h = ConsumerHarness(partitions=partitions, **props)
    c = h.ready()
    c.assign([tp(p) for p in range(partitions)])
    for p in range(partitions):
        c.seek(tp(p), (offsets or {}).get(p, 0))
    return h, c


def one_fetch(h):
    h.step()
    reqs = h.net.pending("Fetch")
    assert len(reqs) == 1
    return reqs[0]


def test_fetch_request_carries_positions_and_fetch_settings():
    h, c = assigned(offsets={0: 5, 1: 7}, **{"fetch.max.wait.ms": "123", "fetch.min.bytes": "17",
                                          "fetch.max.bytes": "100000", "max.partition.fetch.bytes": "4096",
                                          "isolation.level": "read_committed", "client.rack": "r1"})
    req = one_fetch(h)
    b = req.body
    assert (b.max_wait_ms, b.min_bytes, b.max_bytes, b.isolation_level, b.rack_id) == (123, 17, 100000, 1, "r1")
    assert (b.session_id, b.session_epoch) == (0, -1)      # sessionless
    parts = {p.partition: p for t in b.topics for p in t.partitions}
    assert {p: parts[p].fetch_offset for p in parts} == {0: 5, 1: 7}
    assert all(parts[p].partition_max_bytes == 4096 and parts[p].current_leader_epoch == 1 for p in parts)
    # Topic ids are known from metadata: the newest version names topics by id.
    assert req.api_version >= 13 and b.topics[0].topic_id is not None
    # The broker may hold a Fetch for fetch.max.wait.ms: the timeout covers that on top.
    assert req.request_timeout_ms == h.config.request_timeout_ms + 123


def test_fetch_falls_back_to_v12_without_a_topic_id():
    h = ConsumerHarness()
    c = h.consumer
    h.step()
    from .consumer_harness import metadata_body
    for r in h.net.pending("Metadata"):
        h.net.respond(r, metadata_body(topic_id=uuid.UUID(int=0)))
    h.net.poll(0, h.clock.now_ns())
    c.assign([tp(0)])
    c.seek(tp(0), 0)
    req = one_fetch(h)
    assert req.api_version == 12 and req.body.topics[0].topic == "t"


def test_records_are_handed_out_per_batch_and_the_position_moves():
    h, c = assigned()
    req = one_fetch(h)
    h.net.respond(req, fetch_body(req, {0: partition_data(0, records(0, 5) + records(5, 3), hw=8)}))
    h.net.poll(0, h.clock.now_ns())
    out = h.collect()
    assert [(b.first_offset, b.end_offset, b.count) for b in out] == [(0, 5, 5), (5, 8, 3)]
    assert c.position(tp(0)) == 8 and c.position(tp(1)) == 0
    ids = [IDENTITY.unpack_from(out[0].identities, 24 * i) for i in range(5)]
    assert [i[2] for i in ids] == [0, 1, 2, 3, 4]
    assert out[0].key_value_bytes == 50 and out[0].records[2].offset == 2
    m = c.metrics.snapshot()
    assert m.records_consumed == 8 and m.key_value_bytes == 80 and m.fetch_responses == 1
    assert c.lag()[tp(0)] == 0


def test_records_before_the_position_are_skipped():
    # A batch may start before the fetch offset (compressed batches always come whole).
    h, c = assigned(offsets={0: 3})
    req = one_fetch(h)
    h.net.respond(req, fetch_body(req, {0: partition_data(0, records(0, 5))}))
    h.net.poll(0, h.clock.now_ns())
    out = h.collect()
    assert [(b.first_offset, b.count) for b in out] == [(3, 2)]
    assert [IDENTITY.unpack_from(out[0].identities, 24 * i)[2] for i in range(2)] == [3, 4]


def test_max_poll_records_splits_a_batch():
    h, c = assigned(**{"max.poll.records": "3"})
    req = one_fetch(h)
    h.net.respond(req, fetch_body(req, {0: partition_data(0, records(0, 5))}))
    h.net.poll(0, h.clock.now_ns())
    assert [(b.first_offset, b.count) for b in h.collect()] == [(0, 3)]
    assert [(b.first_offset, b.count) for b in h.collect()] == [(3, 2)]
    assert c.position(tp(0)) == 5


def test_an_answer_for_an_old_position_is_dropped():
    h, c = assigned()
    req = one_fetch(h)
    c.seek(tp(0), 100)                     # the user seeks while the Fetch is in flight
    h.net.respond(req, fetch_body(req, {0: partition_data(0, records(0, 5))}))
    h.net.poll(0, h.clock.now_ns())
    assert h.collect() == []
    assert c.position(tp(0)) == 100


def test_not_leader_asks_for_metadata_and_takes_the_new_leader():
    h, c = assigned()
    req = one_fetch(h)
    leader = FetchResponse.LeaderIdAndEpoch(leader_id=0, leader_epoch=2)
    h.net.respond(req, fetch_body(req, {0: partition_data(0, error="NOT_LEADER_OR_FOLLOWER",
                                                          current_leader=leader)}))
    h.net.poll(0, h.clock.now_ns())
    assert h.collect() == []
    assert c.metadata.update_requested
    assert c.metadata.partition_meta(tp(0)).leader_epoch == 2
    assert c.metrics.snapshot().errors_by_name == {"NOT_LEADER_OR_FOLLOWER": 1}


def test_fenced_leader_epoch_refreshes_metadata():
    h, c = assigned()
    req = one_fetch(h)
    h.net.respond(req, fetch_body(req, {1: partition_data(1, error="FENCED_LEADER_EPOCH")}))
    h.net.poll(0, h.clock.now_ns())
    h.collect()
    assert c.metadata.update_requested and c.position(tp(1)) == 0


def test_offset_out_of_range_resets_by_auto_offset_reset():
    h, c = assigned(**{"auto.offset.reset": "earliest"})
    req = one_fetch(h)
    h.net.respond(req, fetch_body(req, {0: partition_data(0, error="OFFSET_OUT_OF_RANGE")}))
    h.net.poll(0, h.clock.now_ns())
    h.collect()
    assert c.subscriptions.state(tp(0)).state is FetchState.AWAIT_RESET
    h.step()
    lo = h.net.pending("ListOffsets")
    assert [p.timestamp for t in lo[0].body.topics for p in t.partitions] == [-2]
    h.net.respond(lo[0], list_offsets_body(lo[0], {0: 42}))
    h.net.poll(0, h.clock.now_ns())
    assert c.position(tp(0)) == 42


def test_offset_out_of_range_with_reset_none_raises():
    h, c = assigned(**{"auto.offset.reset": "none"})
    req = one_fetch(h)
    h.net.respond(req, fetch_body(req, {0: partition_data(0, error="OFFSET_OUT_OF_RANGE")}))
    h.net.poll(0, h.clock.now_ns())
    with pytest.raises(OffsetOutOfRangeError):
        h.collect()


def test_authorization_failure_is_raised():
    h, c = assigned()
    req = one_fetch(h)
    h.net.respond(req, fetch_body(req, {0: partition_data(0, error="TOPIC_AUTHORIZATION_FAILED")}))
    h.net.poll(0, h.clock.now_ns())
    with pytest.raises(Exception, match="TOPIC_AUTHORIZATION_FAILED"):
        h.collect()


def test_control_batches_are_skipped_and_move_the_position():
    h, c = assigned()
    marker = build_batch([control_record(ControlRecordType.COMMIT, offset=3, timestamp=1)], base_offset=3,
                         is_control=True, is_transactional=True, producer_id=9)
    req = one_fetch(h)
    h.net.respond(req, fetch_body(req, {0: partition_data(0, records(0, 3, producer_id=9,
                                                                     is_transactional=True) + marker)}))
    h.net.poll(0, h.clock.now_ns())
    out = h.collect()
    assert [(b.first_offset, b.count) for b in out] == [(0, 3)]
    assert c.position(tp(0)) == 4 and c.metrics.snapshot().control_batches == 1


def test_read_committed_skips_aborted_transactions():
    # pid 7 aborts offsets 0..2 (marker at 3); pid 8 commits 4..5 (marker at 6).
    aborted = records(0, 3, producer_id=7, is_transactional=True)
    abort = build_batch([control_record(ControlRecordType.ABORT, offset=3, timestamp=1)], base_offset=3,
                        is_control=True, is_transactional=True, producer_id=7)
    kept = records(4, 2, producer_id=8, is_transactional=True)
    commit = build_batch([control_record(ControlRecordType.COMMIT, offset=6, timestamp=1)], base_offset=6,
                         is_control=True, is_transactional=True, producer_id=8)
    blob = aborted + abort + kept + commit
    for level, expect in (("read_committed", [(4, 2)]), ("read_uncommitted", [(0, 3), (4, 2)])):
        h, c = assigned(**{"isolation.level": level})
        req = one_fetch(h)
        h.net.respond(req, fetch_body(req, {0: partition_data(0, blob, hw=7, lso=7, aborted=[(7, 0)])}))
        h.net.poll(0, h.clock.now_ns())
        assert [(b.first_offset, b.count) for b in h.collect()] == expect, level
        assert c.position(tp(0)) == 7
    assert c.metrics.snapshot().aborted_records_skipped == 0


def test_one_fetch_per_node_in_flight():
    h, c = assigned()
    one_fetch(h)
    h.step()
    assert len(h.net.requests("Fetch")) == 1


def test_fetch_ahead_asks_from_the_end_of_the_buffered_answer():
    h, c = assigned()
    req = one_fetch(h)
    h.net.respond(req, fetch_body(req, {0: partition_data(0, records(0, 5))}))
    h.net.poll(0, h.clock.now_ns())
    h.step()                                  # nothing handed out yet
    reqs = h.net.pending("Fetch")
    parts = {p.partition: p.fetch_offset for t in reqs[0].body.topics for p in t.partitions}
    assert parts == {0: 5, 1: 0}              # partition 0 from where its buffered answer ends
    h.net.respond(reqs[0], fetch_body(reqs[0], {0: partition_data(0, records(5, 2))}))
    h.net.poll(0, h.clock.now_ns())
    h.step()                                  # two answers buffered per partition: no Fetch
    assert h.net.pending("Fetch") == []
    out = h.collect()
    assert [(b.tp.partition, b.first_offset, b.count) for b in out] == [(0, 0, 5), (0, 5, 2)]
    assert c.position(tp(0)) == 7
    h.step()
    reqs = h.net.pending("Fetch")
    assert {p.partition: p.fetch_offset for t in reqs[0].body.topics for p in t.partitions} == {0: 7, 1: 0}


def test_a_seek_drops_buffered_answers():
    h, c = assigned()
    req = one_fetch(h)
    h.net.respond(req, fetch_body(req, {0: partition_data(0, records(0, 5))}))
    h.net.poll(0, h.clock.now_ns())
    c.seek(tp(0), 2)
    assert h.collect() == []
    h.step()
    reqs = h.net.pending("Fetch")
    assert {p.partition: p.fetch_offset for t in reqs[0].body.topics for p in t.partitions}[0] == 2


def test_throttle_mutes_the_node():
    h, c = assigned()
    req = one_fetch(h)
    h.net.respond(req, fetch_body(req, throttle_ms=250))
    h.net.poll(0, h.clock.now_ns())
    assert h.net.throttle_calls == [(0, 250)]
    assert c.metrics.snapshot().throttle_time_ms == 250


def test_a_broken_connection_asks_for_metadata_and_fetches_again():
    h, c = assigned()
    one_fetch(h)
    h.net.disconnect(0)
    h.net.poll(0, h.clock.now_ns())
    assert c.metadata.update_requested
    h.step()
    assert len(h.net.pending("Fetch")) == 1


def test_corrupt_records_fail_with_check_crcs_only():
    blob = bytearray(records(0, 3))
    blob[-1] ^= 0xFF
    h, c = assigned()
    req = one_fetch(h)
    h.net.respond(req, fetch_body(req, {0: partition_data(0, bytes(blob))}))
    h.net.poll(0, h.clock.now_ns())
    with pytest.raises(Exception, match="CRC"):
        h.collect()
    h, c = assigned(**{"check.crcs": "false"})
    req = one_fetch(h)
    h.net.respond(req, fetch_body(req, {0: partition_data(0, bytes(blob))}))
    h.net.poll(0, h.clock.now_ns())
    assert sum(b.count for b in h.collect()) == 3
