"""The producer's view of the cluster: brokers, partition leaders, topic ids
(the Java client's Metadata and Cluster, without I/O).

How this works: the ``MetadataUpdater`` (metadata_updater.py, the producer's and the
consumer's) asks ``time_to_next_update_ns(now)`` whether a refresh is due (one was
requested after a leader error or for an unknown topic, or ``metadata.max.age.ms`` has
passed), sends ``build_request()`` to the least-loaded node, and feeds the answer to
``handle_response`` (or reports ``failed_update``). A refresh waits ``retry.backoff.ms``
after the last one; failed refreshes back off exponentially from there to
``retry.backoff.max.ms``, jittered (Java's ``Metadata.refreshBackoff``:
``ExponentialBackoff(retry.backoff.ms, 2, retry.backoff.max.ms, 0.2)``, KIP-580) so that
many clients that lost a broker do not all ask again at once. The wait is drawn once
per answer or failure (Java draws anew each time it asks); the random source is passed
in (``random``) so tests can pin it. Leaders learned from Produce responses (KIP-951
``current_leader``) update the view without a full refresh, if their leader
epoch is newer.

Idle topics (the producer's ``metadata.max.idle.ms``, Java's ProducerMetadata): the
producer writes when it last sent to a topic into ``last_use_ns`` (one dict store per
send); a refresh's answer drops every topic not used for that long from the topics
asked for and from the view, unless it was added and not yet answered. Sending to it
again adds it back (and waits for its metadata, as Java's does). The consumer's topics
are its subscription: they never expire (``metadata_max_idle_ms`` None).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from kctl.config import MetadataConfig
from kctl.engine.backoff import (
    RETRY_BACKOFF_EXP_BASE, RETRY_BACKOFF_JITTER, ExponentialBackoff, Random,
)
from kctl.engine.batch import TopicPartition
from kctl.engine.clock import NS_PER_MS
from kctl.protocol import requests
from kctl.protocol.error_codes import error_for

_ZERO_UUID = uuid.UUID(int=0)

#: Topic errors that mean "not there (yet)" rather than "broken": keep asking.
_RETRY_TOPIC_ERRORS = frozenset({"UNKNOWN_TOPIC_OR_PARTITION", "LEADER_NOT_AVAILABLE",
                                 "NOT_LEADER_OR_FOLLOWER", "UNKNOWN_TOPIC_ID"})


@dataclass(frozen=True, slots=True)
class PartitionMeta:
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeAddress:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class MetadataUpdate:
    """What one Metadata response changed."""

    topic_errors: dict[str, str] = field(default_factory=dict)   # fatal per-topic errors
    leaders_changed: bool = False


class Metadata:
    def __init__(self, config: MetadataConfig, *, allow_auto_topic_creation: bool = False,
                 random: Random | None = None) -> None:
        """``allow_auto_topic_creation``: what Metadata requests ask for (v4+); the producer
        never asks, the consumer as ``allow.auto.create.topics`` says. ``random``: the
        jitter source of the refresh backoff (a float in [0, 1) per draw; default
        ``random.random``)."""
        self.config = config
        self.refresh_backoff = ExponentialBackoff(config.retry_backoff_ms, RETRY_BACKOFF_EXP_BASE,
                                                  config.retry_backoff_max_ms,
                                                  RETRY_BACKOFF_JITTER, random)
        self.allow_auto_topic_creation = allow_auto_topic_creation
        self.topics: set[str] = set()
        # Added and not yet in an answer (Java's newTopics): never dropped as idle.
        self._new_topics: set[str] = set()
        # When the client last used each topic (now_ns); a topic without one never expires.
        self.last_use_ns: dict[str, int] = {}
        self.nodes: dict[int, NodeAddress] = {}
        self.cluster_id: str | None = None
        self._partitions: dict[TopicPartition, PartitionMeta] = {}
        self._by_topic: dict[str, tuple[int, ...]] = {}
        self._available: dict[str, tuple[int, ...]] = {}
        self._by_node: dict[int, tuple[TopicPartition, ...]] = {}
        self.topic_ids: dict[str, uuid.UUID] = {}
        self._need_update = True
        self._in_progress = False
        self._last_success_ns: int | None = None
        self._last_attempt_ns: int | None = None
        self._failures = 0
        self._backoff_ns = self.refresh_backoff.backoff_ns(0)   # after the last attempt
        self.version = 0          # bumped whenever partitions or leaders may have changed
        self.refreshes = 0

    # -- questions ---------------------------------------------------------------------
    def leader_for(self, tp: TopicPartition) -> int | None:
        p = self._partitions.get(tp)
        return None if p is None or p.leader < 0 else p.leader

    def leader_epoch_for(self, tp: TopicPartition) -> int:
        """The epoch of the partition's leader (-1: not known, or Metadata v0-6 gave none)."""
        p = self._partitions.get(tp)
        return -1 if p is None else p.leader_epoch

    def partition_meta(self, tp: TopicPartition) -> PartitionMeta | None:
        return self._partitions.get(tp)

    def partition_count(self, topic: str) -> int | None:
        parts = self._by_topic.get(topic)
        return None if parts is None else len(parts)

    def available_partitions(self, topic: str) -> tuple[int, ...]:
        """Partitions of ``topic`` whose leader is known."""
        return self._available.get(topic, ())

    def partitions_by_node(self) -> dict[int, tuple[TopicPartition, ...]]:
        return self._by_node

    def node(self, node_id: int) -> NodeAddress | None:
        return self.nodes.get(node_id)

    # -- refresh policy ------------------------------------------------------------------
    def add_topics(self, topics: Iterable[str], now_ns: int | None = None) -> None:
        """Ask for ``topics`` from now on; ``now_ns``: they are used now (the producer's
        sends, Java's ``ProducerMetadata.add``), which keeps them from expiring."""
        topics = set(topics)
        if now_ns is not None:
            for topic in topics:
                self.last_use_ns[topic] = now_ns
        new = topics - self.topics
        if new:
            self.topics |= new
            self._new_topics |= new
            self._need_update = True

    def _idle_topics(self, now_ns: int) -> set[str]:
        """Topics not used for ``metadata.max.idle.ms`` (none without that limit)."""
        idle_ms = self.config.metadata_max_idle_ms
        if idle_ms is None:
            return set()
        limit = now_ns - idle_ms * NS_PER_MS
        return {t for t in self.topics - self._new_topics
                if t in self.last_use_ns and self.last_use_ns[t] <= limit}

    def request_update(self) -> None:
        self._need_update = True

    @property
    def update_requested(self) -> bool:
        return self._need_update

    def _attempt_ended(self, now_ns: int) -> None:
        """The wait before the next refresh, drawn as the last attempt ends: retry.backoff.ms
        x 2^(failures - 1) (x 1 after an answer), jittered, up to retry.backoff.max.ms."""
        self._last_attempt_ns = now_ns
        self._backoff_ns = self.refresh_backoff.backoff_ns(max(self._failures - 1, 0))

    def time_to_next_update_ns(self, now_ns: int) -> int:
        """0 when a refresh should be sent now; else how long until one is due."""
        if self._in_progress:
            return 1 << 62
        if self._last_attempt_ns is None:
            return 0
        if self._need_update or self._last_success_ns is None:
            due = now_ns
        else:
            due = self._last_success_ns + self.config.metadata_max_age_ms * NS_PER_MS
        allowed = self._last_attempt_ns + self._backoff_ns
        return max(due - now_ns, allowed - now_ns, 0)

    def build_request(self, now_ns: int, version: int):
        """The Metadata request to send now at ``version`` (``requests.metadata``: the
        client's topics, auto-created only as ``allow_auto_topic_creation`` says); marks a
        refresh in progress."""
        # Built before the refresh is marked in progress: a request that cannot be built
        # must not leave a refresh "in progress" that no answer will ever end.
        req = requests.metadata(version, sorted(self.topics),
                                allow_auto_topic_creation=self.allow_auto_topic_creation)
        self._in_progress = True
        self._last_attempt_ns = now_ns
        return req

    def failed_update(self, now_ns: int) -> None:
        self._in_progress = False
        self._failures += 1
        self._attempt_ended(now_ns)
        self._need_update = True

    # -- answers -------------------------------------------------------------------------
    def handle_response(self, resp, now_ns: int) -> MetadataUpdate:
        self._in_progress = False
        self._failures = 0
        self._attempt_ended(now_ns)
        self.refreshes += 1
        self.cluster_id = resp.cluster_id
        self.nodes = {b.node_id: NodeAddress(b.node_id, b.host, b.port, b.rack) for b in resp.brokers}
        errors: dict[str, str] = {}
        retry = False
        old_leaders = {tp: p.leader for tp, p in self._partitions.items()}
        idle = self._idle_topics(now_ns)     # before: a new topic's first answer keeps it
        self._new_topics -= {t.name for t in resp.topics}
        if idle:
            self.topics -= idle
            for topic in idle:
                del self.last_use_ns[topic]
                self.topic_ids.pop(topic, None)
            for tp in [tp for tp in self._partitions if tp.topic in idle]:
                del self._partitions[tp]
        for t in resp.topics:
            if t.name in idle:
                continue
            if t.error_code:
                name = error_for(t.error_code).name
                if name in _RETRY_TOPIC_ERRORS:
                    retry = True
                else:
                    errors[t.name] = name
                continue
            if t.topic_id not in (None, _ZERO_UUID):
                self.topic_ids[t.name] = t.topic_id
            for tp in [tp for tp in self._partitions if tp.topic == t.name]:
                del self._partitions[tp]
            for p in t.partitions:
                leader = p.leader_id if p.error_code in (0, 9) else -1  # 9: REPLICA_NOT_AVAILABLE
                if leader < 0:
                    retry = True
                self._partitions[TopicPartition(t.name, p.partition_index)] = PartitionMeta(
                    leader, p.leader_epoch, tuple(p.replica_nodes), tuple(p.isr_nodes))
        self._reindex()
        missing = self.topics - {t.name for t in resp.topics}
        self._need_update = retry or bool(missing)
        self._last_success_ns = now_ns
        changed = old_leaders != {tp: p.leader for tp, p in self._partitions.items()}
        return MetadataUpdate(errors, changed)

    def update_leader(self, tp: TopicPartition, leader: int, leader_epoch: int) -> bool:
        """A newer leader learned from a Produce response; True if it changed anything."""
        cur = self._partitions.get(tp)
        if leader < 0 or (cur is not None and leader_epoch <= cur.leader_epoch) or leader not in self.nodes:
            return False
        self._partitions[tp] = PartitionMeta(leader, leader_epoch,
                                             cur.replicas if cur else (), cur.isr if cur else ())
        self._reindex()
        return True

    def add_node(self, node: NodeAddress) -> None:
        self.nodes[node.node_id] = node

    def _reindex(self) -> None:
        by_topic: dict[str, list[int]] = {}
        available: dict[str, list[int]] = {}
        by_node: dict[int, list[TopicPartition]] = {}
        for tp, p in sorted(self._partitions.items()):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
            if p.leader >= 0:
                available.setdefault(tp.topic, []).append(tp.partition)
                by_node.setdefault(p.leader, []).append(tp)
        self._by_topic = {k: tuple(v) for k, v in by_topic.items()}
        self._available = {k: tuple(v) for k, v in available.items()}
        self._by_node = {k: tuple(v) for k, v in by_node.items()}
        self.version += 1
