"""One builder per request kctl sends (protocol/requests.py), checked at every version
``CLIENT_MAX_VERSIONS`` allows: the body encodes at that version and decodes back with
the generic decoder to what the builder meant. And the table itself: it caps
negotiation, and an API it does not list is never chosen."""

from __future__ import annotations

import uuid

import pytest

from kctl.errors import UnsupportedVersionError
from kctl.protocol import messages, requests, schema
from kctl.protocol.client_versions import CLIENT_MAX_VERSIONS, CLIENT_MAX_VERSIONS_BY_NAME
from kctl.protocol.versions import VersionRange, negotiate

TOPIC_ID = uuid.UUID(int=7)


def versions(name):
    info = schema.API_BY_NAME[name]
    return range(info.min_version, CLIENT_MAX_VERSIONS_BY_NAME[name] + 1)


def round_trip(name, version, body):
    key = schema.API_BY_NAME[name].api_key
    frame = messages.encode_request(key, version, 7, "kctl", body)
    return messages.decode_request(frame).body


def test_table_is_within_the_schema_and_caps_negotiation():
    for name, v in CLIENT_MAX_VERSIONS_BY_NAME.items():
        info = schema.API_BY_NAME[name]
        assert info.min_version <= v <= info.max_version, name
    offered = [VersionRange(a.api_key, a.min_version, a.max_version) for a in schema.API_BY_KEY.values()]
    negotiated = negotiate(offered, CLIENT_MAX_VERSIONS)
    assert negotiated.chosen == dict(CLIENT_MAX_VERSIONS), "every listed API at its cap, nothing else"
    with pytest.raises(UnsupportedVersionError, match="kctl's clients do not send DescribeCluster"):
        negotiated.require(schema.API_BY_NAME["DescribeCluster"].api_key)


@pytest.mark.parametrize("version", versions("Metadata"))
def test_metadata(version):
    got = round_trip("Metadata", version, requests.metadata(version, ["a", "b"]))
    assert [t.name for t in got.topics] == ["a", "b"]
    every = round_trip("Metadata", version, requests.metadata(version, None))
    assert every.topics in ([], None) and (every.topics == [] if version == 0 else every.topics is None)


@pytest.mark.parametrize("version", versions("Produce"))
@pytest.mark.parametrize("txn", [None, "t"])
def test_produce(version, txn):
    if txn is not None and version < 3:
        with pytest.raises(UnsupportedVersionError, match="transactional id"):
            requests.produce(version, acks=-1, timeout_ms=1000, transactional_id=txn,
                             topics=[requests.ProduceTopic("t", TOPIC_ID, [(0, b"")])])
        return
    out = requests.produce(version, acks=-1, timeout_ms=1000, transactional_id=txn,
                           topics=[requests.ProduceTopic("t", TOPIC_ID, [(0, b"")])])
    if txn is not None:
        assert out.version <= 11, "transaction protocol v1: Produce stops at v11"
    got = round_trip("Produce", out.version, out.body)
    (t,) = got.topic_data
    assert (t.name or t.topic_id) == ("t" if out.version < 13 else TOPIC_ID)
    no_id = requests.produce(version, acks=1, timeout_ms=1000,
                             topics=[requests.ProduceTopic("t", None, [(0, b"")])])
    assert no_id.version <= 12, "without a topic id, v12 at most"


@pytest.mark.parametrize("version", versions("InitProducerId"))
def test_init_producer_id(version):
    body = requests.init_producer_id(version, transactional_id="x", transaction_timeout_ms=60000)
    got = round_trip("InitProducerId", version, body)
    assert got.transactional_id == "x" and got.transaction_timeout_ms == 60000


@pytest.mark.parametrize("version", versions("FindCoordinator"))
def test_find_coordinator(version):
    got = round_trip("FindCoordinator", version, requests.find_coordinator(version, "x"))
    assert (got.coordinator_keys == ["x"]) if version >= 4 else (got.key == "x")


@pytest.mark.parametrize("version", versions("AddPartitionsToTxn"))
def test_add_partitions_to_txn(version):
    body = requests.add_partitions_to_txn(version, transactional_id="x", producer_id=5,
                                          producer_epoch=2, partitions={"t": [0, 3]})
    got = round_trip("AddPartitionsToTxn", version, body)
    assert got.v3_and_below_transactional_id == "x" and got.v3_and_below_producer_epoch == 2
    assert [(t.name, list(t.partitions)) for t in got.v3_and_below_topics] == [("t", [0, 3])]


@pytest.mark.parametrize("version", versions("EndTxn"))
def test_end_txn(version):
    body = requests.end_txn(version, transactional_id="x", producer_id=5, producer_epoch=2, committed=True)
    got = round_trip("EndTxn", version, body)
    assert (got.transactional_id, got.producer_id, got.producer_epoch, got.committed) == ("x", 5, 2, True)


@pytest.mark.parametrize("version", versions("Fetch"))
def test_fetch(version):
    wants = [requests.FetchPartition("t", 1, 9, 100, leader_epoch=4), requests.FetchPartition("u", 0, 3, 50),
             requests.FetchPartition("t", 2, 7, 100)]
    out = requests.fetch(version, wants, max_bytes=1000, max_wait_ms=5, min_bytes=2,
                         isolation_level=requests.READ_COMMITTED, rack_id="r1",
                         topic_ids={"t": TOPIC_ID, "u": uuid.UUID(int=7)})
    assert out.version == version
    got = round_trip("Fetch", out.version, out.body)
    by_id = version >= 13
    assert [(t.topic_id if by_id else t.topic, [(p.partition, p.fetch_offset, p.partition_max_bytes)
                                                for p in t.partitions]) for t in got.topics] == [
        (TOPIC_ID if by_id else "t", [(1, 9, 100), (2, 7, 100)]),
        (uuid.UUID(int=7) if by_id else "u", [(0, 3, 50)])]
    assert (got.max_wait_ms, got.min_bytes) == (5, 2)
    if version >= 3:
        assert got.max_bytes == 1000
    if version >= 9:
        assert got.topics[0].partitions[0].current_leader_epoch == 4
    if version >= 11:
        assert got.rack_id == "r1"
    if version >= 15:
        assert got.replica_state.replica_id == -1
    else:
        assert got.replica_id == -1
    assert got.isolation_level == (1 if out.version >= 4 else 0)


@pytest.mark.parametrize("version", [v for v in versions("Fetch") if v >= 13])
def test_fetch_without_a_topic_id_names_topics_at_v12(version):
    out = requests.fetch(version, [requests.FetchPartition("t", 0, 0, 10), requests.FetchPartition("u", 0, 0, 10)],
                         max_bytes=10, max_wait_ms=1, topic_ids={"t": TOPIC_ID})
    assert out.version == 12
    assert [t.topic for t in round_trip("Fetch", 12, out.body).topics] == ["t", "u"]
