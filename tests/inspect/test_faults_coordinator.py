"""--inject-error on the transaction coordinator's answers (FindCoordinator,
InitProducerId, AddPartitionsToTxn, EndTxn): each response at the rate, every error
code it carries, re-encoded at its version with everything else (tagged fields too)
as the broker sent it."""

from __future__ import annotations

import copy
import random

import pytest

from kctl.errors import ConfigError
from kctl.inspect.faults import (
    ADD_PARTITIONS_TO_TXN, END_TXN, FIND_COORDINATOR, INIT_PRODUCER_ID, PRODUCE, ErrorRewrite,
    FaultInjector, FaultPlan, rewrite_coordinator_errors, rewrite_response_frame,
)
from kctl.protocol import messages, schema
from kctl.protocol.error_codes import ERRORS_BY_NAME

CLIP = ERRORS_BY_NAME["COORDINATOR_LOAD_IN_PROGRESS"].code
TAGS = {99: b"kept"}


def _flexible(api_key: int, version: int) -> bool:
    return version >= schema.API_BY_KEY[api_key].flexible_min_version


def _tags(api_key: int, version: int) -> dict[int, bytes]:
    return dict(TAGS) if _flexible(api_key, version) else {}


def _find_coordinator(version: int):
    cls = messages.response_class(FIND_COORDINATOR)
    tags = _tags(FIND_COORDINATOR, version)
    if version >= 4:
        coords = [cls.Coordinator(key=k, node_id=1, host="127.0.0.1", port=9092, error_code=0,
                                  error_message=None, unknown_tagged_fields=dict(tags))
                  for k in ("txn-a", "txn-b")]
        return cls(throttle_time_ms=7, coordinators=coords, unknown_tagged_fields=tags)
    return cls(throttle_time_ms=7, error_code=0, error_message=None, node_id=1, host="127.0.0.1",
               port=9092, unknown_tagged_fields=tags)


def _init_producer_id(version: int):
    cls = messages.response_class(INIT_PRODUCER_ID)
    return cls(throttle_time_ms=3, error_code=0, producer_id=4242, producer_epoch=5,
               unknown_tagged_fields=_tags(INIT_PRODUCER_ID, version))


def _end_txn(version: int):
    cls = messages.response_class(END_TXN)
    return cls(throttle_time_ms=3, error_code=0, producer_id=4242, producer_epoch=6,
               unknown_tagged_fields=_tags(END_TXN, version))


def _add_partitions(version: int):
    cls = messages.response_class(ADD_PARTITIONS_TO_TXN)
    tags = _tags(ADD_PARTITIONS_TO_TXN, version)

    def topics():
        return [cls.AddPartitionsToTxnTopicResult(
                    name=name, unknown_tagged_fields=dict(tags),
                    results_by_partition=[cls.AddPartitionsToTxnPartitionResult(
                        partition_index=i, partition_error_code=0, unknown_tagged_fields=dict(tags))
                        for i in range(n)])
                for name, n in (("orders", 3), ("audit", 1))]
    if version >= 4:
        return cls(throttle_time_ms=1, error_code=0, unknown_tagged_fields=tags,
                   results_by_transaction=[cls.AddPartitionsToTxnResult(
                       transactional_id=t, topic_results=topics(), unknown_tagged_fields=dict(tags))
                       for t in ("txn-a", "txn-b")])
    return cls(throttle_time_ms=1, results_by_topic_v3_and_below=topics(), unknown_tagged_fields=tags)


def _expect_find_coordinator(body, version):
    for c in (body.coordinators if version >= 4 else [body]):
        c.error_code, c.error_message, c.node_id, c.host, c.port = CLIP, None, -1, "", -1
    return 2 if version >= 4 else 1


def _expect_producer(body, version):
    body.error_code = CLIP
    body.producer_id, body.producer_epoch = -1, -1
    return 1


