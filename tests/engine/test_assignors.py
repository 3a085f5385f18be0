"""The assignors, with the expectations of Java's RangeAssignorTest, RoundRobinAssignorTest
and CooperativeStickyAssignorTest (balance, stickiness, the cooperative rule), and the
consumer protocol's embedded messages round-tripped."""

import random

import pytest

from kctl.engine.assignors import (
    Assignment, CooperativeStickyAssignor, RangeAssignor, RoundRobinAssignor, Subscription, decode_assignment,
    decode_subscription, encode_assignment, encode_subscription)
from kctl.engine.batch import TopicPartition as TP


def subs(**members):
    return {m: Subscription(tuple(t)) for m, t in members.items()}


def names(result):
    return {m: [f"{tp.topic}-{tp.partition}" for tp in parts] for m, parts in result.items()}


class TestRangeAssignor:
    def test_one_consumer_no_topic(self):
        assert RangeAssignor().assign({}, subs(c1=[])) == {"c1": []}

    def test_one_consumer_one_topic(self):
        assert names(RangeAssignor().assign({"t1": 3}, subs(c1=["t1"]))) == {"c1": ["t1-0", "t1-1", "t1-2"]}

    def test_only_assigns_partitions_from_subscribed_topics(self):
        assert names(RangeAssignor().assign({"t1": 3, "other": 3}, subs(c1=["t1"]))) == {
            "c1": ["t1-0", "t1-1", "t1-2"]}

    def test_two_consumers_one_topic_one_partition(self):
        assert names(RangeAssignor().assign({"t1": 1}, subs(c1=["t1"], c2=["t1"]))) == {"c1": ["t1-0"], "c2": []}

    def test_multiple_consumers_mixed_topics(self):
        r = RangeAssignor().assign({"t1": 3, "t2": 2}, subs(c1=["t1"], c2=["t1", "t2"], c3=["t1"]))
        assert names(r) == {"c1": ["t1-0"], "c2": ["t1-1", "t2-0", "t2-1"], "c3": ["t1-2"]}

    def test_two_consumers_two_topics_six_partitions(self):
        r = RangeAssignor().assign({"t1": 3, "t2": 3}, subs(c1=["t1", "t2"], c2=["t1", "t2"]))
        assert names(r) == {"c1": ["t1-0", "t1-1", "t2-0", "t2-1"], "c2": ["t1-2", "t2-2"]}

    def test_static_members_order_by_instance_id(self):
        s = {"b": Subscription(("t",), group_instance_id="i1"), "a": Subscription(("t",), group_instance_id="i2")}
        assert names(RangeAssignor().assign({"t": 2}, s)) == {"b": ["t-0"], "a": ["t-1"]}


class TestRoundRobinAssignor:
    def test_two_consumers_two_topics_six_partitions(self):
        r = RoundRobinAssignor().assign({"t1": 3, "t2": 3}, subs(c1=["t1", "t2"], c2=["t1", "t2"]))
        assert names(r) == {"c1": ["t1-0", "t1-2", "t2-1"], "c2": ["t1-1", "t2-0", "t2-2"]}

    def test_multiple_consumers_mixed_topics(self):
        r = RoundRobinAssignor().assign({"t1": 3, "t2": 2}, subs(c1=["t1"], c2=["t1", "t2"], c3=["t1"]))
        assert names(r) == {"c1": ["t1-0"], "c2": ["t1-1", "t2-0", "t2-1"], "c3": ["t1-2"]}


def run_rounds(counts, members, owned, generation):
    """One cooperative rebalance and its follow-up: (first round, final assignment)."""
    a = CooperativeStickyAssignor()
    s = {m: Subscription(tuple(members[m]), tuple(owned.get(m, ())), generation) for m in members}
    first = a.assign(counts, s)
    s2 = {m: Subscription(tuple(members[m]), tuple(first[m]), generation + 1) for m in members}
    return first, a.assign(counts, s2)


