"""MetadataUpdater (engine/metadata_updater.py), alone and through its two owners, the
producer's Sender and the Consumer, stepped with a FakeClock over the FakeNetwork.

Java's cases: NetworkClientTest.testUnsupportedVersionDuringInternalMetadataRequest (no
usable Metadata version is a failed update, no request on the wire), MetadataTest's
testFailedUpdate / testTimeToNextUpdateRetryBackoff (a failed update backs off, doubling
from retry.backoff.ms to retry.backoff.max.ms). Passing over a node without a common
version, so that another node is asked, is kctl's addition: Java's leastLoadedNode does
not look at versions and keeps picking the same node.
"""

from __future__ import annotations

import pytest

from kctl.config import ProducerConfig
from kctl.engine.clock import NS_PER_MS, FakeClock
from kctl.engine.metadata import Metadata
from kctl.engine.metadata_updater import MetadataUpdater
from kctl.errors import KctlError
from kctl.protocol import schema
from kctl.protocol.error_codes import ERRORS_BY_NAME

from .consumer_harness import ConsumerHarness, metadata_body, tp
from .fake_network import ALL_VERSIONS, FakeNetwork
from .sender_harness import Harness

METADATA = schema.API_BY_NAME["Metadata"].api_key
#: What a broker that does not offer Metadata at all negotiates with kctl.
NO_METADATA = {k: v for k, v in ALL_VERSIONS.items() if k != METADATA}
#: kctl's side of Metadata, as the "no common version" line words it.
KCTL_RANGE = f"kctl v{schema.API_BY_KEY[METADATA].min_version}-v{ALL_VERSIONS[METADATA]}"
#: retry.backoff.ms and retry.backoff.max.ms, Kafka's defaults.
BACKOFF_MS, BACKOFF_MAX_MS = 100, 1000


class Updates:
    """The owner's side: what ``on_update`` was handed."""

    def __init__(self) -> None:
        self.seen = []

    def __call__(self, update, now_ns):
        self.seen.append((update, now_ns))


def updater(nodes=(0,), **node_versions):
    clock = FakeClock(now_ns=10**12)
    net = FakeNetwork(clock, nodes)
    for node, versions in node_versions.items():
        net.node_versions[int(node.removeprefix("node"))] = versions
    metadata = Metadata(ProducerConfig.from_properties({"bootstrap.servers": "127.0.0.1:9000"}).metadata,
                        random=lambda: 0.5)       # no jitter: the backoffs' exact figures
    metadata.add_topics(["t"])
    updates = Updates()
    return clock, net, metadata, MetadataUpdater(metadata, net, updates), updates


def count_failures(metadata: Metadata) -> list[int]:
    """A spy on ``failed_update``: the times at which refreshes failed."""
    times: list[int] = []
    real = metadata.failed_update

    def failed_update(now_ns: int) -> None:
        times.append(now_ns)
        real(now_ns)

    metadata.failed_update = failed_update
    return times


def test_unsupported_version_during_internal_metadata_request():
    """NetworkClientTest.testUnsupportedVersionDuringInternalMetadataRequest: the only node
    offers no Metadata version kctl speaks. No request is built or sent; the attempt is a
    failed update whose reason names the node and both sides' ranges; the next attempt
    waits for retry.backoff.ms."""
    clock, net, metadata, u, updates = updater(node0=NO_METADATA)
    failures = count_failures(metadata)
    now = clock.now_ns()
    wake = u.maybe_update(now)
    assert net.requests("Metadata") == [] and not u.in_flight
    assert failures == [now]
    assert wake == now + BACKOFF_MS * NS_PER_MS
    assert u.last_error == f"node 0 (node-0): no common version of Metadata: broker does not offer it, {KCTL_RANGE}"
    # Before the backoff has passed, nothing is tried again.
    clock.advance(ms=BACKOFF_MS - 1)
    assert u.maybe_update(clock.now_ns()) == wake and failures == [now]
    assert updates.seen == []


