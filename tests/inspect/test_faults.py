"""Fault decisions without I/O: plan validation, body rewriters, seeded determinism."""

import random

import pytest

from kctl.errors import ConfigError
from kctl.inspect.faults import (
    ErrorBudget, ErrorRewrite, FaultInjector, FaultPlan, inject_throttle, rewrite_partition_errors,
    rewrite_response_frame, segments,
)
from kctl.protocol import messages
from kctl.protocol.error_codes import ERRORS_BY_NAME

PRODUCE, FETCH, METADATA = 0, 1, 3
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
    with pytest.raises(ConfigError, match="NAME\\[:RATE\\]"):
        ErrorRewrite.parse("NOT_LEADER_OR_FOLLOWER:lots")
    with pytest.raises(ConfigError, match="outside 0..1"):
        ErrorRewrite("NOT_LEADER_OR_FOLLOWER", 2.0)
    with pytest.raises(ConfigError, match="Produce and Fetch"):
        ErrorRewrite("NOT_LEADER_OR_FOLLOWER", apis=("Metadata",))


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
