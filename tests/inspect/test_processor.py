"""One ``Processor`` stepped by hand with a fake clock in front of a scripted fake broker:
its collaborators (clock, faults, rewriter, stats) are passed in, held responses leave
exactly when the clock says and in request order, and a client's requests keep their
order even when a later one could go first."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from kctl.engine.clock import FakeClock
from kctl.inspect.faults import FaultPlan, FaultSwitch
from kctl.inspect.processor import Handoff, Processor
from kctl.inspect.proxy_stats import ProxyStats
from kctl.inspect.rewrite import ResponseRewriter
from kctl.protocol import messages
from kctl.protocol.frames import FrameDecoder, frame
from tests.engine.fake_broker import FakeBroker

METADATA, API_VERSIONS = 3, 18


def _metadata_answer(broker, conn_id, req):
    body = messages.response_class(METADATA)(brokers=[], cluster_id="c", controller_id=-1, topics=[])
    return broker.response_frame(req, body)


@pytest.fixture
def rig():
    clock = FakeClock(now_ns=1_000_000_000)
    with FakeBroker(_metadata_answer) as fake:
        stats = ProxyStats()
        faults = FaultSwitch(FaultPlan(delay_ms=50, delay_apis=("Metadata",)))
        proc = Processor(0, clock=clock, faults=faults,
                         rewriter=ResponseRewriter("127.0.0.1", lambda host, port: 19092),
                         stats=stats)
        listener = socket.create_server(("127.0.0.1", 0))
        client = socket.create_connection(listener.getsockname())
        accepted, addr = listener.accept()
        listener.close()
        proc.adopt(accepted, Handoff(7, addr[:2], ("127.0.0.1", 19092), ("127.0.0.1", fake.port)))
        client.setblocking(False)
        yield clock, fake, proc, stats, client
        client.close()
        proc.close()


def _turns(proc, n=20):
    for _ in range(n):
        proc.run_once(5_000_000)


def _until(proc, done, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while not done():
        proc.run_once(5_000_000)
        assert time.monotonic() < deadline, "the processor did not get there"


def _responses(stats):
    return sum(a.responses for a in stats.snapshot(0).apis.values())


def _answers(client) -> list[int]:
    dec = FrameDecoder()
    try:
        while data := client.recv(65536):
            dec.feed(data)
    except BlockingIOError:
        pass
    return [struct.unpack_from(">i", f)[0] for f in dec.frames()]


def test_a_held_response_leaves_when_the_clock_says(rig):
    clock, fake, proc, stats, client = rig
    body = messages.message_class("MetadataRequest")(topics=[])
    client.sendall(frame(messages.encode_request(METADATA, 1, 11, "t", body)))
    _until(proc, lambda: _responses(stats) == 1)
    assert _answers(client) == []                 # read from the broker, held
    clock.advance(ms=49)
    _turns(proc)
    assert _answers(client) == []
    clock.advance(ms=1)
    _turns(proc)
    time.sleep(0.05)
    assert _answers(client) == [11]
    snap = stats.snapshot(clock.now_ns())
    assert snap.apis["Metadata"].latency_us[50.0] == pytest.approx(50_000, rel=0.01)
    assert [c.id for c in snap.connections] == [7]   # the acceptor's id, not the processor's


def test_a_later_undelayed_answer_waits_for_the_one_ahead(rig):
    clock, fake, proc, stats, client = rig
    md = messages.encode_request(METADATA, 1, 21, "t", messages.message_class("MetadataRequest")(topics=[]))
    av = messages.encode_request(API_VERSIONS, 3, 22, "t", messages.message_class("ApiVersionsRequest")(
        client_software_name="t", client_software_version="1"))
    client.sendall(frame(md) + frame(av))      # pipelined: the second is not delayed
    _until(proc, lambda: _responses(stats) == 2)
    clock.advance(ms=10)
    _turns(proc)
    assert _answers(client) == []                 # ApiVersions is ready but behind Metadata
    clock.advance(ms=40)
    _turns(proc)
    time.sleep(0.05)
    assert _answers(client) == [21, 22]
