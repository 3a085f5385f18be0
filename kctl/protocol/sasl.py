"""SASL client mechanisms, sans-IO: PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802, 7677).

How this works: a mechanism object turns server challenges into client responses
and nothing else; the caller carries the bytes (in Kafka, inside SaslAuthenticate
requests, see ``kctl/engine/sasl.py``). ``initial_response()`` gives the first
client message; ``respond(challenge)`` the next one, or ``None`` when the exchange
is complete on the client's side; ``done`` says the server proved itself (SCRAM)
or that nothing more is expected (PLAIN).

SCRAM checks what a client must check, so a fake or downgraded server is caught:
the server nonce must extend the client's, the iteration count must be at least
``MIN_ITERATIONS`` (4096, RFC 7677 and Kafka's own minimum), and the server's
final signature must match. Failures are ``SaslError``; a server's ``e=...``
answer is ``AuthenticationError``. Neither message contains the password.

Names are not SASLprep-normalised (Kafka's ScramFormatter does not either); a
username's ``=`` and ``,`` are escaped as RFC 5802 requires.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from typing import Final

from kctl.errors import AuthenticationError, RemoteProtocolError

__all__ = ["AuthenticationError", "MIN_ITERATIONS", "PlainMechanism", "SaslError",
           "ScramMechanism", "mechanism_for"]

MIN_ITERATIONS: Final = 4096
_HASHES: Final = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
_GS2_HEADER: Final = b"n,,"


class SaslError(RemoteProtocolError):
    """The server's SASL messages do not follow the mechanism (or fail its checks)."""


class PlainMechanism:
    name = "PLAIN"

    def __init__(self, username: str, password: str) -> None:
        self._message = b"\0" + username.encode() + b"\0" + password.encode()
        self.done = False

    def initial_response(self) -> bytes:
        self.done = True
        return self._message

    def respond(self, challenge: bytes) -> bytes | None:
        if challenge:
            raise SaslError("PLAIN: the server sent a challenge, but PLAIN has none")
        return None

    def __repr__(self) -> str:
        return "PlainMechanism(...)"


def _escape_name(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _attributes(message: bytes, what: str) -> dict[str, str]:
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslError(f"SCRAM: the {what} is not UTF-8") from None
    out: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise SaslError(f"SCRAM: malformed {what} (attribute {part[:20]!r})")
        out.setdefault(key, value)
    return out


class ScramMechanism:
    """The client side of SCRAM-SHA-256 / SCRAM-SHA-512 (no channel binding)."""

    def __init__(self, mechanism: str, username: str, password: str, *,
                 nonce: str | None = None, min_iterations: int = MIN_ITERATIONS) -> None:
        if mechanism not in _HASHES:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self.name = mechanism
        self._hash = _HASHES[mechanism]
        self._password = password.encode("utf-8")
        self._nonce = nonce or secrets.token_urlsafe(24)
        self._min_iterations = min_iterations
        self._client_first_bare = f"n={_escape_name(username)},r={self._nonce}".encode()
        self._auth_message = b""
        self._server_signature = b""
        self._step = 0
        self.done = False

    def __repr__(self) -> str:
        return f"ScramMechanism({self.name}, step={self._step})"

    def initial_response(self) -> bytes:
        if self._step != 0:
            raise SaslError("SCRAM: the exchange has already started")
        self._step = 1
        return _GS2_HEADER + self._client_first_bare

    def respond(self, challenge: bytes) -> bytes | None:
        if self._step == 1:
            self._step = 2
            return self._client_final(challenge)
        if self._step == 2:
            self._step = 3
            self._check_server_final(challenge)
            return None
        raise SaslError("SCRAM: unexpected server message after the exchange ended")

    def _hmac(self, key: bytes, msg: bytes) -> bytes:
        return hmac.new(key, msg, self._hash).digest()

    def _client_final(self, server_first: bytes) -> bytes:
        attrs = _attributes(server_first, "server-first-message")
        if "m" in attrs:
            raise SaslError("SCRAM: the server requires an extension kctl does not know")
        if "e" in attrs:
            raise AuthenticationError(f"the server refused: {attrs['e']}")
        try:
            nonce, salt_b64, iterations_text = attrs["r"], attrs["s"], attrs["i"]
        except KeyError as e:
            raise SaslError(f"SCRAM: the server-first-message has no {e.args[0]}= attribute") from None
        if not nonce.startswith(self._nonce) or len(nonce) <= len(self._nonce):
            raise SaslError("SCRAM: the server's nonce does not extend the client's nonce "
                            "(a replayed or forged server-first-message)")
        try:
            iterations = int(iterations_text)
            salt = base64.b64decode(salt_b64, validate=True)
        except ValueError:
            raise SaslError("SCRAM: malformed salt or iteration count") from None
        if iterations < self._min_iterations:
            raise SaslError(f"SCRAM: the server asks for {iterations} iterations, fewer than "
                            f"the minimum {self._min_iterations} (a weak or downgraded server)")
        salted = hashlib.pbkdf2_hmac(self._hash, self._password, salt, iterations)
        client_key = self._hmac(salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        without_proof = b"c=" + base64.b64encode(_GS2_HEADER) + b",r=" + nonce.encode()
        self._auth_message = b",".join((self._client_first_bare, server_first, without_proof))
        signature = self._hmac(stored_key, self._auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        self._server_signature = self._hmac(self._hmac(salted, b"Server Key"), self._auth_message)
        return without_proof + b",p=" + base64.b64encode(proof)

    def _check_server_final(self, server_final: bytes) -> None:
        attrs = _attributes(server_final, "server-final-message")
        if "e" in attrs:
            raise AuthenticationError(f"the server refused: {attrs['e']}")
        try:
            got = base64.b64decode(attrs.get("v", ""), validate=True)
        except ValueError:
            got = b""
        if not hmac.compare_digest(got, self._server_signature):
            raise SaslError("SCRAM: the server's signature is wrong (it does not know the "
                            "credentials: an impostor)")
        self.done = True


def mechanism_for(name: str, username: str, password: str) -> PlainMechanism | ScramMechanism:
    if name == "PLAIN":
        return PlainMechanism(username, password)
    return ScramMechanism(name, username, password)
