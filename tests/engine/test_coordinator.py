"""Group membership and the consumer's side of it, stepped with a fake clock and network.
Mirrors Java's AbstractCoordinatorTest (find, join, sync, heartbeat, session and poll
timeouts, leave) and ConsumerCoordinatorTest (eager and cooperative rebalances, committed
offsets, auto commit, commit errors)."""

import pytest

from kctl.engine.assignors import Assignment, Subscription, decode_subscription, encode_assignment, encode_subscription
from kctl.engine.coordinator import COORDINATOR_ID_BASE, MemberState
from kctl.engine.subscription import FetchState
from kctl.errors import KctlError

from .consumer_harness import (
    ConsumerHarness, FindCoordinatorResponse, HeartbeatResponse, JoinGroupResponse, OffsetCommitResponse,
    OffsetFetchResponse, SyncGroupResponse, code, list_offsets_body, tp)

COORD = COORDINATOR_ID_BASE - 0
GROUP = {"group.id": "g", "session.timeout.ms": "10000", "heartbeat.interval.ms": "1000",
         "max.poll.interval.ms": "60000"}


#: A session long enough for a test's idle steps without Heartbeat answers.
QUIET = {"session.timeout.ms": "60000", "heartbeat.interval.ms": "20000", "max.poll.interval.ms": "300000"}


def harness(**props):
    h = ConsumerHarness(partitions=4, **{**GROUP, **props})
    h.ready()
    return h


def find(h):
    h.step()
    req = h.net.pending("FindCoordinator")[0]
    h.net.respond(req, FindCoordinatorResponse(
        throttle_time_ms=0,
        coordinators=[FindCoordinatorResponse.Coordinator(key="g", node_id=0, host="127.0.0.1", port=9000,
                                                          error_code=0)]))
    h.net.poll(0, h.clock.now_ns())
    assert h.consumer.coordinator.coordinator == COORD


def join_response(req, *, member="m1", leader="m1", generation=1, error=None, members=None, protocol="range"):
    return JoinGroupResponse(
        throttle_time_ms=0, error_code=code(error) if error else 0, generation_id=generation,
        protocol_type="consumer", protocol_name=protocol, leader=leader, skip_assignment=False,
        member_id=member, members=members or [])


def member(member_id, topics=("t",), owned=(), generation=-1):
    return JoinGroupResponse.JoinGroupResponseMember(
        member_id=member_id, group_instance_id=None,
        metadata=encode_subscription(Subscription(tuple(topics), tuple(owned), generation)))


def sync_response(partitions, error=None, protocol="range"):
    return SyncGroupResponse(throttle_time_ms=0, error_code=code(error) if error else 0,
                             protocol_type="consumer", protocol_name=protocol,
                             assignment=encode_assignment(Assignment(tuple(tp(p) for p in partitions))))


def answer(h, api, body):
    req = h.net.pending(api)[0]
    h.net.respond(req, body(req) if callable(body) else body)
    h.net.poll(0, h.clock.now_ns())
    return req


def joined(h, partitions=(0, 1, 2, 3), *, leader=True, generation=1, others=()):
    """Runs find/join/sync to STABLE with ``partitions`` assigned."""
    if h.consumer.coordinator.coordinator is None:
        find(h)
    h.step()
    members = [member("m1")] + [member(m) for m in others] if leader else []
    answer(h, "JoinGroup", lambda r: join_response(r, leader="m1" if leader else "m0",
                                                   generation=generation, members=members))
    sync = answer(h, "SyncGroup", sync_response(partitions))
    assert h.consumer.coordinator.state is MemberState.STABLE
    return sync


def test_join_with_member_id_required_then_sync_as_leader():
    h = harness()
    c = h.consumer
    c.subscribe(["t"])
    find(h)
    h.step()
    first = h.net.pending("JoinGroup")[0]
    assert first.body.member_id == "" and first.body.protocol_type == "consumer"
    assert [p.name for p in first.body.protocols] == ["range", "cooperative-sticky"]
    assert decode_subscription(first.body.protocols[0].metadata).topics == ("t",)
    # The JoinGroup may wait for the whole rebalance: rebalance timeout + 5 s.
    assert first.request_timeout_ms == 60000 + 5000
    h.net.respond(first, join_response(first, member="m1", error="MEMBER_ID_REQUIRED"))
    h.net.poll(0, h.clock.now_ns())
    h.step()
    second = h.net.pending("JoinGroup")[0]
    assert second.body.member_id == "m1"
    h.net.respond(second, join_response(second, members=[member("m1"), member("m2")]))
    h.net.poll(0, h.clock.now_ns())
    sync = h.net.pending("SyncGroup")[0]
    got = {a.member_id: a.assignment for a in sync.body.assignments}
    from kctl.engine.assignors import decode_assignment
    assert {m: [p.partition for p in decode_assignment(a).partitions] for m, a in got.items()} == {
        "m1": [0, 1], "m2": [2, 3]}
    h.net.respond(sync, sync_response([0, 1]))
    h.net.poll(0, h.clock.now_ns())
    assert c.coordinator.state is MemberState.STABLE and c.coordinator.generation.generation_id == 1
    assert sorted(t.partition for t in c.assignment()) == [0, 1]
    assert h.events == [("assigned", [0, 1])]


def test_follower_sends_an_empty_sync():
    h = harness()
    h.consumer.subscribe(["t"])
    sync = joined(h, (2, 3), leader=False)
    assert sync.body.assignments == []
    assert sorted(t.partition for t in h.consumer.assignment()) == [2, 3]


def test_heartbeats_every_interval_and_rebalance_in_progress_rejoins():
    h = harness()
    h.consumer.subscribe(["t"])
    joined(h)
    h.step(ms=999)
    assert h.net.pending("Heartbeat") == []
    h.step(ms=1)
    hb = h.net.pending("Heartbeat")[0]
    assert (hb.body.generation_id, hb.body.member_id) == (1, "m1")
    h.net.respond(hb, HeartbeatResponse(throttle_time_ms=0, error_code=code("REBALANCE_IN_PROGRESS")))
    h.net.poll(0, h.clock.now_ns())
    assert h.consumer.coordinator.rejoin_needed
    h.step()
    # Eager (range): everything is revoked before the JoinGroup goes out.
    assert ("revoked", [0, 1, 2, 3]) in h.events
    assert h.net.pending("JoinGroup")[0].body.member_id == "m1"


