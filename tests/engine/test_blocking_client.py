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
