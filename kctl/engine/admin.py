"""Blocking cluster operations for set-up and verification.

Metadata, topic creation, a single Produce, and reading a partition back with
Fetch, each over a ``BlockingClient`` at the versions it negotiated. Requests
are built by field name; the version-specific layout is the codec's business,
except where a field's *meaning* changes with the version (topic names vs topic
ids in Fetch v13+ and Produce v13+), which is handled here once.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kctl.engine.blocking_client import BlockingClient
from kctl.engine.metadata import ALLOW_AUTO_CREATE_MIN_VERSION
from kctl.errors import BrokerError, KctlError
from kctl.protocol import messages
from kctl.protocol.error_codes import broker_error, error_for
from kctl.protocol.records import RecordBatch, decode_batches

TOPIC_ALREADY_EXISTS = 36
_ZERO_UUID = uuid.UUID(int=0)


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error: str | None


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID | None
    partitions: tuple[PartitionInfo, ...]
    error: str | None


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    cluster_id: str | None
    controller_id: int
    brokers: tuple[BrokerInfo, ...]
    topics: dict[str, TopicInfo]


@dataclass(frozen=True, slots=True)
class ProduceResult:
    base_offset: int
    log_append_time_ms: int
    log_start_offset: int


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    high_watermark: int
    log_start_offset: int
    batches: tuple[RecordBatch, ...]


def _error_name(code: int) -> str | None:
    return None if code == 0 else error_for(code).name


def fetch_metadata(client: BlockingClient, topics: Iterable[str] | None = None,
                   *, allow_auto_topic_creation: bool = False) -> ClusterMetadata:
    """Brokers and the given topics (all topics when ``topics`` is None)."""
    req_cls = messages.message_class("MetadataRequest")
    version = client.version_for(req_cls())
    if topics is None:
        wanted = [] if version == 0 else None  # "all topics": an empty array in v0, null since v1
    else:
        wanted = [req_cls.MetadataRequestTopic(name=t) for t in topics]
    req = req_cls(topics=wanted)
    if version >= ALLOW_AUTO_CREATE_MIN_VERSION:  # older brokers decide by their own config
        req.allow_auto_topic_creation = allow_auto_topic_creation
    resp = client.request(req, version=version)
    brokers = tuple(BrokerInfo(b.node_id, b.host, b.port, b.rack) for b in resp.brokers)
    out: dict[str, TopicInfo] = {}
    for t in resp.topics:
        parts = tuple(sorted(
            (PartitionInfo(p.partition_index, p.leader_id, p.leader_epoch, tuple(p.replica_nodes),
                           tuple(p.isr_nodes), _error_name(p.error_code)) for p in t.partitions),
            key=lambda p: p.partition))
        topic_id = t.topic_id if t.topic_id not in (None, _ZERO_UUID) else None
        out[t.name] = TopicInfo(t.name, topic_id, parts, _error_name(t.error_code))
    return ClusterMetadata(resp.cluster_id, resp.controller_id, brokers, out)


def create_topics(client: BlockingClient, names: Sequence[str], *, partitions: int = 1,
                  replication_factor: int = 1, configs: dict[str, str] | None = None,
                  timeout_ms: int = 30_000, exist_ok: bool = True) -> dict[str, str | None]:
    """Creates topics; returns each name's error name (None when created or already there)."""
    req_cls = messages.message_class("CreateTopicsRequest")
    topic_cls = req_cls.CreatableTopic
    cfg_cls = req_cls.CreatableTopicConfig
    req = req_cls(
        topics=[topic_cls(name=n, num_partitions=partitions, replication_factor=replication_factor,
                          assignments=[],
                          configs=[cfg_cls(name=k, value=v) for k, v in (configs or {}).items()])
                for n in names],
        timeout_ms=timeout_ms, validate_only=False)
    resp = client.request(req)
    result: dict[str, str | None] = {}
    for t in resp.topics:
        if t.error_code == 0 or (exist_ok and t.error_code == TOPIC_ALREADY_EXISTS):
            result[t.name] = None
            continue
        err = broker_error(t.error_code, t.error_message or "")
        raise KctlError(f"cannot create topic {t.name!r}: {err}")
    return result


def produce(client: BlockingClient, topic: str, partition: int, records: bytes, *,
            acks: int = -1, timeout_ms: int = 30_000, topic_id: uuid.UUID | None = None,
            transactional_id: str | None = None) -> ProduceResult | None:
    """Sends one record blob to one partition; ``None`` for acks=0 (no response)."""
    req_cls = messages.message_class("ProduceRequest")
    tcls = req_cls.TopicProduceData
    version = client.version_for(req_cls())
    by_id = version >= 13
    if by_id and topic_id is None:
        topic_id = _topic_id(client, topic)
    req = req_cls(
        transactional_id=transactional_id, acks=acks, timeout_ms=timeout_ms,
        topic_data=[tcls(name="" if by_id else topic, topic_id=topic_id if by_id else _ZERO_UUID,
                         partition_data=[req_cls.PartitionProduceData(index=partition, records=records)])])
    if acks == 0:
        client.send_only(req, version=version)
        return None
    resp = client.request(req, version=version)
    p = resp.responses[0].partition_responses[0]
    if p.error_code:
        raise broker_error(p.error_code, p.error_message or "")
    return ProduceResult(p.base_offset, p.log_append_time_ms, p.log_start_offset)


def _topic_id(client: BlockingClient, topic: str) -> uuid.UUID:
    info = fetch_metadata(client, [topic]).topics.get(topic)
    if info is None or info.topic_id is None:
        raise KctlError(f"broker {client.address} gave no topic id for {topic!r}")
    return info.topic_id