def test_unknown_member_id_on_heartbeat_resets_the_generation():
    h = harness()
    h.consumer.subscribe(["t"])
    joined(h)
    h.step(ms=1000)
    answer(h, "Heartbeat", HeartbeatResponse(throttle_time_ms=0, error_code=code("UNKNOWN_MEMBER_ID")))
    co = h.consumer.coordinator
    assert co.generation.generation_id == -1 and co.member_id == "" and co.state is MemberState.UNJOINED
    h.step()
    assert h.net.pending("JoinGroup")[0].body.member_id == ""


def test_not_coordinator_marks_the_coordinator_unknown():
    h = harness()
    h.consumer.subscribe(["t"])
    joined(h)
    h.step(ms=1000)
    answer(h, "Heartbeat", HeartbeatResponse(throttle_time_ms=0, error_code=code("NOT_COORDINATOR")))
    assert h.consumer.coordinator.coordinator is None
    h.step()
    assert len(h.net.pending("FindCoordinator")) == 1


def test_find_coordinator_at_an_old_version_asks_for_one_key():
    """A broker before KIP-699 (FindCoordinator v3) gets the single-key layout, and its
    answer's top-level fields name the coordinator."""
    from kctl.engine.coordinator import FIND_COORDINATOR
    h = ConsumerHarness(partitions=4, **GROUP)
    h.net.versions[FIND_COORDINATOR] = 3
    h.ready()
    h.consumer.subscribe(["t"])
    h.step()
    req = h.net.pending("FindCoordinator")[0]
    assert req.api_version == 3
    assert (h.net.wire_bodies[req.correlation_id].key, h.net.wire_bodies[req.correlation_id].key_type) == ("g", 0)
    h.net.respond(req, FindCoordinatorResponse(throttle_time_ms=0, error_code=0, node_id=0,
                                               host="127.0.0.1", port=9000, coordinators=[]))
    h.net.poll(0, h.clock.now_ns())
    assert h.consumer.coordinator.coordinator == COORD


def test_find_coordinator_skips_a_node_without_the_api_and_fails_when_none_has_it():
    """A node that offers no FindCoordinator version kctl speaks is passed over (Java's
    leastLoadedNode does not look; kctl asks a node that can answer); with no such node the
    consumer fails with a clear error, as Java's UnsupportedVersionException does."""
    from kctl.engine.coordinator import FIND_COORDINATOR
    h = ConsumerHarness(partitions=4, nodes=(0, 1), **GROUP)
    h.net.node_versions[0] = {k: v for k, v in h.net.versions.items() if k != FIND_COORDINATOR}
    h.ready()
    h.consumer.subscribe(["t"])
    h.step()
    assert [r.node for r in h.net.pending("FindCoordinator")] == [1]
    h2 = ConsumerHarness(partitions=4, **GROUP)
    del h2.net.versions[FIND_COORDINATOR]
    with pytest.raises(KctlError, match="broker 0 offers no FindCoordinator version kctl speaks"):
        h2.ready()
    assert h2.net.pending("FindCoordinator") == []


def test_session_timeout_without_heartbeat_answers_drops_the_coordinator():
    h = harness()
    h.consumer.subscribe(["t"])
    joined(h)
    h.step(ms=1000)                 # heartbeat sent, never answered
    h.step(ms=8999)
    assert h.consumer.coordinator.coordinator is not None
    h.step(ms=1)                    # 10 s since the join: session.timeout.ms
    assert h.consumer.coordinator.coordinator is None


def test_poll_timeout_leaves_the_group():
    h = harness(**{"max.poll.interval.ms": "20000", "session.timeout.ms": "30000"})
    h.consumer.subscribe(["t"])
    joined(h)
    for _ in range(20):             # steps, but no poll by the application
        h.step(ms=1000)
        for r in h.net.pending("Heartbeat"):
            h.net.respond(r, HeartbeatResponse(throttle_time_ms=0, error_code=0))
        h.net.poll(0, h.clock.now_ns())
    h.step(ms=1)
    leave = h.net.requests("LeaveGroup")
    assert len(leave) == 1 and leave[0].body.members[0].member_id == "m1"
    assert "poll timeout" in leave[0].body.members[0].reason
    assert ("revoked", [0, 1, 2, 3]) in h.events


def test_close_commits_and_leaves():
    h = harness()
    c = h.consumer
    c.subscribe(["t"])
    joined(h, (0, 1))
    c.seek(tp(0), 10)
    c.seek(tp(1), 20)

    def respond_all():
        for r in h.net.pending("OffsetCommit"):
            h.net.respond(r, commit_body(r))
        for r in h.net.pending("LeaveGroup"):
            from .consumer_harness import LeaveGroupResponse
            h.net.respond(r, LeaveGroupResponse(throttle_time_ms=0, error_code=0, members=[]))

    orig_poll = h.net.poll

    def poll(timeout_ns, now_ns):
        respond_all()
        return orig_poll(timeout_ns, now_ns)

    h.net.poll = poll
    c.close()
    commits = h.net.requests("OffsetCommit")
    assert {p.partition_index: p.committed_offset for t in commits[-1].body.topics for p in t.partitions} == {
        0: 10, 1: 20}
    assert commits[-1].body.generation_id_or_member_epoch == 1 and commits[-1].body.member_id == "m1"
    assert len(h.net.requests("LeaveGroup")) == 1


def commit_body(req, errors=None):
    errors = errors or {}
    return OffsetCommitResponse(throttle_time_ms=0, topics=[
        OffsetCommitResponse.OffsetCommitResponseTopic(name=t.name, partitions=[
            OffsetCommitResponse.OffsetCommitResponsePartition(
                partition_index=p.partition_index,
                error_code=code(errors[p.partition_index]) if p.partition_index in errors else 0)
            for p in t.partitions]) for t in req.body.topics])


def offset_fetch_body(req, committed):
    parts = [OffsetFetchResponse.OffsetFetchResponsePartitions(
        partition_index=p, committed_offset=committed.get(p, -1), committed_leader_epoch=-1, metadata="",
        error_code=0) for t in req.body.groups[0].topics for p in t.partition_indexes]
    return OffsetFetchResponse(throttle_time_ms=0, groups=[OffsetFetchResponse.OffsetFetchResponseGroup(
        group_id="g", error_code=0, topics=[OffsetFetchResponse.OffsetFetchResponseTopics(name="t",
                                                                                          partitions=parts)])])


