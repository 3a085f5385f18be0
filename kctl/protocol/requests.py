"""One builder for each request kctl's clients send, and readers for the answers whose
layout changes with the version.

How this works: the engine works with version-independent values (topic names and
ids, partitions, producer ids); a builder takes the version negotiated with the broker
(``NetworkClient.api_version`` / ``BlockingClient.version_for``, both capped by
``client_versions.CLIENT_MAX_VERSIONS``) and fills the message for that version. Where a
field's *meaning* changes with the version (topics named by id in Produce and Fetch
v13+, "all topics" in Metadata v0, the batched FindCoordinator of v4+, the epoch bump of
InitProducerId v3+), that is decided here and nowhere else: the engine never branches
on a version. A builder may lower the version (Produce v13 needs every topic's id) and
then says so in its ``Outgoing``.

Sans-IO (conventions rule 1).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from kctl.errors import UnsupportedVersionError
from kctl.protocol import messages
from kctl.protocol.client_versions import TRANSACTION_V1_MAX_VERSIONS

__all__ = [
    "Coordinator", "COORDINATOR_TRANSACTION", "COORDINATOR_GROUP", "FetchPartition", "Outgoing",
    "ProduceTopic",
    "add_partitions_to_txn", "can_bump_epoch", "create_topics", "end_txn", "fetch",
    "EARLIEST_TIMESTAMP", "find_coordinator", "init_producer_id", "LATEST_TIMESTAMP", "list_offsets",
    "listed_offset", "metadata", "produce", "read_add_partitions_to_txn",
    "read_find_coordinator", "names_topics_by_id", "READ_COMMITTED", "READ_UNCOMMITTED",
]

ZERO_UUID: Final = uuid.UUID(int=0)
COORDINATOR_GROUP: Final = 0
COORDINATOR_TRANSACTION: Final = 1

#: Produce and Fetch name topics by id from this version on (KIP-516).
_TOPIC_IDS_FROM: Final = 13
#: Metadata's allow_auto_topic_creation exists from v4; before, the broker's config decides.
_ALLOW_AUTO_CREATE_FROM: Final = 4
#: InitProducerId takes the current producer id and epoch from v3 (KIP-360: epoch bumps).
_EPOCH_BUMP_FROM: Final = 3

_Metadata = messages.message_class("MetadataRequest")
_Produce = messages.message_class("ProduceRequest")
_InitProducerId = messages.message_class("InitProducerIdRequest")
_CreateTopics = messages.message_class("CreateTopicsRequest")
_Fetch = messages.message_class("FetchRequest")
_FindCoordinator = messages.message_class("FindCoordinatorRequest")
_AddPartitions = messages.message_class("AddPartitionsToTxnRequest")
_EndTxn = messages.message_class("EndTxnRequest")
_ListOffsets = messages.message_class("ListOffsetsRequest")


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A request body and the version to send it at (lower than asked when the
    builder had to step down)."""

    body: Any
    version: int


class ProduceTopic(NamedTuple):
    """One topic's batches in a Produce request: (partition, records) pairs."""

    name: str
    topic_id: uuid.UUID | None
    partitions: Sequence[tuple[int, Any]]


# -- Metadata ------------------------------------------------------------------------------------
def metadata(version: int, topics: Iterable[str] | None, *,
             allow_auto_topic_creation: bool = False) -> Any:
    """Metadata for ``topics`` (every topic when None). Before v4 the request cannot
    say whether to create missing topics: such brokers decide by their own
    ``auto.create.topics.enable`` (Java's builder refuses to send false there; kctl
    sends the version's only meaning instead)."""
    if topics is None:
        wanted = [] if version == 0 else None   # "all topics": empty in v0, null since v1
    else:
        wanted = [_Metadata.MetadataRequestTopic(name=t) for t in topics]
    req = _Metadata(topics=wanted)
    if version >= _ALLOW_AUTO_CREATE_FROM:
        req.allow_auto_topic_creation = allow_auto_topic_creation
    return req


# -- Produce -------------------------------------------------------------------------------------
#: Produce carries a transactional id from v3 (KIP-98).
_TRANSACTIONAL_PRODUCE_FROM: Final = 3


