"""NetworkClient, InFlightRequests and ClusterConnectionStates: against scripted
fake brokers on 127.0.0.1, and against the embedded broker."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from kctl.config import ProducerConfig
from kctl.engine.backoff import ExponentialBackoff
from kctl.engine.clock import FakeClock, SystemClock
from kctl.engine.connection_states import ClusterConnectionStates, ConnectionState
from kctl.engine.inflight import CorrelationIdMismatchError, InFlightRequests
from kctl.engine.network import (
    ClientRequest, NetworkClient, NodeNotReadyError, RequestTimeoutError)
from kctl.errors import BrokerUnavailableError, UnsupportedVersionError
from kctl.protocol import messages, schema
from tests.engine.fake_broker import API_VERSIONS, FakeBroker, api_versions_frame

METADATA = schema.API_BY_NAME["Metadata"].api_key
PRODUCE = schema.API_BY_NAME["Produce"].api_key
MS = 1_000_000

MetadataRequest = messages.message_class("MetadataRequest")
MetadataResponse = messages.message_class("MetadataResponse")
ProduceRequest = messages.message_class("ProduceRequest")


def now() -> int:
    return time.monotonic_ns()


def make_client(address: str, clock=None, **props) -> NetworkClient:
    settings = {"bootstrap.servers": address, "client.id": "kctl-test",
                "reconnect.backoff.ms": 10, "reconnect.backoff.max.ms": 80}
    settings.update({k.replace("_", "."): v for k, v in props.items()})
    cfg = ProducerConfig.from_properties(settings).network
    return NetworkClient(cfg, clock=clock or SystemClock(), random=lambda: 0.5)


def connect(client: NetworkClient, node: int = -1, clock=None, timeout_s: float = 5.0) -> None:
    t = clock.now_ns if clock else now
    deadline = time.monotonic() + timeout_s
    while not client.ready(node, t()):
        assert time.monotonic() < deadline, f"node {node} never got ready: {client.connection_error(node)}"
        client.poll(20 * MS, t())


def poll_until(client: NetworkClient, n: int, clock=None, timeout_s: float = 5.0) -> list:
    t = clock.now_ns if clock else now
    out: list = []
    deadline = time.monotonic() + timeout_s
    while len(out) < n:
        assert time.monotonic() < deadline, f"only {len(out)} of {n} responses"
        out += client.poll(20 * MS, t())
    return out


def metadata_request(node: int = -1, **kw) -> ClientRequest:
    return ClientRequest(node=node, api_key=METADATA, body=MetadataRequest(topics=[]), **kw)


def answer_metadata(broker, conn_id, req):
    return broker.response_frame(req, MetadataResponse(cluster_id=f"c{req.header.correlation_id}"))


def silent(broker, conn_id, req):
    return None


# ---------------------------------------------------------------------------
# negotiation

def test_negotiates_versions_before_anything_else_is_sent():
    with FakeBroker(answer_metadata) as fake, make_client(fake.address) as c:
        with pytest.raises(NodeNotReadyError):
            c.send(metadata_request(), now())
        assert c.ready(-1, now()) is False  # starts connecting
        assert c.connection_state(-1) is ConnectionState.CONNECTING
        connect(c)
        assert c.connection_state(-1) is ConnectionState.READY
        assert c.api_version(-1, METADATA) == 12
        assert c.api_version(-1, PRODUCE) == 11
        assert c.api_version(-1, 9999) is None
        c.send(metadata_request(), now())
        (r,) = poll_until(c, 1)
        assert r.body.cluster_id == f"c{r.request.correlation_id}"
        assert r.request.api_version == 12
        keys = [req.header.request_api_key for _, req in fake.requests]
        assert keys == [API_VERSIONS, METADATA]
        assert fake.requests[1][1].header.client_id == "kctl-test"


def test_api_versions_falls_back_to_the_brokers_version():
    def old_broker(req):
        if req.header.request_api_version > 2:
            return api_versions_frame(req, 0, error_code=35, ranges={API_VERSIONS: (0, 2)})
        return api_versions_frame(req, req.header.request_api_version,
                                  ranges={API_VERSIONS: (0, 2), METADATA: (0, 7)})

    with FakeBroker(api_versions_handler=old_broker) as fake, make_client(fake.address) as c:
        connect(c)
        assert [r.header.request_api_version for _, r in fake.requests] == [4, 2]
        assert c.api_version(-1, METADATA) == 7
        assert c.api_version(-1, PRODUCE) is None


def test_api_versions_error_disconnects_with_a_reason():
    with FakeBroker(api_versions_handler=lambda req: api_versions_frame(req, 0, error_code=33)) as fake, \
            make_client(fake.address) as c:
        deadline = time.monotonic() + 5
        while c.connection_error(-1) is None:
            assert time.monotonic() < deadline
            c.ready(-1, now())
            c.poll(20 * MS, now())
        assert "refused ApiVersions" in c.connection_error(-1)
        assert c.connection_state(-1) is ConnectionState.DISCONNECTED


def test_no_common_version_comes_back_as_version_mismatch():
    with FakeBroker(answer_metadata, api_versions={API_VERSIONS: (0, 4)}) as fake, \
            make_client(fake.address) as c:
        connect(c)
        c.send(metadata_request(), now())
        (r,) = c.poll(0, now())
        assert r.version_mismatch and isinstance(r.error, UnsupportedVersionError)
        assert not r.disconnected and c.in_flight_request_count() == 0


# ---------------------------------------------------------------------------
# pipelining, ordering, framing

def test_pipelines_up_to_max_in_flight_then_blocks_and_matches_in_order():
    with FakeBroker(silent) as fake, make_client(fake.address, max_in_flight_requests_per_connection=3) as c:
        connect(c)
        sent = []
        for _ in range(3):
            assert c.ready(-1, now())
            sent.append(metadata_request(user=len(sent)))
            c.send(sent[-1], now())
        assert c.in_flight_request_count(-1) == 3
        assert not c.ready(-1, now()) and not c.is_ready(-1, now())
        with pytest.raises(NodeNotReadyError):
            c.send(metadata_request(), now())
        reqs = fake.wait_requests(3, api_key=METADATA)
        # Answer all three in one write: they must come back in order, matched.
        fake.send(0, b"".join(fake.response_frame(r, MetadataResponse(cluster_id=str(i)))
                              for i, (_, r) in enumerate(reqs)))
        out = poll_until(c, 3)
        assert [r.request.user for r in out] == [0, 1, 2]
        assert [r.body.cluster_id for r in out] == ["0", "1", "2"]
        assert [r.request.correlation_id for r in out] == [r.header.correlation_id for _, r in reqs]
        assert all(r.request.sent_ns >= r.request.enqueued_ns for r in out)
        assert c.is_ready(-1, now()) and c.in_flight_request_count() == 0


def test_response_in_one_byte_segments():
    with FakeBroker(silent) as fake, make_client(fake.address) as c:
        connect(c)
        c.send(metadata_request(), now())
        (_, req), = fake.wait_requests(1, api_key=METADATA)
        data = fake.response_frame(req, MetadataResponse(cluster_id="x" * 40))
        t = threading.Thread(target=fake.send, args=(0, data), kwargs={"segment": 1, "pause_s": 0.0005})
        t.start()
        polls = 0
        out = []
        while not out:
            out = c.poll(100 * MS, now())
            polls += 1
        t.join()
        assert out[0].body.cluster_id == "x" * 40
        assert polls > 1  # it really arrived in pieces


def test_large_request_is_written_in_parts():
    body = bytes(range(256)) * (8 * 1024)  # 2 MiB
    produce = ProduceRequest(acks=1, timeout_ms=1000, topic_data=[ProduceRequest.TopicProduceData(
        name="t", partition_data=[ProduceRequest.PartitionProduceData(index=0, records=body)])])
    encoded = messages.encode(produce, 9)
    with FakeBroker(silent) as fake, \
            make_client(fake.address, send_buffer_bytes=4096) as c:
        connect(c)
        req = ClientRequest(node=-1, api_key=PRODUCE, api_version=9, body=memoryview(encoded))
        c.send(req, now())
        assert req.sent_ns == -1, "2 MiB should not fit a 4 KiB socket buffer at once"
        assert not c.is_ready(-1, now())  # a partly written request blocks the next one
        deadline = time.monotonic() + 5
        while req.sent_ns < 0:
            assert time.monotonic() < deadline
            c.poll(50 * MS, now())
        (_, got), = fake.wait_requests(1, api_key=PRODUCE)
        assert got.body.topic_data[0].partition_data[0].records == body
        assert got.header.correlation_id == req.correlation_id
        assert got.header.client_id == "kctl-test"
        assert req.size_bytes == 4 + len(fake.raw[-1])


def test_request_without_response_completes_when_written():
    with FakeBroker(silent) as fake, make_client(fake.address) as c:
        connect(c)
        produce = ProduceRequest(acks=0, timeout_ms=1000, topic_data=[])
        req = ClientRequest(node=-1, api_key=PRODUCE, body=produce, expects_response=False)
        done = []
        req.callback = done.append
        c.send(req, now())
        assert c.in_flight_request_count() == 0
        (r,) = c.poll(1000 * MS, now())
        assert r.body is None and not r.disconnected and r.error is None
        assert r.request.sent_ns > 0 and done == [r]
        fake.wait_requests(1, api_key=PRODUCE)


def test_an_answer_to_a_no_response_request_is_dropped():
    # Tansu answers acks=0 Produce requests; that must not break the connection.
    def answer_anyway(broker, conn_id, req):
        if req.header.request_api_key == PRODUCE:
            body = messages.response_class(PRODUCE)()
            return broker.response_frame(req, body)
        return answer_metadata(broker, conn_id, req)

    with FakeBroker(answer_anyway) as fake, make_client(fake.address) as c:
        connect(c)
        c.send(ClientRequest(node=-1, api_key=PRODUCE, expects_response=False,
                             body=ProduceRequest(acks=0, topic_data=[])), now())
        poll_until(c, 1)
        c.send(metadata_request(), now())
        (r,) = poll_until(c, 1)
        assert r.body is not None and not r.disconnected
        assert c.metrics.unexpected_responses_total == 1


# ---------------------------------------------------------------------------
# SASL re-authentication (KIP-368)

SASL_HANDSHAKE = schema.API_BY_NAME["SaslHandshake"].api_key
SASL_AUTHENTICATE = schema.API_BY_NAME["SaslAuthenticate"].api_key
SASL_VERSIONS = {API_VERSIONS: (0, 4), METADATA: (0, 12), SASL_HANDSHAKE: (0, 1),
                 SASL_AUTHENTICATE: (0, 2)}
SASL_PLAIN = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
              "sasl_username": "alice", "sasl_password": "pw"}


class _SaslResponder:
    """PLAIN's server side with a session lifetime; Metadata answers are held until the
    next SASL request arrives, then written first, as a broker answers in order."""

    def __init__(self, lifetime_ms: int, refuse_login: int = 0) -> None:
        self.lifetime_ms = lifetime_ms
        self.refuse_login = refuse_login     # the n-th login (1-based) is refused
        self.logins = 0
        self.held: list[bytes] = []

    def __call__(self, broker, conn_id, req):
        key = req.header.request_api_key
        if key == METADATA:
            self.held.append(answer_metadata(broker, conn_id, req))
            return None
        out, self.held = b"".join(self.held), []
        cls = messages.response_class(key)
        if key == SASL_HANDSHAKE:
            return out + broker.response_frame(req, cls(error_code=0, mechanisms=["PLAIN"]))
        self.logins += 1
        if self.logins == self.refuse_login:
            return out + broker.response_frame(req, cls(
                error_code=58, error_message="Cannot change principals during re-authentication"))
        return out + broker.response_frame(req, cls(error_code=0, auth_bytes=b"",
                                                    session_lifetime_ms=self.lifetime_ms))


def _poll_while(client, clock, cond, timeout_s: float = 5.0) -> list:
    out: list = []
    deadline = time.monotonic() + timeout_s
    while cond():
        assert time.monotonic() < deadline, "timed out"
        out += client.poll(20 * MS, clock.now_ns())
    return out


def test_reauthenticates_on_the_same_connection_before_the_session_expires():
    """KIP-368 as Java's client does it (SaslAuthenticatorTest, re-authentication): the node
    stops taking requests at 85-95 % of the session lifetime (here 90 %: random 0.5), logs
    in again on the same connection after the request in flight, and is READY again."""
    responder = _SaslResponder(lifetime_ms=1000)
    clock = FakeClock()
    with FakeBroker(responder, api_versions=SASL_VERSIONS) as fake, \
            make_client(fake.address, clock=clock, **SASL_PLAIN) as c:
        connect(c, clock=clock)
        assert responder.logins == 1
        clock.advance(ms=899)
        assert c.ready(-1, clock.now_ns())
        c.send(metadata_request(user="before"), clock.now_ns())
        fake.wait_requests(1, api_key=METADATA)
        clock.advance(ms=1)                                   # 900 ms: due
        assert not c.ready(-1, clock.now_ns()) and not c.is_ready(-1, clock.now_ns())
        out: list = []
        deadline = time.monotonic() + 5
        while not out or c.connection_state(-1) is not ConnectionState.READY:
            assert time.monotonic() < deadline, f"{out}, {c.connection_state(-1)}"
            out += c.poll(20 * MS, clock.now_ns())
        assert [r.request.user for r in out] == ["before"] and out[0].body is not None
        assert responder.logins == 2 and c.metrics.reauthentications_total == 1
        assert c.metrics.connection_creation_total == 1 and c.metrics.connection_close_total == 0
        keys = [r.header.request_api_key for cid, r in fake.requests]
        assert {cid for cid, _ in fake.requests} == {0}       # one connection throughout
        assert keys == [API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE, METADATA,
                        SASL_HANDSHAKE, SASL_AUTHENTICATE]    # no second ApiVersions
        # The next session counts from the second login: due again 900 ms after it.
        assert c.ready(-1, clock.advance(ms=899))
        assert not c.ready(-1, clock.advance(ms=1))
        _poll_while(c, clock, lambda: c.metrics.reauthentications_total < 2)
        assert c.ready(-1, clock.now_ns()) and c.metrics.connection_close_total == 0


def test_a_refused_reauthentication_closes_the_connection_with_the_reason():
    responder = _SaslResponder(lifetime_ms=1000, refuse_login=2)
    clock = FakeClock()
    with FakeBroker(responder, api_versions=SASL_VERSIONS) as fake, \
            make_client(fake.address, clock=clock, **SASL_PLAIN) as c:
        connect(c, clock=clock)
        clock.advance(ms=900)
        _poll_while(c, clock, lambda: c.connection_state(-1) is not ConnectionState.DISCONNECTED)
        err = c.authentication_error(-1)
        assert err is not None and "Cannot change principals" in str(err)
        assert c.metrics.reauthentications_total == 0


def test_no_session_lifetime_means_no_reauthentication():
    responder = _SaslResponder(lifetime_ms=0)
    clock = FakeClock()
    with FakeBroker(responder, api_versions=SASL_VERSIONS) as fake, \
            make_client(fake.address, clock=clock, **SASL_PLAIN) as c:
        connect(c, clock=clock)
        clock.advance(ms=300_000)   # (under connections.max.idle.ms)
        assert c.ready(-1, clock.now_ns())
        c.poll(0, clock.now_ns())
        assert responder.logins == 1 and c.connection_state(-1) is ConnectionState.READY


# ---------------------------------------------------------------------------
# failures

def test_killed_connection_returns_every_in_flight_request_as_disconnected():
    with FakeBroker(silent) as fake, make_client(fake.address) as c:
        connect(c)
        for i in range(5):
            c.send(metadata_request(user=i), now())
            c.poll(0, now())
        fake.wait_requests(5, api_key=METADATA)
        fake.kill(0)
        out = poll_until(c, 5)
        assert [r.request.user for r in out] == [0, 1, 2, 3, 4]
        assert all(r.disconnected and not r.timed_out for r in out)
        assert all(isinstance(r.error, BrokerUnavailableError) for r in out)
        assert c.connection_state(-1) is ConnectionState.DISCONNECTED
        assert c.in_flight_request_count() == 0
        assert 0 < c.connection_delay_ns(-1, now()) <= 10 * MS
        # and it reconnects after the backoff
        connect(c)
        assert len(fake.conns) == 2


def test_request_timeout_closes_the_connection_and_reconnects_after_backoff():
    clock = FakeClock(now_ns=10**12)
    with FakeBroker(silent) as fake, make_client(fake.address, clock=clock, request_timeout_ms=1000) as c:
        connect(c, clock=clock)
        c.send(metadata_request(user="a"), clock.now_ns())
        clock.advance(ms=400)
        c.send(metadata_request(user="b"), clock.now_ns())
        fake.wait_requests(2, api_key=METADATA)
        clock.advance(ms=500)
        assert c.poll(0, clock.now_ns()) == []  # 900 ms: not yet
        clock.advance(ms=101)
        out = c.poll(0, clock.now_ns())
        assert [r.request.user for r in out] == ["a", "b"]  # the whole connection goes
        assert all(r.timed_out and r.disconnected for r in out)
        assert isinstance(out[0].error, RequestTimeoutError)
        assert "did not answer within 1000 ms" in str(out[0].error)
        assert c.metrics.request_timeouts_total == 1
        assert not c.ready(-1, clock.now_ns())  # inside the 10 ms backoff
        assert c.connection_delay_ns(-1, clock.now_ns()) == 10 * MS
        clock.advance(ms=10)
        connect(c, clock=clock)
        fake.wait_connections(2)


def test_correlation_id_mismatch_disconnects_with_a_clear_error():
    def wrong_id(broker, conn_id, req):
        return broker.response_frame(req, MetadataResponse(),
                                     correlation_id=req.header.correlation_id + 7)

    with FakeBroker(wrong_id) as fake, make_client(fake.address) as c:
        connect(c)
        c.send(metadata_request(), now())
        (r,) = poll_until(c, 1)
        assert r.disconnected and not r.timed_out
        assert isinstance(r.error, CorrelationIdMismatchError)
        cid = r.request.correlation_id
        assert f"answered correlation id {cid + 7}, expected {cid}" in str(r.error)
        assert fake.address in str(r.error)
        assert "correlation id" in c.connection_error(-1)


def test_reconnect_backoff_grows_exponentially_and_caps():
    # A port nobody listens on: every connect is refused.
    closed_port = socket.socket()
    closed_port.bind(("127.0.0.1", 0))  # bound, never listening
    address = "127.0.0.1:%d" % closed_port.getsockname()[1]
    clock = FakeClock(now_ns=10**12)
    with closed_port, make_client(address, clock=clock, reconnect_backoff_ms=10, reconnect_backoff_max_ms=80) as c:
        delays = []
        for _ in range(6):
            assert c.ready(-1, clock.now_ns()) is False
            deadline = time.monotonic() + 5
            while c.connection_state(-1) is not ConnectionState.DISCONNECTED:
                assert time.monotonic() < deadline
                c.poll(20 * MS, clock.now_ns())
            delays.append(c.connection_delay_ns(-1, clock.now_ns()) // MS)
            assert not c.ready(-1, clock.now_ns())  # still backing off: no new connect
            assert c.connection_state(-1) is ConnectionState.DISCONNECTED
            clock.advance(ms=delays[-1])
        assert delays == [10, 20, 40, 80, 80, 80]
        assert "refused" in c.connection_error(-1).lower()


def test_idle_connection_is_closed_after_connections_max_idle_ms():
    clock = FakeClock(now_ns=10**12)
    with FakeBroker(silent) as fake, make_client(fake.address, clock=clock,
                                                connections_max_idle_ms=1000) as c:
        connect(c, clock=clock)
        clock.advance(ms=1000)
        c.poll(0, clock.now_ns())
        assert c.connection_state(-1) is ConnectionState.READY
        clock.advance(ms=1)
        assert c.poll(0, clock.now_ns()) == []
        assert c.connection_state(-1) is ConnectionState.DISCONNECTED
        assert "idle" in c.connection_error(-1)
        with pytest.raises(LookupError, match="node 5 has no known address"):
            c.ready(5, clock.now_ns())


def test_wakeup_interrupts_poll_from_another_thread():
    with FakeBroker() as fake, make_client(fake.address) as c:
        threading.Timer(0.05, c.wakeup).start()
        t0 = time.monotonic()
        assert c.poll(5_000 * MS, now()) == []
        assert time.monotonic() - t0 < 2


def test_least_loaded_node_prefers_ready_then_connecting_then_oldest_attempt():
    with FakeBroker(silent) as a, FakeBroker(silent) as b:
        c = make_client(f"{a.address},{b.address}", max_in_flight_requests_per_connection=5)
        with c:
            assert c.least_loaded_node(now()) in (-1, -2)
            connect(c, -1)
            connect(c, -2)
            c.send(metadata_request(-1), now())
            assert c.least_loaded_node(now()) == -2
            c.set_nodes({7: a.address})
            assert c.nodes() == [7]
            assert c.least_loaded_node(now()) == 7  # never connected: may connect


def test_least_loaded_node_passes_over_a_node_without_a_common_version():
    """With ``api_key``, a connected node that offers no version of that API is passed over
    (Java's leastLoadedNode would pick it: ready, nothing in flight); a node not yet
    connected is not judged."""
    no_metadata = {API_VERSIONS: (0, 4), PRODUCE: (3, 11)}
    with FakeBroker(silent) as a, FakeBroker(silent, api_versions=no_metadata) as b:
        c = make_client(f"{a.address},{b.address}")
        with c:
            assert c.least_loaded_node(now(), api_key=METADATA) == -2   # (random 0.5: -2 looked at first)
            connect(c, -2)
            assert c.api_version(-2, METADATA) is None
            assert c.least_loaded_node(now()) == -2
            assert c.least_loaded_node(now(), api_key=METADATA) == -1   # may connect
            connect(c, -1)
            assert c.least_loaded_node(now(), api_key=METADATA) == -1
            assert c.least_loaded_node(now(), api_key=PRODUCE) == -2


# ---------------------------------------------------------------------------
# building blocks

class _Req:
    def __init__(self, cid, enqueued_ns=0, sent_ns=0, timeout_ns=100):
        self.correlation_id, self.enqueued_ns, self.sent_ns = cid, enqueued_ns, sent_ns
        self.timeout_ns, self.throttle_ns = timeout_ns, 0


def test_in_flight_requests_rules():
    q = InFlightRequests(2)
    assert q.can_send_more(1)
    q.add(1, _Req(1, sent_ns=-1))
    assert not q.can_send_more(1)  # newest not fully written
    q.newest(1).sent_ns = 5
    assert q.can_send_more(1)
    q.add(1, _Req(2))
    assert not q.can_send_more(1) and q.count() == 2 and q.count(1) == 2
    with pytest.raises(CorrelationIdMismatchError, match="answered correlation id 2, expected 1"):
        q.complete_next(1, 2)
    assert q.count(1) == 2  # left as it was
    assert q.complete_next(1, 1).correlation_id == 1
    q.add(1, _Req(3, enqueued_ns=50))
    assert q.timed_out_nodes(100) == [] and q.timed_out_nodes(101) == [1]
    q.add_throttle(1, 1000)
    assert q.timed_out_nodes(101) == []
    assert [r.correlation_id for r in q.clear_all(1)] == [2, 3]
    assert q.count() == 0 and q.clear_all(1) == []
    with pytest.raises(CorrelationIdMismatchError, match="no request in flight"):
        q.complete_next(1, 9)


def test_backoff_jitter_and_cap():
    assert [ExponentialBackoff(50, 2, 1000, 0.2, lambda: 0.5).backoff_ms(n) for n in range(7)] == \
        [50, 100, 200, 400, 800, 1000, 1000]
    low = ExponentialBackoff(50, 2, 1000, 0.2, lambda: 0.0)
    high = ExponentialBackoff(50, 2, 1000, 0.2, lambda: 0.999999)
    assert low.backoff_ms(0) == pytest.approx(40) and high.backoff_ms(0) == pytest.approx(60, rel=1e-4)
    assert high.backoff_ms(10) == 1000  # jitter never goes above the cap
    assert ExponentialBackoff(1000, 2, 1000, 0.2, lambda: 0.0).backoff_ms(5) == 1000  # no growth room


def test_connection_states_table():
    s = ClusterConnectionStates(10, 80, 100, 400, random=lambda: 0.5)
    assert s.can_connect(1, 0) and s.connection_delay_ns(1, 0) == 0
    s.connecting(1, 0)
    assert s.connection_delay_ns(1, 0) == 100 * MS
    assert s.nodes_with_connection_setup_timeout(100 * MS + 1) == [1]
    s.disconnected(1, 100 * MS + 1)  # a failed connect: setup timeout doubles
    assert s.get(1).connection_setup_timeout_ns == 200 * MS
    assert not s.can_connect(1, 100 * MS + 5) and s.is_blacked_out(1, 100 * MS + 5)
    s.connecting(1, 200 * MS)
    s.checking_api_versions(1)
    assert s.get(1).connection_setup_timeout_ns == 100 * MS
    s.ready(1)
    assert s.is_ready(1, 0) and s.get(1).failed_attempts == 0
    s.throttle(1, 500 * MS)
    assert not s.is_ready(1, 400 * MS) and s.poll_delay_ns(1, 400 * MS) == 100 * MS
    with pytest.raises(AssertionError, match="READY -> CONNECTING"):
        s.connecting(1, 0)


def test_connection_states_reauthentication():
    """KIP-368: READY with a renewal time, not ready from then on, AUTHENTICATING on the
    same connection, READY again with the next time."""
    s = ClusterConnectionStates(10, 80, 100, 400, random=lambda: 0.5)
    s.connecting(1, 0)
    s.checking_api_versions(1)
    s.authenticating(1)
    s.ready(1, reauthenticate_at_ns=900 * MS)
    assert s.is_ready(1, 899 * MS) and not s.is_ready(1, 900 * MS)
    assert s.reauthentication_due(899 * MS) == [] and s.reauthentication_due(900 * MS) == [1]
    assert s.next_reauthentication_ns() == 900 * MS
    s.reauthenticating(1)
    assert s.state(1) is ConnectionState.AUTHENTICATING and s.next_reauthentication_ns() is None
    with pytest.raises(AssertionError, match="not READY"):
        s.reauthenticating(1)
    s.ready(1, reauthenticate_at_ns=1800 * MS)
    s.disconnected(1, 1000 * MS)
    assert s.next_reauthentication_ns() is None


# ---------------------------------------------------------------------------
# the embedded broker

@pytest.mark.broker
def test_embedded_broker_negotiates_and_pipelines(broker):
    with make_client(broker.bootstrap, max_in_flight_requests_per_connection=5) as c:
        node = c.bootstrap_nodes[0]
        connect(c, node)
        assert c.api_version(node, METADATA) is not None
        assert c.api_version(node, API_VERSIONS) is not None
        reqs = []
        while c.ready(node, now()):
            reqs.append(metadata_request(node, user=len(reqs)))
            c.send(reqs[-1], now())
        assert len(reqs) == 5
        out = poll_until(c, 5)
        assert [r.request.user for r in out] == list(range(5))
        assert all(r.error is None and r.body.brokers for r in out)
        broker_nodes = {b.node_id: (b.host, b.port) for b in out[0].body.brokers}
        c.set_nodes(broker_nodes)
        (real,) = broker_nodes
        connect(c, real)
        assert c.least_loaded_node(now()) in (node, real)


@pytest.mark.broker
def test_embedded_broker_takes_a_pre_encoded_produce(broker):
    from kctl.engine import admin
    from kctl.engine.blocking_client import BlockingClient
    from kctl.protocol.records import Record, build_batch

    with BlockingClient(broker.bootstrap) as bc:
        admin.create_topics(bc, ["network-produce"])
        topic_id = admin.fetch_metadata(bc, ["network-produce"]).topics["network-produce"].topic_id
    with make_client(broker.bootstrap) as c:
        connect(c)
        version = c.api_version(-1, PRODUCE)
        batch = build_batch([Record(offset=i, timestamp=0, key=None, value=b"v%d" % i) for i in range(10)])
        topic = ProduceRequest.TopicProduceData(
            partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)])
        if version >= 13:
            topic.topic_id = topic_id
        else:
            topic.name = "network-produce"
        produce = ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[topic])
        c.send(ClientRequest(node=-1, api_key=PRODUCE, api_version=version,
                             body=messages.encode(produce, version)), now())
        (r,) = poll_until(c, 1)
        p = r.body.responses[0].partition_responses[0]
        assert p.error_code == 0 and p.base_offset == 0
        assert r.request.sent_ns <= r.received_ns


@pytest.mark.parametrize("version", [4, 12])  # request header v1 and v2 (flexible)
def test_pre_encoded_body_frames_byte_for_byte_like_the_generic_encoder(version):
    body = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="t")])
    with FakeBroker(silent) as fake, make_client(fake.address) as c:
        connect(c)
        req = ClientRequest(node=-1, api_key=METADATA, api_version=version,
                            body=messages.encode(body, version))
        c.send(req, now())
        fake.wait_requests(1, api_key=METADATA)
        assert fake.raw[-1] == messages.encode_request(METADATA, version, req.correlation_id,
                                                       "kctl-test", body)


def test_a_failing_callback_does_not_stop_the_others():
    with FakeBroker(silent) as fake, make_client(fake.address, max_in_flight_requests_per_connection=2) as c:
        connect(c)
        seen = []

        def boom(r):
            raise RuntimeError("callback bug")

        c.send(metadata_request(callback=boom), now())
        c.send(metadata_request(callback=seen.append), now())
        reqs = fake.wait_requests(2, api_key=METADATA)
        fake.send(0, b"".join(fake.response_frame(r, MetadataResponse()) for _, r in reqs))
        with pytest.raises(RuntimeError, match="callback bug"):
            while not seen:
                c.poll(20 * MS, now())
        assert len(seen) == 1 and c.in_flight_request_count() == 0