def check_valid(result, counts, members):
    seen = [tp for parts in result.values() for tp in parts]
    assert len(seen) == len(set(seen)), "a partition assigned twice"
    for m, parts in result.items():
        assert all(tp.topic in members[m] for tp in parts)


class TestCooperativeStickyAssignor:
    def test_one_consumer_gets_everything(self):
        r = CooperativeStickyAssignor().assign({"t": 3}, subs(c1=["t"]))
        assert names(r) == {"c1": ["t-0", "t-1", "t-2"]}

    def test_new_member_waits_for_revocation_then_gets_its_share(self):
        counts = {"t": 6}
        members = {"c1": ["t"], "c2": ["t"]}
        first, final = run_rounds(counts, members, {"c1": [TP("t", p) for p in range(6)]}, 1)
        # Round one: c1 keeps three, the three that move are withheld from c2 (cooperative).
        assert len(first["c1"]) == 3 and first["c2"] == []
        assert set(first["c1"]) <= {TP("t", p) for p in range(6)}
        assert sorted(len(p) for p in final.values()) == [3, 3]
        assert set(final["c1"]) == set(first["c1"])          # sticky
        check_valid(final, counts, members)

    def test_balanced_and_sticky_when_a_member_leaves(self):
        counts = {"t1": 5, "t2": 4}
        members = {"a": ["t1", "t2"], "b": ["t1", "t2"], "c": ["t1", "t2"]}
        r = CooperativeStickyAssignor().assign(counts, {m: Subscription(tuple(t)) for m, t in members.items()})
        del members["c"]
        a = CooperativeStickyAssignor()
        after = a.assign(counts, {m: Subscription(tuple(members[m]), tuple(r[m]), 1) for m in members})
        assert sorted(len(p) for p in after.values()) == [4, 5]
        for m in members:
            assert set(r[m]) <= set(after[m])                 # nobody lost what they had
        check_valid(after, counts, members)

    def test_newer_generation_wins_a_double_claim(self):
        counts = {"t": 2}
        s = {"a": Subscription(("t",), (TP("t", 0),), 5), "b": Subscription(("t",), (TP("t", 0),), 4)}
        r = CooperativeStickyAssignor().assign(counts, s)
        assert TP("t", 0) in r["a"] and TP("t", 0) not in r["b"]

    def test_random_subscriptions_stay_valid_and_balanced(self):
        rnd = random.Random(7)
        a = CooperativeStickyAssignor()
        for _ in range(50):
            counts = {f"t{i}": rnd.randint(1, 8) for i in range(3)}
            same = rnd.random() < 0.5
            members = {f"m{i}": (sorted(counts) if same else rnd.sample(sorted(counts), rnd.randint(1, 3)))
                       for i in range(rnd.randint(1, 5))}
            r = a.assign(counts, {m: Subscription(tuple(t)) for m, t in members.items()})
            check_valid(r, counts, members)
            if same:
                sizes = [len(p) for p in r.values()]
                assert max(sizes) - min(sizes) <= 1
                assert sum(sizes) == sum(counts.values())


def test_subscription_round_trip_and_newer_versions():
    s = Subscription(("a", "b"), (TP("a", 0), TP("b", 3)), 7, "rack-1", b"ud")
    assert decode_subscription(encode_subscription(s)) == s
    for v in (0, 1, 2):
        got = decode_subscription(encode_subscription(s, v))
        assert got.topics == ("a", "b")
    # A newer version (more trailing fields) reads as the newest kctl knows.
    newer = (9).to_bytes(2, "big") + encode_subscription(s)[2:] + b"\x00\x00\x00\x00"
    assert decode_subscription(newer).topics == ("a", "b")


def test_assignment_round_trip_and_empty():
    a = Assignment((TP("a", 1), TP("a", 0)), None)
    assert set(decode_assignment(encode_assignment(a)).partitions) == set(a.partitions)
    assert decode_assignment(b"").partitions == ()


def test_truncated_subscription_is_a_decode_error():
    from kctl.errors import DecodeError
    with pytest.raises(DecodeError):
        decode_subscription(encode_subscription(Subscription(("a",)))[:5])
