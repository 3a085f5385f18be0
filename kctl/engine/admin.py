"""Blocking cluster operations for set-up and verification.

Metadata, topic creation, a single Produce, and reading a partition back with
Fetch, each over a ``BlockingClient`` at the versions it negotiated. Requests
come from ``protocol/requests.py``, the one builder per request, which also
decides what changes meaning with the version (topic ids in Fetch and Produce
v13+, "all topics" in Metadata v0): nothing here looks at a version.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from kctl.engine.blocking_client import BlockingClient
from kctl.errors import (BrokerError, BrokerUnavailableError, EndOffsetsError, KctlError,
                         RetriableEndOffsetsError)
from kctl.protocol import messages, requests
from kctl.protocol.error_codes import ERRORS_BY_NAME, broker_error, error_for
from kctl.protocol.records import RecordBatch, decode_batches

TOPIC_ALREADY_EXISTS = 36
_ZERO_UUID = uuid.UUID(int=0)
_METADATA = messages.message_class("MetadataRequest")
_CREATE_TOPICS = messages.message_class("CreateTopicsRequest")
_PRODUCE = messages.message_class("ProduceRequest")
_FETCH = messages.message_class("FetchRequest")
_LIST_OFFSETS = messages.message_class("ListOffsetsRequest")


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
    version = client.version_for(_METADATA())
    req = requests.metadata(version, topics, allow_auto_topic_creation=allow_auto_topic_creation)
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
    version = client.version_for(_CREATE_TOPICS())
    req = requests.create_topics(version, names, partitions=partitions,
                                 replication_factor=replication_factor, configs=configs,
                                 timeout_ms=timeout_ms)
    resp = client.request(req, version=version)
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
    version = client.version_for(_PRODUCE())
    if topic_id is None and requests.names_topics_by_id(version):
        topic_id = _topic_id(client, topic)
    out = requests.produce(version, acks=acks, timeout_ms=timeout_ms, transactional_id=transactional_id,
                           topics=[requests.ProduceTopic(topic, topic_id, [(partition, records)])])
    if acks == 0:
        client.send_only(out.body, version=out.version)
        return None
    resp = client.request(out.body, version=out.version)
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
    last_stable_offset: int = -1
    #: read_committed: the aborted transactions in the range, as (producer_id, first_offset)
    aborted_transactions: tuple[tuple[int, int], ...] = ()


def topic_id(client: BlockingClient, topic: str) -> uuid.UUID:
    """The topic's id (Fetch v13+ names topics by id)."""
    return _topic_id(client, topic)


def fetch_raw(client: BlockingClient, topic: str, partition: int, offset: int, *,
              max_bytes: int = 16 * 1024 * 1024, max_wait_ms: int = 100,
              topic_id: uuid.UUID | None = None,
              isolation_level: int = requests.READ_UNCOMMITTED) -> RawFetch:
    """One Fetch of one partition from ``offset``, records undecoded.
    ``isolation_level`` ``requests.READ_COMMITTED``: up to the last stable offset."""
    version = client.version_for(_FETCH())
    if topic_id is None and requests.names_topics_by_id(version):
        topic_id = _topic_id(client, topic)
    out = requests.fetch(version, [requests.FetchPartition(topic, partition, offset, max_bytes)],
                         max_bytes=max_bytes, max_wait_ms=max_wait_ms, isolation_level=isolation_level,
                         topic_ids={topic: topic_id} if topic_id is not None else None)
    resp = client.request(out.body, version=out.version)
    if resp.error_code:
        raise broker_error(resp.error_code)
    p = resp.responses[0].partitions[0]
    if p.error_code:
        raise broker_error(p.error_code)
    aborted = tuple((a.producer_id, a.first_offset) for a in (p.aborted_transactions or ()))
    return RawFetch(p.high_watermark, p.log_start_offset, bytes(p.records or b""),
                    p.last_stable_offset, aborted)


