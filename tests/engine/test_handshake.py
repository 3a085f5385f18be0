"""The connection set-up exchange, stepped by hand without a socket (sans-IO): ApiVersions with
KIP-511's retry, SASL PLAIN and SCRAM against scramp's server side, refusals, and the table of
states. Java's counterparts: NetworkClientTest (ApiVersions), SaslAuthenticatorTest."""

from __future__ import annotations

import pytest

from kctl.config import ProducerConfig
from kctl.engine.handshake import (
    API_VERSIONS, TRANSITIONS, ClientHandshake, HandshakeObserver, HandshakeState)
from kctl.engine.sasl import SASL_AUTHENTICATE, SASL_HANDSHAKE, reauthentication_time_ns
from kctl.errors import AuthenticationError, RemoteProtocolError
from kctl.protocol import messages

METADATA = 3
MS = 1_000_000
ADDRESS = "broker-1:9092"


def _security(**props):
    return ProducerConfig.from_properties(props).security


def _api_versions(version: int, *, error_code: int = 0, ranges=None) -> bytes:
    cls = messages.response_class(API_VERSIONS)
    ranges = ranges or {API_VERSIONS: (0, 3), METADATA: (0, 12),
                        SASL_HANDSHAKE: (0, 1), SASL_AUTHENTICATE: (0, 2)}
    keys = [cls.ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in ranges.items()]
    return messages.encode_response(API_VERSIONS, version, 1,
                                    cls(error_code=error_code, api_keys=keys, throttle_time_ms=0))


def _answer(api_key: int, version: int, **fields) -> bytes:
    return messages.encode_response(api_key, version, 1, messages.response_class(api_key)(**fields))


def test_plaintext_is_ready_after_api_versions():
    h = ClientHandshake(_security(), ADDRESS)
    req = h.next_request()
    assert (req.api_key, h.state) == (API_VERSIONS, HandshakeState.API_VERSIONS)
    assert h.next_request() is None                   # one request out at a time
    h.on_response(_api_versions(req.api_version))
    assert h.ready and h.versions.version_for(METADATA) == 12
    assert h.next_request() is None


def test_unsupported_api_versions_version_is_asked_again_lower():
    """KIP-511: the broker answers in the v0 layout with its own range."""
    h = ClientHandshake(_security(), ADDRESS)
    first = h.next_request()
    h.on_response(_api_versions(0, error_code=35, ranges={API_VERSIONS: (0, 2)}))
    again = h.next_request()
    assert (again.api_key, again.api_version) == (API_VERSIONS, 2) and again.api_version < first.api_version
    assert h.state is HandshakeState.API_VERSIONS
    h.on_response(_api_versions(2))
    assert h.ready


def test_api_versions_error_fails_the_handshake():
    h = ClientHandshake(_security(), ADDRESS)
    h.next_request()
    with pytest.raises(RemoteProtocolError, match=f"broker {ADDRESS} refused ApiVersions"):
        h.on_response(_api_versions(3, error_code=41))
    assert h.state is HandshakeState.FAILED


def test_sasl_plain_handshake_then_authenticate():
    h = ClientHandshake(_security(**{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                     "sasl.username": "alice", "sasl.password": "pw"}), ADDRESS)
    h.on_response(_api_versions(h.next_request().api_version))
    assert h.state is HandshakeState.SASL_HANDSHAKE and h.authenticating
    hs = h.next_request()
    assert (hs.api_key, hs.api_version, hs.body.mechanism) == (SASL_HANDSHAKE, 1, "PLAIN")
    h.on_response(_answer(SASL_HANDSHAKE, 1, error_code=0, mechanisms=["PLAIN"]))
    auth = h.next_request()
    assert auth.api_key == SASL_AUTHENTICATE and auth.body.auth_bytes == b"\0alice\0pw"
    assert h.state is HandshakeState.SASL_AUTHENTICATE
    h.on_response(_answer(SASL_AUTHENTICATE, auth.api_version, error_code=0, auth_bytes=b""))
    assert h.ready


