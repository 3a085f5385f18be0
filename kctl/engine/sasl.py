"""SASL authentication over Kafka requests (KIP-43, KIP-152), sans-IO.

How this works: after ApiVersions, a SASL connection sends SaslHandshake (v1+,
naming the mechanism) and then SaslAuthenticate requests carrying the
mechanism's messages (``kctl/protocol/sasl.py``) until the mechanism is done.
``SaslAuthenticator`` decides which request comes next and reads each answer;
the blocking client and the non-blocking network client only carry them. A
refusal is an ``AuthenticationError`` naming the mechanism, the user and the
broker's own message (never the password); a broker breaking the exchange is a
``SaslError``.
"""

from __future__ import annotations

from typing import Any

from kctl.config import SecurityConfig
from kctl.errors import AuthenticationError
from kctl.protocol import messages, schema
from kctl.protocol.error_codes import error_for
from kctl.protocol.sasl import SaslError, mechanism_for

SASL_HANDSHAKE = schema.API_BY_NAME["SaslHandshake"].api_key
SASL_AUTHENTICATE = schema.API_BY_NAME["SaslAuthenticate"].api_key
_UNSUPPORTED_SASL_MECHANISM = 33

__all__ = ["SASL_AUTHENTICATE", "SASL_HANDSHAKE", "SaslAuthenticator"]


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
            raise self._fail(f"the broker does not enable {self.mechanism_name} (it offers: {offered})")
        if body.error_code:
            raise self._fail(f"SaslHandshake answered {error_for(body.error_code).name}")
        self._authenticate(self._mechanism.initial_response())

    def _on_authenticate(self, body: Any) -> None:
        if body.error_code:
            message = body.error_message or error_for(body.error_code).name
            raise self._fail(message)
        reply = self._mechanism.respond(bytes(body.auth_bytes or b""))
        if reply is not None:
            self._authenticate(reply)
        elif self._mechanism.done:
            self.done = True
        else:
            raise SaslError("the exchange ended before the server proved itself")
