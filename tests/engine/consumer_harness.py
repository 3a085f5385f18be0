"""A Consumer stepped with a FakeClock and a FakeNetwork, and the broker answers tests
script: Metadata, Fetch, ListOffsets, FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
OffsetFetch, OffsetCommit. Nothing touches a socket."""

from __future__ import annotations

import uuid

from kctl.consumer_config import ConsumerConfig
from kctl.engine.batch import TopicPartition
from kctl.engine.clock import FakeClock
from kctl.engine.consumer import Consumer
from kctl.protocol import messages
from kctl.protocol.error_codes import ERRORS_BY_NAME
from kctl.protocol.identity import IDENTITY
from kctl.protocol.records import Header, Record, build_batch

from .fake_network import FakeNetwork

MetadataResponse = messages.message_class("MetadataResponse")
FetchResponse = messages.message_class("FetchResponse")
ListOffsetsResponse = messages.message_class("ListOffsetsResponse")
FindCoordinatorResponse = messages.message_class("FindCoordinatorResponse")
JoinGroupResponse = messages.message_class("JoinGroupResponse")
SyncGroupResponse = messages.message_class("SyncGroupResponse")
HeartbeatResponse = messages.message_class("HeartbeatResponse")
OffsetFetchResponse = messages.message_class("OffsetFetchResponse")
OffsetCommitResponse = messages.message_class("OffsetCommitResponse")
LeaveGroupResponse = messages.message_class("LeaveGroupResponse")

TOPIC = "t"
TOPIC_ID = uuid.UUID(int=0xBEEF)
TAG = b"run1"


def code(name: str) -> int:
    return ERRORS_BY_NAME[name].code


def tp(p: int, topic: str = TOPIC) -> TopicPartition:
    return TopicPartition(topic, p)


def metadata_body(topic=TOPIC, partitions=2, nodes=(0,), leaders=None, topic_id=TOPIC_ID, epoch=1):
    leaders = leaders or {p: nodes[p % len(nodes)] for p in range(partitions)}
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=[MetadataResponse.MetadataResponseBroker(node_id=n, host="127.0.0.1", port=9000 + n)
                 for n in nodes],
        cluster_id="c", controller_id=nodes[0],
        topics=[MetadataResponse.MetadataResponseTopic(
            error_code=0, name=topic, topic_id=topic_id, is_internal=False,
            partitions=[MetadataResponse.MetadataResponsePartition(
                error_code=0, partition_index=p, leader_id=leaders[p], leader_epoch=epoch,
                replica_nodes=[leaders[p]], isr_nodes=[leaders[p]], offline_replicas=[])
                for p in range(partitions)])])


def records(base: int, n: int, *, value_size: int = 10, intended0: int = 1_700_000_000_000_000_000,
            step: int = 1000, worker: int = 0, seq0: int | None = None, **batch_args) -> bytes:
    """One v2 batch of ``n`` records at offsets base.., each with a kctl identity."""
    seq0 = base if seq0 is None else seq0
    recs = [Record(base + i, 1_700_000_000_000 + i, None, bytes([i % 251]) * value_size,
                   (Header("kctl", IDENTITY.pack(TAG, worker, seq0 + i, intended0 + i * step)),))
            for i in range(n)]
    return build_batch(recs, base_offset=base, **batch_args)


def partition_data(p: int, blob: bytes = b"", *, error: str | None = None, hw: int = 1000, lso: int = -1,
                   aborted=None, current_leader=None):
    return FetchResponse.PartitionData(
        partition_index=p, error_code=code(error) if error else 0, high_watermark=hw,
        last_stable_offset=lso if lso >= 0 else hw, log_start_offset=0,
        aborted_transactions=[FetchResponse.AbortedTransaction(producer_id=pid, first_offset=o)
                              for pid, o in (aborted or [])] or None,
        preferred_read_replica=-1, records=blob,
        current_leader=current_leader or FetchResponse.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1))


def fetch_body(request, data: dict[int, object] | None = None, *, throttle_ms=0):
    """Answers ``request``: ``data`` maps partition -> PartitionData (others: empty)."""
    data = data or {}
    topics = []
    for t in request.body.topics:
        parts = [data.get(p.partition) or partition_data(p.partition) for p in t.partitions]
        topics.append(FetchResponse.FetchableTopicResponse(topic=t.topic, topic_id=t.topic_id,
                                                           partitions=parts))
    return FetchResponse(throttle_time_ms=throttle_ms, error_code=0, session_id=0, responses=topics)


def list_offsets_body(request, offsets: dict[int, int], errors: dict[int, str] | None = None):
    errors = errors or {}
    return ListOffsetsResponse(throttle_time_ms=0, topics=[
        ListOffsetsResponse.ListOffsetsTopicResponse(name=t.name, partitions=[
            ListOffsetsResponse.ListOffsetsPartitionResponse(
                partition_index=p.partition_index,
                error_code=code(errors[p.partition_index]) if p.partition_index in errors else 0,
                timestamp=-1, offset=offsets.get(p.partition_index, -1), leader_epoch=1,
                old_style_offsets=[])
            for p in t.partitions]) for t in request.body.topics])


class ConsumerHarness:
    def __init__(self, *, partitions=2, nodes=(0,), start_ms=0, **props):
        self.clock = FakeClock(now_ns=10**12)
        settings = {"bootstrap.servers": "127.0.0.1:9000", **props}
        self.config = ConsumerConfig.from_properties(settings)
        self.net = FakeNetwork(self.clock, nodes, max_in_flight=100)
        self.events: list[tuple[str, list]] = []
        self.consumer = Consumer(self.config, clock=self.clock, network=self.net, listener=self,
                                 random=lambda: 0.5)
        self.partitions = partitions
        self.nodes = nodes

    # rebalance listener
    def on_partitions_revoked(self, partitions, positions):
        self.events.append(("revoked", [p.partition for p in partitions]))

    def on_partitions_assigned(self, partitions):
        self.events.append(("assigned", [p.partition for p in partitions]))

    def on_partitions_lost(self, partitions):
        self.events.append(("lost", [p.partition for p in partitions]))

    def step(self, ms: int = 0):
        if ms:
            self.clock.advance(ms=ms)
        self.consumer.run_once(self.clock.now_ns())
        self.net.poll(0, self.clock.now_ns())

    def answer_metadata(self, **kw):
        for r in self.net.pending("Metadata"):
            self.net.respond(r, metadata_body(partitions=self.partitions, nodes=self.nodes, **kw))
        self.net.poll(0, self.clock.now_ns())

    def ready(self):
        """Metadata answered; returns the consumer."""
        self.step()
        self.answer_metadata()
        return self.consumer

    def collect(self):
        return self.consumer.fetcher.collect(self.config.max_poll_records, self.clock.now_ns())
