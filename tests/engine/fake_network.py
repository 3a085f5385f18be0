"""A scripted stand-in for NetworkClient, for stepping the Sender with a fake clock.

Requests are kept in ``sent`` (per node, in order); a test answers one with
``respond(request, body)``, ``disconnect(node)`` or lets acks=0 requests complete
on the next poll. Nothing touches a socket and time moves only with the FakeClock.
"""

from __future__ import annotations

from collections import defaultdict

from kctl.engine.network import ClientRequest, ClientResponse, NetworkMetrics
from kctl.protocol import messages, schema
from kctl.protocol.client_versions import CLIENT_MAX_VERSIONS
from kctl.protocol.versions import NegotiatedVersions, VersionRange

#: What a broker offering everything negotiates with kctl: kctl's own table.
ALL_VERSIONS = dict(CLIENT_MAX_VERSIONS)


class FakeNetwork:
    def __init__(self, clock, nodes=(0,), *, max_in_flight=5, versions=None):
        self.clock = clock
        self.metrics = NetworkMetrics()        # as NetworkClient's (re-authentications stay 0)
        self.node_ids = list(nodes)
        self.max_in_flight = max_in_flight
        self.versions = dict(ALL_VERSIONS if versions is None else versions)
        #: A node's own negotiated versions ({api_key: version}), where it differs from ``versions``.
        self.node_versions: dict[int, dict[int, int]] = {}
        self.sent: dict[int, list[ClientRequest]] = defaultdict(list)
        self.in_flight: dict[int, list[ClientRequest]] = defaultdict(list)
        self.throttled_until: dict[int, int] = {}
        self.throttle_calls: list[tuple[int, int]] = []
        self.down: set[int] = set()
        self._ready_responses: list[ClientResponse] = []
        self._correlation = 0
        self.wire_bodies: dict[int, object] = {}
        self.extra_nodes: dict[int, object] = {}

    # -- the NetworkClient surface the sender uses --------------------------------
    def authentication_error(self, node=None):
        return None

    def set_nodes(self, nodes):
        self.node_ids = sorted(nodes)

    def add_node(self, node, address):
        """A node outside metadata's list (a group coordinator's own connection)."""
        self.extra_nodes[node] = address

    def address(self, node):
        return f"node-{node}"

    def is_blacked_out(self, node, now_ns):
        return False

    def has_in_flight_requests(self, node=None):
        return self.in_flight_request_count(node) > 0

    def nodes(self):
        return list(self.node_ids)

    def is_ready(self, node, now_ns):
        return (node not in self.down and now_ns >= self.throttled_until.get(node, 0)
                and len(self.in_flight[node]) < self.max_in_flight)

    def ready(self, node, now_ns):
        return self.is_ready(node, now_ns)

    def poll_delay_ns(self, node, now_ns):
        return max(0, self.throttled_until.get(node, 0) - now_ns)

    def connection_delay_ns(self, node, now_ns):
        return 0

    def least_loaded_node(self, now_ns, *, api_key=None, any_node_if_none=False):
        up = [n for n in self.node_ids if n not in self.down
              and (api_key is None or self.api_version(n, api_key) is not None)]
        if not up and any_node_if_none:
            up = [n for n in self.node_ids if n not in self.down]
        return min(up, key=lambda n: len(self.in_flight[n])) if up else None

    def api_version(self, node, api_key):
        return self.node_versions.get(node, self.versions).get(api_key)

    def api_versions(self, node):
        """What negotiating with ``node`` gave (``None`` while it is down), as NetworkClient's."""
        if node in self.down:
            return None
        chosen = self.node_versions.get(node, self.versions)
        return NegotiatedVersions(chosen=dict(chosen),
                                  broker={k: VersionRange(k, 0, v) for k, v in chosen.items()},
                                  local_max=CLIENT_MAX_VERSIONS)

    def throttle(self, node, throttle_ms, now_ns):
        self.throttle_calls.append((node, throttle_ms))
        self.throttled_until[node] = now_ns + throttle_ms * 1_000_000

    def send(self, request: ClientRequest, now_ns):
        assert self.is_ready(request.node, now_ns), f"send to node {request.node} that is not ready"
        self._correlation += 1
        request.correlation_id = self._correlation
        request.enqueued_ns = now_ns
        request.sent_ns = now_ns
        if request.api_version is None:
            request.api_version = self.node_versions.get(request.node, self.versions)[request.api_key]
        # Encode the body, as the wire would: a request the codec rejects fails here.
        wire = messages.encode(request.body, request.api_version)
        # What went on the wire, decoded again: batch buffers are reused after completion.
        self.wire_bodies[request.correlation_id] = messages.decode(
            type(request.body), request.api_version, wire)
        self.sent[request.node].append(request)
        if request.expects_response:
            self.in_flight[request.node].append(request)
        else:
            self._ready_responses.append(ClientResponse(request, None, now_ns))

    def poll(self, timeout_ns, now_ns):
        out, self._ready_responses = self._ready_responses, []
        for r in out:
            if r.request.callback:
                r.request.callback(r)
        return out

    def in_flight_request_count(self, node=None):
        if node is None:
            return sum(len(v) for v in self.in_flight.values())
        return len(self.in_flight[node])

    def close_all(self, linger_s=0.0):
        pass

    # -- scripting -----------------------------------------------------------------
    def requests(self, api_name, node=None):
        key = schema.API_BY_NAME[api_name].api_key
        nodes = [node] if node is not None else list(self.sent)
        return [r for n in nodes for r in self.sent[n] if r.api_key == key]

    def pending(self, api_name):
        key = schema.API_BY_NAME[api_name].api_key
        return [r for q in self.in_flight.values() for r in q if r.api_key == key]

    def respond(self, request: ClientRequest, body):
        """Queues ``body`` as the answer to ``request`` (delivered by the next poll)."""
        self.in_flight[request.node].remove(request)
        # Through the codec, as the wire would.
        wire = messages.encode(body, request.api_version)
        decoded = messages.decode(type(body), request.api_version, wire)
        self._ready_responses.append(ClientResponse(request, decoded, self.clock.now_ns()))

    def disconnect(self, node, now_ns=None, *, timed_out=False):
        from kctl.errors import BrokerUnavailableError
        for r in self.in_flight.pop(node, []):
            self._ready_responses.append(ClientResponse(
                r, None, self.clock.now_ns(), disconnected=True, timed_out=timed_out,
                error=BrokerUnavailableError(f"node {node} disconnected")))