def test_committed_offsets_give_positions_and_the_rest_resets():
    h = harness(**{"auto.offset.reset": "earliest"})
    c = h.consumer
    c.subscribe(["t"])
    joined(h, (0, 1))
    h.step()
    of = h.net.pending("OffsetFetch")[0]
    assert of.api_version <= 9
    assert sorted(of.body.groups[0].topics[0].partition_indexes) == [0, 1]
    h.net.respond(of, offset_fetch_body(of, {0: 17}))
    h.net.poll(0, h.clock.now_ns())
    assert c.position(tp(0)) == 17
    assert c.subscriptions.state(tp(1)).state is FetchState.AWAIT_RESET
    h.step()
    lo = h.net.pending("ListOffsets")[0]
    h.net.respond(lo, list_offsets_body(lo, {1: 3}))
    h.net.poll(0, h.clock.now_ns())
    assert c.position(tp(1)) == 3


def test_auto_commit_every_interval_with_the_generation():
    h = harness(**{"auto.commit.interval.ms": "5000", **QUIET})
    c = h.consumer
    c.subscribe(["t"])
    joined(h, (0,))
    c.seek(tp(0), 9)
    h.step(ms=4000)
    assert h.net.pending("OffsetCommit") == []
    h.step(ms=1000)
    req = h.net.pending("OffsetCommit")[0]
    assert req.body.topics[0].partitions[0].committed_offset == 9
    h.net.respond(req, commit_body(req))
    h.net.poll(0, h.clock.now_ns())
    assert c.coordinator.committed() == {tp(0): 9}
    h.step(ms=4999)
    assert h.net.pending("OffsetCommit") == []
    # Nothing new consumed: Java's autoCommitOffsetsAsync still commits allConsumed() every
    # interval (kctl sent nothing while idle: a benchmark's commit load was not Java's).
    h.step(ms=1)
    req = h.net.pending("OffsetCommit")[0]
    assert req.body.topics[0].partitions[0].committed_offset == 9


def test_auto_commit_commits_every_position_changed_or_not():
    """ConsumerCoordinatorTest.testAutoCommitDynamicAssignment: the auto-commit carries
    subscriptions.allConsumed(), every assigned partition with a position (kctl sent only
    the partitions whose offset changed since its last commit)."""
    h = harness(**{"auto.commit.interval.ms": "1000"})
    c = h.consumer
    c.subscribe(["t"])
    joined(h, (0, 1))
    c.seek(tp(0), 3)
    c.seek(tp(1), 7)
    h.step(ms=1000)
    req = h.net.pending("OffsetCommit")[0]
    h.net.respond(req, commit_body(req))
    h.net.poll(0, h.clock.now_ns())
    c.seek(tp(0), 5)                   # only partition 0 moves
    h.step(ms=1000)
    req = h.net.pending("OffsetCommit")[0]
    assert {p.partition_index: p.committed_offset for t in req.body.topics for p in t.partitions} == {0: 5, 1: 7}


def test_auto_commit_retry_backoff():
    """ConsumerCoordinatorTest.testAutoCommitRetryBackoff: a retriable failure
    (COORDINATOR_LOAD_IN_PROGRESS) is tried again after retry.backoff.ms, not a whole
    auto.commit.interval.ms later; a non-retriable one waits for the interval."""
    h = harness(**{"auto.commit.interval.ms": "5000", "retry.backoff.ms": "100", **QUIET})
    c = h.consumer
    c.subscribe(["t"])
    joined(h, (0,))
    c.seek(tp(0), 9)
    h.step(ms=5000)
    req = h.net.pending("OffsetCommit")[0]
    h.net.respond(req, commit_body(req, {0: "COORDINATOR_LOAD_IN_PROGRESS"}))
    h.net.poll(0, h.clock.now_ns())
    h.step(ms=99)
    assert h.net.pending("OffsetCommit") == []
    h.step(ms=1)
    req = h.net.pending("OffsetCommit")[0]
    h.net.respond(req, commit_body(req, {0: "OFFSET_METADATA_TOO_LARGE"}))
    h.net.poll(0, h.clock.now_ns())
    h.step(ms=100)
    assert h.net.pending("OffsetCommit") == []
    h.step(ms=4900)
    assert len(h.net.pending("OffsetCommit")) == 1


def test_commit_with_an_old_generation_resets_it():
    h = harness()
    c = h.consumer
    c.subscribe(["t"])
    joined(h, (0,))
    c.seek(tp(0), 4)
    c.commit_async()
    req = h.net.pending("OffsetCommit")[0]
    h.net.respond(req, commit_body(req, {0: "ILLEGAL_GENERATION"}))
    h.net.poll(0, h.clock.now_ns())
    assert c.coordinator.generation.generation_id == -1
    assert c.coordinator.member_id == "m1"   # testCommitOffsetIllegalGenerationShouldResetGenerationId
    assert c.metrics.snapshot().commit_failures == 1


def test_join_waits_for_the_auto_commit():
    h = harness()
    c = h.consumer
    c.subscribe(["t"])
    joined(h, (0,))
    c.seek(tp(0), 4)
    c.coordinator.request_rejoin("test")
    h.step()
    assert h.net.pending("JoinGroup") == []                # the commit goes first
    req = h.net.pending("OffsetCommit")[0]
    h.net.respond(req, commit_body(req))
    h.net.poll(0, h.clock.now_ns())
    h.step()
    assert len(h.net.pending("JoinGroup")) == 1


def test_cooperative_revokes_only_what_moves_and_rejoins():
    h = harness(**{"partition.assignment.strategy": "cooperative-sticky"})
    c = h.consumer
    c.subscribe(["t"])
    joined(h, (0, 1, 2, 3))
    h.events.clear()
    c.coordinator.request_rejoin("a member joined")
    h.step()
    join = h.net.pending("JoinGroup")[0]
    sub = decode_subscription(join.body.protocols[0].metadata)
    assert [p.partition for p in sub.owned_partitions] == [0, 1, 2, 3] and sub.generation_id == 1
    assert h.events == []                  # cooperative: nothing revoked before the join
    # As leader with a new member: cooperative-sticky keeps 0,1 and withholds 2,3.
    h.net.respond(join, join_response(join, generation=2, protocol="cooperative-sticky",
                                      members=[member("m1", owned=[tp(p) for p in range(4)], generation=1),
                                               member("m2")]))
    h.net.poll(0, h.clock.now_ns())
    sync = h.net.pending("SyncGroup")[0]
    from kctl.engine.assignors import decode_assignment
    got = {a.member_id: sorted(p.partition for p in decode_assignment(a.assignment).partitions)
           for a in sync.body.assignments}
    assert got == {"m1": [0, 1], "m2": []}
    h.net.respond(sync, sync_response([0, 1], protocol="cooperative-sticky"))
    h.net.poll(0, h.clock.now_ns())
    assert h.events == [("revoked", [2, 3]), ("assigned", [])]
    assert c.coordinator.rejoin_needed                     # the follow-up round hands 2, 3 on