def _expect_add_partitions(body, version):
    topics = list(body.results_by_topic_v3_and_below)
    for txn in body.results_by_transaction:
        topics.extend(txn.topic_results)
    for t in topics:
        for p in t.results_by_partition:
            p.partition_error_code = CLIP
    n = sum(len(t.results_by_partition) for t in topics)
    if version >= 4:
        body.error_code = CLIP
        n += 1
    return n


CASES = [(FIND_COORDINATOR, v, _find_coordinator, _expect_find_coordinator) for v in range(7)]
CASES += [(INIT_PRODUCER_ID, v, _init_producer_id, _expect_producer) for v in range(7)]
CASES += [(END_TXN, v, _end_txn, _expect_producer) for v in range(6)]
CASES += [(ADD_PARTITIONS_TO_TXN, v, _add_partitions, _expect_add_partitions) for v in range(6)]


@pytest.mark.parametrize("api_key,version,build,expect", CASES,
                         ids=[f"{schema.API_BY_KEY[c[0]].name}-v{c[1]}" for c in CASES])
def test_frame_rewrite_sets_the_errors_and_keeps_the_rest(api_key, version, build, expect):
    frame = messages.encode_response(api_key, version, 77, build(version))
    before = messages.decode_response(frame, api_key, version)
    out = rewrite_response_frame(frame, api_key, version, error_code=CLIP, rng=random.Random(1))
    after = messages.decode_response(out, api_key, version)
    assert after.header.correlation_id == 77
    wanted = copy.deepcopy(before.body)
    expect(wanted, version)
    # Fields a version does not carry are not on the wire: compare what it encodes.
    assert messages.encode(after.body, version) == messages.encode(wanted, version)
    assert after.body.throttle_time_ms == before.body.throttle_time_ms
    if _flexible(api_key, version):
        assert after.body.unknown_tagged_fields == TAGS
    assert CLIP in _codes(after.body)


def _codes(body) -> set[int]:
    found, stack = set(), [body]
    while stack:
        m = stack.pop()
        for f in m._fields:
            v = getattr(m, f)
            if f in ("error_code", "partition_error_code"):
                found.add(v)
            elif isinstance(v, list) and v and isinstance(v[0], messages.Message):
                stack.extend(v)
    return found


@pytest.mark.parametrize("version", [3, 4])
def test_counts_each_error_code_set(version):
    body = _add_partitions(version)
    n = rewrite_coordinator_errors(body, ADD_PARTITIONS_TO_TXN, CLIP, 1.0, random.Random(0))
    assert n == (4 if version < 4 else 2 * 4 + 1)


def test_rate_applies_per_response():
    rng = random.Random(11)
    hits = 0
    for _ in range(1000):
        body = _add_partitions(4)
        n = rewrite_coordinator_errors(body, ADD_PARTITIONS_TO_TXN, CLIP, 0.3, rng)
        codes = _codes(body)
        assert codes == ({CLIP} if n else {0})           # the whole response or nothing
        hits += bool(n)
    assert 230 < hits < 370


def test_parse_api_selector():
    e = ErrorRewrite.parse("concurrent_transactions@endtxn,AddPartitionsToTxn:0.5")
    assert (e.error, e.rate, e.apis) == ("CONCURRENT_TRANSACTIONS", 0.5, ("EndTxn", "AddPartitionsToTxn"))
    assert ErrorRewrite.parse("NOT_LEADER_OR_FOLLOWER@Produce,Fetch").apis == ("Produce", "Fetch")
    assert ErrorRewrite.parse("NOT_COORDINATOR@FindCoordinator").rate == 1.0
    for bad, said in (("NOT_COORDINATOR@Metadata:0.5", "Metadata"), ("NOT_COORDINATOR@:0.5", "(none)"),
                      ("NOT_COORDINATOR@EndTxn:often", "NAME[@API,...][:RATE]")):
        with pytest.raises(ConfigError, match=said.replace("[", r"\[").replace("]", r"\]")):
            ErrorRewrite.parse(bad)