def fetch(client: BlockingClient, topic: str, partition: int, offset: int, *,
          max_bytes: int = 16 * 1024 * 1024, max_wait_ms: int = 100,
          topic_id: uuid.UUID | None = None) -> FetchedPartition:
    """One Fetch of one partition from ``offset`` (read_uncommitted)."""
    raw = fetch_raw(client, topic, partition, offset, max_bytes=max_bytes, max_wait_ms=max_wait_ms,
                    topic_id=topic_id)
    batches = decode_batches(raw.records)
    return FetchedPartition(raw.high_watermark, raw.log_start_offset, tuple(batches))


def log_end_offsets(client: BlockingClient, topic: str, partitions: Iterable[int] | None = None, *,
                    client_for: Callable[[str], BlockingClient],
                    isolation_level: int = requests.READ_UNCOMMITTED,
                    metadata: ClusterMetadata | None = None) -> dict[int, int]:
    """One round: each partition's log end offset (every partition of ``topic`` when
    ``partitions`` is None; read_committed: the last stable offset), asked once of its
    leader. Metadata from ``client`` (any broker; ``metadata`` when the caller has it
    already, fresh), the partitions grouped by leader, one ListOffsets (latest, with the
    leader epoch Metadata gave) per leader at the version that leader offers, over a
    connection from ``client_for(address)`` (not yet connected; closed here), or ``client``
    itself when the leader is at its address.

    Returns partition -> end offset when every partition answered. Otherwise raises
    ``EndOffsetsError`` naming each partition left without one and why (the others'
    offsets in it): ``RetriableEndOffsetsError`` when every reason may pass (a retriable
    error such as NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE or UNKNOWN_TOPIC_OR_PARTITION,
    no leader yet, a leader's connection that failed), so that the caller asks again after
    a fresh Metadata for as long as its own timeout allows, as the Java consumer's
    ``endOffsets(partitions, timeout)`` does; nothing here asks twice. The bootstrap
    connection breaking raises ``BrokerUnavailableError`` from ``client``."""
    md = metadata if metadata is not None else fetch_metadata(client, [topic])
    asked = sorted(set(partitions)) if partitions is not None else None
    info = md.topics.get(topic)
    if info is None or info.error:
        why = info.error if info is not None and info.error else "not in the Metadata answer"
        # Java: a topic Metadata does not (yet) name has no leaders: retried until the timeout
        retriable = info is None or (info.error in ERRORS_BY_NAME and ERRORS_BY_NAME[info.error].retriable)
        kind = RetriableEndOffsetsError if retriable else EndOffsetsError
        raise kind(topic, {}, {p: f"topic {why} (Metadata from {client.address})" for p in asked or ()},
                   f"{why} (Metadata from {client.address})")
    pending = asked if asked is not None else [p.partition for p in info.partitions]
    conns: dict[str, BlockingClient] = {client.address: client}
    try:
        answers = _ask_leaders(md, info, pending, client, conns, client_for, isolation_level)
    finally:
        for conn in conns.values():
            if conn is not client:
                conn.close()
    offsets = {p: a for p, a in sorted(answers.items()) if isinstance(a, int)}
    failed = {p: a for p, a in sorted(answers.items()) if not isinstance(a, int)}
    if not failed:
        return offsets
    errors = {p: why for p, (why, _) in failed.items()}
    kind = RetriableEndOffsetsError if all(again for _, again in failed.values()) else EndOffsetsError
    raise kind(topic, offsets, errors)