def test_a_fatal_group_error_is_raised():
    h = harness()
    c = h.consumer
    c.subscribe(["t"])
    find(h)
    h.step()
    answer(h, "JoinGroup", lambda r: join_response(r, error="GROUP_AUTHORIZATION_FAILED"))
    with pytest.raises(KctlError, match="GROUP_AUTHORIZATION_FAILED"):
        h.step()


def test_member_state_table_refuses_a_missing_transition():
    h = harness()
    with pytest.raises(KctlError, match="not allowed"):
        h.consumer.coordinator._transition(MemberState.STABLE)


def test_assign_mode_with_a_group_fetches_committed_offsets_without_joining():
    """... and commits as no member (ConsumerCoordinator.sendOffsetCommitRequest: generation
    -1, member "", no group.instance.id: kctl sent the static member's id)."""
    h = harness(**{"group.instance.id": "static-1"})
    c = h.consumer
    c.assign([tp(0)])
    find(h)
    h.step()
    assert h.net.pending("JoinGroup") == []
    of = h.net.pending("OffsetFetch")[0]
    h.net.respond(of, offset_fetch_body(of, {0: 5}))
    h.net.poll(0, h.clock.now_ns())
    assert c.position(tp(0)) == 5
    c.commit_async({tp(0): 6})
    req = h.net.pending("OffsetCommit")[0]
    assert (req.body.generation_id_or_member_epoch, req.body.member_id, req.body.group_instance_id) == (-1, "", None)


def test_close_dynamic_assignment_commits_in_the_revoke_listener_with_the_generation():
    """Java's ConsumerCoordinatorTest.testCloseDynamicAssignment: the listener's commit of
    the revoked partitions, sent while closing, carries the member's generation and id, and
    comes before LeaveGroup (it used to go out with -1 and "": UNKNOWN_MEMBER_ID)."""
    h = harness(**{"enable.auto.commit": "false"})
    c = h.consumer
    c.subscribe(["t"])
    joined(h, (0, 1), generation=3)
    c.seek(tp(0), 10)
    c.seek(tp(1), 20)
    order = []

    def revoked(partitions, positions):
        c.coordinator.commit_async(positions, h.clock.now_ns())
    h.on_partitions_revoked = revoked
    orig_send = h.net.send

    def send(req, now_ns):
        order.append(req)
        return orig_send(req, now_ns)
    h.net.send = send
    orig_poll = h.net.poll

    def poll(timeout_ns, now_ns):
        from .consumer_harness import LeaveGroupResponse
        for r in h.net.pending("OffsetCommit"):
            h.net.respond(r, commit_body(r))
        for r in h.net.pending("LeaveGroup"):
            h.net.respond(r, LeaveGroupResponse(throttle_time_ms=0, error_code=0, members=[]))
        return orig_poll(timeout_ns, now_ns)
    h.net.poll = poll
    c.close()
    commits = [r for r in order if r.api_key == 8]
    leaves = [i for i, r in enumerate(order) if r.api_key == 13]
    assert len(commits) == 1 and len(leaves) == 1
    assert order.index(commits[0]) < leaves[0]
    assert commits[0].body.generation_id_or_member_epoch == 3 and commits[0].body.member_id == "m1"
    assert {p.partition_index: p.committed_offset for t in commits[0].body.topics for p in t.partitions} == {
        0: 10, 1: 20}


def test_close_with_a_failed_commit_says_why():
    """Java's ConsumerCoordinatorTest close/commit tests: a closing commit answered with an
    error is kept (close_commit_error, the WARNING kctl consume prints), not only counted."""
    h = harness()
    c = h.consumer
    c.subscribe(["t"])
    joined(h, (0,))
    c.seek(tp(0), 5)
    orig_poll = h.net.poll

    def poll(timeout_ns, now_ns):
        for r in h.net.pending("OffsetCommit"):
            h.net.respond(r, commit_body(r, {0: "UNKNOWN_MEMBER_ID"}))
        from .consumer_harness import LeaveGroupResponse
        for r in h.net.pending("LeaveGroup"):
            h.net.respond(r, LeaveGroupResponse(throttle_time_ms=0, error_code=0, members=[]))
        return orig_poll(timeout_ns, now_ns)
    h.net.poll = poll
    c.close()
    assert c.close_commit_error == "t-0 UNKNOWN_MEMBER_ID"
    assert c.metrics.snapshot().commit_failures >= 1


def test_no_committed_offset_and_no_reset_policy_names_those_partitions():
    """ConsumerCoordinatorTest's refreshCommittedOffsets + resetInitializingPositions: a
    partition with a committed offset takes it; the others, with auto.offset.reset=none,
    fail in one NoOffsetForPartitionException naming them."""
    from kctl.engine.subscription import NoOffsetForPartitionError

    h = harness(**{"auto.offset.reset": "none"})
    c = h.consumer
    c.subscribe(["t"])
    joined(h, (0, 1, 2))
    h.step()
    of = h.net.pending("OffsetFetch")[0]
    h.net.respond(of, offset_fetch_body(of, {0: 17}))
    with pytest.raises(NoOffsetForPartitionError,
                       match=r"^Undefined offset with no reset policy for partitions: \[t-1, t-2\] "):
        h.net.poll(0, h.clock.now_ns())
    assert c.position(tp(0)) == 17


def test_close_waits_for_the_revoke_listeners_commit_without_a_leave_group():
    """Java's AbstractCoordinator.close awaits the coordinator's pending requests within
    the close timeout: a static member (group.instance.id: no LeaveGroup) closing with its
    listener's commit in flight gets the answer (the wait ran only after a LeaveGroup, so
    the commit was dropped unanswered by closing the connections)."""
    h = harness(**{"enable.auto.commit": "false", "group.instance.id": "i1"})
    c = h.consumer
    c.subscribe(["t"])
    joined(h, (0,))
    c.seek(tp(0), 7)
    answers = []

    def revoked(partitions, positions):
        c.coordinator.commit_async(positions, h.clock.now_ns(), answers.append)
    h.on_partitions_revoked = revoked
    orig_poll = h.net.poll

    def poll(timeout_ns, now_ns):
        for r in h.net.pending("OffsetCommit"):
            h.net.respond(r, commit_body(r, {0: "REBALANCE_IN_PROGRESS"}))
        return orig_poll(timeout_ns, now_ns)
    h.net.poll = poll
    c.close()
    assert h.net.requests("LeaveGroup") == []
    assert [a.errors for a in answers] == [{tp(0): "REBALANCE_IN_PROGRESS"}]
    assert c.metrics.snapshot().commit_failures == 1