def test_time_to_next_update_retry_backoff_without_a_common_version():
    """MetadataTest.testTimeToNextUpdateRetryBackoff, for the failure above: run as a loop
    runs (woken at each returned time) for 5 s, the attempts back off 100, 200, 400, 800,
    then 1000 ms (retry.backoff.max.ms): a handful of attempts, never a tight loop."""
    clock, net, metadata, u, _ = updater(node0=NO_METADATA)
    failures = count_failures(metadata)
    start = clock.now_ns()
    turns = 0
    while clock.now_ns() < start + 5000 * NS_PER_MS:
        wake = u.maybe_update(clock.now_ns())
        assert wake > clock.now_ns(), "asked to run again at once: a tight loop"
        clock.advance_to(wake)
        turns += 1
    gaps_ms = [(b - a) // NS_PER_MS for a, b in zip(failures, failures[1:])]
    assert gaps_ms[:5] == [100, 200, 400, 800, 1000]
    assert set(gaps_ms[4:]) == {BACKOFF_MAX_MS}
    assert turns == len(failures) <= 9
    assert net.requests("Metadata") == []


def test_a_node_without_a_common_version_is_passed_over():
    """Node 0 offers no Metadata version, node 1 does (at v9): the request goes to node 1 at
    its own version, and nothing fails."""
    clock, net, metadata, u, updates = updater(nodes=(0, 1), node0=NO_METADATA, node1={**ALL_VERSIONS, METADATA: 9})
    failures = count_failures(metadata)
    u.maybe_update(clock.now_ns())
    (req,) = net.requests("Metadata")
    assert req.node == 1 and req.api_version == 9 and u.in_flight
    assert failures == [] and u.last_error is None
    net.respond(req, metadata_body(nodes=(0, 1)))
    net.poll(0, clock.now_ns())
    assert not u.in_flight and len(updates.seen) == 1
    assert metadata.partition_count("t") == 2


def test_a_later_node_that_offers_a_version_is_used():
    """Only node 0 can be reached and it offers no Metadata version: failed updates with
    backoff. Once node 1 can be reached (out of its reconnect backoff), the next attempt,
    after the backoff, asks it; its answer ends the failures."""
    clock, net, metadata, u, updates = updater(nodes=(0, 1), node0=NO_METADATA)
    net.down.add(1)
    failures = count_failures(metadata)
    wake = u.maybe_update(clock.now_ns())
    assert len(failures) == 1 and "node 0" in u.last_error
    clock.advance_to(wake)
    wake = u.maybe_update(clock.now_ns())
    assert len(failures) == 2 and wake == clock.now_ns() + 2 * BACKOFF_MS * NS_PER_MS
    net.down.discard(1)
    clock.advance(ms=50)
    assert u.maybe_update(clock.now_ns()) == wake   # still inside the backoff: nothing sent
    assert net.requests("Metadata") == []
    clock.advance_to(wake)
    u.maybe_update(clock.now_ns())
    (req,) = net.requests("Metadata")
    assert req.node == 1
    net.respond(req, metadata_body(nodes=(0, 1)))
    net.poll(0, clock.now_ns())
    assert u.last_error is None and len(updates.seen) == 1 and len(failures) == 2
    # Healthy again: the next refresh is metadata.max.age.ms away, not a backoff.
    assert metadata.time_to_next_update_ns(clock.now_ns()) == 5 * 60 * 1000 * NS_PER_MS


def test_failed_update_after_a_disconnect():
    """MetadataTest.testFailedUpdate: the node goes away with the request in flight; the
    update fails, in-flight clears, the retry waits for retry.backoff.ms."""
    clock, net, metadata, u, updates = updater()
    failures = count_failures(metadata)
    u.maybe_update(clock.now_ns())
    assert u.in_flight
    net.disconnect(0)
    net.poll(0, clock.now_ns())
    assert not u.in_flight and failures == [clock.now_ns()] and updates.seen == []
    assert u.last_error == "node 0: node 0 disconnected"
    assert u.maybe_update(clock.now_ns()) == clock.now_ns() + BACKOFF_MS * NS_PER_MS
    clock.advance(ms=BACKOFF_MS)
    u.maybe_update(clock.now_ns())
    assert len(net.requests("Metadata")) == 2


# -- the producer ---------------------------------------------------------------------------


def topic_error_body(name: str):
    """A Metadata answer whose only topic, "t", carries the error ``name``."""
    body = metadata_body(partitions=0)
    body.topics[0].error_code = ERRORS_BY_NAME[name].code
    return body


def test_producer_without_a_common_metadata_version_backs_off_then_asks_another_node():
    """The producer's loop: node 0 (the only one reachable) offers no Metadata version, so
    the sender's turns send nothing and wake at the backoff; node 1 comes up and is asked;
    records then go to their leaders as usual."""
    h = Harness(nodes=(0, 1))
    h.net.node_versions[0] = NO_METADATA
    h.net.down.add(1)
    sender = h.producer.sender
    failures = count_failures(h.producer.metadata)
    now = h.clock.now_ns()
    assert sender.run_once(now) == now + BACKOFF_MS * NS_PER_MS
    assert h.net.requests("Metadata") == [] and len(failures) == 1
    assert "no common version of Metadata" in sender.metadata_updater.last_error
    h.net.down.discard(1)
    h.step(ms=BACKOFF_MS)
    (req,) = h.net.requests("Metadata")
    assert req.node == 1
    h.net.respond(req, metadata_body(nodes=(0, 1)))
    h.step()
    h.answer_init()   # idempotence (on by default) first asks for a producer id
    handles = h.send(2, partition=1)
    h.step(ms=5)   # linger.ms
    (produce,) = h.produce_requests()
    assert produce.node == 1   # partition 1's leader
    h.respond(produce)
    h.step()
    assert [x.offset for x in handles] == [0, 1] and len(failures) == 1


def test_producer_send_names_the_metadata_failure_after_max_block_ms():
    """A send that waits for metadata (max.block.ms) when no node offers a Metadata version:
    one line naming the node and the versions, after a bounded number of loop turns."""
    h = Harness(**{"max.block.ms": "2000"})
    h.net.node_versions[0] = NO_METADATA
    turns = sleeping_poll(h.net)
    with pytest.raises(KctlError, match=r"^topic 't' not present in metadata after 2000 ms \(max\.block\.ms\); "
                                         r"the last metadata refresh failed: node 0 \(node-0\): no common version "
                                         r"of Metadata: broker does not offer it"):
        h.producer.send("t", b"v")
    assert h.net.requests("Metadata") == [] and len(turns) < 100


def test_producer_fails_a_topics_batches_on_its_metadata_error():
    """What stays the sender's: a topic's error in a Metadata answer fails its batches
    (those still queued: linger.ms keeps them so here)."""
    h = Harness(**{"linger.ms": "10000"})
    h.start()
    handles = h.send(3)
    h.producer.metadata.request_update()
    h.step(ms=BACKOFF_MS)
    (_, req) = h.net.requests("Metadata")
    h.net.respond(req, topic_error_body("TOPIC_AUTHORIZATION_FAILED"))
    h.step()
    assert {x.error for x in handles} == {"TOPIC_AUTHORIZATION_FAILED"}
    assert h.producer.metrics.failed_by_error == {"TOPIC_AUTHORIZATION_FAILED": 3}
    assert h.produce_requests() == []


# -- the consumer ---------------------------------------------------------------------------


def sleeping_poll(net: FakeNetwork) -> list[int]:
    """Makes ``net.poll`` let its timeout pass on the fake clock (as waiting on sockets
    does); returns the list of waits, one per loop turn. Over 10,000 turns is a tight loop."""
    waits: list[int] = []
    real = net.poll

    def poll(timeout_ns, now_ns):
        waits.append(timeout_ns)
        assert len(waits) < 10_000, "tight loop"
        net.clock.advance(timeout_ns)
        return real(timeout_ns, net.clock.now_ns())

    net.poll = poll
    return waits


def test_consumer_without_a_common_metadata_version_backs_off_then_asks_another_node():
    """The consumer's loop used to build the request at version None (a TypeError out of
    run_once). Now: no request, a failed update, the wake at the backoff; then node 1 is
    asked and the consumer reads as usual."""
    h = ConsumerHarness(nodes=(0, 1))
    h.net.node_versions[0] = NO_METADATA
    h.net.down.add(1)
    failures = count_failures(h.consumer.metadata)
    h.consumer.assign([tp(0)])
    now = h.clock.now_ns()
    assert h.consumer.run_once(now) == now + BACKOFF_MS * NS_PER_MS
    assert h.net.requests("Metadata") == [] and len(failures) == 1
    h.step(ms=BACKOFF_MS - 1)
    assert h.net.requests("Metadata") == [] and len(failures) == 1   # inside the backoff
    h.net.down.discard(1)
    h.step(ms=1)
    (req,) = h.net.requests("Metadata")
    assert req.node == 1 and h.consumer.metadata_updater.in_flight
    h.answer_metadata()
    assert h.consumer.metadata.partition_count("t") == 2
    assert h.consumer.metadata_updater.last_error is None


def test_consumer_partitions_for_names_the_metadata_failure():
    """partitions_for waits default.api.timeout.ms (here 2 s) and then says why."""
    h = ConsumerHarness()
    h.net.node_versions[0] = NO_METADATA
    turns = sleeping_poll(h.net)
    with pytest.raises(KctlError, match=r"^metadata for topic 't' did not complete within 2 s; the last metadata "
                                         r"refresh failed: node 0 \(node-0\): no common version of Metadata"):
        h.consumer.partitions_for("t", timeout_s=2)
    assert h.net.requests("Metadata") == [] and len(turns) < 100


def test_consumer_raises_on_a_read_topics_metadata_error_only():
    """What stays the consumer's: an error for a topic it reads raises; another topic's does not."""
    h = ConsumerHarness()
    h.consumer.assign([tp(0)])
    h.step()
    (req,) = h.net.pending("Metadata")
    h.net.respond(req, topic_error_body("TOPIC_AUTHORIZATION_FAILED"))
    with pytest.raises(KctlError, match=r"^topic 't': TOPIC_AUTHORIZATION_FAILED$"):
        h.net.poll(0, h.clock.now_ns())

    other = ConsumerHarness()
    other.consumer.assign([tp(0, "u")])
    other.step()
    (req,) = other.net.pending("Metadata")
    other.net.respond(req, topic_error_body("TOPIC_AUTHORIZATION_FAILED"))
    other.net.poll(0, other.clock.now_ns())   # "t" is not read: nothing raised
    assert other.consumer.metadata_updater.last_error is None


def test_consumer_against_a_broker_without_metadata():
    """The defect as a user met it, over real sockets: a broker whose ApiVersions answer
    offers no Metadata. The consumer used to raise a TypeError out of its loop; now
    partitions_for fails with one line naming the broker's and kctl's ranges, having
    retried with backoff, and no Metadata request ever reached the broker."""
    from kctl.consumer_config import ConsumerConfig
    from kctl.engine.consumer import Consumer

    from .fake_broker import API_VERSIONS, FakeBroker

    with FakeBroker(api_versions={API_VERSIONS: (0, 4)}) as broker:
        config = ConsumerConfig.from_properties({"bootstrap.servers": broker.address})
        with Consumer(config) as consumer:
            failures = count_failures(consumer.metadata)
            with pytest.raises(KctlError, match=r"^metadata for topic 't' did not complete within 1 s; the last "
                                                 r"metadata refresh failed: node -1 \(127\.0\.0\.1:\d+\): no common "
                                                 r"version of Metadata: broker does not offer it, " + KCTL_RANGE + "$"):
                consumer.partitions_for("t", timeout_s=1)
        # Backoff 100, 200, 400 ms: at most 4 attempts in the second (fewer if connecting is slow).
        assert 1 <= len(failures) <= 4
        assert [r.header.request_api_key for _, r in broker.requests] == [API_VERSIONS]
