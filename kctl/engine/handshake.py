"""A Kafka connection's set-up exchange, sans-IO: ApiVersions, then SaslHandshake and
SaslAuthenticate when SASL is on.

How this works
--------------
Every new connection first asks ApiVersions (kctl's highest version; again at the
broker's highest when it answers UNSUPPORTED_VERSION in the v0 layout, KIP-511) and
keeps the negotiated versions; with SASL it then sends SaslHandshake v1+ naming the
mechanism and SaslAuthenticate requests carrying the mechanism's messages
(``engine/sasl.py``) until the mechanism is done (KIP-43, KIP-152).

``ClientHandshake`` decides which request comes next and reads each answer, h11
style: ``next_request()`` hands out a ``HandshakeRequest`` (API key, version, body),
the caller frames and sends it with its own correlation id and client id, checks
the correlation id of the answer and gives the answer's bytes to ``on_response()``.
It never touches a socket or a clock, so the producer's ``NetworkClient`` (non-
blocking), the ``BlockingClient`` and tests drive the same code. Its states are a
table (``TRANSITIONS``); a move not in it is a bug raised loudly.

``HandshakeObserver`` is the same table watched from the middle of a connection:
``kctl inspect`` sees its clients' handshakes pass and uses it to know when a
connection is authenticating or ready, and when the frames are raw SASL tokens
(after a SaslHandshake v0, the tokens travel size-prefixed but without a Kafka
header, so there is no API key or correlation id to read in them).

Re-authentication (KIP-368): once READY, ``reauthenticate()`` moves a SASL
handshake back to SASL_HANDSHAKE (READY -> SASL_HANDSHAKE in the table) and runs the
mechanism again on the same connection with the versions already negotiated;
``session_lifetime_ms`` is what the broker's last SaslAuthenticate answer set. When
to do it is the caller's (``sasl.reauthentication_time_ns``, time passed in): the
handshake never reads a clock.

Failures: a refusal (TLS aside, which the connection layer reports) is an
``AuthenticationError`` naming the broker and the reason, never the password;
a broker breaking the exchange is a ``RemoteProtocolError``. Either leaves the
handshake FAILED.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Final

import kctl
from kctl.config import SecurityConfig
from kctl.engine.sasl import SASL_AUTHENTICATE, SASL_HANDSHAKE, SaslAuthenticator
from kctl.errors import AuthenticationError, DecodeError, KctlError, RemoteProtocolError
from kctl.protocol import messages, schema
from kctl.protocol.client_versions import CLIENT_MAX_VERSIONS
from kctl.protocol.error_codes import error_for
from kctl.protocol.versions import NegotiatedVersions, VersionRange, negotiate

__all__ = ["API_VERSIONS", "ApiVersionsAnswer", "ClientHandshake", "HandshakeObserver",
           "HandshakeRequest", "HandshakeState", "TRANSITIONS", "api_versions_request",
           "read_api_versions_response"]

API_VERSIONS: Final = schema.API_BY_NAME["ApiVersions"].api_key
UNSUPPORTED_VERSION: Final = 35


class HandshakeState(enum.Enum):
    API_VERSIONS = "api_versions"
    SASL_HANDSHAKE = "sasl_handshake"
    SASL_AUTHENTICATE = "sasl_authenticate"
    READY = "ready"
    FAILED = "failed"


_H = HandshakeState
#: Allowed moves (conventions rule 5). API_VERSIONS -> API_VERSIONS is KIP-511's retry at a
#: lower version; SASL_AUTHENTICATE -> SASL_AUTHENTICATE is each further round of the mechanism;
#: READY -> SASL_HANDSHAKE is a re-authentication (KIP-368) on the same connection.
TRANSITIONS: Final[dict[HandshakeState, frozenset[HandshakeState]]] = {
    _H.API_VERSIONS: frozenset({_H.API_VERSIONS, _H.SASL_HANDSHAKE, _H.READY, _H.FAILED}),
    _H.SASL_HANDSHAKE: frozenset({_H.SASL_AUTHENTICATE, _H.FAILED}),
    _H.SASL_AUTHENTICATE: frozenset({_H.SASL_AUTHENTICATE, _H.READY, _H.FAILED}),
    _H.READY: frozenset({_H.SASL_HANDSHAKE}),
    _H.FAILED: frozenset(),
}


def _move(current: HandshakeState, new: HandshakeState) -> HandshakeState:
    if new not in TRANSITIONS[current]:
        raise AssertionError(f"handshake cannot go from {current.value} to {new.value}")
    return new


@dataclass(frozen=True, slots=True)
class HandshakeRequest:
    """A request the handshake wants sent: the caller adds the header (correlation id,
    client id) and frames it."""

    api_key: int
    api_version: int
    body: Any


@dataclass(frozen=True, slots=True)
class ApiVersionsAnswer:
    """What an ApiVersions response means: the negotiated versions, or the
    lower ApiVersions version to ask again with (KIP-511's UNSUPPORTED_VERSION)."""

    versions: NegotiatedVersions | None
    retry_version: int | None = None


def api_versions_request() -> Any:
    """The ApiVersionsRequest kctl sends on every new connection."""
    return messages.message_class("ApiVersionsRequest")(
        client_software_name="kctl", client_software_version=kctl.__version__)


def read_api_versions_response(data: bytes, version: int, address: str) -> ApiVersionsAnswer:
    """Interprets an ApiVersions response frame (correlation id already checked).

    A broker that does not know ``version`` answers in the v0 layout with
    UNSUPPORTED_VERSION and its own range: the answer then names the version to
    retry with. Any other error, or no usable retry, is a ``RemoteProtocolError``.
    """
    max_version = CLIENT_MAX_VERSIONS[API_VERSIONS]
    try:
        resp = messages.decode_response(data, API_VERSIONS, version).body
    except DecodeError:
        resp = messages.decode_response(data, API_VERSIONS, 0).body
    if resp.error_code == UNSUPPORTED_VERSION:
        offered = [k for k in resp.api_keys if k.api_key == API_VERSIONS]
        retry = min(offered[0].max_version, max_version) if offered else None
        if retry is None or retry >= version:
            raise RemoteProtocolError(
                f"broker {address} supports no ApiVersions version kctl speaks")
        return ApiVersionsAnswer(None, retry)
    if resp.error_code != 0:
        err = error_for(resp.error_code)
        raise RemoteProtocolError(f"broker {address} refused ApiVersions: {err.name}")
    return ApiVersionsAnswer(negotiate((VersionRange(k.api_key, k.min_version, k.max_version)
                                        for k in resp.api_keys), CLIENT_MAX_VERSIONS))


class ClientHandshake:
    """One connection's set-up, from the client's side: ``next_request()`` -> send ->
    ``on_response()``, until ``ready`` (or an error, and ``state`` FAILED)."""

    def __init__(self, security: SecurityConfig, address: str) -> None:
        self.security = security
        self.address = address
        self.state = HandshakeState.API_VERSIONS
        self.versions: NegotiatedVersions | None = None
        self._api_versions_version = CLIENT_MAX_VERSIONS[API_VERSIONS]
        self._sasl: SaslAuthenticator | None = None
        #: Completed re-authentications (KIP-368) on this connection.
        self.reauthentications = 0
        self.reauthenticating = False
        # The request handed out and not yet answered, and the one to hand out next.
        self._sent: HandshakeRequest | None = None
        self._next: HandshakeRequest | None = HandshakeRequest(
            API_VERSIONS, self._api_versions_version, api_versions_request())

    @property
    def ready(self) -> bool:
        return self.state is HandshakeState.READY

    @property
    def authenticating(self) -> bool:
        """SASL under way (after ApiVersions)."""
        return self.state in (HandshakeState.SASL_HANDSHAKE, HandshakeState.SASL_AUTHENTICATE)

    @property
    def session_lifetime_ms(self) -> int:
        """The session lifetime the broker set at the last login (0: none, or no SASL)."""
        return 0 if self._sasl is None else self._sasl.session_lifetime_ms

    def reauthenticate(self) -> None:
        """Logs in again on this READY connection (KIP-368): SaslHandshake and the
        mechanism's exchange once more, with the versions already negotiated."""
        if self._sasl is None:
            raise AssertionError("re-authentication of a connection that did not use SASL")
        self.state = _move(self.state, HandshakeState.SASL_HANDSHAKE)
        self.reauthenticating = True
        self._sasl = SaslAuthenticator(self.security, self.address)
        self._next_sasl()

    def next_request(self) -> HandshakeRequest | None:
        """The request to send now; ``None`` while an answer is awaited, or when done."""
        nxt, self._next = self._next, None
        if nxt is not None:
            self._sent = nxt
        return nxt

    def on_response(self, frame: bytes) -> None:
        """The answer (a response frame without its size prefix) to the request last
        handed out. Raises ``AuthenticationError`` or ``RemoteProtocolError`` and goes
        FAILED when the handshake cannot complete."""
        sent, self._sent = self._sent, None
        if sent is None:
            raise AssertionError("a handshake answer arrived with no handshake request out")
        try:
            if sent.api_key == API_VERSIONS:
                self._on_api_versions(frame, sent.api_version)
            else:
                body = messages.decode_response(frame, sent.api_key, sent.api_version).body
                self._on_sasl(sent.api_key, body)
        except KctlError:
            self.state = _move(self.state, HandshakeState.FAILED)
            raise

    def _on_api_versions(self, frame: bytes, version: int) -> None:
        answer = read_api_versions_response(frame, version, self.address)
        if answer.versions is None:
            assert answer.retry_version is not None
            self.state = _move(self.state, HandshakeState.API_VERSIONS)
            self._next = HandshakeRequest(API_VERSIONS, answer.retry_version, api_versions_request())
            return
        self.versions = versions = answer.versions
        if not self.security.uses_sasl:
            self.state = _move(self.state, HandshakeState.READY)
            return
        handshake = versions.version_for(SASL_HANDSHAKE)
        if handshake is None or handshake < 1 or versions.version_for(SASL_AUTHENTICATE) is None:
            raise AuthenticationError(
                f"broker {self.address} does not offer SaslHandshake v1 and SaslAuthenticate "
                "(KIP-152, Kafka 1.0+): kctl cannot authenticate with SASL there")
        self._sasl = SaslAuthenticator(self.security, self.address)
        self.state = _move(self.state, HandshakeState.SASL_HANDSHAKE)
        self._next_sasl()

    def _on_sasl(self, api_key: int, body: Any) -> None:
        sasl = self._sasl
        assert sasl is not None
        sasl.on_response(api_key, body)
        if sasl.done:
            self.state = _move(self.state, HandshakeState.READY)
            if self.reauthenticating:
                self.reauthenticating = False
                self.reauthentications += 1
            return
        self.state = _move(self.state, HandshakeState.SASL_AUTHENTICATE)
        self._next_sasl()

    def _next_sasl(self) -> None:
        assert self._sasl is not None and self.versions is not None
        step = self._sasl.next_request()
        if step is None:
            raise RemoteProtocolError(f"SASL exchange with {self.address} stalled")
        api_key, body = step
        self._next = HandshakeRequest(api_key, self.versions.require(api_key), body)


class HandshakeObserver:
    """A client's handshake as seen by a proxy between it and the broker.

    ``on_request`` / ``on_response`` take what passed (API key and version, and for
    responses whether the top-level ``error_code`` was 0); ``raw_sasl`` says the
    next frames are raw SASL tokens (no Kafka header). A client that sends anything
    but ApiVersions or SASL is READY: clients may skip ApiVersions (old ones do).
    After a v0 SaslHandshake the raw tokens end with the first frame that reads as a
    Kafka request (the caller decides that), and the connection is READY."""

    __slots__ = ("state", "raw_sasl")

    def __init__(self) -> None:
        self.state = HandshakeState.API_VERSIONS
        self.raw_sasl = False

    def _go(self, new: HandshakeState) -> None:
        self.state = _move(self.state, new)

    def on_request(self, api_key: int, api_version: int) -> None:
        state = self.state
        if state is HandshakeState.API_VERSIONS:
            if api_key == SASL_HANDSHAKE:
                self._go(HandshakeState.SASL_HANDSHAKE)
            elif api_key != API_VERSIONS:
                self._go(HandshakeState.READY)
        elif state is HandshakeState.SASL_AUTHENTICATE and api_key != SASL_AUTHENTICATE:
            self.raw_sasl = False
            self._go(HandshakeState.READY)
        # SASL_HANDSHAKE waits for its answer; READY and FAILED are final.

    def on_response(self, api_key: int, api_version: int, ok: bool) -> None:
        if api_key == SASL_HANDSHAKE and self.state is HandshakeState.SASL_HANDSHAKE:
            if not ok:
                self._go(HandshakeState.FAILED)
                return
            self._go(HandshakeState.SASL_AUTHENTICATE)
            self.raw_sasl = api_version == 0
        elif api_key == SASL_AUTHENTICATE and self.state is HandshakeState.SASL_AUTHENTICATE and not ok:
            self._go(HandshakeState.FAILED)

    def on_raw_token_end(self) -> None:
        """A frame after raw SASL tokens read as a Kafka request: authentication is over."""
        if self.raw_sasl:
            self.raw_sasl = False
            self._go(HandshakeState.READY)