def dead_coordinator_waits(h, *, answer=(), timeout_ms=None):
    """net.poll as time passing over a coordinator that answers only ``answer`` (API names):
    each wait moves the fake clock by its timeout, and a request unanswered for
    request.timeout.ms closes its connection (NetworkClient's expiry: ``timed_out``)."""
    from .consumer_harness import LeaveGroupResponse
    limit = (timeout_ms or h.config.request_timeout_ms) * 1_000_000
    orig_poll = h.net.poll
    bodies = {"Heartbeat": lambda r: HeartbeatResponse(throttle_time_ms=0, error_code=0),
              "LeaveGroup": lambda r: LeaveGroupResponse(throttle_time_ms=0, error_code=0, members=[]),
              "OffsetCommit": commit_body}

    def poll(timeout_ns, now_ns):
        for api in answer:
            for r in h.net.pending(api):
                h.net.respond(r, bodies[api](r))
        h.clock.advance(max(timeout_ns, 1_000_000))
        now = h.clock.now_ns()
        for node, reqs in list(h.net.in_flight.items()):
            if any(now - r.sent_ns > (r.request_timeout_ms * 1_000_000 if r.request_timeout_ms and not timeout_ms
                                       else limit) for r in reqs):
                h.net.disconnect(node, timed_out=True)
        return orig_poll(0, now)
    h.net.poll = poll


def test_close_bound_is_the_timeout_capped_by_request_timeout():
    """Java's close timer: min(close timeout, request.timeout.ms) (createTimerForRequest)."""
    from kctl.engine.consumer import close_bound_s
    h = harness(**{"request.timeout.ms": "5000"})
    assert close_bound_s(h.config) == 5.0 and close_bound_s(h.config, 2.0) == 2.0
    assert close_bound_s(harness().config) == 30.0


def test_close_no_response_for_commit():
    """ConsumerCoordinatorTest.testCloseNoResponseForCommit: the coordinator is up
    (Heartbeats answered) but never answers the closing commit. close returns at its bound,
    having sent that one OffsetCommit (no auto-commit every auto.commit.interval.ms meanwhile:
    three more went out under a 15 s kill before), then LeaveGroup, written though the bound
    is spent; the commit is reported (close_commit_error) and counted."""
    h = harness(**{"request.timeout.ms": "5000", "auto.commit.interval.ms": "1000"})
    c = h.consumer
    c.subscribe(["t"])
    joined(h, (0, 1))
    c.seek(tp(0), 10)
    c.seek(tp(1), 20)
    dead_coordinator_waits(h, answer=("Heartbeat",))
    start = h.clock.now_ns()
    c.close(30)
    assert h.clock.now_ns() - start <= 5000 * 1_000_000 + 1_000_000
    commits = h.net.requests("OffsetCommit")
    assert len(commits) == 1
    leaves = h.net.requests("LeaveGroup")
    assert len(leaves) == 1 and leaves[0].sent_ns >= start + 5000 * 1_000_000
    assert c.close_commit_error.startswith("OffsetCommit not answered within the close's 5 s")
    assert "unknown" in c.close_commit_error
    assert c.metrics.snapshot().commit_failures == 1


def test_close_timeout_coordinator_unavailable_for_commit():
    """ConsumerCoordinatorTest.testCloseTimeoutCoordinatorUnavailableForCommit, as the audit
    saw it (the coordinator blackholed: nothing answered): a Heartbeat in flight since before
    close times out, the connection closes and the commit fails retriably
    (NETWORK_EXCEPTION, counted); the commit is sent again once a coordinator is found, but
    FindCoordinator gets no answer either. close returns at its bound, says why, and sends
    no LeaveGroup (no coordinator known: Java's maybeLeaveGroup does not either)."""
    h = harness(**{"request.timeout.ms": "4000"})
    c = h.consumer
    c.subscribe(["t"])
    joined(h, (0,))
    c.seek(tp(0), 7)
    h.step(ms=1000)                          # a Heartbeat goes out, never to be answered
    assert h.net.pending("Heartbeat")
    dead_coordinator_waits(h)
    h.clock.advance(ms=1000)
    start = h.clock.now_ns()
    c.close()
    assert h.clock.now_ns() - start <= 4000 * 1_000_000 + 1_000_000
    assert len(h.net.requests("OffsetCommit")) == 1
    assert len(h.net.requests("FindCoordinator")) == 2     # the join's, and close's search
    assert h.net.requests("LeaveGroup") == []
    assert c.close_commit_error.startswith("not sent: no coordinator ready within the close's 4 s")
    assert "(the last attempt: t-0 NETWORK_EXCEPTION)" in c.close_commit_error
    assert c.metrics.snapshot().commit_failures == 1


def test_close_commit_retried_after_a_request_timeout():
    """Java's commitOffsetsSync within close: a closing commit whose request timed out
    (the connection closed, the coordinator dropped) is sent again on a new connection once
    the coordinator is found, within the bound; its success leaves nothing to report."""
    h = harness(**{"request.timeout.ms": "3000"})
    c = h.consumer
    c.subscribe(["t"])
    joined(h, (0,))
    c.seek(tp(0), 9)
    dead_coordinator_waits(h, answer=("Heartbeat",), timeout_ms=1000)
    orig_poll = h.net.poll

    def poll(timeout_ns, now_ns):
        commits = h.net.requests("OffsetCommit")
        for r in h.net.pending("FindCoordinator"):
            h.net.respond(r, FindCoordinatorResponse(throttle_time_ms=0, coordinators=[
                FindCoordinatorResponse.Coordinator(key="g", node_id=0, host="127.0.0.1", port=9000,
                                                    error_code=0)]))
        if len(commits) == 2:
            for r in h.net.pending("OffsetCommit"):
                h.net.respond(r, commit_body(r))
        return orig_poll(timeout_ns, now_ns)
    h.net.poll = poll
    c.close(2.5)
    commits = h.net.requests("OffsetCommit")
    assert len(commits) == 2 and commits[1].body.member_id == "m1"
    assert c.close_commit_error is None
    assert len(h.net.requests("LeaveGroup")) == 1


