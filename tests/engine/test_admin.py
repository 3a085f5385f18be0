"""admin.log_end_offsets (engine/admin.py) against two scripted brokers on 127.0.0.1:
each partition's end offset is asked of its leader, one ListOffsets per leader at the
version that leader offers, once per call; a partition left without one is named with its
reason in an EndOffsetsError, retriable when every reason may pass. The patience is the
caller's: ``setup_retry.call`` asks again after a fresh Metadata until its bound (stepped
here with a fake clock), as the Java consumer's ``endOffsets(partitions, timeout)`` does.

Java's cases (OffsetFetcherTest): a ListOffsets per leader (the fetcher groups partitions
by leader), testBatchedListOffsetsMetadataErrors (errors are per partition, the others
still answered), testGetOffsetsForTimesWhenSomeTopicPartitionLeadersNotKnownInitially (a
partition without a leader is asked after a fresh Metadata names one),
testGetOffsetByTimeWithPartitionsRetryCouldTriggerMetadataUpdate and testGetOffsetsForTimes
(a retriable error, UNKNOWN_TOPIC_OR_PARTITION among them, asked again after a Metadata
update), testGetOffsetsForTimesWhenSomeTopicPartitionLeadersDisconnectException (a lost
connection asked again), testGetOffsetsForTimesTimeout (the timer bounds it), and
TOPIC_AUTHORIZATION_FAILED raised at once (OffsetFetcherUtils' handling of the answer).
Unlike Java, an error Kafka does not call retriable is raised at once, not retried
until the timer expires.
"""

from __future__ import annotations

import re
import socket
import uuid

import pytest

from kctl.engine import admin, setup_retry
from kctl.engine.blocking_client import BlockingClient
from kctl.engine.setup_retry import SetupRetry
from kctl.errors import (EndOffsetsError, KctlError, RetriableEndOffsetsError, RetriableError,
                         RetriesExhaustedError)
from kctl.load import verify
from kctl.protocol import messages, requests
from kctl.protocol.error_codes import ERRORS_BY_NAME

from .fake_broker import API_VERSIONS, FakeBroker

LIST_OFFSETS, METADATA = 2, 3
MetadataResponse = messages.message_class("MetadataResponse")
ListOffsetsResponse = messages.message_class("ListOffsetsResponse")
TOPIC = "t"
TOPIC_ID = uuid.UUID(int=0xBEEF)
EPOCH = 7


