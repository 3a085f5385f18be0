"""Rewriting responses so clients keep talking through the proxy, sans-IO.

How this works
--------------
A Kafka client bootstraps from one address, then connects to the brokers that
Metadata, FindCoordinator and DescribeCluster responses name (and the
``node_endpoints`` hints of Produce and Fetch responses, KIP-951). To keep a
client inside the proxy, every broker address in those responses becomes the
address of a proxy listener that forwards to that broker. ``listener_port(host,
port)`` is the proxy's callback that returns (creating it on first use) the
listener for an upstream broker.

Virtual brokers: with ``virtual`` set (a list of ``(node_id, listener_port)``),
the one upstream broker is presented as several. Broker lists are replaced by
the virtual brokers; partition ``p``'s leader becomes virtual node ``p % N``
(replicas and ISR just that node); the controller and any coordinator become
the first virtual node. Every virtual listener forwards to the same upstream,
which leads every partition, so requests sent to any virtual node succeed.
This is for testing multi-broker client behaviour against a single-broker
cluster; with a real multi-broker upstream use plain mode.

ApiVersions answers are clamped to the versions kctl's codec knows, so every
response that carries addresses can be decoded and rewritten.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from kctl.protocol import schema

_KEY = {name: schema.API_BY_NAME[name].api_key for name in (
    "Produce", "Fetch", "Metadata", "FindCoordinator", "DescribeCluster", "ApiVersions")}
PRODUCE: Final = _KEY["Produce"]
FETCH: Final = _KEY["Fetch"]
METADATA: Final = _KEY["Metadata"]
FIND_COORDINATOR: Final = _KEY["FindCoordinator"]
DESCRIBE_CLUSTER: Final = _KEY["DescribeCluster"]
API_VERSIONS: Final = _KEY["ApiVersions"]

#: Responses that may name brokers (or, for ApiVersions, versions the proxy must decode).
REWRITTEN_APIS: Final = frozenset(_KEY.values())


class ResponseRewriter:
    """Rewrites broker addresses (and node ids, in virtual mode) in decoded responses."""

    def __init__(self, advertised_host: str, listener_port: Callable[[str, int], int],
                 virtual: Sequence[tuple[int, int]] | None = None) -> None:
        self.advertised_host = advertised_host
        self.listener_port = listener_port
        self.virtual = list(virtual) if virtual and len(virtual) > 1 else None

    def needs_body(self, api_key: int) -> bool:
        return api_key in REWRITTEN_APIS

    def rewrite(self, api_key: int, body: Any) -> bool:
        """Rewrites ``body`` in place; True when anything changed (re-encode then)."""
        if api_key == METADATA:
            return self._metadata(body)
        if api_key == FIND_COORDINATOR:
            return self._find_coordinator(body)
        if api_key == DESCRIBE_CLUSTER:
            return self._describe_cluster(body)
        if api_key in (PRODUCE, FETCH):
            return self._leader_hints(api_key, body)
        if api_key == API_VERSIONS:
            return clamp_api_versions(body)
        return False

    # -- helpers -----------------------------------------------------------------------------
    def _addr(self, obj: Any) -> bool:
        """Points ``obj.host``/``obj.port`` at the proxy listener for that broker."""
        if not obj.host or obj.port is None or obj.port < 0:
            return False
        port = self.listener_port(obj.host, obj.port)
        if (obj.host, obj.port) == (self.advertised_host, port):
            return False
        obj.host, obj.port = self.advertised_host, port
        return True

    def _vnode(self, index: int) -> tuple[int, int]:
        assert self.virtual is not None
        return self.virtual[index % len(self.virtual)]

    # -- per API -----------------------------------------------------------------------------
    def _metadata(self, body: Any) -> bool:
        if self.virtual is None:
            changed = False
            for b in body.brokers:
                changed |= self._addr(b)
            return changed
        cls = type(body).MetadataResponseBroker
        rack = body.brokers[0].rack if body.brokers else None
        body.brokers = [cls(node_id=n, host=self.advertised_host, port=p, rack=rack)
                        for n, p in self.virtual]
        if body.controller_id >= 0:
            body.controller_id = self.virtual[0][0]
        for t in body.topics or ():
            for p in t.partitions:
                if p.leader_id >= 0:
                    leader = self._vnode(p.partition_index)[0]
                    p.leader_id = leader
                    p.replica_nodes = [leader]
                    p.isr_nodes = [leader]
                    p.offline_replicas = []
        return True

    def _find_coordinator(self, body: Any) -> bool:
        changed = False
        targets = list(body.coordinators or ())
        if body.host:            # v0-v3 answer at the top level
            targets.append(body)
        for c in targets:
            if self.virtual is not None and c.node_id >= 0:
                c.node_id, port = self.virtual[0]
                c.host, c.port = self.advertised_host, port
                changed = True
            else:
                changed |= self._addr(c)
        return changed

    def _describe_cluster(self, body: Any) -> bool:
        if self.virtual is None:
            changed = False
            for b in body.brokers:
                changed |= self._addr(b)
            return changed
        cls = type(body).DescribeClusterBroker
        body.brokers = [cls(broker_id=n, host=self.advertised_host, port=p) for n, p in self.virtual]
        if body.controller_id >= 0:
            body.controller_id = self.virtual[0][0]
        return True

    def _leader_hints(self, api_key: int, body: Any) -> bool:
        """KIP-951: Produce/Fetch responses may name the new leader and its endpoint."""
        changed = False
        if self.virtual is not None:
            for t in body.responses:
                parts = t.partition_responses if api_key == PRODUCE else t.partitions
                for p in parts:
                    cl = p.current_leader
                    if cl is not None and cl.leader_id >= 0:
                        index = p.index if api_key == PRODUCE else p.partition_index
                        cl.leader_id = self._vnode(index)[0]
                        changed = True
            if body.node_endpoints:
                cls = type(body.node_endpoints[0])
                body.node_endpoints = [cls(node_id=n, host=self.advertised_host, port=p)
                                       for n, p in self.virtual]
                changed = True
            return changed
        for e in body.node_endpoints or ():
            changed |= self._addr(e)
        return changed


def clamp_api_versions(body: Any) -> bool:
    """Lowers each API's max_version to the highest kctl's codec knows; True if any changed."""
    changed = False
    for k in body.api_keys or ():
        api = schema.API_BY_KEY.get(k.api_key)
        if api is None:
            continue
        known = min(max(api.request.valid_versions), max(api.response.valid_versions))
        if k.max_version > known:
            k.max_version = known
            changed = True
    return changed