# -- commits and rebalances (ConsumerCoordinatorTest) ---------------------------------------------
REBALANCE = {"max.poll.interval.ms": "30000", "retry.backoff.ms": "100", "session.timeout.ms": "60000",
             "heartbeat.interval.ms": "20000", "auto.commit.interval.ms": "5000"}


def rebalancing(h, partitions=(0,), offset=4):
    """Joined with ``partitions`` at ``offset``, then a rebalance asked for: the next step
    prepares the join (the commit before rebalancing)."""
    c = h.consumer
    c.subscribe(["t"])
    joined(h, partitions)
    for p in partitions:
        c.seek(tp(p), offset)
    c.coordinator.request_rejoin("group is rebalancing (Heartbeat: REBALANCE_IN_PROGRESS)")
    h.step()
    return c


def test_auto_commit_dynamic_assignment_rebalance():
    """ConsumerCoordinatorTest.testAutoCommitDynamicAssignmentRebalance and
    generationIfStable: no auto-commit before the member is in a stable generation, nor
    while a JoinGroup or SyncGroup is under way (kctl committed with the old generation
    during a JoinGroup, and with the new one between JoinGroup and SyncGroup)."""
    h = harness(**REBALANCE, **{"partition.assignment.strategy": "cooperative-sticky"})
    c = h.consumer
    c.subscribe(["t"])
    find(h)
    h.step(ms=5000)                               # JoinGroup in flight: not joined, no commit
    assert h.net.pending("OffsetCommit") == []
    answer(h, "JoinGroup", lambda r: join_response(r, members=[member("m1")], protocol="cooperative-sticky"))
    h.step(ms=5000)                               # SyncGroup in flight
    assert h.net.pending("OffsetCommit") == []
    answer(h, "SyncGroup", sync_response([0, 1], protocol="cooperative-sticky"))
    c.seek(tp(0), 100)
    h.step(ms=5000)
    req = h.net.pending("OffsetCommit")[0]
    assert req.body.generation_id_or_member_epoch == 1 and req.body.member_id == "m1"
    h.net.respond(req, commit_body(req))
    h.net.poll(0, h.clock.now_ns())
    # Cooperative rebalance: the commit before joining, then the partitions stay owned while
    # the JoinGroup waits, and no auto-commit goes out with the old generation.
    c.coordinator.request_rejoin("test")
    h.step()
    answer(h, "OffsetCommit", commit_body)
    h.step()
    assert len(h.net.pending("JoinGroup")) == 1 and c.assignment()
    h.step(ms=5000)
    h.step(ms=5000)
    assert h.net.pending("OffsetCommit") == []


def test_commit_offset_rebalance_in_progress():
    """ConsumerCoordinatorTest.testCommitOffsetRebalanceInProgress: while rebalancing a
    commit fails at once, without a request, and is not retriable."""
    h = harness(**REBALANCE)
    c = h.consumer
    c.subscribe(["t"])
    joined(h, (0,))
    c.seek(tp(0), 4)
    c.coordinator.on_join_prepare = lambda gen, now: True
    c.coordinator.request_rejoin("test")
    h.step()
    assert c.coordinator.state is MemberState.PREPARING_REBALANCE
    results = []
    assert c.coordinator.commit_async({tp(0): c.subscriptions.all_consumed()[tp(0)]}, h.clock.now_ns(),
                                      results.append)
    assert h.net.pending("OffsetCommit") == []
    [r] = results
    assert not r.ok and not r.sent and r.errors == {tp(0): "REBALANCE_IN_PROGRESS"}
    assert r.describe() == "not sent: the member was rebalancing (REBALANCE_IN_PROGRESS)"
    assert c.metrics.snapshot().commit_failures == 0          # no OffsetCommit was answered


def test_on_join_prepare_with_offset_commit_should_success_after_retry():
    """ConsumerCoordinatorTest.testOnJoinPrepareWithOffsetCommitShouldSuccessAfterRetry: a
    retriable failure of the commit before joining is sent again after retry.backoff.ms,
    and the JoinGroup waits for it (kctl joined after the first answer, failed or not)."""
    h = harness(**REBALANCE)
    rebalancing(h)
    req = h.net.pending("OffsetCommit")[0]
    h.net.respond(req, commit_body(req, {0: "UNKNOWN_TOPIC_OR_PARTITION"}))
    h.net.poll(0, h.clock.now_ns())
    h.step(ms=99)
    assert h.net.pending("OffsetCommit") == [] and h.net.pending("JoinGroup") == []
    h.step(ms=1)
    req = h.net.pending("OffsetCommit")[0]
    assert req.body.generation_id_or_member_epoch == 1
    assert h.net.pending("JoinGroup") == []
    h.net.respond(req, commit_body(req))
    h.net.poll(0, h.clock.now_ns())
    h.step()
    assert len(h.net.pending("JoinGroup")) == 1
    assert h.consumer.rebalance_commit_failures.count == 0
    assert h.consumer.coordinator.committed() == {tp(0): 4}


def test_on_join_prepare_with_offset_commit_should_keep_join_after_non_retryable_exception():
    """ConsumerCoordinatorTest.testOnJoinPrepareWithOffsetCommitShouldKeepJoinAfterNonRetryableException:
    the join goes on; the failure is kept for the run's report, not only counted."""
    h = harness(**REBALANCE)
    c = rebalancing(h)
    req = h.net.pending("OffsetCommit")[0]
    h.net.respond(req, commit_body(req, {0: "UNKNOWN_MEMBER_ID"}))
    h.net.poll(0, h.clock.now_ns())
    h.step()
    assert len(h.net.pending("JoinGroup")) == 1
    assert h.net.pending("JoinGroup")[0].body.member_id == ""      # UNKNOWN_MEMBER_ID: a new member
    assert c.rebalance_commit_failures.count == 1
    assert c.rebalance_commit_failures.last_error == "t-0 UNKNOWN_MEMBER_ID"
    assert c.metrics.snapshot().commit_failures == 1


def test_on_join_prepare_with_offset_commit_should_keep_join_after_rebalance_timeout():
    """ConsumerCoordinatorTest.testOnJoinPrepareWithOffsetCommitShouldKeepJoinAfterRebalanceTimeout:
    retriable failures until the rebalance timeout, then the join goes on."""
    h = harness(**REBALANCE)
    c = rebalancing(h)
    for _ in range(3):
        req = h.net.pending("OffsetCommit")[0]
        h.net.respond(req, commit_body(req, {0: "COORDINATOR_LOAD_IN_PROGRESS"}))
        h.net.poll(0, h.clock.now_ns())
        h.step(ms=100)
    assert h.net.pending("JoinGroup") == []
    h.clock.advance(ms=30000)
    c.coordinator.polled(h.clock.now_ns())      # the application polls on (no poll timeout)
    h.step()
    assert len(h.net.pending("JoinGroup")) == 1
    assert c.rebalance_commit_failures.count == 1
    assert "no answer within the rebalance timeout (max.poll.interval.ms 30000 ms)" in \
        c.rebalance_commit_failures.last_error


