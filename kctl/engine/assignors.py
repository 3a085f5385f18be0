"""Partition assignors and the consumer protocol's embedded messages (the Java client's
``ConsumerProtocol``, ``RangeAssignor``, ``RoundRobinAssignor`` and
``CooperativeStickyAssignor``).

How this works
--------------
A group member's JoinGroup carries, per assignor it supports, a
``ConsumerProtocolSubscription`` (topics, owned partitions, generation, rack); the
leader's SyncGroup carries each member's ``ConsumerProtocolAssignment``. Their codec is
``protocol/consumer_protocol.py`` (shared with ``kctl decode``); here they are turned into
and out of the engine's ``Subscription`` and ``Assignment``.

The group's leader runs ``assign(partitions_per_topic, subscriptions)`` of the assignor
the coordinator chose; every assignor is a pure function of its inputs (members are
taken in the order of their group instance id, else member id, as Java's ``MemberInfo``
orders them), so tests check the Java tests' expectations directly:

- ``range``: per topic, the members subscribed to it share its partitions in
  contiguous ranges; the first ``n % m`` members get one more.
- ``roundrobin``: every partition of every topic, sorted, dealt in turn to the next
  member (in order) that subscribes to its topic.
- ``cooperative-sticky``: balanced (partition counts differ by at most one when every
  member subscribes to the same topics), and sticky: a member keeps what it owned as
  far as balance allows (a partition claimed by two members goes to the one with the
  newer generation). Then, the cooperative rule: a partition that moves from one
  member to another is left out of this round, so its owner revokes it first and the
  follow-up rebalance hands it on (Java's ``adjustAssignment``). With members
  subscribing to different topics, the same stickiness goes partition by partition to
  the least loaded eligible member, which keeps counts as even as subscriptions allow.

Rack-aware assignment (KIP-881) needs partition racks; kctl's assignors ignore racks.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from kctl.consumer_config import RebalanceProtocol
from kctl.engine.batch import TopicPartition
from kctl.errors import KctlError
from kctl.protocol import consumer_protocol
from kctl.protocol.consumer_protocol import ASSIGNMENT_VERSION, SUBSCRIPTION_VERSION

__all__ = ["Assignment", "Assignor", "CooperativeStickyAssignor", "RangeAssignor", "RoundRobinAssignor",
           "Subscription", "assignor_for", "decode_assignment", "decode_subscription",
           "encode_assignment", "encode_subscription"]

_Subscription = consumer_protocol.ConsumerProtocolSubscription
_Assignment = consumer_protocol.ConsumerProtocolAssignment


@dataclass(frozen=True, slots=True)
class Subscription:
    topics: tuple[str, ...]
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation_id: int = -1
    rack_id: str | None = None
    user_data: bytes | None = None
    group_instance_id: str | None = field(default=None, compare=False)   # from JoinGroup's members


@dataclass(frozen=True, slots=True)
class Assignment:
    partitions: tuple[TopicPartition, ...]
    user_data: bytes | None = None


def _grouped(tps: Sequence[TopicPartition]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for tp in tps:
        out.setdefault(tp.topic, []).append(tp.partition)
    return out


def encode_subscription(sub: Subscription, version: int = SUBSCRIPTION_VERSION) -> bytes:
    body = _Subscription(
        topics=list(sub.topics), user_data=sub.user_data,
        owned_partitions=[_Subscription.TopicPartition(topic=t, partitions=sorted(ps))
                          for t, ps in sorted(_grouped(sub.owned_partitions).items())],
        generation_id=sub.generation_id, rack_id=sub.rack_id)
    return consumer_protocol.encode_embedded(body, version)


def decode_subscription(data: bytes) -> Subscription:
    m = consumer_protocol.decode_subscription(data).message
    owned = tuple(TopicPartition(t.topic, p) for t in (m.owned_partitions or ()) for p in t.partitions)
    return Subscription(tuple(m.topics), owned, m.generation_id if m.generation_id is not None else -1,
                        m.rack_id, m.user_data)


def encode_assignment(a: Assignment, version: int = ASSIGNMENT_VERSION) -> bytes:
    body = _Assignment(
        assigned_partitions=[_Assignment.TopicPartition(topic=t, partitions=sorted(ps))
                             for t, ps in sorted(_grouped(a.partitions).items())],
        user_data=a.user_data)
    return consumer_protocol.encode_embedded(body, version)


def decode_assignment(data: bytes | None) -> Assignment:
    """An empty SyncGroup assignment (the member got nothing) is an empty ``Assignment``."""
    if not data:
        return Assignment(())
    m = consumer_protocol.decode_assignment(data).message
    return Assignment(tuple(TopicPartition(t.topic, p) for t in m.assigned_partitions for p in t.partitions),
                      m.user_data)


def _member_order(subscriptions: Mapping[str, Subscription]) -> list[str]:
    """Members as Java's ``MemberInfo`` orders them: static members by instance id first,
    then the rest by member id."""
    return sorted(subscriptions, key=lambda m: (subscriptions[m].group_instance_id is None,
                                                subscriptions[m].group_instance_id or "", m))


class Assignor(Protocol):
    name: str
    protocols: tuple[RebalanceProtocol, ...]

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, list[TopicPartition]]: ...


class RangeAssignor:
    name = "range"
    protocols = (RebalanceProtocol.EAGER,)

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, list[TopicPartition]]:
        out: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
        order = _member_order(subscriptions)
        for topic in sorted(partitions_per_topic):
            members = [m for m in order if topic in subscriptions[m].topics]
            n = partitions_per_topic[topic]
            if not members or n <= 0:
                continue
            per, extra = divmod(n, len(members))
            for i, m in enumerate(members):
                start = per * i + min(i, extra)
                length = per + (1 if i < extra else 0)
                out[m].extend(TopicPartition(topic, p) for p in range(start, start + length))
        return out


class RoundRobinAssignor:
    name = "roundrobin"
    protocols = (RebalanceProtocol.EAGER,)

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, list[TopicPartition]]:
        out: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
        order = _member_order(subscriptions)
        if not order:
            return out
        i = 0
        for topic in sorted(partitions_per_topic):
            for p in range(partitions_per_topic[topic]):
                for _ in range(len(order)):
                    m = order[i % len(order)]
                    i += 1
                    if topic in subscriptions[m].topics:
                        out[m].append(TopicPartition(topic, p))
                        break
        return out


class CooperativeStickyAssignor:
    name = "cooperative-sticky"
    protocols = (RebalanceProtocol.EAGER, RebalanceProtocol.COOPERATIVE)

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, list[TopicPartition]]:
        owners = self._current_owners(partitions_per_topic, subscriptions)
        if len({frozenset(s.topics) for s in subscriptions.values()}) <= 1:
            result = self._constrained(partitions_per_topic, subscriptions, owners)
        else:
            result = self._general(partitions_per_topic, subscriptions, owners)
        # The cooperative rule: a partition changing hands waits for its owner to revoke it.
        for member, parts in result.items():
            result[member] = [tp for tp in parts if owners.get(tp, member) == member]
        return result

    @staticmethod
    def _current_owners(partitions_per_topic: Mapping[str, int],
                        subscriptions: Mapping[str, Subscription]) -> dict[TopicPartition, str]:
        """Who owns each partition now: its claimant with the newest generation (a claim
        of a partition that no longer exists, or of an unsubscribed topic, is dropped)."""
        owners: dict[TopicPartition, tuple[int, str]] = {}
        for m in _member_order(subscriptions):
            s = subscriptions[m]
            for tp in s.owned_partitions:
                if (tp.topic not in s.topics or tp.partition >= partitions_per_topic.get(tp.topic, 0)):
                    continue
                cur = owners.get(tp)
                if cur is None or s.generation_id > cur[0]:
                    owners[tp] = (s.generation_id, m)
        return {tp: m for tp, (_, m) in owners.items()}

    @staticmethod
    def _constrained(partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription],
                     owners: Mapping[TopicPartition, str]) -> dict[str, list[TopicPartition]]:
        """Every member subscribes to the same topics (Java's ``constrainedAssign``)."""
        order = _member_order(subscriptions)
        out: dict[str, list[TopicPartition]] = {m: [] for m in order}
        if not order:
            return out
        topics = sorted(subscriptions[order[0]].topics)
        all_parts = [TopicPartition(t, p) for t in topics for p in range(partitions_per_topic.get(t, 0))]
        total, members = len(all_parts), len(order)
        min_quota, extra = divmod(total, members)
        max_quota = min_quota + (1 if extra else 0)
        with_max = 0            # members at max_quota so far (at most ``extra``)
        owned_by: dict[str, list[TopicPartition]] = defaultdict(list)
        for tp in all_parts:
            m = owners.get(tp)
            if m is not None:
                owned_by[m].append(tp)
        assigned: set[TopicPartition] = set()
        # Members that owned the most keep first, so the members allowed max_quota are them.
        for m in sorted(order, key=lambda m: -len(owned_by[m])):
            keep = owned_by[m]
            quota = min_quota
            if len(keep) > min_quota and with_max < extra:
                quota = max_quota
                with_max += 1
            out[m] = keep[:quota]
            assigned.update(out[m])
        free = [tp for tp in all_parts if tp not in assigned]
        # Fill members below min_quota, then let members reach max_quota while allowed.
        for m in order:
            while len(out[m]) < min_quota and free:
                out[m].append(free.pop(0))
        for m in order:
            if not free:
                break
            if len(out[m]) == min_quota and with_max < extra:
                out[m].append(free.pop(0))
                with_max += 1
        if free:   # cannot happen with the quotas above; never lose a partition silently
            raise KctlError(f"cooperative-sticky left {len(free)} partition(s) unassigned")
        return out

    @staticmethod
    def _general(partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription],
                 owners: Mapping[TopicPartition, str]) -> dict[str, list[TopicPartition]]:
        order = _member_order(subscriptions)
        out: dict[str, list[TopicPartition]] = {m: [] for m in order}
        parts = [TopicPartition(t, p) for t in sorted(partitions_per_topic)
                 for p in range(partitions_per_topic[t])]
        eligible = {tp: [m for m in order if tp.topic in subscriptions[m].topics] for tp in parts}
        # Most constrained partitions first, so they get their few members before others fill up.
        for tp in sorted(parts, key=lambda tp: (len(eligible[tp]), tp)):
            members = eligible[tp]
            if not members:
                continue
            least = min(len(out[m]) for m in members)
            owner = owners.get(tp)
            if owner in members and len(out[owner]) <= least:
                out[owner].append(tp)
                continue
            best = min(members, key=lambda m: (len(out[m]), order.index(m)))
            out[best].append(tp)
        return out


_ASSIGNORS = {a.name: a for a in (RangeAssignor(), RoundRobinAssignor(), CooperativeStickyAssignor())}


def assignor_for(name: str) -> Assignor:
    try:
        return _ASSIGNORS[name]
    except KeyError:
        raise KctlError(f"no assignor named {name!r} (kctl has {', '.join(_ASSIGNORS)})") from None
