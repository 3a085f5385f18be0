"""A small Kafka proxy for security and compatibility tests, in front of the embedded broker.

Tansu serves neither SASL nor old protocol versions on request, so this proxy plays
the parts a real broker would:

- ``users`` (name -> password): it answers SaslHandshake/SaslAuthenticate itself,
  running the server side of PLAIN and SCRAM-SHA-256/512 with ``scramp`` (an
  independent implementation), and refuses anything but ApiVersions before a
  successful login, as a Kafka SASL listener does. ``server_first_hook`` may
  tamper with the SCRAM server-first-message (iterations, nonce).
- ``session_lifetime_ms`` (KIP-368, a broker with ``connections.max.reauth.ms``):
  SaslAuthenticate v1+ answers carry it; a request other than SaslHandshake or
  SaslAuthenticate arriving after the session expired closes the connection
  (``expired_closes``, the client ids); a SaslHandshake on a logged-in connection
  is a re-authentication (``reauthentications``). SASL answers wait for the
  answers of requests forwarded before them, as a broker answers in order.
- ``caps`` (api key -> highest version): it advertises at most those versions and
  no flexible version at all (an old broker), and answers an ApiVersions request
  newer than it advertises with UNSUPPORTED_VERSION in the v0 layout (KIP-511).
- Metadata answers name the proxy instead of the broker, so every connection of a
  client (produce workers too) comes through it.

Everything else is forwarded as is. Threads: one reader per client connection,
one per upstream connection.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

from scramp import ScramException, ScramMechanism

from kctl.protocol import messages, schema
from kctl.protocol.frames import FrameDecoder, frame

API_VERSIONS, METADATA = 18, 3
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM, UNSUPPORTED_VERSION = 58, 33, 35
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _last_rigid_version(api_key: int) -> int:
    """The highest version of an API that is not flexible (KIP-482)."""
    api = schema.API_BY_KEY[api_key]
    return api.max_version if api.flexible_min_version is None else api.flexible_min_version - 1


class KafkaProxy:
    def __init__(self, upstream: str, *, users: dict[str, str] | None = None,
                 mechanisms: tuple[str, ...] = MECHANISMS, caps: dict[int, int] | None = None,
                 iterations: int = 4096,
                 server_first_hook: Callable[[str], str] | None = None,
                 session_lifetime_ms: int = 0) -> None:
        host, _, port = upstream.rpartition(":")
        self.upstream = (host, int(port))
        self.users = users
        self.mechanisms = mechanisms
        self.caps = caps
        self.server_first_hook = server_first_hook
        self.session_lifetime_ms = session_lifetime_ms
        self.expired_closes: list[str | None] = []     # client ids of connections closed
        self.reauthentications: list[str | None] = []  # client ids, one per login again
        self._scram = {}
        if users is not None:
            for name in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                m = ScramMechanism(name)
                self._scram[name] = (m, {u: m.make_auth_info(p, iteration_count=iterations)
                                         for u, p in users.items()})
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self.requests: list[tuple[int, int]] = []   # (api_key, version) as clients sent them
        self.logins: list[tuple[str, str, bool]] = []  # (mechanism, user, ok)
        self._socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def __enter__(self) -> KafkaProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.listener.close()
        for s in list(self._socks):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    # -- connections ---------------------------------------------------------------
    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self._socks.append(client)
            threading.Thread(target=_Session(self, client).run, daemon=True).start()


class _Session:
    def __init__(self, proxy: KafkaProxy, client: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.lock = threading.Lock()
        self.upstream: socket.socket | None = None
        self.pending: dict[int, tuple[int, int]] = {}
        self.answered = threading.Condition()
        self.expires_at: float | None = None    # time.monotonic() of the session's end
        self.authenticated = proxy.users is None
        self.mechanism: str | None = None
        self.scram_server = None
        self.user = ""

    def send_client(self, data: bytes) -> None:
        with self.lock:
            self.client.sendall(data)

    def respond(self, req: messages.Request, body, version: int | None = None) -> None:
        h = req.header
        v = h.request_api_version if version is None else version
        self.send_client(frame(messages.encode_response(h.request_api_key, v, h.correlation_id, body)))

    def run(self) -> None:
        dec = FrameDecoder()
        try:
            while data := self.client.recv(1 << 20):
                dec.feed(data)
                for f in dec.frames():
                    self.on_request(bytes(f))
        except OSError:
            pass
        finally:
            self.client.close()
            if self.upstream is not None:
                self.upstream.close()

    def on_request(self, raw: bytes) -> None:
        req = messages.decode_request(raw)
        key, version = req.header.request_api_key, req.header.request_api_version
        self.proxy.requests.append((key, version))
        caps = self.proxy.caps
        if key == API_VERSIONS and caps is not None and version > self.cap(API_VERSIONS):
            cls = messages.response_class(API_VERSIONS)
            self.respond(req, cls(error_code=UNSUPPORTED_VERSION, api_keys=[cls.ApiVersion(
                api_key=API_VERSIONS, min_version=0, max_version=self.cap(API_VERSIONS))]), version=0)
            return
        if key in (SASL_HANDSHAKE, SASL_AUTHENTICATE) and self.proxy.users is not None:
            with self.answered:     # a broker answers a connection's requests in order
                if not self.answered.wait_for(lambda: not self.pending, timeout=10):
                    raise OSError("upstream never answered")
            if key == SASL_HANDSHAKE:
                self.on_handshake(req)
            else:
                self.on_authenticate(req)
            return
        if self.expires_at is not None and time.monotonic() > self.expires_at:
            self.proxy.expired_closes.append(req.header.client_id)
            raise OSError("session expired")  # Kafka closes the connection (KIP-368)
        if not self.authenticated and key != API_VERSIONS:
            raise OSError("request before authentication")  # a broker closes the connection
        if self.upstream is None:
            self.upstream = socket.create_connection(self.proxy.upstream)
            self.proxy._socks.append(self.upstream)
            threading.Thread(target=self.read_upstream, daemon=True).start()
        with self.answered:
            self.pending[req.header.correlation_id] = (key, version)
        self.upstream.sendall(frame(raw))

    def cap(self, key: int) -> int:
        caps = self.proxy.caps or {}
        return min(caps.get(key, 1 << 15), _last_rigid_version(key)) if key in schema.API_BY_KEY else -1

    # -- upstream answers ------------------------------------------------------------
    def read_upstream(self) -> None:
        dec = FrameDecoder()
        try:
            while data := self.upstream.recv(1 << 20):
                dec.feed(data)
                for f in dec.frames():
                    self.on_response(bytes(f))
        except OSError:
            pass
        finally:
            try:
                self.client.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def on_response(self, raw: bytes) -> None:
        cid = messages.peek_correlation_id(raw)
        with self.answered:
            key, version = self.pending.pop(cid, (None, None))
            self.answered.notify_all()
        if key == API_VERSIONS:
            body = messages.decode_response(raw, key, version).body
            keys = []
            for k in body.api_keys:
                if self.proxy.caps is not None:
                    hi = min(k.max_version, self.cap(k.api_key))
                    if hi < k.min_version:
                        continue
                    k.max_version = hi
                if self.proxy.users is not None and k.api_key in (SASL_HANDSHAKE, SASL_AUTHENTICATE):
                    continue
                keys.append(k)
            if self.proxy.users is not None:
                cls = type(body).ApiVersion
                for api, hi in ((SASL_HANDSHAKE, 1), (SASL_AUTHENTICATE, 2)):
                    keys.append(cls(api_key=api, min_version=0,
                                    max_version=min(hi, self.cap(api)) if self.proxy.caps else hi))
            body.api_keys = keys
            raw = messages.encode_response(key, version, cid, body)
        elif key == METADATA:
            body = messages.decode_response(raw, key, version).body
            for b in body.brokers:
                b.host, b.port = "127.0.0.1", self.proxy.port
            raw = messages.encode_response(key, version, cid, body)
        self.send_client(frame(raw))

    # -- SASL, server side ----------------------------------------------------------------
    def on_handshake(self, req: messages.Request) -> None:
        cls = messages.response_class(SASL_HANDSHAKE)
        mech = req.body.mechanism
        if mech not in self.proxy.mechanisms:
            self.respond(req, cls(error_code=UNSUPPORTED_SASL_MECHANISM,
                                  mechanisms=list(self.proxy.mechanisms)))
            return
        self.mechanism = mech
        self.scram_server = None
        if self.authenticated and self.proxy.users is not None:
            self.proxy.reauthentications.append(req.header.client_id)
        self.respond(req, cls(error_code=0, mechanisms=list(self.proxy.mechanisms)))

    def fail(self, req: messages.Request) -> None:
        cls = messages.response_class(SASL_AUTHENTICATE)
        self.proxy.logins.append((self.mechanism, self.user, False))
        # Kafka's own wording for a bad login.
        self.respond(req, cls(error_code=SASL_AUTHENTICATION_FAILED, auth_bytes=b"",
                              error_message="Authentication failed during authentication due to "
                                            f"invalid credentials with SASL mechanism {self.mechanism}"))

    def succeed(self, req: messages.Request, auth_bytes: bytes) -> None:
        cls = messages.response_class(SASL_AUTHENTICATE)
        self.authenticated = True
        self.proxy.logins.append((self.mechanism, self.user, True))
        lifetime = self.proxy.session_lifetime_ms
        if lifetime > 0 and req.header.request_api_version >= 1:
            self.expires_at = time.monotonic() + lifetime / 1000
        self.respond(req, cls(error_code=0, auth_bytes=auth_bytes, session_lifetime_ms=lifetime))

    def on_authenticate(self, req: messages.Request) -> None:
        cls = messages.response_class(SASL_AUTHENTICATE)
        data = bytes(req.body.auth_bytes)
        users = self.proxy.users
        if self.mechanism == "PLAIN":
            _authz, user, password = (data.split(b"\0") + [b"", b""])[:3]
            self.user = user.decode()
            if users.get(self.user) == password.decode() and self.user in users:
                self.succeed(req, b"")
            else:
                self.fail(req)
            return
        mech, infos = self.proxy._scram[self.mechanism]
        try:
            if self.scram_server is None:
                self.scram_server = mech.make_server(lambda u: infos[u])
                self.user = data.decode().split("n=", 1)[-1].split(",", 1)[0]
                if self.user not in infos:
                    self.fail(req)
                    return
                self.scram_server.set_client_first(data.decode())
                first = self.scram_server.get_server_first()
                if self.proxy.server_first_hook is not None:
                    first = self.proxy.server_first_hook(first)
                self.respond(req, cls(error_code=0, auth_bytes=first.encode(), session_lifetime_ms=0))
            else:
                self.scram_server.set_client_final(data.decode())
                self.succeed(req, self.scram_server.get_server_final().encode())
        except ScramException:
            self.fail(req)
