"""MetadataUpdater: one step of a client's Metadata refresh (the Java client's
NetworkClient.DefaultMetadataUpdater), shared by the producer's Sender and the Consumer.

How this works
--------------
``maybe_update(now_ns)`` is called once per loop turn and returns when it next needs to
run. It sends nothing while a refresh is in flight, nor before ``Metadata`` says one is
due (requested, ``metadata.max.age.ms`` passed, and the failure backoff of
``retry.backoff.ms`` .. ``retry.backoff.max.ms`` over). Then it asks the network for the
least-loaded node that can take a Metadata request, starts a connect if that node is not
ready, and sends ``Metadata.build_request`` at the version negotiated with it.

The answer: a disconnect or timeout is a failed update (``Metadata.failed_update``,
hence the backoff); a response updates ``Metadata``, hands the brokers to the network
(``set_network_nodes``) and goes to the owner's ``on_update(update, now_ns)``, where what
differs lives (the producer fails a topic's batches, the consumer raises for a topic it
reads).

No common Metadata version. A node whose ApiVersions answer leaves no version both sides
speak cannot take the request. Java builds the request, finds no usable version in
``doSend`` and calls ``handleFailedRequest``: a failed update with backoff, and since
``leastLoadedNode`` does not look at versions, the next attempt picks the same ready node
again, so one old broker in a cluster stalls metadata for good. Here
``least_loaded_node(now, api_key=METADATA)`` passes such a node over, so another node
(connected or not yet) is asked instead; only when no node can take it is the attempt a
failed update, with the backoff, and the reason (broker's and kctl's version ranges) kept
in ``last_error``, which the owners' metadata timeouts quote. Never a request without a
version, never a retry without the backoff.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kctl.engine.clock import NS_PER_MS
from kctl.engine.metadata import Metadata, MetadataUpdate
from kctl.engine.network import ClientRequest, ClientResponse, NetworkClient
from kctl.errors import UnsupportedVersionError
from kctl.protocol import schema

__all__ = ["MetadataUpdater"]

log = logging.getLogger(__name__)

METADATA = schema.API_BY_NAME["Metadata"].api_key

#: While a refresh is in flight: its answer (or the request timeout's disconnect) wakes the loop.
_IN_FLIGHT_WAIT_NS = 1000 * NS_PER_MS
#: No node at all to ask (all in reconnect backoff): look again this soon.
_NO_NODE_WAIT_NS = 50 * NS_PER_MS

#: The owner's handler of a Metadata answer (after ``Metadata.handle_response``).
OnUpdate = Callable[[MetadataUpdate, int], None]


class MetadataUpdater:
    def __init__(self, metadata: Metadata, network: NetworkClient, on_update: OnUpdate) -> None:
        self.metadata = metadata
        self.network = network
        self.on_update = on_update
        self.in_flight = False
        #: Why the last refresh failed (``None`` after a successful one).
        self.last_error: str | None = None

    def maybe_update(self, now_ns: int) -> int:
        """Sends a Metadata request if one is due and a node can take it; returns when
        to run again (monotonic ns)."""
        if self.in_flight:
            return now_ns + _IN_FLIGHT_WAIT_NS
        delay = self.metadata.time_to_next_update_ns(now_ns)
        if delay > 0:
            return now_ns + delay
        network = self.network
        node = network.least_loaded_node(now_ns, api_key=METADATA)
        if node is None:
            return self._no_node(now_ns)
        if not network.ready(node, now_ns):
            return now_ns + max(NS_PER_MS, network.connection_delay_ns(node, now_ns))
        version = network.api_version(node, METADATA)
        if version is None:   # a network that does not pass such nodes over: still no request
            return self._unsupported(node, now_ns)
        req = self.metadata.build_request(now_ns, version)
        self.in_flight = True
        network.send(ClientRequest(node, METADATA, req, api_version=version, callback=self._on_response), now_ns)
        return now_ns + _IN_FLIGHT_WAIT_NS

    def _no_node(self, now_ns: int) -> int:
        """No node can take a Metadata request now: every node is in reconnect backoff,
        or the connected ones offer no common version (a failed update)."""
        for node in self.network.nodes():
            if self.network.api_versions(node) is not None and self.network.api_version(node, METADATA) is None:
                return self._unsupported(node, now_ns)
        return now_ns + _NO_NODE_WAIT_NS

    def _unsupported(self, node: int, now_ns: int) -> int:
        """Java's handleFailedRequest after an UnsupportedVersionException: a failed update
        (backoff), the reason kept."""
        try:
            self.network.api_versions(node).require(METADATA)
            reason = "no common version of Metadata"
        except UnsupportedVersionError as e:
            reason = str(e)
        error = f"node {node} ({self.network.address(node)}): {reason}"
        if error != self.last_error:
            log.info("metadata refresh failed: %s", error)
        self.last_error = error
        self.metadata.failed_update(now_ns)
        return now_ns + max(NS_PER_MS, self.metadata.time_to_next_update_ns(now_ns))

    def _on_response(self, resp: ClientResponse) -> None:
        self.in_flight = False
        now = resp.received_ns
        if resp.body is None or resp.error is not None:
            self.last_error = f"node {resp.node}: {resp.error or 'no answer'}"
            self.metadata.failed_update(now)
            return
        self.last_error = None
        update = self.metadata.handle_response(resp.body, now)
        self.set_network_nodes()
        self.on_update(update, now)

    def set_network_nodes(self) -> None:
        """Tells the network the brokers metadata knows (after an answer, or a node added by hand)."""
        self.network.set_nodes({n.node_id: (n.host, n.port) for n in self.metadata.nodes.values()})