class Cluster:
    """Brokers 1 and 2 (two FakeBrokers). ``leaders``: partition -> leader node (-1: none),
    one dict per Metadata answer in turn (the last one repeats). A broker answers
    ListOffsets with ``end(partition)`` for the partitions it leads now, NOT_LEADER_OR_FOLLOWER
    for the others, and the error in ``errors[(node, partition)]`` where one is scripted;
    ``next_errors[(node, partition)]``: errors for its next answers, one each, in turn."""

    def __init__(self, *leaders: dict[int, int], list_offsets_max=(7, 3)) -> None:
        self.leaders = list(leaders)
        self.metadata_answers = 0
        self.errors: dict[tuple[int, int], str] = {}
        self.next_errors: dict[tuple[int, int], list[str]] = {}
        self.topic_error = ""                          # in Metadata, for the topic
        self.partition_errors: dict[int, str] = {}    # in Metadata, per partition
        self.brokers = {}
        for node, lo_max in zip((1, 2), list_offsets_max):
            versions = {API_VERSIONS: (0, 4), METADATA: (0, 12), LIST_OFFSETS: (1, lo_max)}
            self.brokers[node] = FakeBroker(self._handler(node), api_versions=versions)
        self.extra_brokers: list[tuple[int, int]] = []   # (node, port) named in Metadata only

    @staticmethod
    def end(partition: int) -> int:
        return 1000 + partition

    def now(self) -> dict[int, int]:
        return self.leaders[min(self.metadata_answers, len(self.leaders)) - 1]

    def _handler(self, node: int):
        def handle(broker, _conn, req):
            key = req.header.request_api_key
            if key == METADATA:
                self.metadata_answers += 1
                return broker.response_frame(req, self._metadata())
            if key == LIST_OFFSETS:
                return broker.response_frame(req, self._list_offsets(node, req))
            return None
        return handle

    def _metadata(self):
        leaders = self.now()
        nodes = [(n, b.port) for n, b in self.brokers.items()] + self.extra_brokers
        return MetadataResponse(
            throttle_time_ms=0, cluster_id="c", controller_id=1,
            brokers=[MetadataResponse.MetadataResponseBroker(node_id=n, host="127.0.0.1", port=port)
                     for n, port in nodes],
            topics=[MetadataResponse.MetadataResponseTopic(
                error_code=ERRORS_BY_NAME[self.topic_error].code if self.topic_error else 0, name=TOPIC, topic_id=TOPIC_ID, is_internal=False,
                partitions=[MetadataResponse.MetadataResponsePartition(
                    error_code=ERRORS_BY_NAME[self.partition_errors[p]].code if p in self.partition_errors else 0,
                    partition_index=p, leader_id=leader, leader_epoch=EPOCH,
                    replica_nodes=[1, 2], isr_nodes=[1, 2], offline_replicas=[])
                    for p, leader in sorted(leaders.items())])])

    def _list_offsets(self, node: int, req):
        leaders = self.now()

        def error(p: int) -> int:
            if self.next_errors.get((node, p)):
                return ERRORS_BY_NAME[self.next_errors[node, p].pop(0)].code
            if (node, p) in self.errors:
                return ERRORS_BY_NAME[self.errors[node, p]].code
            return 0 if leaders.get(p) == node else ERRORS_BY_NAME["NOT_LEADER_OR_FOLLOWER"].code
        epoch = {"leader_epoch": EPOCH} if req.header.request_api_version >= 4 else {}   # v4+
        codes = {p.partition_index: error(p.partition_index) for t in req.body.topics for p in t.partitions}
        return ListOffsetsResponse(throttle_time_ms=0, topics=[
            ListOffsetsResponse.ListOffsetsTopicResponse(name=t.name, partitions=[
                ListOffsetsResponse.ListOffsetsPartitionResponse(
                    partition_index=p.partition_index, error_code=codes[p.partition_index], timestamp=-1,
                    offset=-1 if codes[p.partition_index] else self.end(p.partition_index),
                    old_style_offsets=[], **epoch)
                for p in t.partitions]) for t in req.body.topics])

    def list_offsets_asked(self, node: int) -> list[tuple[int, list[int]]]:
        """(version, partitions) of each ListOffsets broker ``node`` received, in order."""
        return [(r.header.request_api_version, [p.partition_index for t in r.body.topics for p in t.partitions])
                for _, r in self.brokers[node].requests if r.header.request_api_key == LIST_OFFSETS]

    def metadata_asked(self, node: int) -> int:
        return sum(1 for _, r in self.brokers[node].requests if r.header.request_api_key == METADATA)

    def ends(self, partitions=None, **kw) -> dict[int, int]:
        """One ``log_end_offsets`` round with broker 1 as the bootstrap."""
        with BlockingClient(self.brokers[1].address, timeout_s=5) as client:
            return admin.log_end_offsets(client, TOPIC, partitions,
                                         client_for=lambda a: BlockingClient(a, timeout_s=5), **kw)

    def ends_within(self, clock, retry=None, partitions=None) -> dict[int, int]:
        """``log_end_offsets`` asked through ``setup_retry.call`` (the callers' one retry),
        stepped with ``clock``."""
        with BlockingClient(self.brokers[1].address, timeout_s=5) as client:
            return setup_retry.call(
                client, lambda c: admin.log_end_offsets(c, TOPIC, partitions,
                                                        client_for=lambda a: BlockingClient(a, timeout_s=5)),
                retry or RETRY, what="the end offsets", now_ns=clock.now, sleep_ns=clock.sleep,
                random=lambda: 0.5)

    def close(self) -> None:
        for b in self.brokers.values():
            b.close()


RETRY = SetupRetry(timeout_ms=1000, timeout_name="default.api.timeout.ms", retry_backoff_ms=100,
                   retry_backoff_max_ms=400)