def test_injector_only_decodes_the_selected_apis():
    inj = FaultInjector(FaultPlan(error=ErrorRewrite.parse("CONCURRENT_TRANSACTIONS@EndTxn:1"), seed=3))
    assert inj.needs_body(END_TXN) and not inj.needs_body(PRODUCE)
    body = _end_txn(3)
    d = inj.on_response(END_TXN, 100, body)
    assert d.errors_injected == 1 and body.error_code == ERRORS_BY_NAME["CONCURRENT_TRANSACTIONS"].code
    other = _init_producer_id(3)
    assert inj.on_response(INIT_PRODUCER_ID, 100, other).errors_injected == 0 and other.error_code == 0


def test_limit_counts_coordinator_responses():
    inj = FaultInjector(FaultPlan(error=ErrorRewrite("COORDINATOR_LOAD_IN_PROGRESS", 1.0,
                                                     ("EndTxn",), limit=2), seed=3))
    injected = [inj.on_response(END_TXN, 100, _end_txn(1)).errors_injected for _ in range(4)]
    assert injected == [1, 1, 0, 0]


def test_parse_find_coordinator_key_type():
    e = ErrorRewrite.parse("coordinator_not_available@FindCoordinator/transaction,EndTxn:0.5")
    assert (e.apis, e.key_type, e.rate) == (("FindCoordinator", "EndTxn"), 1, 0.5)
    assert e.describe() == "COORDINATOR_NOT_AVAILABLE@FindCoordinator/transaction,EndTxn 0.5"
    assert ErrorRewrite.parse("NOT_COORDINATOR@findcoordinator/GROUP").key_type == 0
    assert ErrorRewrite.parse("NOT_COORDINATOR@FindCoordinator").key_type is None
    for bad, said in (("NOT_COORDINATOR@FindCoordinator/txn", "'txn' is not one of group, "
                                                             "transaction, share"),
                      ("NOT_COORDINATOR@EndTxn/transaction", "only FindCoordinator takes")):
        with pytest.raises(ConfigError, match=said):
            ErrorRewrite.parse(bad)
    with pytest.raises(ConfigError, match="name FindCoordinator"):
        ErrorRewrite("NOT_COORDINATOR", apis=("EndTxn",), key_type=1)


@pytest.mark.parametrize("version", [0, 3, 4])
def test_a_key_type_hits_only_the_lookups_of_that_type(version):
    """A transactional producer's coordinator lookup (key_type 1) fails; the group lookups
    of the consumers beside it (key_type 0, and every v0 request) are left alone."""
    inj = FaultInjector(FaultPlan(error=ErrorRewrite.parse(
        "COORDINATOR_NOT_AVAILABLE@FindCoordinator/transaction"), seed=3))
    assert inj.needs_request_body(FIND_COORDINATOR) and not inj.needs_request_body(PRODUCE)
    req_cls = messages.request_class(FIND_COORDINATOR)
    hit = []
    for key_type in ((0,) if version == 0 else (0, 1)):
        req = (req_cls(coordinator_keys=["k"], key_type=key_type) if version >= 4
               else req_cls(key="k", key_type=key_type))
        wire = messages.encode_request(FIND_COORDINATOR, version, 1, "c", req)
        decision = inj.on_request(FIND_COORDINATOR, messages.decode_request(wire).body)
        assert decision.key_type == key_type
        body = _find_coordinator(version)
        hit.append(inj.on_response(FIND_COORDINATOR, 100, body, decision).errors_injected)
    assert hit == ([0] if version == 0 else [0, 2 if version >= 4 else 1])
    # Without a key type, every lookup is hit, and no request is read for it.
    every = FaultInjector(FaultPlan(error=ErrorRewrite.parse("NOT_COORDINATOR@FindCoordinator")))
    assert not every.needs_request_body(FIND_COORDINATOR)
    assert every.on_response(FIND_COORDINATOR, 100, _find_coordinator(version)).errors_injected
