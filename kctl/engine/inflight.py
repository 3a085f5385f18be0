"""Requests sent but not yet answered, per node (the Java client's ``InFlightRequests``).

How this works: each node has a deque, oldest request on the left. Kafka answers
the requests of one connection in the order it received them, so a response
belongs to the oldest in-flight request of its connection; a response whose
correlation id is not that one means the stream is broken (``complete_next``
raises ``CorrelationIdMismatchError`` and leaves the queue as it was, so the
caller can disconnect and hand every request back).

``can_send_more(node)``: the queue is empty, or the newest request has been
written completely and fewer than ``max_in_flight_per_connection`` are queued.
Waiting for the newest one to be written keeps at most one request partially
written per connection, as Java's Selector does.

Requests are any objects with ``correlation_id``, ``sent_ns`` (time the last byte
was written, -1 until then), ``enqueued_ns`` (when the client took it),
``timeout_ns`` and ``throttle_ns`` attributes; the network client's
``ClientRequest`` is one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Generic, Protocol, TypeVar

from kctl.errors import RemoteProtocolError


class InFlight(Protocol):
    correlation_id: int
    sent_ns: int
    enqueued_ns: int
    timeout_ns: int
    throttle_ns: int


R = TypeVar("R", bound=InFlight)


class CorrelationIdMismatchError(RemoteProtocolError):
    """A response's correlation id is not the oldest in-flight request's."""

    def __init__(self, node: int, got: int, expected: int | None, where: str = "") -> None:
        self.node = node
        self.got = got
        self.expected = expected
        want = "with no request in flight" if expected is None else f"expected {expected}"
        super().__init__(f"{where or f'node {node}'} answered correlation id {got}, {want}")


class InFlightRequests(Generic[R]):
    __slots__ = ("max_in_flight_per_connection", "_requests", "_count")

    def __init__(self, max_in_flight_per_connection: int) -> None:
        self.max_in_flight_per_connection = max_in_flight_per_connection
        self._requests: dict[int, deque[R]] = {}
        self._count = 0

    def add(self, node: int, request: R) -> None:
        q = self._requests.get(node)
        if q is None:
            q = self._requests[node] = deque()
        q.append(request)
        self._count += 1

    def can_send_more(self, node: int) -> bool:
        q = self._requests.get(node)
        return (not q) or (q[-1].sent_ns >= 0 and len(q) < self.max_in_flight_per_connection)

    def oldest(self, node: int) -> R | None:
        q = self._requests.get(node)
        return q[0] if q else None

    def newest(self, node: int) -> R | None:
        """The most recently added request (the one being written, if any)."""
        q = self._requests.get(node)
        return q[-1] if q else None

    def complete_next(self, node: int, correlation_id: int | None = None) -> R:
        """Removes and returns the oldest request; with ``correlation_id``, only if it matches."""
        q = self._requests.get(node)
        if not q:
            if correlation_id is not None:
                raise CorrelationIdMismatchError(node, correlation_id, None)
            raise LookupError(f"no request in flight to node {node}")
        if correlation_id is not None and q[0].correlation_id != correlation_id:
            raise CorrelationIdMismatchError(node, correlation_id, q[0].correlation_id)
        self._count -= 1
        return q.popleft()

    def complete_newest(self, node: int) -> R:
        """Removes the newest request (one that expects no response, once written)."""
        q = self._requests.get(node)
        if not q:
            raise LookupError(f"no request in flight to node {node}")
        self._count -= 1
        return q.pop()

    def clear_all(self, node: int) -> list[R]:
        """Removes and returns (oldest first) every request of a broken connection."""
        q = self._requests.pop(node, None)
        if not q:
            return []
        self._count -= len(q)
        return list(q)

    def timed_out_nodes(self, now_ns: int) -> list[int]:
        """Nodes with a request older than its timeout (throttle time not counted, as Java)."""
        out = []
        for node, q in self._requests.items():
            for r in q:
                if now_ns - r.enqueued_ns - r.throttle_ns > r.timeout_ns:
                    out.append(node)
                    break
        return out

    def next_timeout_ns(self) -> int | None:
        """The earliest moment a request times out, or ``None`` with nothing in flight."""
        best = None
        for q in self._requests.values():
            for r in q:
                t = r.enqueued_ns + r.throttle_ns + r.timeout_ns
                if best is None or t < best:
                    best = t
        return best

    def add_throttle(self, node: int, throttle_ns: int) -> None:
        """Extends the timeout of every request to ``node`` by a throttle delay."""
        for r in self._requests.get(node, ()):
            r.throttle_ns += throttle_ns

    def count(self, node: int | None = None) -> int:
        if node is None:
            return self._count
        q = self._requests.get(node)
        return len(q) if q else 0

    def is_empty(self, node: int | None = None) -> bool:
        return self.count(node) == 0

    def nodes(self) -> Iterable[int]:
        return [n for n, q in self._requests.items() if q]

    def requests(self, node: int) -> list[R]:
        """A snapshot of ``node``'s in-flight requests, oldest first."""
        return list(self._requests.get(node, ()))