def produce(version: int, *, acks: int, timeout_ms: int, topics: Sequence[ProduceTopic],
            transactional_id: str | None = None) -> Outgoing:
    """A Produce request. v13+ names topics by id only: without every topic's id,
    v12 (as the Java client). Inside a transaction of the transaction protocol v1
    (kctl's), at most v11 (``TRANSACTION_V1_MAX_VERSIONS``)."""
    if transactional_id is not None:
        if version < _TRANSACTIONAL_PRODUCE_FROM:
            raise UnsupportedVersionError(
                f"Produce v{version} cannot carry a transactional id (v{_TRANSACTIONAL_PRODUCE_FROM}+): "
                "the broker is too old for transactions")
        version = min(version, TRANSACTION_V1_MAX_VERSIONS["Produce"])
    by_id = version >= _TOPIC_IDS_FROM
    if by_id and any(t.topic_id in (None, ZERO_UUID) for t in topics):
        version, by_id = _TOPIC_IDS_FROM - 1, False
    data_cls, part_cls = _Produce.TopicProduceData, _Produce.PartitionProduceData
    body = _Produce(
        transactional_id=transactional_id, acks=acks, timeout_ms=timeout_ms,
        topic_data=[data_cls(name="" if by_id else t.name,
                             topic_id=t.topic_id if by_id else ZERO_UUID,
                             partition_data=[part_cls(index=p, records=r) for p, r in t.partitions])
                    for t in topics])
    return Outgoing(body, version)


def names_topics_by_id(version: int) -> bool:
    """Whether Produce and Fetch at ``version`` need the topic's id (v13+): a caller
    that does not have it looks it up, or the builder steps down to v12."""
    return version >= _TOPIC_IDS_FROM


# -- InitProducerId ------------------------------------------------------------------------------
def can_bump_epoch(version: int | None) -> bool:
    """Whether InitProducerId at ``version`` can bump a producer's epoch (KIP-360, v3+)."""
    return version is not None and version >= _EPOCH_BUMP_FROM


def init_producer_id(version: int, *, transactional_id: str | None, transaction_timeout_ms: int,
                     producer_id: int = -1, producer_epoch: int = -1) -> Any:
    """InitProducerId for a new producer id, or (``producer_id`` >= 0, v3+) to bump the
    epoch of the current one. Below v3 the current id cannot be named: a new one is asked for."""
    req = _InitProducerId(transactional_id=transactional_id,
                          transaction_timeout_ms=transaction_timeout_ms)
    if producer_id >= 0 and can_bump_epoch(version):
        req.producer_id = producer_id
        req.producer_epoch = producer_epoch
    return req


# -- CreateTopics --------------------------------------------------------------------------------
def create_topics(version: int, names: Sequence[str], *, partitions: int, replication_factor: int,
                  configs: Mapping[str, str] | None = None, timeout_ms: int = 30_000) -> Any:
    """CreateTopics for ``names``, each with the same partitions and configs."""
    del version   # every field kctl sets exists in every version
    topic_cls, cfg_cls = _CreateTopics.CreatableTopic, _CreateTopics.CreatableTopicConfig
    return _CreateTopics(
        topics=[topic_cls(name=n, num_partitions=partitions, replication_factor=replication_factor,
                          assignments=[],
                          configs=[cfg_cls(name=k, value=v) for k, v in (configs or {}).items()])
                for n in names],
        timeout_ms=timeout_ms, validate_only=False)


# -- Fetch ---------------------------------------------------------------------------------------
READ_UNCOMMITTED: Final = 0
READ_COMMITTED: Final = 1


class FetchPartition(NamedTuple):
    """One partition of a Fetch: read ``topic``/``partition`` from ``offset``, at most
    ``max_bytes`` of it; ``leader_epoch`` is the leader epoch the client knows (KIP-320,
    checked by the broker; -1: none)."""

    topic: str
    partition: int
    offset: int
    max_bytes: int
    leader_epoch: int = -1


def fetch(version: int, partitions: Sequence[FetchPartition], *, max_wait_ms: int, max_bytes: int,
          min_bytes: int = 1, isolation_level: int = READ_UNCOMMITTED, rack_id: str = "",
          topic_ids: Mapping[str, uuid.UUID] | None = None) -> Outgoing:
    """A Fetch outside any fetch session (session 0, epoch -1: the broker forgets it).
    v13+ names topics by id (``topic_ids``): with a topic's id unknown, v12. Isolation
    levels exist from v4; below, every read is uncommitted (a broker that old has no
    transactions). v15+ carries the replica id in ReplicaState (-1: a consumer)."""
    ids = topic_ids or {}
    by_id = version >= _TOPIC_IDS_FROM
    if by_id and any(ids.get(p.topic, ZERO_UUID) == ZERO_UUID for p in partitions):
        version, by_id = _TOPIC_IDS_FROM - 1, False
    topics: dict[str, list[Any]] = {}
    for p in partitions:
        topics.setdefault(p.topic, []).append(_Fetch.FetchPartition(
            partition=p.partition, current_leader_epoch=p.leader_epoch, fetch_offset=p.offset,
            last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=p.max_bytes))
    body = _Fetch(
        replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
        isolation_level=isolation_level if version >= 4 else 0, session_id=0, session_epoch=-1,
        topics=[_Fetch.FetchTopic(topic="" if by_id else t, topic_id=ids[t] if by_id else ZERO_UUID,
                                  partitions=parts) for t, parts in topics.items()],
        forgotten_topics_data=[], rack_id=rack_id)
    if version >= 15:
        body.replica_state = _Fetch.ReplicaState(replica_id=-1, replica_epoch=-1)
    return Outgoing(body, version)