def _ask_leaders(md: ClusterMetadata, info: TopicInfo, partitions: Sequence[int], bootstrap: BlockingClient,
                 conns: dict[str, BlockingClient], client_for: Callable[[str], BlockingClient],
                 isolation_level: int) -> dict[int, int | tuple[str, bool]]:
    """Each leader asked once: per partition its end offset, or (why not, whether that may pass)."""
    brokers = {b.node_id: b for b in md.brokers}
    known = {p.partition: p for p in info.partitions}
    out: dict[int, int | tuple[str, bool]] = {}
    by_leader: dict[int, list[PartitionInfo]] = {}
    for partition in partitions:
        meta = known.get(partition)
        if meta is None:
            out[partition] = (f"not a partition of {info.name} in the Metadata answer", True)
        elif meta.leader < 0 or meta.leader not in brokers:
            why = (f"no leader ({meta.error})" if meta.error else "no leader" if meta.leader < 0
                   else f"leader {meta.leader} is not among the brokers Metadata named")
            out[partition] = (why, True)
        else:
            by_leader.setdefault(meta.leader, []).append(meta)
    for node, metas in sorted(by_leader.items()):
        address = brokers[node].address
        conn = conns.get(address)
        try:
            if conn is None:
                conn = conns[address] = client_for(address)
                conn.connect()
            answers = _list_latest(conn, info.name, metas, isolation_level)
        except (KctlError, OSError) as e:
            conns.pop(address, None)
            if conn is not None and conn is not bootstrap:
                conn.close()               # the caller's client stays the caller's to close
            # a connection that failed may pass (the leader restarting, moving); TLS, SASL,
            # no version in common or a protocol error would fail the same way again
            again = isinstance(e, (BrokerUnavailableError, OSError))
            out.update({m.partition: (f"leader {node} at {address}: {e}", again) for m in metas})
            continue
        for m in metas:
            answer = answers.get(m.partition, ("left out of the answer", True))
            out[m.partition] = answer if isinstance(answer, int) else (
                f"{answer[0]} from broker {node} ({address})", answer[1])
    return out


def _list_latest(conn: BlockingClient, topic: str, metas: Sequence[PartitionInfo],
                 isolation_level: int) -> dict[int, int | tuple[str, bool]]:
    """One ListOffsets (latest) on one broker: per partition answered, its offset or (the
    error's name, whether it is retriable)."""
    version = conn.version_for(_LIST_OFFSETS())
    req = requests.list_offsets(version, {(topic, m.partition): requests.LATEST_TIMESTAMP for m in metas},
                                leader_epochs={(topic, m.partition): m.leader_epoch for m in metas},
                                isolation_level=isolation_level)
    resp = conn.request(req, version=version)
    out: dict[int, int | tuple[str, bool]] = {}
    for t in resp.topics:
        if t.name != topic:
            continue
        for p in t.partitions:
            if p.error_code:
                err = error_for(p.error_code)
                out[p.partition_index] = (err.name, err.retriable)
            elif (offset := requests.listed_offset(p)) >= 0:
                out[p.partition_index] = offset
            else:
                out[p.partition_index] = ("no error and no offset", False)
    return out


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
    "fetch", "fetch_metadata", "fetch_raw", "log_end_offsets", "produce", "topic_id",
    "read_partition",
]


@dataclass(frozen=True, slots=True)
class BrokerApis:
    """What one broker offers per API (name, min, max) and what kctl will use."""

    broker: BrokerInfo
    apis: tuple[tuple[str, int, int, int | None], ...]   # (API name, broker min, broker max, kctl's choice)
    error: str | None = None


def cluster_overview(bootstrap: str, *, security=None, topics: Iterable[str] | None = None,
                     client_id: str = "kctl-metadata", timeout_s: float = 10.0,
                     setup_timeout_s: float | None = None
                     ) -> tuple[ClusterMetadata, tuple[BrokerApis, ...]]:
    """``kctl metadata``: the cluster's metadata from the first bootstrap broker that
    answers, then each broker's ApiVersions over its own connection. ``timeout_s`` bounds
    each request (request.timeout.ms), ``setup_timeout_s`` each connection's set-up
    (socket.connection.setup.timeout.ms: TCP, TLS, SASL, ApiVersions)."""
    from kctl.protocol import schema
    errors = []
    md = None
    for address in [a.strip() for a in bootstrap.split(",") if a.strip()]:
        try:
            with BlockingClient(address, client_id=client_id, timeout_s=timeout_s, security=security,
                                setup_timeout_s=setup_timeout_s) as c:
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
                                security=security, setup_timeout_s=setup_timeout_s) as c:
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
