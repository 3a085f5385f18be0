"""A blocking request/response connection to one broker, over kctl's codec.

For set-up and verification work (ApiVersions, Metadata, CreateTopics, reading
a topic back), not for the load path: the producer engine has its own
non-blocking network client. One request is outstanding at a time, so a
response is matched to its request by correlation id and a mismatch is a
protocol error.

On connect it wraps the socket in TLS when ``security`` says so, negotiates
versions: ApiVersions at kctl's highest version, and, when the broker answers
UNSUPPORTED_VERSION (sending its own list in the v0 layout, as KIP-511
prescribes), again at the highest version it offers; then, for SASL, runs the
SaslHandshake/SaslAuthenticate exchange (``engine/sasl.py``).
"""

from __future__ import annotations

import socket
import ssl
import struct
from dataclasses import dataclass
from typing import Any

import kctl
from kctl.config import PLAINTEXT_SECURITY, SecurityConfig
from kctl.errors import AuthenticationError, BrokerUnavailableError, DecodeError, RemoteProtocolError
from kctl.protocol import messages, schema
from kctl.protocol.error_codes import error_for
from kctl.protocol.frames import DEFAULT_MAX_FRAME_BYTES, frame
from kctl.protocol.versions import NegotiatedVersions, VersionRange, negotiate

API_VERSIONS = schema.API_BY_NAME["ApiVersions"].api_key
UNSUPPORTED_VERSION = 35
_SIZE = struct.Struct(">i")


