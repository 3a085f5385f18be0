"""``kctl inspect`` with several processor processes against the embedded broker: connections
spread over processors, order per connection under delay ranges, faults seeded per connection
whichever processor owns it, a killed processor reported with its connections, and a merged
capture that tshark and kctl decode read to the same frames, each leg once."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from collections import Counter

import pytest

from kctl.broker import free_port
from kctl.config import ProducerConfig
from kctl.engine import admin
from kctl.engine.blocking_client import BlockingClient
from kctl.engine.producer import Producer
from kctl.inspect.faults import FaultPlan
from kctl.inspect.legs import Leg, read_legs
from kctl.inspect.proxy import InspectorProxy
from kctl.inspect.session import DecodedFrame, decode_files
from kctl.protocol import messages
from kctl.protocol.frames import FrameDecoder, frame

pytestmark = pytest.mark.broker

METADATA = 3


def _topic(broker, name, partitions=3):
    with BlockingClient(broker.bootstrap) as c:
        admin.create_topics(c, [name], partitions=partitions)
    return name


def _connect(bootstrap: str) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _pipelined(sock: socket.socket, n: int, first_corr: int = 1) -> list[int]:
    """Sends ``n`` Metadata requests back to back, then reads the answers: their correlation ids."""
    body = messages.message_class("MetadataRequest")(topics=[])
    sock.sendall(b"".join(frame(messages.encode_request(METADATA, 1, first_corr + i, "pipe", body))
                          for i in range(n)))
    dec = FrameDecoder()
    got: list[int] = []
    while len(got) < n:
        data = sock.recv(65536)
        assert data, "the proxy closed the connection"
        dec.feed(data)
        got += [struct.unpack_from(">i", f)[0] for f in dec.frames()]
    return got


def test_clients_spread_over_processors_and_stats_merge(broker):
    with InspectorProxy([broker.bootstrap], processors=2) as proxy:
        assert len([p for p in proxy.processor_pids() if p]) == 2
        socks = [_connect(proxy.bootstrap) for _ in range(6)]
        for s in socks:
            assert _pipelined(s, 3) == [1, 2, 3]
        owners = proxy.connection_owners()
        snap = proxy.snapshot()
        for s in socks:
            s.close()
    assert sorted(Counter(owners.values()).values()) == [3, 3]     # the fewest connections first
    assert snap.processors == 2 and snap.connections_total == 6
    assert snap.apis["Metadata"].requests == snap.apis["Metadata"].responses == 18
    assert {c.processor for c in snap.connections} == {0, 1}
    assert snap.apis["Metadata"].latency_us[99.0] > 0


def test_order_per_connection_is_kept_under_a_delay_range(broker):
    plan = FaultPlan(delay_ms=(1, 60), seed=7)
    with InspectorProxy([broker.bootstrap], processors=2, faults=plan) as proxy:
        socks = [_connect(proxy.bootstrap) for _ in range(4)]
        for i, s in enumerate(socks):
            assert _pipelined(s, 25, first_corr=100 * i) == list(range(100 * i, 100 * i + 25))
        snap = proxy.snapshot()
        for s in socks:
            s.close()
    assert snap.faults["delayed"] == 100
    lat = snap.apis["Metadata"].latency_us
    # Each answer waits for its own delay and for the answers ahead of it: at least 1 ms.
    assert lat[50.0] >= 1_000 and snap.apis["Metadata"].latency_max_us >= 20_000


def _delays(broker, processors: int) -> dict[int, list[int]]:
    """Per connection id, the delay drawn for each of its responses."""
    events = []
    plan = FaultPlan(delay_ms=(0, 5), seed=42)
    with InspectorProxy([broker.bootstrap], processors=processors, faults=plan,
                        on_frame=events.append) as proxy:
        socks = [_connect(proxy.bootstrap) for _ in range(3)]
        for s in socks:
            _pipelined(s, 5)
        deadline = time.monotonic() + 5
        while sum(e.direction == "response" for e in events) < 15 and time.monotonic() < deadline:
            time.sleep(0.02)
        for s in socks:
            s.close()
    out: dict[int, list[int]] = {}
    for e in events:
        if e.direction == "response":
            out.setdefault(e.connection_id, []).append(e.fault.delay_ns)
    return out


def test_faults_are_seeded_per_connection_whichever_processor_owns_it(broker):
    one = _delays(broker, 1)
    two = _delays(broker, 2)
    assert one == two and len(one) == 3 and all(len(v) == 5 for v in one.values())
    assert len({tuple(v) for v in one.values()}) == 3     # each connection draws its own


def test_a_killed_processor_is_reported_with_its_connections(broker):
    lost = []
    with InspectorProxy([broker.bootstrap], processors=2, on_lost=lost.append) as proxy:
        socks = [_connect(proxy.bootstrap) for _ in range(4)]
        for s in socks:
            _pipelined(s, 1)
        owners = proxy.connection_owners()
        victim = 1
        pid = proxy.processor_pids()[victim]
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while not proxy.lost and time.monotonic() < deadline:
            time.sleep(0.02)
        assert proxy.lost and lost == list(proxy.lost)
        gone = proxy.lost[0]
        assert (gone.processor, gone.pid, gone.exitcode) == (victim, pid, -signal.SIGKILL)
        assert sorted(c.id for c in gone.connections) == sorted(
            cid for cid, p in owners.items() if p == victim)
        assert "killed by signal 9" in str(gone) and "connection(s) were lost: #" in str(gone)
        # Its clients see their connections end; the others keep working, new ones too.
        for cid, s in enumerate(socks):
            if owners[cid] == victim:
                s.settimeout(5)
                try:
                    assert s.recv(1) == b""
                except ConnectionResetError:
                    pass
            else:
                assert _pipelined(s, 2, first_corr=7) == [7, 8]
        with BlockingClient(proxy.bootstrap) as c:
            assert admin.fetch_metadata(c).brokers
        snap = proxy.snapshot()
        for s in socks:
            s.close()
    assert snap.lost == proxy.lost and proxy.alive_processors == 0


def _produce(producer, topic, n, worker):
    handles = [producer.send(topic, f"{worker}-{i}".encode()) for i in range(n)]
    assert producer.flush(20)
    assert all(h.error is None for h in handles)


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed")
def test_a_multi_processor_capture_reads_the_same_in_tshark_and_kctl(broker, tmp_path):
    topic = _topic(broker, "processors-capture")
    path = tmp_path / "multi.pcapng"
    events = []
    with InspectorProxy([broker.bootstrap], processors=2, capture=path,
                        on_frame=events.append) as proxy:
        producers = [Producer(ProducerConfig.from_properties(
            {"bootstrap.servers": proxy.bootstrap, "linger.ms": 2, "client.id": f"w{w}"}))
            for w in range(3)]
        for w, p in enumerate(producers):
            _produce(p, topic, 300, w)
        assert set(proxy.connection_owners().values()) == {0, 1}
        for p in producers:
            p.close()
        listen_port = proxy.listeners[0][1]
    assert proxy.capture_result is not None and not proxy.capture_result.damaged
    legs = read_legs(path)
    upstream_port = int(broker.bootstrap.rsplit(":", 1)[1])
    assert legs.broker_ports == {0: frozenset({listen_port}), 1: frozenset({upstream_port})}
    ours = Counter((e.direction, e.correlation_id) for e in events)
    assert sum(ours.values()) == len(events) > 20
    # tshark: the same frames on each leg (its interface), each once.
    run = subprocess.run(
        ["tshark", "-r", str(path), "-d", f"tcp.port=={listen_port},kafka",
         "-d", f"tcp.port=={upstream_port},kafka", "-Y", "kafka",
         "-T", "fields", "-e", "frame.interface_name", "-e", "tcp.dstport",
         "-e", "kafka.correlation_id", "-E", "occurrence=a", "-E", "aggregator=,"],
        capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    seen: dict[str, Counter] = {"kctl client leg": Counter(), "kctl upstream leg": Counter()}
    for line in run.stdout.splitlines():
        iface, dst, corrs = line.split("\t")
        direction = "request" if int(dst) in (listen_port, upstream_port) else "response"
        for corr in corrs.split(","):
            seen[iface][(direction, int(corr))] += 1
    assert seen["kctl client leg"] == ours
    assert seen["kctl upstream leg"] == ours
    # kctl decode's default: the client leg only, every frame once, records as produced.
    frames = [f for f in decode_files([path], legs.ports_for((Leg.CLIENT,)),
                                      interfaces=legs.interfaces_for((Leg.CLIENT,)))
              if isinstance(f, DecodedFrame)]
    assert Counter((f.direction, f.correlation_id) for f in frames) == ours
    assert all(f.error is None for f in frames)
    records = sum(rs.record_count for f in frames if f.direction == "request" and f.api_key == 0
                  for rs in f.record_sets)
    assert records == 900
    run = subprocess.run([sys.executable, "-m", "kctl", "decode", str(path), "--summary", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    import json
    summary = json.loads(run.stdout)
    assert summary["frames"] == len(events)
    both = subprocess.run([sys.executable, "-m", "kctl", "decode", str(path), "--summary", "--json",
                           "--leg", "both"], capture_output=True, text=True, timeout=120)
    assert json.loads(both.stdout)["frames"] == 2 * len(events)


def test_virtual_brokers_in_processor_processes(broker):
    topic = _topic(broker, "processors-virtual", partitions=6)
    with InspectorProxy([broker.bootstrap], virtual_brokers=3, processors=2) as proxy:
        with BlockingClient(proxy.bootstrap) as c:
            md = admin.fetch_metadata(c, [topic])
        assert [p.leader for p in md.topics[topic].partitions] == [1, 2, 3, 1, 2, 3]
        with Producer(ProducerConfig.from_properties({"bootstrap.servers": proxy.bootstrap,
                                                      "linger.ms": 2})) as p:
            handles = [p.send(topic, f"v{i}".encode(), key=f"k{i}".encode()) for i in range(300)]
            assert p.flush(20) and all(h.error is None for h in handles)
            by_node = dict(p.metrics.snapshot().records_by_node)
        snap = proxy.snapshot()
    assert set(by_node) == {1, 2, 3} and sum(by_node.values()) == 300
    assert snap.apis["Produce"].records == 300
