"""BlockingClient against a scripted fake broker: ApiVersions fallback and framing faults."""

import socket
import struct
import threading

import pytest

from kctl.engine.blocking_client import BlockingClient, parse_address
from kctl.errors import BrokerUnavailableError, RemoteProtocolError
from kctl.protocol import messages, schema
from kctl.protocol.frames import FrameDecoder, frame
from kctl.protocol.versions import VersionRange, negotiate

API_VERSIONS = 18


class FakeBroker:
    """Accepts one connection and answers each request with ``handler(request) -> bytes|None``."""

    def __init__(self, handler):
        self.handler = handler
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.requests = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        conn, _ = self.sock.accept()
        dec = FrameDecoder()
        with conn:
            while data := conn.recv(65536):
                dec.feed(data)
                for f in dec.frames():
                    req = messages.decode_request(f)
                    self.requests.append(req)
                    out = self.handler(req)
                    if out is None:
                        return
                    conn.sendall(out)

    def close(self):
        self.sock.close()


def _api_versions_response(req, version, error_code=0, ranges=None):
    cls = messages.response_class(API_VERSIONS)
    keys = [cls.ApiVersion(api_key=k, min_version=lo, max_version=hi)
            for k, (lo, hi) in (ranges or {API_VERSIONS: (0, 4), 3: (0, 12)}).items()]
    body = cls(error_code=error_code, api_keys=keys, throttle_time_ms=0)
    return frame(messages.encode_response(API_VERSIONS, version, req.header.correlation_id, body))


def test_falls_back_when_the_broker_refuses_our_api_versions_version():
    def handler(req):
        if req.header.request_api_version > 2:
            # An older broker answers in the v0 layout with UNSUPPORTED_VERSION and its range.
            return _api_versions_response(req, 0, error_code=35, ranges={API_VERSIONS: (0, 2)})
        return _api_versions_response(req, req.header.request_api_version,
                                      ranges={API_VERSIONS: (0, 2), 3: (0, 1), 0: (3, 3)})

    fake = FakeBroker(handler)
    with BlockingClient(fake.address, timeout_s=5) as c:
        assert [r.header.request_api_version for r in fake.requests] == [4, 2]
        assert c.versions.chosen == {API_VERSIONS: 2, 3: 1, 0: 3}
    fake.close()


def test_wrong_correlation_id_is_a_protocol_error():
    def handler(req):
        out = bytearray(_api_versions_response(req, 3))
        out[4:8] = struct.pack(">i", req.header.correlation_id + 7)
        return bytes(out)

    fake = FakeBroker(handler)
    with pytest.raises(RemoteProtocolError, match="out of order"):
        BlockingClient(fake.address, timeout_s=5).connect()
    fake.close()


def test_connection_closed_mid_handshake_names_the_broker():
    fake = FakeBroker(lambda req: None)
    with pytest.raises(BrokerUnavailableError, match=fake.address):
        BlockingClient(fake.address, timeout_s=5).connect()
    fake.close()


def test_silent_broker_times_out_clearly():
    fake = FakeBroker(lambda req: b"")
    with pytest.raises(BrokerUnavailableError, match="did not answer"):
        BlockingClient(fake.address, timeout_s=0.3).connect()
    fake.close()


def test_negotiate_picks_highest_common_and_skips_disjoint():
    produce = schema.API_BY_NAME["Produce"]
    got = negotiate([VersionRange(produce.api_key, 0, 3), VersionRange(9999, 0, 1),
                     VersionRange(schema.API_BY_NAME["Fetch"].api_key, 99, 120)])
    assert got.chosen == {produce.api_key: 3}
    with pytest.raises(Exception, match="no common version of Fetch"):
        got.require(schema.API_BY_NAME["Fetch"].api_key)


@pytest.mark.parametrize("text,expected", [
    ("127.0.0.1:9093", ("127.0.0.1", 9093)), ("[::1]:19092", ("::1", 19092)), ("host", ("host", 9092))])
def test_parse_address(text, expected):
    assert parse_address(text) == expected


# -- connection set-up failures: one line naming the broker and what happened, within
# socket.connection.setup.timeout.ms, with a hint when security.protocol looks wrong.

class RawListener:
    """Accepts connections on 127.0.0.1 and either never answers (``silent``) or resets
    each after reading a few bytes (``reset``)."""

    def __init__(self, mode: str):
        self.mode = mode
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.conns = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            if self.mode == "reset":
                conn.recv(10)
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conn.close()
            else:
                self.conns.append(conn)

    def close(self):
        self.stopped.set()
        self.thread.join(2)
        for c in self.conns:
            c.close()
        self.sock.close()


def _tls():
    from kctl.config import ProducerConfig
    return ProducerConfig.from_properties({"security.protocol": "SSL"}).security


@pytest.fixture
def silent():
    listener = RawListener("silent")
    yield listener
    listener.close()


def test_a_tls_handshake_without_answer_is_one_line_within_the_setup_timeout(silent):
    import time
    start = time.monotonic()
    with pytest.raises(BrokerUnavailableError) as info:
        BlockingClient(silent.address, security=_tls(), timeout_s=30, setup_timeout_s=0.5).connect()
    assert time.monotonic() - start < 3
    text = str(info.value)
    assert silent.address in text and "TLS handshake within 0.5 s" in text and "is this a TLS port" in text


def test_a_tls_handshake_reset_is_one_line():
    listener = RawListener("reset")
    try:
        with pytest.raises(BrokerUnavailableError) as info:
            BlockingClient(listener.address, security=_tls(), setup_timeout_s=5).connect()
    finally:
        listener.close()
    text = str(info.value)
    assert listener.address in text and "during the TLS handshake" in text and "is this a TLS port" in text


def test_plaintext_without_answer_hints_at_tls_and_follows_the_setup_timeout(silent):
    with pytest.raises(BrokerUnavailableError) as info:
        BlockingClient(silent.address, timeout_s=30, setup_timeout_s=0.5).connect()
    text = str(info.value)
    assert "within 0.5 s" in text and "socket.connection.setup.timeout.ms" in text
    assert "may expect TLS" in text and "security.protocol" in text


def test_plaintext_answered_with_a_tls_alert_says_to_use_tls():
    server = socket.create_server(("127.0.0.1", 0))

    def answer():
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"\x15\x03\x03\x00\x02\x02\x46")    # a TLS alert record, as a TLS listener sends
    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    with pytest.raises(RemoteProtocolError, match="answered with TLS: set security.protocol=SSL"):
        BlockingClient(f"127.0.0.1:{server.getsockname()[1]}", timeout_s=5).connect()
    thread.join(5)
    server.close()


def test_kctl_metadata_against_a_silent_port_with_ssl_is_one_line_within_the_setup_timeout(silent):
    import subprocess
    import sys
    import time
    start = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "kctl", "metadata", "-b", silent.address,
                          "-X", "security.protocol=SSL", "-X", "socket.connection.setup.timeout.ms=1000"],
                         capture_output=True, text=True, timeout=30)
    assert time.monotonic() - start < 8
    assert run.returncode != 0 and "Traceback" not in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "is this a TLS port" in run.stderr, run.stderr