def test_sasl_scram_against_scramps_server():
    scramp = pytest.importorskip("scramp")
    mech = scramp.ScramMechanism("SCRAM-SHA-256")
    salt, stored, server_key, iterations = mech.make_auth_info("pw")
    h = ClientHandshake(_security(**{"security.protocol": "SASL_PLAINTEXT",
                                     "sasl.mechanism": "SCRAM-SHA-256",
                                     "sasl.username": "bob", "sasl.password": "pw"}), ADDRESS)
    h.on_response(_api_versions(h.next_request().api_version))
    h.next_request()
    h.on_response(_answer(SASL_HANDSHAKE, 1, error_code=0, mechanisms=["SCRAM-SHA-256"]))
    server = mech.make_server(lambda user: (salt, stored, server_key, iterations))
    rounds = 0
    while not h.ready:
        req = h.next_request()
        assert req.api_key == SASL_AUTHENTICATE
        rounds += 1
        if rounds == 1:
            server.set_client_first(req.body.auth_bytes.decode())
            reply = server.get_server_first()
        else:
            server.set_client_final(req.body.auth_bytes.decode())
            reply = server.get_server_final()
        h.on_response(_answer(SASL_AUTHENTICATE, req.api_version, error_code=0,
                              auth_bytes=reply.encode()))
    assert rounds == 2


def test_refused_password_is_one_line_without_the_password():
    h = ClientHandshake(_security(**{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                     "sasl.username": "alice", "sasl.password": "s3cret"}), ADDRESS)
    h.on_response(_api_versions(h.next_request().api_version))
    h.next_request()
    h.on_response(_answer(SASL_HANDSHAKE, 1, error_code=0, mechanisms=["PLAIN"]))
    auth = h.next_request()
    with pytest.raises(AuthenticationError) as info:
        h.on_response(_answer(SASL_AUTHENTICATE, auth.api_version, error_code=58,
                              error_message="invalid credentials"))
    assert str(info.value).startswith(f"SASL PLAIN authentication as 'alice' failed at broker {ADDRESS}")
    assert "s3cret" not in str(info.value) and h.state is HandshakeState.FAILED


def test_broker_without_sasl_handshake_v1_is_refused():
    h = ClientHandshake(_security(**{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                     "sasl.username": "a", "sasl.password": "b"}), ADDRESS)
    req = h.next_request()
    with pytest.raises(AuthenticationError, match="does not offer SaslHandshake v1"):
        h.on_response(_api_versions(req.api_version, ranges={API_VERSIONS: (0, 3),
                                                             SASL_HANDSHAKE: (0, 0)}))


def test_transitions_table_is_closed():
    for state, targets in TRANSITIONS.items():
        assert targets <= set(HandshakeState), state
    # READY leaves only to log in again (KIP-368); FAILED is final.
    assert TRANSITIONS[HandshakeState.READY] == {HandshakeState.SASL_HANDSHAKE}
    assert not TRANSITIONS[HandshakeState.FAILED]


def _plain_login(h: ClientHandshake, *, lifetime_ms: int, api_versions: bool = True) -> None:
    if api_versions:
        h.on_response(_api_versions(h.next_request().api_version))
    hs = h.next_request()
    assert hs.api_key == SASL_HANDSHAKE
    h.on_response(_answer(SASL_HANDSHAKE, hs.api_version, error_code=0, mechanisms=["PLAIN"]))
    auth = h.next_request()
    assert auth.api_key == SASL_AUTHENTICATE
    h.on_response(_answer(SASL_AUTHENTICATE, auth.api_version, error_code=0, auth_bytes=b"",
                          session_lifetime_ms=lifetime_ms))


