"""Fault decisions without I/O: plan validation, body rewriters, seeded determinism."""

import random
import uuid

import pytest

from kctl.errors import ConfigError
from kctl.inspect.faults import (
    ErrorBudget, ErrorRewrite, FaultInjector, FaultPlan, LossLedger, empty_produce_response,
    encode_request_frame, inject_throttle, offset_count, rewrite_partition_errors,
    rewrite_response_frame, segments,
)
from kctl.protocol import messages, requests
from kctl.protocol.error_codes import ERRORS_BY_NAME
from kctl.protocol.records import Compression, Record, build_batch, build_message_set, decode_batches

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
NLOF = ERRORS_BY_NAME["NOT_LEADER_OR_FOLLOWER"].code


def _produce_response(partitions=3, throttle=0):
    cls = messages.message_class("ProduceResponse")
    return cls(throttle_time_ms=throttle, responses=[cls.TopicProduceResponse(
        name="t", partition_responses=[
            cls.PartitionProduceResponse(index=i, error_code=0, base_offset=100 + i,
                                         log_append_time_ms=-1, log_start_offset=0)
            for i in range(partitions)])])


def _fetch_response(partitions=2):
    cls = messages.message_class("FetchResponse")
    return cls(throttle_time_ms=0, responses=[cls.FetchableTopicResponse(
        topic="t", partitions=[cls.PartitionData(partition_index=i, high_watermark=5, records=b"")
                               for i in range(partitions)])])


# -- the plan -------------------------------------------------------------------------------------

def test_default_plan_does_nothing():
    inj = FaultInjector(FaultPlan())
    assert not FaultPlan().active
    body = _produce_response()
    d = inj.on_response(PRODUCE, 100, body)
    assert (d.frame, d.delay_ns, d.drop_at, d.segment_bytes, d.swallow) == (None, 0, None, 0, False)
    assert body == _produce_response()


