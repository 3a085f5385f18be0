"""SASL authentication over Kafka requests (KIP-43, KIP-152), sans-IO.

How this works: after ApiVersions, a SASL connection sends SaslHandshake (v1+,
naming the mechanism) and then SaslAuthenticate requests carrying the
mechanism's messages (``kctl/protocol/sasl.py``) until the mechanism is done.
``SaslAuthenticator`` decides which request comes next and reads each answer;
the blocking client and the non-blocking network client only carry them. A
refusal is an ``AuthenticationError`` naming the mechanism, the user and the
broker's own message (never the password); a broker breaking the exchange is a
``SaslError``.

Re-authentication (KIP-368): a SaslAuthenticate answer (v1+) may carry
``session_lifetime_ms``; a broker with ``connections.max.reauth.ms`` closes a
connection whose session has expired when its next request arrives. The client
logs in again on the same connection before that, as Java's
``SaslClientAuthenticator`` does: at a time drawn between 85 % and 95 % of the
lifetime after the login ended (``reauthentication_time_ns``), with a fresh
SaslHandshake and mechanism exchange (no new ApiVersions).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from kctl.config import SecurityConfig
from kctl.errors import AuthenticationError
from kctl.protocol import messages, schema
from kctl.protocol.error_codes import error_for
from kctl.protocol.sasl import SaslError, mechanism_for

SASL_HANDSHAKE = schema.API_BY_NAME["SaslHandshake"].api_key
SASL_AUTHENTICATE = schema.API_BY_NAME["SaslAuthenticate"].api_key
_UNSUPPORTED_SASL_MECHANISM = 33

#: Java's window for re-authentication: 85 % of the session lifetime (network latency and
#: clock drift) plus up to 10 % more at random (so many connections do not log in at once).
REAUTH_WINDOW_START: Final = 0.85
REAUTH_WINDOW_JITTER: Final = 0.10
_NS_PER_MS: Final = 1_000_000

__all__ = ["REAUTH_WINDOW_JITTER", "REAUTH_WINDOW_START", "SASL_AUTHENTICATE", "SASL_HANDSHAKE",
           "SaslAuthenticator", "reauthentication_time_ns"]


def reauthentication_time_ns(authenticated_ns: int, session_lifetime_ms: int,
                             random: Callable[[], float]) -> int | None:
    """When a connection whose login ended at ``authenticated_ns`` logs in again: a
    random point between 85 % and 95 % of the broker's session lifetime later (Java's
    ``ReauthInfo.setAuthenticationEndAndSessionReauthenticationTimes``); ``None`` when
    the broker set no lifetime (0: the session never expires)."""
    if session_lifetime_ms <= 0:
        return None
    fraction = REAUTH_WINDOW_START + random() * REAUTH_WINDOW_JITTER
    return authenticated_ns + int(session_lifetime_ms * fraction) * _NS_PER_MS


class SaslAuthenticator:
    """One connection's SASL exchange: ``next_request()`` -> send -> ``on_response()``,
    until ``done``."""

    def __init__(self, security: SecurityConfig, address: str) -> None:
        assert security.sasl_mechanism is not None   # config.check_sasl: set whenever SASL is
        self.mechanism_name = security.sasl_mechanism.value
        self.username = security.sasl_username or ""
        self.address = address
        self._mechanism = mechanism_for(self.mechanism_name, self.username,
                                        security.sasl_password or "")
        self._next: tuple[int, Any] | None = (
            SASL_HANDSHAKE, messages.message_class("SaslHandshakeRequest")(mechanism=self.mechanism_name))
        self.done = False
        #: The session lifetime the broker's last SaslAuthenticate answer gave (v1+; 0: none).
        self.session_lifetime_ms = 0

    def next_request(self) -> tuple[int, Any] | None:
        """(api_key, request body) to send now, or ``None`` (wait for an answer, or done)."""
        nxt, self._next = self._next, None
        return nxt

    def _fail(self, reason: str) -> AuthenticationError:
        return AuthenticationError(
            f"SASL {self.mechanism_name} authentication as {self.username!r} failed at broker "
            f"{self.address}: {reason}")

    def on_response(self, api_key: int, body: Any) -> None:
        try:
            if api_key == SASL_HANDSHAKE:
                self._on_handshake(body)
            elif api_key == SASL_AUTHENTICATE:
                self._on_authenticate(body)
            else:
                raise SaslError(f"unexpected API key {api_key} during SASL")
        except AuthenticationError as e:
            if str(e).startswith("SASL "):
                raise
            raise self._fail(str(e)) from None
        except SaslError as e:
            raise self._fail(str(e)) from None

    def _authenticate(self, auth_bytes: bytes) -> None:
        self._next = (SASL_AUTHENTICATE,
                      messages.message_class("SaslAuthenticateRequest")(auth_bytes=auth_bytes))

    def _on_handshake(self, body: Any) -> None:
        if body.error_code == _UNSUPPORTED_SASL_MECHANISM:
            offered = ", ".join(body.mechanisms or []) or "none"
            if self.mechanism_name in (body.mechanisms or []):
                # Seen from Tansu: the error code and the list disagree; say both, guess neither.
                raise self._fail(f"SaslHandshake answered UNSUPPORTED_SASL_MECHANISM "
                                 f"({_UNSUPPORTED_SASL_MECHANISM}) for {self.mechanism_name}, yet the "
                                 f"mechanisms it lists include it ({offered}): the broker's answer "
                                 "contradicts its own list (its SASL set-up, not the client's)")
            raise self._fail(f"the broker does not enable {self.mechanism_name} (it offers: {offered})")
        if body.error_code:
            raise self._fail(f"SaslHandshake answered {error_for(body.error_code).name}")
        self._authenticate(self._mechanism.initial_response())

    def _on_authenticate(self, body: Any) -> None:
        if body.error_code:
            message = body.error_message or error_for(body.error_code).name
            raise self._fail(message)
        self.session_lifetime_ms = max(int(body.session_lifetime_ms or 0), 0)
        reply = self._mechanism.respond(bytes(body.auth_bytes or b""))
        if reply is not None:
            self._authenticate(reply)
        elif self._mechanism.done:
            self.done = True
        else:
            raise SaslError("the exchange ended before the server proved itself")