MS = 1_000_000


class Clock:
    """A fake clock for ``setup_retry.call``: sleeping moves it on."""

    def __init__(self) -> None:
        self.ns = 0
        self.slept: list[int] = []

    def now(self) -> int:
        return self.ns

    def sleep(self, ns: int) -> None:
        self.slept.append(ns)
        self.ns += ns


@pytest.fixture
def cluster_of():
    made = []

    def make(*leaders, **kw):
        made.append(Cluster(*leaders, **kw))
        return made[-1]
    yield make
    for c in made:
        c.close()


def test_each_partition_is_asked_of_its_leader_at_the_version_it_offers(cluster_of):
    cluster = cluster_of({0: 1, 1: 2, 2: 1, 3: 2})
    got = cluster.ends(isolation_level=requests.READ_COMMITTED)
    assert got == {p: Cluster.end(p) for p in range(4)}
    # one ListOffsets per leader, its own partitions only (a non-leader would answer
    # NOT_LEADER_OR_FOLLOWER), at the highest version each broker offers
    assert cluster.list_offsets_asked(1) == [(7, [0, 2])]
    assert cluster.list_offsets_asked(2) == [(3, [1, 3])]
    assert cluster.metadata_asked(1) == 1 and cluster.metadata_asked(2) == 0
    for node, epoch in ((1, EPOCH), (2, -1)):       # the leader epoch goes out from v4
        req = next(r for _, r in cluster.brokers[node].requests if r.header.request_api_key == LIST_OFFSETS)
        assert req.body.isolation_level == requests.READ_COMMITTED
        assert {(p.timestamp, p.current_leader_epoch) for t in req.body.topics for p in t.partitions} == \
            {(requests.LATEST_TIMESTAMP, epoch)}


def test_only_the_partitions_asked_and_a_given_metadata_is_not_asked_again(cluster_of):
    cluster = cluster_of({0: 1, 1: 2, 2: 1, 3: 2})
    with BlockingClient(cluster.brokers[1].address, timeout_s=5) as client:
        md = admin.fetch_metadata(client, [TOPIC])
        got = admin.log_end_offsets(client, TOPIC, [3, 1], metadata=md,
                                    client_for=lambda a: BlockingClient(a, timeout_s=5))
    assert got == {1: 1001, 3: 1003}
    assert cluster.metadata_asked(1) == 1          # the caller's, not a second one
    assert cluster.list_offsets_asked(1) == [] and cluster.list_offsets_asked(2) == [(3, [1, 3])]


def test_batched_list_offsets_errors_are_per_partition_and_one_round_asks_once(cluster_of):
    # testBatchedListOffsetsMetadataErrors: a partition's error leaves the others answered
    cluster = cluster_of({0: 1, 1: 2, 2: 1, 3: 2, 4: -1})
    cluster.errors[(2, 1)] = "TOPIC_AUTHORIZATION_FAILED"       # will not pass
    cluster.partition_errors[4] = "LEADER_NOT_AVAILABLE"        # may pass
    with pytest.raises(EndOffsetsError) as e:
        cluster.ends()
    b2 = cluster.brokers[2].address
    assert not isinstance(e.value, RetriableError)              # one reason will not pass
    assert e.value.offsets == {0: 1000, 2: 1002, 3: 1003}
    assert e.value.errors == {1: f"TOPIC_AUTHORIZATION_FAILED from broker 2 ({b2})",
                              4: "no leader (LEADER_NOT_AVAILABLE)"}
    assert e.value.describe_errors() == (f"TOPIC_AUTHORIZATION_FAILED from broker 2 ({b2}): partition(s) 1; "
                                         "no leader (LEADER_NOT_AVAILABLE): partition(s) 4")
    # one round: Metadata once, each leader once; asking again is the caller's choice
    assert cluster.metadata_asked(1) == 1
    assert cluster.list_offsets_asked(1) == [(7, [0, 2])] and cluster.list_offsets_asked(2) == [(3, [1, 3])]


