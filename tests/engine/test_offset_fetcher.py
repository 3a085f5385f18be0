"""Positions from ListOffsets (Java's OffsetFetcherTest): resets by strategy and time,
retries after leadership errors, "no offset at that time" going to the end, queries."""

from kctl.engine.subscription import FetchState

from .consumer_harness import ConsumerHarness, list_offsets_body, tp


def setup(**props):
    h = ConsumerHarness(partitions=2, **props)
    c = h.ready()
    c.assign([tp(0), tp(1)])
    return h, c


def timestamps(req):
    return {p.partition_index: p.timestamp for t in req.body.topics for p in t.partitions}


def test_auto_offset_reset_latest_and_earliest():
    for reset, ts in (("latest", -1), ("earliest", -2)):
        h, c = setup(**{"auto.offset.reset": reset})
        h.step()
        req = h.net.pending("ListOffsets")[0]
        assert timestamps(req) == {0: ts, 1: ts}
        h.net.respond(req, list_offsets_body(req, {0: 10, 1: 20}))
        h.net.poll(0, h.clock.now_ns())
        assert (c.position(tp(0)), c.position(tp(1))) == (10, 20)


def test_read_committed_asks_with_its_isolation_level():
    h, c = setup(**{"isolation.level": "read_committed"})
    h.step()
    assert h.net.pending("ListOffsets")[0].body.isolation_level == 1


def test_seek_to_timestamp_and_no_offset_means_the_end():
    h, c = setup()
    c.seek_to_timestamp([tp(0)], 1234)
    c.seek(tp(1), 0)
    h.step()
    req = h.net.pending("ListOffsets")[0]
    assert timestamps(req) == {0: 1234}
    h.net.respond(req, list_offsets_body(req, {0: -1}))       # nothing at or after 1234
    h.net.poll(0, h.clock.now_ns())
    h.step()
    req = h.net.pending("ListOffsets")[0]
    assert timestamps(req) == {0: -1}


def test_by_duration_uses_the_wall_clock():
    h, c = setup(**{"auto.offset.reset": "by_duration:PT1M"})
    h.step()
    req = h.net.pending("ListOffsets")[0]
    assert timestamps(req)[0] == h.clock.wall_ms() - 60_000


def test_leadership_error_retries_after_backoff():
    h, c = setup(**{"retry.backoff.ms": "100", "auto.offset.reset": "earliest"})
    h.step()
    req = h.net.pending("ListOffsets")[0]
    h.net.respond(req, list_offsets_body(req, {1: 5}, errors={0: "NOT_LEADER_OR_FOLLOWER"}))
    h.net.poll(0, h.clock.now_ns())
    assert c.position(tp(1)) == 5 and c.subscriptions.state(tp(0)).state is FetchState.AWAIT_RESET
    assert c.metadata.update_requested
    h.step(ms=50)
    assert h.net.pending("ListOffsets") == []
    h.step(ms=50)
    req = h.net.pending("ListOffsets")[0]
    assert timestamps(req) == {0: -2}


def test_end_offsets_query():
    h, c = setup()
    q = c.offsets.list_offsets({tp(0): -1, tp(1): -1}, h.clock.now_ns())
    req = h.net.pending("ListOffsets")[-1]
    h.net.respond(req, list_offsets_body(req, {0: 100, 1: 200}))
    h.net.poll(0, h.clock.now_ns())
    assert q.done and {t.partition: r.offset for t, r in q.results.items()} == {0: 100, 1: 200}


def test_no_reset_policy_names_every_partition_as_java_does():
    """Java's SubscriptionState.resetInitializingPositions: assign() without a seek and
    auto.offset.reset=none throws one NoOffsetForPartitionException for every partition
    without a position, in its wording (kctl raised one per partition, in its own)."""
    import pytest

    from kctl.engine.subscription import NoOffsetForPartitionError

    h, c = setup(**{"auto.offset.reset": "none"})
    with pytest.raises(NoOffsetForPartitionError) as e:
        h.step()
    assert str(e.value) == ("Undefined offset with no reset policy for partitions: [t-0, t-1] "
                            "(auto.offset.reset=none)")
    assert h.net.pending("ListOffsets") == []