def test_join_prepare_and_commit_with_coordinator_not_available():
    """ConsumerCoordinatorTest.testJoinPrepareAndCommitWithCoordinatorNotAvailable: retriable,
    the coordinator is looked up again and the join waits."""
    h = harness(**REBALANCE)
    c = rebalancing(h)
    req = h.net.pending("OffsetCommit")[0]
    h.net.respond(req, commit_body(req, {0: "COORDINATOR_NOT_AVAILABLE"}))
    h.net.poll(0, h.clock.now_ns())
    assert c.coordinator.coordinator is None
    h.step(ms=100)
    assert h.net.pending("JoinGroup") == [] and c.rebalance_commit_failures.count == 0


def test_join_prepare_commit_without_a_generation_is_not_sent_and_is_reported():
    """The member was dropped (generation reset) before the commit: Java's
    sendOffsetCommitRequest fails it at once (CommitFailedException); the positions read
    since the last commit go to the next owners uncommitted, which the run reports."""
    h = harness(**REBALANCE)
    c = h.consumer
    c.subscribe(["t"])
    joined(h, (0,))
    c.seek(tp(0), 4)
    c.coordinator.reset_generation("test: dropped")
    h.step()
    assert h.net.pending("OffsetCommit") == [] and len(h.net.pending("JoinGroup")) == 1
    assert c.rebalance_commit_failures.count == 1
    assert c.rebalance_commit_failures.last_error == (
        "not sent: the member was not in the group (its generation was reset)")
    assert ("lost", [0]) in h.events


def test_a_failed_sync_group_does_not_prepare_again():
    """AbstractCoordinator's needsJoinPrepare: a SyncGroup answered REBALANCE_IN_PROGRESS
    joins again without a second onJoinPrepare (kctl committed a second time, with the
    generation that never became stable). Cooperative: the partitions stay owned throughout."""
    h = harness(**REBALANCE, **{"partition.assignment.strategy": "cooperative-sticky"})
    c = rebalancing(h)
    req = h.net.pending("OffsetCommit")[0]
    h.net.respond(req, commit_body(req))
    h.net.poll(0, h.clock.now_ns())
    h.step()
    answer(h, "JoinGroup", lambda r: join_response(r, generation=2, protocol="cooperative-sticky",
                                                   members=[member("m1", owned=[tp(0)], generation=1)]))
    answer(h, "SyncGroup", SyncGroupResponse(throttle_time_ms=0, error_code=code("REBALANCE_IN_PROGRESS"),
                                             protocol_type="consumer", protocol_name="range", assignment=b""))
    h.step()
    assert h.net.pending("OffsetCommit") == [] and len(h.net.pending("JoinGroup")) == 1


def test_commit_answered_for_an_old_generation_keeps_the_new_one():
    """ConsumerCoordinatorTest's generationUnchanged cases: ILLEGAL_GENERATION for a commit
    sent with generation 1, answered once generation 2 is stable, does not reset 2."""
    h = harness(**REBALANCE)
    c = h.consumer
    c.subscribe(["t"])
    joined(h, (0,))
    c.seek(tp(0), 4)
    c.commit_async()
    old = h.net.pending("OffsetCommit")[0]
    c.coordinator.on_join_prepare = lambda gen, now: True
    c.coordinator.request_rejoin("test")
    h.step()
    answer(h, "JoinGroup", lambda r: join_response(r, generation=2, members=[member("m1")]))
    answer(h, "SyncGroup", sync_response([0]))
    h.net.respond(old, commit_body(old, {0: "ILLEGAL_GENERATION"}))
    h.net.poll(0, h.clock.now_ns())
    assert c.coordinator.generation.generation_id == 2 and c.coordinator.state is MemberState.STABLE


def test_eager_join_prepare_marks_partitions_pending_revocation():
    """ConsumerCoordinator.maybeMarkPartitionsPendingRevocation (eager, auto-commit): while
    the commit before the join is in flight no Fetch is sent for the partitions and what
    is buffered is not handed out, so the position stays at what is committed (kctl handed
    records out meanwhile: the next owner read them again)."""
    from .consumer_harness import fetch_body, partition_data, records

    h = harness(**REBALANCE)
    c = h.consumer
    c.subscribe(["t"])
    joined(h, (0,))
    c.seek(tp(0), 0)
    h.step()
    answer(h, "Fetch", lambda r: fetch_body(r, {0: partition_data(0, records(0, 5))}))
    c.coordinator.request_rejoin("group is rebalancing (Heartbeat: REBALANCE_IN_PROGRESS)")
    h.step()
    req = h.net.pending("OffsetCommit")[0]
    assert req.body.topics[0].partitions[0].committed_offset == 0
    assert h.collect() == [] and c.position(tp(0)) == 0
    h.step()
    assert h.net.pending("Fetch") == []
    h.net.respond(req, commit_body(req))
    h.net.poll(0, h.clock.now_ns())
    h.step()
    assert len(h.net.pending("JoinGroup")) == 1 and ("revoked", [0]) in h.events


def test_illegal_generation():
    """ConsumerCoordinatorTest.testIllegalGeneration: a Heartbeat answered ILLEGAL_GENERATION
    resets the generation (the member id kept) and the next join gives the partitions up
    as lost, not revoked (kctl revoked them with the dropped generation)."""
    h = harness()
    h.consumer.subscribe(["t"])
    joined(h, (0, 1))
    h.events.clear()
    h.step(ms=1000)
    answer(h, "Heartbeat", HeartbeatResponse(throttle_time_ms=0, error_code=code("ILLEGAL_GENERATION")))
    co = h.consumer.coordinator
    assert co.generation.generation_id == -1 and co.member_id == "m1" and co.rejoin_needed
    h.step()
    assert h.events == [("lost", [0, 1])]
    assert h.net.pending("JoinGroup")[0].body.member_id == "m1"


