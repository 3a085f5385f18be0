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


def _held(proc, conn_id=7):
    """Writes read from the broker and waiting for their release time."""
    link = proc.links.get(conn_id)
    return len(link.out) if link is not None else 0


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
    _until(proc, lambda: _held(proc) == 1)
    assert _answers(client) == []                 # read from the broker, held
    assert _responses(stats) == 0                 # counted when the client's socket takes it
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
    _until(proc, lambda: _held(proc) == 2)
    clock.advance(ms=10)
    _turns(proc)
    assert _answers(client) == []                 # ApiVersions is ready but behind Metadata
    clock.advance(ms=40)
    _turns(proc)
    time.sleep(0.05)
    assert _answers(client) == [21, 22]


FETCH = 1
_BIG = 8 * 1024 * 1024       # more than loopback's largest send buffer (tcp_wmem max 4 MiB)


def _big_fetch_answer(broker, conn_id, req):
    r = messages.response_class(FETCH)
    part = r.PartitionData(partition_index=0, error_code=0, high_watermark=1, records=b"x" * _BIG)
    body = r(throttle_time_ms=0, error_code=0, session_id=0,
             responses=[r.FetchableTopicResponse(topic="t", partitions=[part])])
    return broker.response_frame(req, body)


def test_latency_ends_when_the_client_socket_takes_the_last_byte(tmp_path):
    """A 30 ms delay and a client that reads its 8 MiB answer only after 300 ms: the
    latency sample (live view, frame event) covers the wait on the client's full socket,
    as a capture on the client's side does, and equals what ``kctl decode`` reads from the
    proxy's own client leg (request's last byte -> response's last byte)."""
    from kctl.inspect.proxy import InspectorProxy
    from kctl.inspect.session import DecodedFrame, decode_files

    events = []
    path = tmp_path / "slow.pcapng"
    with FakeBroker(_big_fetch_answer) as fake, \
            InspectorProxy([fake.address], capture=path, on_frame=events.append,
                           faults=FaultPlan(delay_ms=30, delay_apis=("Fetch",))) as proxy:
        port = proxy.listeners[0][1]
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
        client.connect(("127.0.0.1", port))
        req = messages.message_class("FetchRequest")(replica_id=-1, max_wait_ms=0, min_bytes=1,
                                                    max_bytes=_BIG * 2, topics=[])
        client.sendall(frame(messages.encode_request(FETCH, 4, 5, "t", req)))
        time.sleep(0.3)
        dec = FrameDecoder()
        while not (got := dec.frames()):
            dec.feed(client.recv(1 << 20))
        assert struct.unpack_from(">i", got[0])[0] == 5
        deadline = time.monotonic() + 5
        while not proxy.snapshot().apis.get("Fetch") or not proxy.snapshot().apis["Fetch"].responses:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        fetch = proxy.snapshot().apis["Fetch"]
        client.close()
    live_ms = fetch.latency_max_us / 1000
    assert live_ms >= 300                          # the delay (30 ms) and the client's slow read
    [event] = [e for e in events if e.direction == "response"]
    assert event.latency_ns / 1e6 == pytest.approx(live_ms, abs=1)
    [resp] = [f for f in decode_files([path], {port}, interfaces={0}, decode_records=False)
              if isinstance(f, DecodedFrame) and f.direction == "response"]
    assert resp.latency_ns / 1e6 == pytest.approx(live_ms, abs=2)


def test_an_error_injected_into_one_coordinator_key_type_only(tmp_path):
    """--inject-error NAME@FindCoordinator/transaction through a processor: it reads each
    FindCoordinator request's key_type and rewrites the answers of transactional lookups
    only; the group lookup on the same connection is answered as the broker answered, and
    the error table counts the error under FindCoordinator."""
    from kctl.inspect.faults import ErrorRewrite
    find = 10
    nodes = {0: 1, 1: 2}

    def answer(broker, conn_id, req):
        body = messages.response_class(find)(error_code=0, node_id=nodes[req.body.key_type],
                                             host="127.0.0.1", port=broker.port)
        return broker.response_frame(req, body)

    clock = FakeClock(now_ns=1_000_000_000)
    plan = FaultPlan(error=ErrorRewrite.parse("COORDINATOR_NOT_AVAILABLE@FindCoordinator/transaction"))
    with FakeBroker(answer) as fake:
        stats = ProxyStats()
        proc = Processor(0, clock=clock, faults=FaultSwitch(plan),
                         rewriter=ResponseRewriter("127.0.0.1", lambda host, port: 19092), stats=stats)
        listener = socket.create_server(("127.0.0.1", 0))
        client = socket.create_connection(listener.getsockname())
        accepted, addr = listener.accept()
        listener.close()
        try:
            proc.adopt(accepted, Handoff(7, addr[:2], ("127.0.0.1", 19092), ("127.0.0.1", fake.port)))
            client.setblocking(False)
            req = messages.request_class(find)
            for corr, key_type in ((1, 0), (2, 1)):
                client.sendall(frame(messages.encode_request(find, 3, corr, "c",
                                                             req(key="k", key_type=key_type))))
            got = {}
            dec = FrameDecoder()

            def answered() -> bool:
                try:
                    dec.feed(client.recv(65536))
                except BlockingIOError:
                    pass
                for f in dec.frames():
                    r = messages.decode_response(f, find, 3)
                    got[r.header.correlation_id] = (r.body.error_code, r.body.node_id)
                return len(got) == 2
            _until(proc, answered)
        finally:
            client.close()
            proc.close()
    assert got == {1: (0, 1), 2: (15, -1)}        # 15: COORDINATOR_NOT_AVAILABLE
    snap = stats.snapshot(clock.now_ns())
    assert snap.errors == {("FindCoordinator", "COORDINATOR_NOT_AVAILABLE"): 1}
    assert snap.faults["errors_injected"] == 1