def test_reauthentication_logs_in_again_without_api_versions():
    """KIP-368 (Java: SaslAuthenticatorTest's re-authentication cases): the session
    lifetime is read from SaslAuthenticate v1+, and a READY handshake logs in again
    with SaslHandshake, the versions already negotiated."""
    h = ClientHandshake(_security(**{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                     "sasl.username": "alice", "sasl.password": "pw"}), ADDRESS)
    _plain_login(h, lifetime_ms=3000)
    assert h.ready and h.session_lifetime_ms == 3000 and h.reauthentications == 0
    versions = h.versions
    h.reauthenticate()
    assert h.state is HandshakeState.SASL_HANDSHAKE and h.reauthenticating and not h.ready
    _plain_login(h, lifetime_ms=2500, api_versions=False)
    assert h.ready and h.session_lifetime_ms == 2500 and h.reauthentications == 1
    assert h.versions is versions and not h.reauthenticating


def test_reauthentication_refused_fails_the_handshake():
    h = ClientHandshake(_security(**{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                     "sasl.username": "alice", "sasl.password": "pw"}), ADDRESS)
    _plain_login(h, lifetime_ms=1000)
    h.reauthenticate()
    hs = h.next_request()
    h.on_response(_answer(SASL_HANDSHAKE, hs.api_version, error_code=0, mechanisms=["PLAIN"]))
    auth = h.next_request()
    with pytest.raises(AuthenticationError, match="failed at broker"):
        h.on_response(_answer(SASL_AUTHENTICATE, auth.api_version, error_code=58,
                              error_message="Cannot change principals during re-authentication"))
    assert h.state is HandshakeState.FAILED and h.reauthentications == 0


def test_no_session_lifetime_from_saslauthenticate_v0_and_no_reauthentication_without_sasl():
    h = ClientHandshake(_security(**{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                     "sasl.username": "a", "sasl.password": "b"}), ADDRESS)
    h.on_response(_api_versions(h.next_request().api_version, ranges={
        API_VERSIONS: (0, 3), SASL_HANDSHAKE: (0, 1), SASL_AUTHENTICATE: (0, 0)}))
    _plain_login(h, lifetime_ms=0, api_versions=False)
    assert h.ready and h.session_lifetime_ms == 0
    plain = ClientHandshake(_security(), ADDRESS)
    plain.on_response(_api_versions(plain.next_request().api_version))
    with pytest.raises(AssertionError, match="did not use SASL"):
        plain.reauthenticate()


@pytest.mark.parametrize("draw,expected_ms", [(0.0, 850), (0.5, 900), (0.999999, 949)])
def test_reauthentication_time_is_85_to_95_percent_of_the_lifetime(draw, expected_ms):
    """Java's ReauthInfo: 0.85 + random * 0.10 of the lifetime after the login ended."""
    assert reauthentication_time_ns(7 * MS, 1000, lambda: draw) == 7 * MS + expected_ms * MS
    assert reauthentication_time_ns(7 * MS, 0, lambda: draw) is None


def test_observer_follows_a_v1_exchange_and_raw_v0_tokens():
    seen = HandshakeObserver()
    seen.on_request(API_VERSIONS, 3)
    assert seen.state is HandshakeState.API_VERSIONS
    seen.on_request(SASL_HANDSHAKE, 1)
    seen.on_response(SASL_HANDSHAKE, 1, ok=True)
    assert seen.state is HandshakeState.SASL_AUTHENTICATE and not seen.raw_sasl
    seen.on_request(SASL_AUTHENTICATE, 2)
    seen.on_request(METADATA, 12)
    assert seen.state is HandshakeState.READY

    raw = HandshakeObserver()
    raw.on_request(SASL_HANDSHAKE, 0)
    raw.on_response(SASL_HANDSHAKE, 0, ok=True)
    assert raw.raw_sasl
    raw.on_raw_token_end()
    assert raw.state is HandshakeState.READY and not raw.raw_sasl

    refused = HandshakeObserver()
    refused.on_request(SASL_HANDSHAKE, 1)
    refused.on_response(SASL_HANDSHAKE, 1, ok=False)
    assert refused.state is HandshakeState.FAILED

    old_client = HandshakeObserver()        # no ApiVersions at all
    old_client.on_request(METADATA, 0)
    assert old_client.state is HandshakeState.READY
