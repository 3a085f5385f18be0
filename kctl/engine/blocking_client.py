"""A blocking request/response connection to one broker, over kctl's codec.

For set-up and verification work (ApiVersions, Metadata, CreateTopics, reading
a topic back), not for the load path: the producer engine has its own
non-blocking network client. One request is outstanding at a time, so a
response is matched to its request by correlation id and a mismatch is a
protocol error.

On connect it opens the socket (``engine/connection.py``), wraps it in TLS when
``security`` says so, and runs the same sans-IO ``ClientHandshake`` as the
non-blocking client (``engine/handshake.py``): ApiVersions, again at a lower
version on UNSUPPORTED_VERSION (KIP-511), then SaslHandshake/SaslAuthenticate for SASL.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from typing import Any

from kctl.config import PLAINTEXT_SECURITY, NetworkConfig, SecurityConfig
from kctl.engine.connection import open_blocking
from kctl.engine.handshake import ClientHandshake
from kctl.errors import BrokerUnavailableError, BrokerUnreachableError, RemoteProtocolError
from kctl.protocol import messages, schema
from kctl.protocol.frames import DEFAULT_MAX_FRAME_BYTES, frame
from kctl.protocol.versions import NegotiatedVersions

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


def setup_timeout_s(network: NetworkConfig) -> float:
    """A first connection attempt's setup bound: ``socket.connection.setup.timeout.ms``
    (at most ``.max.ms``, as Java's first attempt), in seconds."""
    return min(network.socket_connection_setup_timeout_ms, network.socket_connection_setup_timeout_max_ms) / 1000


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
                 security: SecurityConfig | None = None, setup_timeout_s: float | None = None) -> None:
        self.address = address
        self.host, self.port = parse_address(address)
        self.client_id = client_id
        self.timeout_s = timeout_s
        # Java's socket.connection.setup.timeout.ms (KIP-601): TCP connect, TLS and SASL
        # handshakes and ApiVersions together; default: the request timeout.
        self.setup_timeout_s = timeout_s if setup_timeout_s is None else setup_timeout_s
        self.security = security or PLAINTEXT_SECURITY
        self._sock: socket.socket | None = None
        self._setup_deadline: float | None = None
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
        """Opens the connection, TLS and the handshake, all within ``setup_timeout_s``;
        every failure is one ``KctlError`` line naming the address and what happened."""
        deadline = time.monotonic() + self.setup_timeout_s
        try:
            self._sock = open_blocking(self.host, self.port, self.setup_timeout_s)
        except TimeoutError:
            raise BrokerUnreachableError(
                f"cannot connect to broker {self._tried()}: no answer within {self.setup_timeout_s:g} s "
                "(socket.connection.setup.timeout.ms)") from None
        except OSError as e:
            raise BrokerUnreachableError(f"cannot connect to broker {self._tried()}: {e.strerror or e}") from None
        self._setup_deadline = deadline
        try:
            if self.security.uses_tls:
                self._start_tls(deadline)
            self._sock.settimeout(max(deadline - time.monotonic(), 0.001))
            self.versions = self._handshake()
            self._sock.settimeout(self.timeout_s)
        except BaseException:
            self.close()
            raise
        finally:
            self._setup_deadline = None

    def _start_tls(self, deadline: float) -> None:
        from kctl.engine.tls import context_for, needs_probe, probe, tls_failure
        assert self._sock is not None
        context = context_for(self.security)
        self._sock.settimeout(max(deadline - time.monotonic(), 0.001))
        try:
            self._sock = context.wrap_socket(self._sock, server_hostname=self.host)
        except (ssl.SSLError, ssl.CertificateError) as e:
            if isinstance(e, ssl.SSLEOFError):
                raise BrokerUnavailableError(
                    f"broker {self.address} closed the connection during the TLS handshake: is this "
                    f"a TLS port? (security.protocol={self.security.protocol.value})") from None
            probed = probe(self.host, self.port, max(deadline - time.monotonic(), 1.0)) \
                if needs_probe(e) else None
            raise tls_failure(self.address, e, security=self.security, probed=probed) from None
        except TimeoutError:
            raise BrokerUnavailableError(
                f"broker {self.address} did not complete the TLS handshake within "
                f"{self.setup_timeout_s:g} s (socket.connection.setup.timeout.ms): is this a TLS port? "
                f"(security.protocol={self.security.protocol.value})") from None
        except OSError as e:
            raise BrokerUnavailableError(
                f"broker {self.address} broke the connection during the TLS handshake "
                f"({e.strerror or type(e).__name__}): is this a TLS port? "
                f"(security.protocol={self.security.protocol.value})") from None

    def _setup_hint(self) -> str:
        """What a failure while the connection is set up adds: the plaintext-to-TLS hint."""
        if self._setup_deadline is None:
            return ""
        if not self.security.uses_tls:
            return (" while setting up the connection; the broker may expect TLS: check "
                    f"security.protocol (now {self.security.protocol.value})")
        return " while setting up the connection"

    def _handshake(self) -> NegotiatedVersions:
        """Carries the ``ClientHandshake``'s requests until it is ready (it raises when it
        cannot be)."""
        handshake = ClientHandshake(self.security, self.address)
        while not handshake.ready:
            step = handshake.next_request()
            if step is None:
                raise RemoteProtocolError(f"the handshake with {self.address} stalled")
            correlation_id = self._send(step.api_key, step.api_version, step.body)
            data = self._receive_frame()
            if messages.peek_correlation_id(data) != correlation_id:
                name = schema.API_BY_KEY[step.api_key].name
                raise RemoteProtocolError(f"broker {self.address} answered {name} out of order")
            handshake.on_response(data)
        assert handshake.versions is not None
        return handshake.versions

    @property
    def connected(self) -> bool:
        """Connected (a connection that broke is closed; ``connect`` opens a new one)."""
        return self._sock is not None

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
            raise BrokerUnavailableError(f"connection to {self.address} broke while sending: "
                                         f"{e.strerror or e}{self._setup_hint()}") from None
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
                if self._setup_deadline is not None:
                    raise BrokerUnavailableError(
                        f"broker {self.address} did not answer within {self.setup_timeout_s:g} s of "
                        "connecting (socket.connection.setup.timeout.ms bounds TCP, TLS, ApiVersions "
                        f"and SASL){self._setup_hint()}") from None
                raise BrokerUnavailableError(
                    f"broker {self.address} did not answer within {self.timeout_s:g} s") from None
            except ssl.SSLError as e:
                self.close()
                from kctl.engine.tls import tls_failure
                raise tls_failure(self.address, e) from None
            except OSError as e:
                self.close()
                raise BrokerUnavailableError(
                    f"connection to {self.address} broke: {e.strerror or e}{self._setup_hint()}") from None
            if not chunk:
                self.close()
                raise BrokerUnavailableError(f"broker {self.address} closed the connection{self._setup_hint()}")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _receive_frame(self) -> bytes:
        head = self._read_exact(4)
        (size,) = _SIZE.unpack(head)
        if size < 0 or size > DEFAULT_MAX_FRAME_BYTES:
            self.close()
            if head[0] in (0x15, 0x16) and head[1] == 3 and not self.security.uses_tls:
                raise RemoteProtocolError(
                    f"broker {self.address} answered with TLS: set security.protocol=SSL (or SASL_SSL)")
            raise RemoteProtocolError(f"broker {self.address} sent a frame of size {size}{self._setup_hint()}")
        return self._read_exact(size)

    def _receive(self, api_key: int, version: int, correlation_id: int) -> Any:
        data = self._receive_frame()
        got = messages.peek_correlation_id(data)
        if got != correlation_id:
            self.close()
            raise RemoteProtocolError(
                f"broker {self.address} answered correlation id {got}, expected {correlation_id}")
        return messages.decode_response(data, api_key, version)