@pytest.mark.parametrize("kwargs, match", [
    ({"delay_ms": -1}, "negative"),
    ({"delay_ms": (5, 1)}, "lo <= hi"),
    ({"throttle_ms": -5}, "negative"),
    ({"drop_rate": 1.5}, "outside 0..1"),
    ({"tiny_segments": -1}, "negative"),
    ({"lose_rate": -0.1}, "outside 0..1"),
    ({"lose_limit": -1}, "negative"),
    ({"delay_apis": ("Produse",)}, "unknown Kafka API 'Produse'"),
])
def test_bad_plans_are_config_errors(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        FaultPlan(**kwargs)


def test_error_rewrite_parsing_and_validation():
    e = ErrorRewrite.parse("not_leader_or_follower:0.01")
    assert (e.error, e.rate, e.code, e.apis) == ("NOT_LEADER_OR_FOLLOWER", 0.01, NLOF, ("Produce",))
    assert ErrorRewrite.parse("REQUEST_TIMED_OUT").rate == 1.0
    with pytest.raises(ConfigError, match="unknown Kafka error name"):
        ErrorRewrite.parse("NOT_A_THING:0.5")
    with pytest.raises(ConfigError, match="NAME\\[@API,...\\]\\[:RATE\\]"):
        ErrorRewrite.parse("NOT_LEADER_OR_FOLLOWER:lots")
    with pytest.raises(ConfigError, match="outside 0..1"):
        ErrorRewrite("NOT_LEADER_OR_FOLLOWER", 2.0)
    with pytest.raises(ConfigError, match="supports Produce, Fetch, ListOffsets, FindCoordinator.*not Metadata"):
        ErrorRewrite("NOT_LEADER_OR_FOLLOWER", apis=("Metadata",))


def test_lose_parsing():
    assert FaultPlan.parse_lose("0.01") == (0.01, None)
    assert FaultPlan.parse_lose("1:3") == (1.0, 3)
    with pytest.raises(ConfigError, match="--lose-records"):
        FaultPlan.parse_lose("often")


def test_delay_parsing():
    assert FaultPlan.parse_delay("50") == 50
    assert FaultPlan.parse_delay("10-100") == (10, 100)
    with pytest.raises(ConfigError, match="--delay-ms"):
        FaultPlan.parse_delay("soon")


# -- body rewriters -------------------------------------------------------------------------------

def test_inject_throttle_keeps_the_larger_value():
    body = _produce_response(throttle=20)
    assert not inject_throttle(body, 10) and body.throttle_time_ms == 20
    assert inject_throttle(body, 250) and body.throttle_time_ms == 250


def test_produce_partition_errors_rewritten():
    body = _produce_response()
    assert rewrite_partition_errors(body, PRODUCE, NLOF, 1.0, random.Random(0)) == 3
    for p in body.responses[0].partition_responses:
        assert (p.error_code, p.base_offset) == (NLOF, -1)


def test_fetch_partition_errors_rewritten():
    body = _fetch_response()
    assert rewrite_partition_errors(body, FETCH, NLOF, 1.0, random.Random(0)) == 2
    for p in body.responses[0].partitions:
        assert (p.error_code, p.high_watermark, p.records) == (NLOF, -1, None)


@pytest.mark.parametrize("version", [0, 1, 4, 7])
def test_list_offsets_partition_errors_rewritten(version):
    # the end offsets a --verify run or a consumer's final lag asks for: an answer as a
    # broker gives it for a failed partition (no offset), re-encoded at the version asked
    cls = messages.message_class("ListOffsetsResponse")

    def answered(i):        # v0 names offsets in a list; v1+ one offset; v4+ the leader epoch
        fields = {"old_style_offsets": [500 + i]} if version == 0 else {"offset": 500 + i}
        return cls.ListOffsetsPartitionResponse(partition_index=i, error_code=0, **fields,
                                                **({"leader_epoch": 3} if version >= 4 else {}))
    body = cls(throttle_time_ms=0, topics=[cls.ListOffsetsTopicResponse(name="t", partitions=[
        answered(i) for i in range(2)])])
    frame = messages.encode_response(LIST_OFFSETS, version, 9, body)
    out = rewrite_response_frame(frame, LIST_OFFSETS, version, error_code=NLOF)
    got = messages.decode_response(out, LIST_OFFSETS, version).body
    for p in got.topics[0].partitions:
        assert p.error_code == NLOF and requests.listed_offset(p) == -1


def test_rate_applies_per_partition():
    body = _produce_response(partitions=1000)
    n = rewrite_partition_errors(body, PRODUCE, NLOF, 0.1, random.Random(7))
    assert 60 < n < 140


@pytest.mark.parametrize("version", [3, 7, 9, 11])
def test_frame_rewrite_reencodes_at_the_same_version(version):
    frame = messages.encode_response(PRODUCE, version, 42, _produce_response())
    out = rewrite_response_frame(frame, PRODUCE, version, throttle_ms=300, error_code=NLOF)
    resp = messages.decode_response(out, PRODUCE, version)
    assert resp.header.correlation_id == 42
    assert resp.body.throttle_time_ms == 300
    assert {p.error_code for p in resp.body.responses[0].partition_responses} == {NLOF}
    assert rewrite_response_frame(frame, PRODUCE, version) is frame   # nothing to do


# -- the injector ---------------------------------------------------------------------------------

def _decisions(plan, n=200, stream=0, api_key=PRODUCE):
    inj = FaultInjector(plan, stream)
    out = []
    for _ in range(n):
        body = _produce_response()
        d = inj.on_response(api_key, 1000, body)
        out.append((d.delay_ns, d.drop_at, d.errors_injected,
                    tuple(p.error_code for p in body.responses[0].partition_responses)))
    return out


def test_same_seed_same_choices_and_streams_differ():
    plan = FaultPlan(delay_ms=(1, 50), drop_rate=0.2, error=ErrorRewrite("NOT_LEADER_OR_FOLLOWER", 0.3),
                     seed=1234)
    assert _decisions(plan) == _decisions(plan)
    assert _decisions(plan, stream=1) != _decisions(plan, stream=0)
    assert _decisions(plan) != _decisions(FaultPlan(**{**_fields(plan), "seed": 99}))


def _fields(plan):
    return {f: getattr(plan, f) for f in plan.__dataclass_fields__}


def test_delay_fixed_and_range():
    assert {d[0] for d in _decisions(FaultPlan(delay_ms=25, seed=1), n=20)} == {25_000_000}
    delays = [d[0] for d in _decisions(FaultPlan(delay_ms=(10, 100), seed=1))]
    assert all(10_000_000 <= d <= 100_000_000 for d in delays)
    assert len(set(delays)) > 100


def test_delay_scoped_to_apis():
    plan = FaultPlan(delay_ms=30, delay_apis=("Produce",), seed=1)
    assert FaultInjector(plan).on_response(METADATA, 100, None).delay_ns == 0
    assert FaultInjector(plan).on_response(PRODUCE, 100, None).delay_ns == 30_000_000


def test_drop_cuts_strictly_inside_the_frame():
    drops = [d[1] for d in _decisions(FaultPlan(drop_rate=1.0, seed=5), n=300)]
    assert all(1 <= d < 1000 for d in drops)
    rate = sum(d[1] is not None for d in _decisions(FaultPlan(drop_rate=0.25, seed=5), n=2000)) / 2000
    assert 0.2 < rate < 0.3


def test_blackhole_swallows_everything():
    inj = FaultInjector(FaultPlan(blackhole=True, throttle_ms=5))
    assert all(inj.on_response(k, 10, None).swallow for k in (PRODUCE, FETCH, METADATA, 18))


def test_throttle_only_for_its_apis():
    inj = FaultInjector(FaultPlan(throttle_ms=100))
    assert inj.needs_body(PRODUCE) and inj.needs_body(FETCH) and not inj.needs_body(METADATA)
    body = _produce_response()
    assert inj.on_response(PRODUCE, 10, body).throttle_ms == 100 and body.throttle_time_ms == 100


def test_error_limit_counts_responses_across_streams():
    plan = FaultPlan(error=ErrorRewrite("NOT_LEADER_OR_FOLLOWER", 1.0, limit=3))
    budget = ErrorBudget(3)
    a, b = FaultInjector(plan, 0, budget=budget), FaultInjector(plan, 1, budget=budget)
    hits = [inj.on_response(PRODUCE, 10, _produce_response(partitions=1)).errors_injected
            for inj in (a, b, a, b, a, b)]
    assert hits == [1, 1, 1, 0, 0, 0]


def test_tiny_segments():
    assert FaultInjector(FaultPlan(tiny_segments=7)).on_response(METADATA, 10, None).segment_bytes == 7
    data = bytes(range(50))
    assert segments(data, 0) == [data]
    parts = segments(data, 7)
    assert b"".join(parts) == data and max(map(len, parts)) == 7 and len(parts) == 8


# -- lost records ---------------------------------------------------------------------------------

TOPIC_ID = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")


def _batch(partition, n, first=0):
    return build_batch([Record(i, 1_700_000_000_000 + i, None, f"p{partition}-{first + i}".encode())
                        for i in range(n)])


def _produce_request(version, parts, acks=1):
    """A Produce request frame with one topic and ``parts`` {partition: records}."""
    cls = messages.request_class(PRODUCE)
    topic = cls.TopicProduceData(partition_data=[cls.PartitionProduceData(index=i, records=r)
                                                 for i, r in parts.items()])
    if version >= 13:
        topic.topic_id = TOPIC_ID
    else:
        topic.name = "t"
    body = cls(acks=acks, timeout_ms=1000, topic_data=[topic])
    return messages.encode_request(PRODUCE, version, 7, "kctl-test", body)


def _broker_answer(version, request_body, base_offsets):
    """What a broker answers to ``request_body``: each partition written at ``base_offsets[p]``."""
    cls = messages.response_class(PRODUCE)
    responses = []
    for t in request_body.topic_data:
        responses.append(cls.TopicProduceResponse(name=t.name, topic_id=t.topic_id, partition_responses=[
            cls.PartitionProduceResponse(index=p.index, error_code=0, base_offset=base_offsets[p.index],
                                         log_append_time_ms=-1, log_start_offset=3)
            for p in t.partition_data]))
    return cls(throttle_time_ms=0, responses=responses)


def _partitions(body):
    return {p.index: p for t in body.topic_data for p in t.partition_data}


def _entries(body):
    return {p.index: p for t in body.responses for p in t.partition_responses}


def _round_trip(inj, version, parts, base_offsets, corr):
    """One request through ``on_request`` (forwarded as re-encoded) and its broker answer
    through ``on_response``; returns (decision, forwarded request or None, client's response)."""
    req = messages.decode_request(_produce_request(version, parts))
    decision = inj.on_request(PRODUCE, req.body)
    forwarded = None
    if decision.forward:
        forwarded = messages.decode_request(encode_request_frame(req))
        answer = _broker_answer(version, forwarded.body, base_offsets)
        frame = messages.encode_response(PRODUCE, version, corr, answer)
    else:
        frame = empty_produce_response(version, corr)
    resp = messages.decode_response(frame, PRODUCE, version)
    d = inj.on_response(PRODUCE, 4 + len(frame), resp.body, decision)
    if d.forged or d.errors_injected:
        frame = messages.encode_response(PRODUCE, version, resp.header.correlation_id, resp.body)
    return decision, forwarded, messages.decode_response(frame, PRODUCE, version)


@pytest.mark.parametrize("version", [3, 7, 9, 12, 13])
def test_lost_batch_leaves_the_request_and_is_acked_anyway(version):
    inj = FaultInjector(FaultPlan(lose_rate=1.0, lose_limit=1, seed=4))
    # First: both partitions are new to the proxy, so nothing may be lost; the broker's
    # answer teaches it the next offsets (p0: 10 + 4, p1: 20 + 2).
    first, fwd, resp = _round_trip(inj, version, {0: _batch(0, 4), 1: _batch(1, 2)}, {0: 10, 1: 20}, 1)
    assert first.lost is None and first.offset_counts == {("t" if version < 13 else TOPIC_ID, 0): 4,
                                                          ("t" if version < 13 else TOPIC_ID, 1): 2}
    assert set(_partitions(fwd.body)) == {0, 1}
    # Second: one of the two batches is lost.
    parts = {0: _batch(0, 3, 4), 1: _batch(1, 5, 2)}
    decision, fwd, resp = _round_trip(inj, version, parts, {0: 14, 1: 22}, 2)
    lost = decision.lost
    assert lost is not None and decision.forward
    kept = 1 - lost.partition
    assert lost.records == parts[lost.partition] and lost.offset_count == (3, 5)[lost.partition]
    assert (lost.name, lost.topic_id) == (("t", uuid.UUID(int=0)) if version < 13 else ("", TOPIC_ID))
    # The broker got the other partition only, byte for byte.
    assert fwd.header.request_api_version == version and fwd.header.client_id == "kctl-test"
    assert set(_partitions(fwd.body)) == {kept}
    assert _partitions(fwd.body)[kept].records == parts[kept]
    # The client hears of both, the lost one at the offset the broker would have given it.
    entries = _entries(resp.body)
    assert resp.header.correlation_id == 2 and set(entries) == {0, 1}
    forged = entries[lost.partition]
    assert forged.error_code == 0 and forged.base_offset == (14, 22)[lost.partition]
    if version >= 2:
        assert forged.log_append_time_ms == -1
    if version >= 5:
        assert forged.log_start_offset == 3
    assert entries[kept].base_offset == (14, 22)[kept]
    t = resp.body.responses[0]
    assert len(resp.body.responses) == 1 and (t.name if version < 13 else t.topic_id) == (
        "t" if version < 13 else TOPIC_ID)
    # The limit is spent: the next request goes through whole.
    third, fwd, _ = _round_trip(inj, version, parts, {0: 17, 1: 27}, 3)
    assert third.lost is None and set(_partitions(fwd.body)) == {0, 1}


@pytest.mark.parametrize("version", [3, 9, 13])
def test_rejected_batch_is_not_forwarded_and_is_answered_with_its_error(version):
    """``lose_error``: the batch is taken out as a lost one, but the client hears the error
    (base_offset -1, the log start offset last seen) instead of a forged success."""
    inj = FaultInjector(FaultPlan(lose_rate=1.0, lose_limit=1, lose_error="OUT_OF_ORDER_SEQUENCE_NUMBER",
                                  seed=4))
    _round_trip(inj, version, {0: _batch(0, 4), 1: _batch(1, 2)}, {0: 10, 1: 20}, 1)
    parts = {0: _batch(0, 3, 4), 1: _batch(1, 5, 2)}
    decision, fwd, resp = _round_trip(inj, version, parts, {0: 14, 1: 22}, 2)
    lost = decision.lost
    assert lost is not None and lost.error_code == 45
    kept = 1 - lost.partition
    assert set(_partitions(fwd.body)) == {kept}
    entries = _entries(resp.body)
    rejected = entries[lost.partition]
    assert rejected.error_code == 45 and rejected.base_offset == -1
    if version >= 5:
        assert rejected.log_start_offset == 3
    assert entries[kept].error_code == 0 and entries[kept].base_offset == (14, 22)[kept]


@pytest.mark.parametrize("version", [3, 9, 12, 13])
def test_a_request_holding_only_the_lost_batch_is_answered_by_the_proxy(version):
    inj = FaultInjector(FaultPlan(lose_rate=1.0, seed=1))
    _round_trip(inj, version, {2: _batch(2, 1)}, {2: 0}, 1)         # p2 next offset: 1
    decision, fwd, resp = _round_trip(inj, version, {2: _batch(2, 6)}, {}, 9)
    assert decision.lost is not None and not decision.forward and fwd is None
    assert resp.header.correlation_id == 9
    if version >= 1:
        assert resp.body.throttle_time_ms == 0
    (entry,) = _entries(resp.body).values()
    assert (entry.index, entry.error_code, entry.base_offset) == (2, 0, 1)
    # A second loss on the partition comes after the first: offsets keep rising.
    _, _, resp = _round_trip(inj, version, {2: _batch(2, 2)}, {}, 10)
    assert _entries(resp.body)[2].base_offset == 7


def test_only_partitions_with_a_known_next_offset_lose_batches():
    inj = FaultInjector(FaultPlan(lose_rate=1.0, seed=1))
    for corr in range(3):   # partition 5 never acknowledged through the proxy: never lost
        req = messages.decode_request(_produce_request(9, {5: _batch(5, 1)}))
        assert inj.on_request(PRODUCE, req.body).lost is None


def test_lost_choices_are_seeded_and_the_limit_spans_streams():
    def choices(seed, stream=0, n=60):
        plan = FaultPlan(lose_rate=0.5, seed=seed)
        ledger = LossLedger.for_plan(plan)
        for p in range(4):
            ledger.on_acked("t", p, 0, 1, 0)
        inj = FaultInjector(plan, stream, ledger=ledger)
        out = []
        for _ in range(n):
            req = messages.decode_request(_produce_request(9, {p: _batch(p, 1) for p in range(4)}))
            d = inj.on_request(PRODUCE, req.body)
            out.append(d.lost.partition if d.lost else None)
        return out
    a = choices(1)
    assert a == choices(1) and a != choices(2) and a != choices(1, stream=1)
    assert 15 < sum(x is not None for x in a) < 45 and {x for x in a if x is not None} == {0, 1, 2, 3}

    plan = FaultPlan(lose_rate=1.0, lose_limit=2, seed=1)
    ledger = LossLedger.for_plan(plan)
    ledger.on_acked("t", 0, 0, 1, 0)
    x, y = FaultInjector(plan, 0, ledger=ledger), FaultInjector(plan, 1, ledger=ledger)
    lost = [inj.on_request(PRODUCE, messages.decode_request(_produce_request(9, {0: _batch(0, 1)})).body).lost
            is not None for inj in (x, y, x, y)]
    assert lost == [True, True, False, False]


def test_lost_entry_is_forged_even_after_the_plan_changed():
    plan = FaultPlan(lose_rate=1.0, seed=1)
    ledger = LossLedger.for_plan(plan)
    ledger.on_acked("t", 0, 40, 2, 0)
    req = messages.decode_request(_produce_request(9, {0: _batch(0, 1), 1: _batch(1, 1)}))
    decision = FaultInjector(plan, ledger=ledger).on_request(PRODUCE, req.body)
    assert decision.lost.partition == 0
    body = _broker_answer(9, req.body, {1: 7})
    d = FaultInjector(FaultPlan(), ledger=ledger).on_response(PRODUCE, 100, body, decision)
    assert d.forged == 1 and _entries(body)[0].base_offset == 42


def test_the_forged_entry_escapes_error_rewriting():
    plan = FaultPlan(lose_rate=1.0, error=ErrorRewrite("NOT_LEADER_OR_FOLLOWER"), seed=1)
    inj = FaultInjector(plan)
    inj.ledger.on_acked("t", 0, 0, 1, 0)
    req = messages.decode_request(_produce_request(9, {0: _batch(0, 1), 1: _batch(1, 1)}))
    decision = inj.on_request(PRODUCE, req.body)
    body = _broker_answer(9, req.body, {1: 7})
    d = inj.on_response(PRODUCE, 100, body, decision)
    assert (d.forged, d.errors_injected) == (1, 1)
    assert _entries(body)[0].error_code == 0 and _entries(body)[1].error_code == NLOF


def test_offset_count():
    recs = [Record(i, 1_000 + i, None, b"v") for i in range(5)]
    assert offset_count(None) == offset_count(b"") == 0
    assert offset_count(_batch(0, 5)) == 5
    assert offset_count(_batch(0, 5) + _batch(0, 2)) == 7
    assert offset_count(build_batch(recs, compression=Compression.GZIP)) == 5
    for magic in (0, 1):
        for codec in (Compression.NONE, Compression.GZIP):
            blob = build_message_set(recs, magic=magic, compression=codec)
            assert offset_count(blob) == len(list(decode_batches(blob).records)) == 5


def test_lost_records_in_legacy_produce_v2():
    inj = FaultInjector(FaultPlan(lose_rate=1.0, seed=1))
    recs = [Record(i, 1_000 + i, None, b"v") for i in range(3)]
    blob = build_message_set(recs, magic=1)
    _round_trip(inj, 2, {0: blob}, {0: 100}, 1)
    decision, fwd, resp = _round_trip(inj, 2, {0: blob, 1: blob}, {1: 0}, 2)
    assert decision.lost.partition == 0 and decision.lost.offset_count == 3
    assert _entries(resp.body)[0].base_offset == 103
