"""Live proof of the codec: negotiate, create a topic, Produce one batch per codec,
Fetch it back through the embedded broker and compare every record field by field."""

import time

import pytest

from kctl.engine import admin
from kctl.engine.blocking_client import BlockingClient
from kctl.errors import BrokerUnavailableError
from kctl.protocol import schema
from kctl.protocol.compression import Compression
from kctl.protocol.records import Header, Record, build_batch

pytestmark = pytest.mark.broker

CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]


@pytest.fixture
def client(broker):
    with BlockingClient(broker.bootstrap, client_id="kctl-test") as c:
        yield c


def _records(codec: Compression, n: int = 40) -> list[Record]:
    now = int(time.time() * 1000)
    out = []
    for i in range(n):
        key = None if i % 7 == 0 else f"key-{i}".encode()
        value = None if i % 11 == 5 else (f"{codec.name}-value-{i}-" * (i % 5 + 1)).encode()
        headers = tuple(Header(f"h{j}", None if j == 1 else f"v{i}.{j}".encode()) for j in range(i % 3))
        out.append(Record(offset=i, timestamp=now + i, key=key, value=value, headers=headers))
    return out


def test_negotiates_the_highest_common_version(client):
    v = client.versions
    for name in ("ApiVersions", "Metadata", "Produce", "Fetch", "CreateTopics"):
        key = schema.API_BY_NAME[name].api_key
        broker = v.broker[key]
        assert v.chosen[key] == min(broker.max_version, schema.API_BY_NAME[name].max_version)


def test_metadata_lists_the_broker(client, broker):
    md = admin.fetch_metadata(client)
    assert [b.address for b in md.brokers] == [broker.bootstrap]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_produce_and_fetch_back_every_codec(client, codec):
    topic = f"roundtrip-{codec.name.lower()}"
    admin.create_topics(client, [topic], partitions=2)
    md = admin.fetch_metadata(client, [topic])
    assert len(md.topics[topic].partitions) == 2
    sent = _records(codec)
    batch = build_batch(sent, compression=codec)
    result = admin.produce(client, topic, 1, batch, acks=-1)
    assert result.base_offset == 0
    got = admin.read_partition(client, topic, 1, expect=len(sent))
    assert [b.compression for b in got] == [codec]
    received = [r for b in got for r in b.records]
    assert len(received) == len(sent)
    for s, r in zip(sent, received):
        assert (r.offset, r.timestamp, r.key, r.value, r.headers) == \
               (s.offset, s.timestamp, s.key, s.value, s.headers)


def test_second_produce_continues_the_offsets(client):
    topic = "roundtrip-offsets"
    admin.create_topics(client, [topic])
    first = admin.produce(client, topic, 0, build_batch(_records(Compression.NONE, 5)))
    second = admin.produce(client, topic, 0, build_batch(_records(Compression.LZ4, 3)))
    assert (first.base_offset, second.base_offset) == (0, 5)
    got = admin.read_partition(client, topic, 0, expect=8)
    assert [r.offset for b in got for r in b.records] == list(range(8))


def test_unreachable_broker_is_one_clear_error(broker):
    from kctl.broker import free_port
    port = free_port()
    with pytest.raises(BrokerUnavailableError, match=f"127.0.0.1:{port}"):
        BlockingClient(f"127.0.0.1:{port}", timeout_s=2).connect()