@dataclass(frozen=True, slots=True)
class RawFetch:
    """One partition's Fetch answer with its records left as bytes."""

    high_watermark: int
    log_start_offset: int
    records: bytes


def topic_id(client: BlockingClient, topic: str) -> uuid.UUID:
    """The topic's id (Fetch v13+ names topics by id)."""
    return _topic_id(client, topic)


def fetch_raw(client: BlockingClient, topic: str, partition: int, offset: int, *,
              max_bytes: int = 16 * 1024 * 1024, max_wait_ms: int = 100,
              topic_id: uuid.UUID | None = None) -> RawFetch:
    """One Fetch of one partition from ``offset`` (read_uncommitted), records undecoded."""
    req_cls = messages.message_class("FetchRequest")
    tcls = req_cls.FetchTopic
    version = client.version_for(req_cls())
    by_id = version >= 13
    if by_id and topic_id is None:
        topic_id = _topic_id(client, topic)
    req = req_cls(
        replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=max_bytes,
        isolation_level=0, session_id=0, session_epoch=-1,
        topics=[tcls(topic="" if by_id else topic, topic_id=topic_id if by_id else _ZERO_UUID,
                     partitions=[req_cls.FetchPartition(partition=partition, fetch_offset=offset,
                                                     partition_max_bytes=max_bytes)])],
        forgotten_topics_data=[], rack_id="")
    resp = client.request(req, version=version)
    if resp.error_code:
        raise broker_error(resp.error_code)
    p = resp.responses[0].partitions[0]
    if p.error_code:
        raise broker_error(p.error_code)
    return RawFetch(p.high_watermark, p.log_start_offset, bytes(p.records or b""))


def fetch(client: BlockingClient, topic: str, partition: int, offset: int, *,
          max_bytes: int = 16 * 1024 * 1024, max_wait_ms: int = 100,
          topic_id: uuid.UUID | None = None) -> FetchedPartition:
    """One Fetch of one partition from ``offset`` (read_uncommitted)."""
    raw = fetch_raw(client, topic, partition, offset, max_bytes=max_bytes, max_wait_ms=max_wait_ms,
                    topic_id=topic_id)
    batches = decode_batches(raw.records)
    return FetchedPartition(raw.high_watermark, raw.log_start_offset, tuple(batches))


def read_partition(client: BlockingClient, topic: str, partition: int, *, start: int = 0,
                   expect: int | None = None, max_empty_fetches: int = 3,
                   timeout_s: float = 5.0) -> list[RecordBatch]:
    """Every batch from ``start`` on.

    With ``expect``, fetches until that many records are read or ``timeout_s``
    passes (a record written just now may not be readable yet, e.g. acks=0);
    without it, until the broker returns nothing ``max_empty_fetches`` times
    in a row. Counting records (not trusting end offsets) is deliberate: some
    brokers report a high watermark that is the last batch's base offset.
    """
    out: list[RecordBatch] = []
    offset = start
    seen = 0
    empty = 0
    deadline = time.monotonic() + timeout_s
    while expect is None or seen < expect:
        got = fetch(client, topic, partition, offset)
        new = [b for b in got.batches if b.next_offset > offset]
        if not new:
            empty += 1
            if expect is None and empty >= max_empty_fetches:
                break
            if expect is not None and time.monotonic() >= deadline:
                break
            if expect is not None:
                time.sleep(0.01)
            continue
        empty = 0
        for b in new:
            out.append(b)
            seen += sum(1 for r in b.records if r.offset >= offset)
        offset = new[-1].next_offset
    return out


__all__ = [
    "BrokerError", "BrokerInfo", "ClusterMetadata", "FetchedPartition", "PartitionInfo",
    "BrokerApis", "ProduceResult", "RawFetch", "TopicInfo", "cluster_overview", "create_topics",
    "fetch", "fetch_metadata", "fetch_raw", "produce", "topic_id",
    "read_partition",
]


@dataclass(frozen=True, slots=True)
class BrokerApis:
    """What one broker offers per API (name, min, max) and what kctl will use."""

    broker: BrokerInfo
    apis: tuple[tuple[str, int, int, int | None], ...]   # (API name, broker min, broker max, kctl's choice)
    error: str | None = None


def cluster_overview(bootstrap: str, *, security=None, topics: Iterable[str] | None = None,
                     client_id: str = "kctl-metadata", timeout_s: float = 10.0
                     ) -> tuple[ClusterMetadata, tuple[BrokerApis, ...]]:
    """``kctl metadata``: the cluster's metadata from the first bootstrap broker that
    answers, then each broker's ApiVersions over its own connection."""
    from kctl.protocol import schema
    errors = []
    md = None
    for address in [a.strip() for a in bootstrap.split(",") if a.strip()]:
        try:
            with BlockingClient(address, client_id=client_id, timeout_s=timeout_s, security=security) as c:
                md = fetch_metadata(c, topics)
            break
        except KctlError as e:
            errors.append(str(e))
    if md is None:
        raise KctlError("; ".join(errors) or "no bootstrap server given")
    per_broker = []
    for b in md.brokers:
        try:
            with BlockingClient(f"{b.host}:{b.port}", client_id=client_id, timeout_s=timeout_s,
                                security=security) as c:
                v = c.versions
        except KctlError as e:
            per_broker.append(BrokerApis(b, (), str(e)))
            continue
        rows = tuple(
            (schema.API_BY_KEY[k].name if k in schema.API_BY_KEY else f"api-{k}", r.min_version,
             r.max_version, v.version_for(k))
            for k, r in sorted(v.broker.items()))
        per_broker.append(BrokerApis(b, rows))
    return md, tuple(per_broker)
