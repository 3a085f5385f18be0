"""What the inspector proxy has seen, as counters and HdrHistograms, and frozen snapshots of it.

The proxy's event loop records into a ``ProxyStats``; any other thread (the live
view) calls ``snapshot()`` and gets a ``StatsSnapshot``: plain frozen values,
safe to keep and to diff (``rates_since``). A lock guards each update; updates
are a few integer additions, so the loop never waits long.

Latency is request-to-response as the client sees it: from the moment the
proxy read the whole request from the client to the moment it handed the
response to the client's socket (injected delays included), in microseconds.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Final

from hdrh.histogram import HdrHistogram

_MAX_LATENCY_US: Final = 3_600_000_000   # an hour: anything longer is clamped
PERCENTILES: Final = (50.0, 90.0, 99.0, 99.9)


@dataclass(frozen=True, slots=True)
class ApiSnapshot:
    api: str
    requests: int
    responses: int
    request_bytes: int
    response_bytes: int
    latency_us: dict[float, int]     # percentile -> microseconds
    latency_max_us: int
    latency_mean_us: float
    throttled: int                   # responses with throttle_time_ms > 0
    throttle_ms_max: int


@dataclass(frozen=True, slots=True)
class ConnectionSnapshot:
    id: int
    client: str
    upstream: str
    listener: str
    in_flight: int
    requests: int
    responses: int


@dataclass(frozen=True, slots=True)
class StatsSnapshot:
    taken_ns: int
    apis: dict[str, ApiSnapshot]
    errors: dict[str, int]           # Kafka error name -> times seen in responses
    faults: dict[str, int]           # delayed, throttled, errors_injected, dropped, swallowed, tiny,
                                     # lost (batches), lost_records, forged (acks of lost batches)
    connections: tuple[ConnectionSnapshot, ...]
    connections_total: int
    decode_errors: int

    @property
    def requests(self) -> int:
        return sum(a.requests for a in self.apis.values())

    @property
    def responses(self) -> int:
        return sum(a.responses for a in self.apis.values())

    @property
    def in_flight(self) -> int:
        return sum(c.in_flight for c in self.connections)

    def rates_since(self, earlier: StatsSnapshot | None) -> dict[str, tuple[float, float]]:
        """Per API: (requests/s, bytes/s both ways) between ``earlier`` and this snapshot."""
        if earlier is None or self.taken_ns <= earlier.taken_ns:
            return {name: (0.0, 0.0) for name in self.apis}
        dt = (self.taken_ns - earlier.taken_ns) / 1e9
        out = {}
        for name, a in self.apis.items():
            b = earlier.apis.get(name)
            reqs = a.requests - (b.requests if b else 0)
            nbytes = (a.request_bytes + a.response_bytes
                      - ((b.request_bytes + b.response_bytes) if b else 0))
            out[name] = (reqs / dt, nbytes / dt)
        return out


@dataclass(slots=True)
class _ApiCounters:
    requests: int = 0
    responses: int = 0
    request_bytes: int = 0
    response_bytes: int = 0
    throttled: int = 0
    throttle_ms_max: int = 0
    latency: HdrHistogram = field(default_factory=lambda: HdrHistogram(1, _MAX_LATENCY_US, 3))


@dataclass(slots=True)
class _ConnCounters:
    client: str
    upstream: str
    listener: str
    in_flight: int = 0
    requests: int = 0
    responses: int = 0


class ProxyStats:
    """Counters updated by the proxy loop; ``snapshot()`` from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._apis: dict[str, _ApiCounters] = {}
        self._errors: Counter[str] = Counter()
        self._faults: Counter[str] = Counter()
        self._conns: dict[int, _ConnCounters] = {}
        self._connections_total = 0
        self._decode_errors = 0

    def _api(self, name: str) -> _ApiCounters:
        a = self._apis.get(name)
        if a is None:
            a = self._apis[name] = _ApiCounters()
        return a

    def on_connection_open(self, conn_id: int, client: str, upstream: str, listener: str) -> None:
        with self._lock:
            self._conns[conn_id] = _ConnCounters(client, upstream, listener)
            self._connections_total += 1

    def on_connection_close(self, conn_id: int) -> None:
        with self._lock:
            self._conns.pop(conn_id, None)

    def on_request(self, conn_id: int, api: str, size: int, expects_response: bool) -> None:
        with self._lock:
            a = self._api(api)
            a.requests += 1
            a.request_bytes += size
            c = self._conns.get(conn_id)
            if c is not None:
                c.requests += 1
                c.in_flight += expects_response

    def on_response(self, conn_id: int, api: str, size: int, latency_ns: int | None,
                    throttle_ms: int, errors: list[str]) -> None:
        with self._lock:
            a = self._api(api)
            a.responses += 1
            a.response_bytes += size
            if latency_ns is not None:
                a.latency.record_value(min(max(1, latency_ns // 1000), _MAX_LATENCY_US))
            if throttle_ms > 0:
                a.throttled += 1
                a.throttle_ms_max = max(a.throttle_ms_max, throttle_ms)
            for e in errors:
                self._errors[e] += 1
            c = self._conns.get(conn_id)
            if c is not None:
                c.responses += 1

    def on_delivered(self, conn_id: int) -> None:
        """The last byte of a response went to the client: one fewer request in flight."""
        with self._lock:
            c = self._conns.get(conn_id)
            if c is not None:
                c.in_flight = max(0, c.in_flight - 1)

    def on_fault(self, kind: str, n: int = 1) -> None:
        with self._lock:
            self._faults[kind] += n

    def on_decode_error(self) -> None:
        with self._lock:
            self._decode_errors += 1

    def snapshot(self, now_ns: int) -> StatsSnapshot:
        with self._lock:
            apis = {}
            for name, a in self._apis.items():
                h = a.latency
                count = h.get_total_count()
                apis[name] = ApiSnapshot(
                    name, a.requests, a.responses, a.request_bytes, a.response_bytes,
                    {p: (h.get_value_at_percentile(p) if count else 0) for p in PERCENTILES},
                    h.get_max_value() if count else 0, h.get_mean_value() if count else 0.0,
                    a.throttled, a.throttle_ms_max)
            conns = tuple(ConnectionSnapshot(i, c.client, c.upstream, c.listener, c.in_flight,
                                             c.requests, c.responses)
                          for i, c in sorted(self._conns.items()))
            return StatsSnapshot(now_ns, apis, dict(self._errors), dict(self._faults), conns,
                                 self._connections_total, self._decode_errors)