@pytest.mark.parametrize("error", ["NOT_LEADER_OR_FOLLOWER", "LEADER_NOT_AVAILABLE", "UNKNOWN_TOPIC_OR_PARTITION"])
@pytest.mark.parametrize("failures", [1, 2, 3])
def test_a_retriable_error_is_asked_again_after_a_fresh_metadata_until_it_passes(cluster_of, error, failures):
    # OffsetFetcher.fetchOffsetsByTimes: partitionsToRetry, awaitMetadataUpdate, again
    cluster = cluster_of({0: 1, 1: 2})
    cluster.next_errors[(2, 1)] = [error] * failures
    clock = Clock()
    assert cluster.ends_within(clock) == {0: 1000, 1: 1001}
    rounds = failures + 1
    assert cluster.metadata_asked(1) == rounds                  # each round on a fresh Metadata
    assert cluster.list_offsets_asked(2) == [(3, [1])] * rounds  # one ListOffsets a round: no inner retry
    assert clock.slept == [100 * MS, 200 * MS, 400 * MS][:failures]   # retry.backoff.ms, doubling


def test_leaders_not_known_initially_are_asked_after_a_fresh_metadata(cluster_of):
    # testGetOffsetsForTimesWhenSomeTopicPartitionLeadersNotKnownInitially, and a leader that
    # moved (broker 1 answers NOT_LEADER_OR_FOLLOWER for partition 2 it no longer leads)
    first = cluster_of({0: 1, 1: -1, 2: 1})
    first.errors[(1, 2)] = "NOT_LEADER_OR_FOLLOWER"
    with pytest.raises(RetriableEndOffsetsError) as e:
        first.ends()                                            # one round: both may pass
    b1 = first.brokers[1].address
    assert e.value.offsets == {0: 1000}
    assert e.value.errors == {1: "no leader", 2: f"NOT_LEADER_OR_FOLLOWER from broker 1 ({b1})"}

    cluster = cluster_of({0: 1, 1: -1, 2: 1}, {0: 1, 1: 2, 2: 2})
    cluster.errors[(1, 2)] = "NOT_LEADER_OR_FOLLOWER"
    clock = Clock()
    assert cluster.ends_within(clock) == {0: 1000, 1: 1001, 2: 1002}
    assert cluster.metadata_asked(1) == 2 and clock.slept == [100 * MS]   # the second Metadata names them
    assert cluster.list_offsets_asked(1) == [(7, [0, 2]), (7, [0])]
    assert cluster.list_offsets_asked(2) == [(3, [1, 2])]


def test_a_non_retriable_error_is_raised_at_once_naming_the_partition(cluster_of):
    cluster = cluster_of({0: 1, 1: 2})
    cluster.errors[(2, 1)] = "TOPIC_AUTHORIZATION_FAILED"
    clock = Clock()
    with pytest.raises(EndOffsetsError, match=r"TOPIC_AUTHORIZATION_FAILED from broker 2 \(127\.0\.0\.1:\d+\): "
                                              r"partition\(s\) 1") as e:
        cluster.ends_within(clock)
    assert not isinstance(e.value, RetriableError) and e.value.offsets == {0: 1000}
    assert clock.slept == [] and cluster.list_offsets_asked(2) == [(3, [1])]


def test_retriable_errors_are_asked_again_until_the_deadline_and_no_longer(cluster_of):
    # testGetOffsetsForTimesTimeout: the timer bounds the retries, then a timeout error
    cluster = cluster_of({0: 1, 1: 2})
    cluster.errors[(2, 1)] = "NOT_LEADER_OR_FOLLOWER"            # never passes
    clock = Clock()
    with pytest.raises(RetriesExhaustedError) as e:
        cluster.ends_within(clock)
    # backoffs 100, 200, 400 ms; the next 400 would end past 1000 ms: four rounds, never past it
    assert clock.ns == 700 * MS and e.value.attempts == 4
    assert cluster.list_offsets_asked(2) == [(3, [1])] * 4
    last = e.value.last
    assert isinstance(last, RetriableEndOffsetsError) and last.offsets == {0: 1000}
    b2 = cluster.brokers[2].address
    assert last.errors == {1: f"NOT_LEADER_OR_FOLLOWER from broker 2 ({b2})"}
    assert str(e.value) == (f"the end offsets: end offsets of 't' unknown (NOT_LEADER_OR_FOLLOWER from broker 2 "
                            f"({b2}): partition(s) 1) (asked 4 time(s) for default.api.timeout.ms=1000 ms)")