def parse_address(address: str, default_port: int = 9092) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) into its parts."""
    host, sep, port = address.strip().rpartition(":")
    if not sep:
        return address.strip(), default_port
    host = host.strip("[]")
    try:
        return host, int(port)
    except ValueError:
        raise BrokerUnavailableError(f"bad broker address {address!r}: port is not a number") from None


def api_key_of(body: Any) -> int:
    """The API key of a request or response message object."""
    name = type(body).__name__
    for suffix in ("Request", "Response"):
        if name.endswith(suffix):
            info = schema.API_BY_NAME.get(name[: -len(suffix)])
            if info is not None:
                return info.api_key
    raise TypeError(f"{name} is not a Kafka request or response")


class BlockingClient:
    """One blocking connection to one broker with negotiated API versions."""

    def __init__(self, address: str, *, client_id: str = "kctl", timeout_s: float = 10.0,
                 security: SecurityConfig | None = None) -> None:
        self.address = address
        self.host, self.port = parse_address(address)
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.security = security or PLAINTEXT_SECURITY
        self._sock: socket.socket | None = None
        self._correlation_id = 0
        self.versions: NegotiatedVersions | None = None

    # -- lifecycle ----------------------------------------------------------
    def __enter__(self) -> BlockingClient:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _tried(self) -> str:
        """The address as dialled: ``127.0.0.1:9092 (no port given: 9092 assumed)``."""
        shown = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
        if ":" not in self.address.strip().lstrip("[").split("]")[-1]:
            shown += f" (no port given: {self.port} assumed)"
        return shown

    def connect(self) -> None:
        try:
            self._sock = socket.create_connection((self.host, self.port), timeout=self.timeout_s)
        except OSError as e:
            raise BrokerUnavailableError(f"cannot connect to broker {self._tried()}: {e.strerror or e}") from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            if self.security.uses_tls:
                from kctl.engine.tls import context_for, tls_failure
                try:
                    self._sock = context_for(self.security).wrap_socket(
                        self._sock, server_hostname=self.host)
                except (ssl.SSLError, ssl.CertificateError) as e:
                    raise tls_failure(self.address, e) from None
            self.versions = self._negotiate()
            if self.security.uses_sasl:
                self._authenticate()
        except BaseException:
            self.close()
            raise

    def _authenticate(self) -> None:
        from kctl.engine.sasl import SASL_AUTHENTICATE, SASL_HANDSHAKE, SaslAuthenticator
        assert self.versions is not None
        handshake = self.versions.version_for(SASL_HANDSHAKE)
        if handshake is None or handshake < 1 or self.versions.version_for(SASL_AUTHENTICATE) is None:
            raise AuthenticationError(
                f"broker {self.address} does not offer SaslHandshake v1 and SaslAuthenticate "
                "(KIP-152, Kafka 1.0+): kctl cannot authenticate with SASL there")
        auth = SaslAuthenticator(self.security, self.address)
        while not auth.done:
            step = auth.next_request()
            if step is None:
                raise RemoteProtocolError(f"SASL exchange with {self.address} stalled")
            api_key, body = step
            version = self.versions.require(api_key)
            cid = self._send(api_key, version, body)
            auth.on_response(api_key, self._receive(api_key, version, cid).body)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    # -- requests -----------------------------------------------------------
    def version_for(self, body: Any) -> int:
        assert self.versions is not None, "connect() first"
        return self.versions.require(api_key_of(body))

    def request(self, body: Any, *, version: int | None = None) -> Any:
        """Sends ``body`` at ``version`` (default: negotiated) and returns the response body."""
        api_key = api_key_of(body)
        if version is None:
            version = self.version_for(body)
        correlation_id = self._send(api_key, version, body)
        return self._receive(api_key, version, correlation_id).body

    def send_only(self, body: Any, *, version: int | None = None) -> None:
        """Sends a request that gets no response (Produce with acks=0)."""
        api_key = api_key_of(body)
        self._send(api_key, self.version_for(body) if version is None else version, body)

    def _send(self, api_key: int, version: int, body: Any) -> int:
        if self._sock is None:
            raise BrokerUnavailableError(f"not connected to {self.address}")
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        payload = messages.encode_request(api_key, version, self._correlation_id, self.client_id, body)
        try:
            self._sock.sendall(frame(payload))
        except ssl.SSLError as e:
            self.close()
            from kctl.engine.tls import tls_failure
            raise tls_failure(self.address, e) from None
        except OSError as e:
            self.close()
            raise BrokerUnavailableError(f"connection to {self.address} broke while sending: {e}") from None
        return self._correlation_id

    def _read_exact(self, n: int) -> bytes:
        assert self._sock is not None
        chunks = []
        left = n
        while left:
            try:
                chunk = self._sock.recv(min(left, 1 << 20))
            except TimeoutError:
                self.close()
                raise BrokerUnavailableError(
                    f"broker {self.address} did not answer within {self.timeout_s:g} s") from None
            except ssl.SSLError as e:
                self.close()
                from kctl.engine.tls import tls_failure
                raise tls_failure(self.address, e) from None
            except OSError as e:
                self.close()
                raise BrokerUnavailableError(f"connection to {self.address} broke: {e}") from None
            if not chunk:
                self.close()
                raise BrokerUnavailableError(f"broker {self.address} closed the connection")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _receive_frame(self) -> bytes:
        (size,) = _SIZE.unpack(self._read_exact(4))
        if size < 0 or size > DEFAULT_MAX_FRAME_BYTES:
            self.close()
            raise RemoteProtocolError(f"broker {self.address} sent a frame of size {size}")
        return self._read_exact(size)

    def _receive(self, api_key: int, version: int, correlation_id: int) -> Any:
        data = self._receive_frame()
        got = messages.peek_correlation_id(data)
        if got != correlation_id:
            self.close()
            raise RemoteProtocolError(
                f"broker {self.address} answered correlation id {got}, expected {correlation_id}")
        return messages.decode_response(data, api_key, version)

    # -- ApiVersions ----------------------------------------------------------
    def _negotiate(self) -> NegotiatedVersions:
        version = schema.API_BY_KEY[API_VERSIONS].max_version
        for _ in range(2):
            correlation_id = self._send(API_VERSIONS, version, api_versions_request())
            data = self._receive_frame()
            if messages.peek_correlation_id(data) != correlation_id:
                raise RemoteProtocolError(f"broker {self.address} answered ApiVersions out of order")
            answer = read_api_versions_response(data, version, self.address)
            if answer.versions is not None:
                return answer.versions
            version = answer.retry_version
        raise RemoteProtocolError(f"broker {self.address} supports no ApiVersions version kctl speaks")


# -- ApiVersions handshake, shared with the non-blocking NetworkClient ---------

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
    max_version = schema.API_BY_KEY[API_VERSIONS].max_version
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
    return ApiVersionsAnswer(negotiate(VersionRange(k.api_key, k.min_version, k.max_version)
                                       for k in resp.api_keys))
