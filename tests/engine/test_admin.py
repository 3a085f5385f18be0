"""admin.log_end_offsets (engine/admin.py) against two scripted brokers on 127.0.0.1:
each partition's end offset is asked of its leader, one ListOffsets per leader at the
version that leader offers, and a partition left without one says why.

Java's cases (OffsetFetcherTest): a ListOffsets per leader (the fetcher groups partitions
by leader), testBatchedListOffsetsMetadataErrors (errors are per partition, the others
still answered), testGetOffsetsForTimesWhenSomeTopicPartitionLeadersNotKnownInitially (a
partition without a leader is asked after a fresh Metadata names one), and
NOT_LEADER_OR_FOLLOWER from a stale leader asked again at the new one.
"""

from __future__ import annotations

import socket
import uuid

import pytest

from kctl.engine import admin
from kctl.engine.blocking_client import BlockingClient
from kctl.errors import KctlError
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
    for the others, and the error in ``errors[(node, partition)]`` where one is scripted."""

    def __init__(self, *leaders: dict[int, int], list_offsets_max=(7, 3)) -> None:
        self.leaders = list(leaders)
        self.metadata_answers = 0
        self.errors: dict[tuple[int, int], str] = {}
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
                error_code=0, name=TOPIC, topic_id=TOPIC_ID, is_internal=False,
                partitions=[MetadataResponse.MetadataResponsePartition(
                    error_code=ERRORS_BY_NAME[self.partition_errors[p]].code if p in self.partition_errors else 0,
                    partition_index=p, leader_id=leader, leader_epoch=EPOCH,
                    replica_nodes=[1, 2], isr_nodes=[1, 2], offline_replicas=[])
                    for p, leader in sorted(leaders.items())])])

    def _list_offsets(self, node: int, req):
        leaders = self.now()

        def error(p: int) -> int:
            if (node, p) in self.errors:
                return ERRORS_BY_NAME[self.errors[node, p]].code
            return 0 if leaders.get(p) == node else ERRORS_BY_NAME["NOT_LEADER_OR_FOLLOWER"].code
        epoch = {"leader_epoch": EPOCH} if req.header.request_api_version >= 4 else {}   # v4+
        return ListOffsetsResponse(throttle_time_ms=0, topics=[
            ListOffsetsResponse.ListOffsetsTopicResponse(name=t.name, partitions=[
                ListOffsetsResponse.ListOffsetsPartitionResponse(
                    partition_index=p.partition_index, error_code=error(p.partition_index), timestamp=-1,
                    offset=-1 if error(p.partition_index) else self.end(p.partition_index),
                    old_style_offsets=[], **epoch)
                for p in t.partitions]) for t in req.body.topics])

    def list_offsets_asked(self, node: int) -> list[tuple[int, list[int]]]:
        """(version, partitions) of each ListOffsets broker ``node`` received, in order."""
        return [(r.header.request_api_version, [p.partition_index for t in r.body.topics for p in t.partitions])
                for _, r in self.brokers[node].requests if r.header.request_api_key == LIST_OFFSETS]

    def metadata_asked(self, node: int) -> int:
        return sum(1 for _, r in self.brokers[node].requests if r.header.request_api_key == METADATA)

    def ends(self, partitions=None, **kw) -> admin.LogEndOffsets:
        """``log_end_offsets`` with broker 1 as the bootstrap."""
        with BlockingClient(self.brokers[1].address, timeout_s=5) as client:
            return admin.log_end_offsets(client, TOPIC, partitions,
                                         client_for=lambda a: BlockingClient(a, timeout_s=5), **kw)

    def close(self) -> None:
        for b in self.brokers.values():
            b.close()


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
    assert got.offsets == {p: Cluster.end(p) for p in range(4)} and got.errors == {}
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
    assert got.offsets == {1: 1001, 3: 1003} and got.errors == {}
    assert cluster.metadata_asked(1) == 1          # the caller's, not a second one
    assert cluster.list_offsets_asked(1) == [] and cluster.list_offsets_asked(2) == [(3, [1, 3])]


def test_batched_list_offsets_errors_are_per_partition(cluster_of):
    # testBatchedListOffsetsMetadataErrors: a partition's error leaves the others answered
    cluster = cluster_of({0: 1, 1: 2, 2: 1, 3: 2, 4: -1})
    cluster.errors[(2, 1)] = "TOPIC_AUTHORIZATION_FAILED"       # not retriable: asked once
    cluster.partition_errors[4] = "LEADER_NOT_AVAILABLE"        # retriable: asked again, still none
    got = cluster.ends()
    b2 = cluster.brokers[2].address
    assert got.offsets == {0: 1000, 2: 1002, 3: 1003}
    assert got.errors == {1: f"TOPIC_AUTHORIZATION_FAILED from broker 2 ({b2})",
                          4: "no leader (LEADER_NOT_AVAILABLE)"}
    assert got.describe_errors() == (f"TOPIC_AUTHORIZATION_FAILED from broker 2 ({b2}): partition(s) 1; "
                                     "no leader (LEADER_NOT_AVAILABLE): partition(s) 4")
    assert cluster.metadata_asked(1) == 2          # the second round after a fresh Metadata
    assert cluster.list_offsets_asked(2) == [(3, [1, 3])]


def test_leaders_not_known_initially_are_asked_after_a_fresh_metadata(cluster_of):
    # testGetOffsetsForTimesWhenSomeTopicPartitionLeadersNotKnownInitially, and a leader that
    # moved (broker 1 answers NOT_LEADER_OR_FOLLOWER for partition 2 it no longer leads)
    cluster = cluster_of({0: 1, 1: -1, 2: 1}, {0: 1, 1: 2, 2: 2})
    cluster.errors[(1, 2)] = "NOT_LEADER_OR_FOLLOWER"
    got = cluster.ends()
    assert got.offsets == {0: 1000, 1: 1001, 2: 1002} and got.errors == {}
    assert cluster.metadata_asked(1) == 2
    assert cluster.list_offsets_asked(1) == [(7, [0, 2])]
    assert cluster.list_offsets_asked(2) == [(3, [1, 2])]


def test_a_leader_that_cannot_be_reached_is_said(cluster_of):
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()                                  # nothing listens there now
    cluster = cluster_of({0: 1, 1: 3})
    cluster.extra_brokers.append((3, port))
    got = cluster.ends()
    assert got.offsets == {0: 1000}
    assert got.errors[1].startswith(f"leader 3 at 127.0.0.1:{port}: cannot connect to broker")


def test_an_unknown_topic_is_an_error_of_its_own(cluster_of):
    cluster = cluster_of({0: 1})
    with BlockingClient(cluster.brokers[1].address, timeout_s=5) as client:
        md = admin.fetch_metadata(client, [TOPIC])
        with pytest.raises(KctlError, match="topic 'other'"):
            admin.log_end_offsets(client, "other", metadata=md, client_for=BlockingClient)


def test_verify_takes_the_ends_before_the_run_from_each_leader(cluster_of):
    cluster = cluster_of({0: 1, 1: 2})
    assert verify.log_end_offsets(cluster.brokers[1].address, TOPIC) == {0: 1000, 1: 1001}
    cluster.errors[(2, 1)] = "TOPIC_AUTHORIZATION_FAILED"
    with pytest.raises(KctlError, match=r"log end offset of 't' before the run is unknown "
                                        r"\(TOPIC_AUTHORIZATION_FAILED from broker 2 .*partition\(s\) 1\)"):
        verify.log_end_offsets(cluster.brokers[1].address, TOPIC)