def test_a_leader_that_cannot_be_reached_may_pass(cluster_of):
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()                                  # nothing listens there now
    cluster = cluster_of({0: 1, 1: 3})
    cluster.extra_brokers.append((3, port))
    with pytest.raises(RetriableEndOffsetsError) as e:
        cluster.ends()
    assert e.value.offsets == {0: 1000}
    assert e.value.errors[1].startswith(f"leader 3 at 127.0.0.1:{port}: cannot connect to broker")


def test_a_topic_missing_from_metadata_may_pass_an_unauthorized_one_does_not(cluster_of):
    cluster = cluster_of({0: 1})
    with BlockingClient(cluster.brokers[1].address, timeout_s=5) as client:
        md = admin.fetch_metadata(client, [TOPIC])
        with pytest.raises(RetriableEndOffsetsError, match=r"topic 'other': not in the Metadata answer"):
            admin.log_end_offsets(client, "other", metadata=md, client_for=BlockingClient)
        with pytest.raises(RetriableEndOffsetsError) as e:
            admin.log_end_offsets(client, "other", [2, 0], metadata=md, client_for=BlockingClient)
        assert sorted(e.value.errors) == [0, 2] and e.value.offsets == {}
        cluster.topic_error = "TOPIC_AUTHORIZATION_FAILED"
        with pytest.raises(EndOffsetsError, match="TOPIC_AUTHORIZATION_FAILED") as e:
            admin.log_end_offsets(client, TOPIC, client_for=BlockingClient)
        assert not isinstance(e.value, RetriableError)


def test_verify_takes_the_ends_before_the_run_from_each_leader(cluster_of):
    cluster = cluster_of({0: 1, 1: 2})
    assert verify.log_end_offsets(cluster.brokers[1].address, TOPIC) == {0: 1000, 1: 1001}
    cluster.errors[(2, 1)] = "TOPIC_AUTHORIZATION_FAILED"
    with pytest.raises(KctlError, match=r"log end offset of 't' before the run is unknown "
                                        r"\(TOPIC_AUTHORIZATION_FAILED from broker 2 .*partition\(s\) 1\)"):
        verify.log_end_offsets(cluster.brokers[1].address, TOPIC)
    assert len(cluster.list_offsets_asked(2)) == 2              # the error that will not pass: asked once


def test_verify_asks_the_ends_before_the_run_once_a_round_within_its_bound(cluster_of):
    cluster = cluster_of({0: 1, 1: 2})
    cluster.next_errors[(2, 1)] = ["LEADER_NOT_AVAILABLE"] * 2
    quick = SetupRetry(timeout_ms=2000, retry_backoff_ms=5, retry_backoff_max_ms=20)
    assert verify.log_end_offsets(cluster.brokers[1].address, TOPIC, retry=quick) == {0: 1000, 1: 1001}
    assert cluster.list_offsets_asked(2) == [(3, [1])] * 3
    cluster.errors[(2, 1)] = "NOT_LEADER_OR_FOLLOWER"            # never passes: max.block.ms bounds it
    short = SetupRetry(timeout_ms=150, retry_backoff_ms=5, retry_backoff_max_ms=20)
    with pytest.raises(KctlError) as e:
        verify.log_end_offsets(cluster.brokers[1].address, TOPIC, retry=short)
    m = re.fullmatch(r"--verify: the log end offset of 't' before the run is unknown \(NOT_LEADER_OR_FOLLOWER "
                     r"from broker 2 \(127\.0\.0\.1:\d+\): partition\(s\) 1; asked (\d+) time\(s\) for "
                     r"max\.block\.ms=150 ms\): records acknowledged without an offset could not be looked for",
                     str(e.value))
    assert m, str(e.value)
    assert len(cluster.list_offsets_asked(2)) == 3 + int(m.group(1))   # one ListOffsets per attempt