# -- ListOffsets ---------------------------------------------------------------------------------
LATEST_TIMESTAMP: Final = -1
EARLIEST_TIMESTAMP: Final = -2


def list_offsets(version: int, stamps: Mapping[tuple[str, int], int], *,
                 leader_epochs: Mapping[tuple[str, int], int] | None = None,
                 isolation_level: int = READ_UNCOMMITTED, timeout_ms: int = 30_000) -> Any:
    """ListOffsets of each (topic, partition) at its timestamp (``LATEST_TIMESTAMP``: the log
    end offset, ``EARLIEST_TIMESTAMP``: the log start, else the first offset at or after that
    time), with the partition's current leader epoch where known. v0 answers in
    ``old_style_offsets`` (``max_num_offsets`` 1; ``listed_offset`` reads either)."""
    topics: dict[str, list[Any]] = {}
    for (topic, partition), timestamp in stamps.items():
        epoch = leader_epochs.get((topic, partition), -1) if leader_epochs else -1
        topics.setdefault(topic, []).append(_ListOffsets.ListOffsetsPartition(
            partition_index=partition, current_leader_epoch=epoch, timestamp=timestamp,
            max_num_offsets=1))
    return _ListOffsets(
        replica_id=-1, isolation_level=isolation_level if version >= 2 else 0, timeout_ms=timeout_ms,
        topics=[_ListOffsets.ListOffsetsTopic(name=t, partitions=ps) for t, ps in topics.items()])


def listed_offset(answer: Any) -> int:
    """A ListOffsets partition answer's offset: ``offset`` (v1+), else v0's first
    ``old_style_offsets``; -1 when it names none."""
    offset = answer.offset
    if (offset is None or offset < 0) and answer.old_style_offsets:
        return answer.old_style_offsets[0]
    return -1 if offset is None else offset


# -- FindCoordinator -----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Coordinator:
    """A FindCoordinator answer for one key, whatever the version's layout."""

    error_code: int
    node_id: int
    host: str
    port: int
    error_message: str | None = None


def find_coordinator(version: int, key: str, key_type: int = COORDINATOR_TRANSACTION) -> Any:
    """FindCoordinator for one key: v4+ asks in a batch of keys (KIP-699), older ones
    with a single key."""
    if version >= 4:
        return _FindCoordinator(key_type=key_type, coordinator_keys=[key])
    req = _FindCoordinator(key=key)
    if version >= 1:
        req.key_type = key_type
    return req


def read_find_coordinator(body: Any) -> Coordinator:
    """The coordinator of the one key asked for (v4+ answers in ``coordinators``)."""
    if body.coordinators:
        c = body.coordinators[0]
        return Coordinator(c.error_code, c.node_id, c.host, c.port, c.error_message)
    return Coordinator(body.error_code, body.node_id, body.host, body.port, body.error_message)


# -- AddPartitionsToTxn and EndTxn ---------------------------------------------------------------
def add_partitions_to_txn(version: int, *, transactional_id: str, producer_id: int,
                          producer_epoch: int, partitions: Mapping[str, Sequence[int]]) -> Any:
    """AddPartitionsToTxn as a producer sends it (v0-v3: one transaction; v4+ is the
    brokers' batched form, which ``CLIENT_MAX_VERSIONS`` keeps out)."""
    del version
    topic_cls = _AddPartitions.AddPartitionsToTxnTopic
    return _AddPartitions(
        v3_and_below_transactional_id=transactional_id, v3_and_below_producer_id=producer_id,
        v3_and_below_producer_epoch=producer_epoch,
        v3_and_below_topics=[topic_cls(name=t, partitions=list(ps)) for t, ps in partitions.items()])


def read_add_partitions_to_txn(body: Any) -> dict[tuple[str, int], int]:
    """Each partition's error code, whatever the version's layout."""
    out: dict[tuple[str, int], int] = {}
    topics = body.results_by_topic_v3_and_below or [
        t for r in (body.results_by_transaction or ()) for t in r.topic_results]
    for t in topics:
        for p in t.results_by_partition:
            out[(t.name, p.partition_index)] = p.partition_error_code
    if not out and getattr(body, "error_code", 0):
        out[("", -1)] = body.error_code
    return out


def end_txn(version: int, *, transactional_id: str, producer_id: int, producer_epoch: int,
            committed: bool) -> Any:
    """EndTxn: commit or abort the producer's transaction."""
    del version
    return _EndTxn(transactional_id=transactional_id, producer_id=producer_id,
                   producer_epoch=producer_epoch, committed=committed)