def test_inconsistent_group_protocol_is_fatal():
    """AbstractCoordinator's isProtocolTypeInconsistent and SyncGroup's protocol name check:
    a JoinGroup (v7+) or SyncGroup (v5+) answer naming another protocol type, or a SyncGroup
    naming another assignor than the JoinGroup chose, is INCONSISTENT_GROUP_PROTOCOL (kctl
    took the assignment)."""
    h = harness()
    h.consumer.subscribe(["t"])
    find(h)
    h.step()
    answer(h, "JoinGroup", lambda r: join_response(r, members=[member("m1")]))
    answer(h, "SyncGroup", sync_response([0, 1], protocol="roundrobin"))
    with pytest.raises(KctlError, match="SyncGroup answered protocol 'roundrobin', not 'range' "
                                        r"\(INCONSISTENT_GROUP_PROTOCOL\)"):
        h.step()
    assert h.consumer.assignment() == []

    h = harness()
    h.consumer.subscribe(["t"])
    find(h)
    h.step()
    join = h.net.pending("JoinGroup")[0]
    body = join_response(join)
    body.protocol_type = "connect"
    h.net.respond(join, body)
    h.net.poll(0, h.clock.now_ns())
    with pytest.raises(KctlError, match="JoinGroup answered protocol type 'connect', not 'consumer'"):
        h.step()


def test_commit_offset_sync_coordinator_not_available():
    """ConsumerCoordinatorTest.testCommitOffsetSyncCoordinatorNotAvailable: commit_sync
    (and close's commit) sends a commit answered with a retriable error again, after the
    coordinator is found again and retry.backoff.ms, within its timeout (kctl gave the first
    failure back: a closing commit failed where Java's succeeded)."""
    h = harness(**{"retry.backoff.ms": "100", "retry.backoff.max.ms": "100"})
    c = h.consumer
    c.assign([tp(0)])
    find(h)
    c.seek(tp(0), 100)
    answers = iter(["COORDINATOR_NOT_AVAILABLE", None])
    sent_at = []
    poll = h.net.poll

    def answering(timeout_ns, now_ns):
        for r in h.net.pending("OffsetCommit"):
            sent_at.append(h.clock.now_ns())
            error = next(answers)
            h.net.respond(r, commit_body(r, {0: error} if error else {}))
        for r in h.net.pending("FindCoordinator"):
            h.net.respond(r, FindCoordinatorResponse(throttle_time_ms=0, coordinators=[
                FindCoordinatorResponse.Coordinator(key="g", node_id=0, host="127.0.0.1", port=9000, error_code=0)]))
        h.clock.advance(ns=max(timeout_ns, 1_000_000))
        return poll(timeout_ns, now_ns)

    h.net.poll = answering
    result = c.commit_sync(timeout_s=5)
    assert result.ok and result.offsets == {tp(0): 100}
    assert len(sent_at) == 2 and sent_at[1] - sent_at[0] >= 100_000_000


def test_a_failed_commit_before_a_rebalance_is_reported_only_when_offsets_were_behind():
    """Dropped from the group right after an auto-commit of every position: the commit
    before the next join cannot be sent (no generation), but nothing would be read twice,
    so nothing is reported. A late answer to a commit abandoned at the rebalance timeout is
    not taken for the next rebalance's commit."""
    h = harness(**REBALANCE)
    c = h.consumer
    c.subscribe(["t"])
    joined(h, (0,))
    c.seek(tp(0), 4)
    h.step(ms=5000)
    answer(h, "OffsetCommit", commit_body)
    c.coordinator.reset_generation("test: dropped (Heartbeat: UNKNOWN_MEMBER_ID)")
    h.step()
    assert h.net.pending("OffsetCommit") == [] and len(h.net.pending("JoinGroup")) == 1
    assert c.rebalance_commit_failures.count == 0 and ("lost", [0]) in h.events

    h = harness(**REBALANCE)
    c = rebalancing(h)
    late = h.net.pending("OffsetCommit")[0]
    h.clock.advance(ms=30000)
    c.coordinator.polled(h.clock.now_ns())
    h.step()
    assert c.rebalance_commit_failures.count == 1
    answer(h, "JoinGroup", lambda r: join_response(r, generation=2, members=[member("m1")]))
    answer(h, "SyncGroup", sync_response([0]))
    c.seek(tp(0), 6)
    c.coordinator.request_rejoin("again")
    h.net.respond(late, commit_body(late, {0: "OFFSET_METADATA_TOO_LARGE"}))
    h.net.poll(0, h.clock.now_ns())
    h.step()
    req = h.net.pending("OffsetCommit")[-1]
    assert req.body.generation_id_or_member_epoch == 2 and h.net.pending("JoinGroup") == []
    assert c.rebalance_commit_failures.count == 1


def test_leave_during_a_rebalance_gives_the_partitions_up_as_lost():
    """ConsumerCoordinator.onLeavePrepare (testUnsubscribeWithInvalidGeneration's rule):
    leaving while a rebalance is under way gives the partitions up as lost, not revoked
    (cooperative: they stay owned while the JoinGroup waits)."""
    h = harness(**REBALANCE, **{"partition.assignment.strategy": "cooperative-sticky",
                               "enable.auto.commit": "false"})
    c = h.consumer
    c.subscribe(["t"])
    joined(h, (0, 1))
    h.events.clear()
    c.coordinator.request_rejoin("test")
    h.step()
    assert c.coordinator.state is MemberState.PREPARING_REBALANCE and c.assignment()
    c.coordinator.maybe_leave_group("the consumer is being closed", h.clock.now_ns())
    assert h.events == [("lost", [0, 1])]


def test_metadata_change_triggers_rebalance():
    """ConsumerCoordinatorTest.testMetadataChangeTriggersRebalance: the leader sees a
    partition added to a subscribed topic and asks for a rebalance (kctl never did: the new
    partition had no owner until some other rebalance); a follower does not watch."""
    h = harness()
    c = h.consumer
    c.subscribe(["t"])
    joined(h, (0, 1, 2, 3))
    h.step()
    assert not c.coordinator.rejoin_needed
    h.partitions = 5
    c.metadata.request_update()
    h.step(ms=1000)                            # past the metadata refresh backoff
    h.answer_metadata()
    h.step()
    assert c.coordinator.rejoin_needed
    assert c.coordinator.rejoin_reason == "cached metadata has changed: topic t has 5 partitions, not 4"

    h = harness()
    c = h.consumer
    c.subscribe(["t"])
    joined(h, (0, 1), leader=False)
    h.partitions = 5
    c.metadata.request_update()
    h.step(ms=1000)                            # past the metadata refresh backoff
    h.answer_metadata()
    h.step()
    assert not c.coordinator.rejoin_needed
