"""What the inspector proxy has seen, as counters and HdrHistograms; the reports its
processors send, and the merged snapshot the live view draws.

How this works
--------------
Each processor records into its own ``ProxyStats`` (a lock guards each update: a few
integer additions, so the loop never waits long, and a thread may ask for a report
at any time). ``report(processor, now_ns)`` is a ``StatsReport``: small frozen values,
cumulative since the processor started, with each API's latency histogram encoded
(HdrHistogram's compressed form, a few KiB). Reports cross from processor processes
to the parent as they are; the parent keeps each processor's latest and
``merge_reports`` adds them into one ``StatsSnapshot`` (histograms added, then read).
Cumulative reports make a lost or late report harmless: the next one carries it all.

Latency is request-to-response as the client sees it: from the moment the
proxy read the request's last byte from the client to the moment the client's
socket took the response's last byte (injected delays, the proxy's own decoding,
rewriting and writing, and a slow client's full socket all included), in
microseconds: what a capture on the client's side measures. A response is counted
(with its bytes, errors and throttle) only then; one the client never got is a
fault (``dropped``, ``undelivered``), never a response.

Statistics come from headers and record-batch headers (``peek.py``): requests,
bytes, and for Produce the batches, records and codecs; responses are decoded for
their error codes and throttle times.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from hdrh.histogram import HdrHistogram

from kctl.inspect.peek import ProduceSummary
from kctl.inspect.summary import capped_percentiles
from kctl.percentiles import latency_histogram, latency_us
from kctl.stats.latency import histogram_mean

PERCENTILES: Final = (50.0, 90.0, 99.0, 99.9)


@dataclass(frozen=True, slots=True)
class ApiSnapshot:
    api: str
    requests: int
    responses: int
    request_bytes: int
    response_bytes: int
    latency_us: dict[float, float]   # percentile -> µs (HdrHistogram bucket values, capped at the max)
    latency_max_us: float            # the largest latency measured, exact (not a bucket value)
    latency_mean_us: float
    throttled: int                   # responses with throttle_time_ms > 0
    throttle_ms_max: int
    records: int = 0                 # Produce: records in the requests (record-batch headers)
    batches: int = 0                 # Produce: record batches in the requests


@dataclass(frozen=True, slots=True)
class ConnectionSnapshot:
    id: int
    client: str
    upstream: str
    listener: str
    in_flight: int
    requests: int
    responses: int
    processor: int = 0
    state: str = "api_versions"      # the client's handshake as seen passing (engine/handshake.py)


@dataclass(frozen=True, slots=True)
class ProcessorLost:
    """A processor that died while the proxy ran, and the connections it owned then."""

    processor: int
    pid: int | None
    exitcode: int | None
    connections: tuple[ConnectionSnapshot, ...]

    def __str__(self) -> str:
        how = ("exit code unknown" if self.exitcode is None
               else f"killed by signal {-self.exitcode}" if self.exitcode < 0
               else f"exit code {self.exitcode}")
        conns = ", ".join(f"#{c.id} {c.client} -> {c.upstream}" for c in self.connections) or "none"
        return (f"processor {self.processor} (pid {self.pid}) died ({how}); "
                f"its {len(self.connections)} connection(s) were lost: {conns}")


@dataclass(frozen=True, slots=True)
class StatsSnapshot:
    taken_ns: int
    apis: dict[str, ApiSnapshot]
    # (API, Kafka error name) -> times seen in that API's responses: NOT_LEADER_OR_FOLLOWER
    # answering Produce is not the one answering Fetch.
    errors: dict[tuple[str, str], int]
    faults: dict[str, int]           # delayed, throttled, errors_injected, dropped, undelivered,
                                     # swallowed, tiny_segments, lost (batches), lost_records, forged
                                     # (acks of lost batches), rejected, rejected_records (batches
                                     # answered with lose_error); docs/inspect-summary.md
    connections: tuple[ConnectionSnapshot, ...]
    connections_total: int
    decode_errors: int
    codecs: dict[str, int] = field(default_factory=dict)   # Produce batches per codec
    processors: int = 1
    lost: tuple[ProcessorLost, ...] = ()

    @property
    def requests(self) -> int:
        return sum(a.requests for a in self.apis.values())

    @property
    def errors_by_name(self) -> dict[str, int]:
        """Kafka error name -> times seen in responses, whatever the API."""
        out: Counter[str] = Counter()
        for (_api, name), n in self.errors.items():
            out[name] += n
        return dict(out)

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

    def records_rate_since(self, earlier: StatsSnapshot | None) -> float:
        """Produce records/s between ``earlier`` and this snapshot."""
        if earlier is None or self.taken_ns <= earlier.taken_ns:
            return 0.0
        now = self.apis.get("Produce")
        before = earlier.apis.get("Produce")
        n = (now.records if now else 0) - (before.records if before else 0)
        return n / ((self.taken_ns - earlier.taken_ns) / 1e9)


@dataclass(frozen=True, slots=True)
class ApiReport:
    api: str
    requests: int
    responses: int
    request_bytes: int
    response_bytes: int
    throttled: int
    throttle_ms_max: int
    records: int
    batches: int
    latency: bytes                   # HdrHistogram.encode() of the latencies (µs), b"" when none
    latency_max_ns: int = 0          # the largest latency measured, exact


@dataclass(frozen=True, slots=True)
class StatsReport:
    """One processor's counters since it started (cumulative), as it sends them."""

    processor: int
    taken_ns: int
    apis: tuple[ApiReport, ...]
    errors: tuple[tuple[str, str, int], ...]     # (API, error name, times seen)
    faults: tuple[tuple[str, int], ...]
    codecs: tuple[tuple[str, int], ...]
    connections: tuple[ConnectionSnapshot, ...]
    connections_total: int
    decode_errors: int


@dataclass(slots=True)
class _ApiCounters:
    requests: int = 0
    responses: int = 0
    request_bytes: int = 0
    response_bytes: int = 0
    throttled: int = 0
    throttle_ms_max: int = 0
    records: int = 0
    batches: int = 0
    latency: HdrHistogram = field(default_factory=latency_histogram)
    latency_max_ns: int = 0


@dataclass(slots=True)
class _ConnCounters:
    client: str
    upstream: str
    listener: str
    in_flight: int = 0
    requests: int = 0
    responses: int = 0
    state: str = "api_versions"


class ProxyStats:
    """One processor's counters, updated by its loop; ``report()`` from any thread."""

    def __init__(self, processor: int = 0) -> None:
        self.processor = processor
        self._lock = threading.Lock()
        self._apis: dict[str, _ApiCounters] = {}
        self._errors: Counter[tuple[str, str]] = Counter()     # (API, error name)
        self._faults: Counter[str] = Counter()
        self._codecs: Counter[str] = Counter()
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

    def on_connection_state(self, conn_id: int, state: str) -> None:
        with self._lock:
            c = self._conns.get(conn_id)
            if c is not None:
                c.state = state

    def on_request(self, conn_id: int, api: str, size: int, expects_response: bool,
                   produce: ProduceSummary | None = None) -> None:
        with self._lock:
            a = self._api(api)
            a.requests += 1
            a.request_bytes += size
            if produce is not None:
                a.records += produce.records
                a.batches += produce.batches
                for codec, n in produce.codecs:
                    self._codecs[codec] += n
            c = self._conns.get(conn_id)
            if c is not None:
                c.requests += 1
                c.in_flight += expects_response

    def on_response(self, conn_id: int, api: str, size: int, latency_ns: int | None,
                    throttle_ms: int, errors: Iterable[str]) -> None:
        """A response whose last byte the client's socket took: one fewer request in flight."""
        with self._lock:
            a = self._api(api)
            a.responses += 1
            a.response_bytes += size
            if latency_ns is not None:
                a.latency.record_value(latency_us(latency_ns))     # rounded up: kctl/percentiles.py
                a.latency_max_ns = max(a.latency_max_ns, latency_ns)
            if throttle_ms > 0:
                a.throttled += 1
                a.throttle_ms_max = max(a.throttle_ms_max, throttle_ms)
            for e in errors:
                self._errors[(api, e)] += 1
            c = self._conns.get(conn_id)
            if c is not None:
                c.responses += 1
                c.in_flight = max(0, c.in_flight - 1)

    def on_fault(self, kind: str, n: int = 1) -> None:
        with self._lock:
            self._faults[kind] += n

    def on_decode_error(self) -> None:
        with self._lock:
            self._decode_errors += 1

    def report(self, now_ns: int) -> StatsReport:
        with self._lock:
            apis = tuple(
                ApiReport(name, a.requests, a.responses, a.request_bytes, a.response_bytes,
                          a.throttled, a.throttle_ms_max, a.records, a.batches,
                          a.latency.encode() if a.latency.get_total_count() else b"",
                          a.latency_max_ns)
                for name, a in self._apis.items())
            conns = tuple(ConnectionSnapshot(i, c.client, c.upstream, c.listener, c.in_flight,
                                             c.requests, c.responses, self.processor, c.state)
                          for i, c in sorted(self._conns.items()))
            return StatsReport(self.processor, now_ns, apis,
                               tuple((api, e, n) for (api, e), n in self._errors.items()),
                               tuple(self._faults.items()), tuple(self._codecs.items()), conns,
                               self._connections_total, self._decode_errors)

    def snapshot(self, now_ns: int) -> StatsSnapshot:
        """This processor's counters alone, as a snapshot."""
        return merge_reports([self.report(now_ns)], now_ns)


def merge_reports(reports: Iterable[StatsReport], now_ns: int, *, processors: int | None = None,
                  lost: tuple[ProcessorLost, ...] = ()) -> StatsSnapshot:
    """Adds the processors' latest reports into one snapshot."""
    reports = list(reports)
    totals: dict[str, list[int]] = {}
    hists: dict[str, HdrHistogram] = {}
    max_ns: Counter[str] = Counter()
    errors: Counter[tuple[str, str]] = Counter()
    faults: Counter[str] = Counter()
    codecs: Counter[str] = Counter()
    conns: list[ConnectionSnapshot] = []
    connections_total = decode_errors = 0
    for r in reports:
        for a in r.apis:
            t = totals.setdefault(a.api, [0] * 8)
            for i, v in enumerate((a.requests, a.responses, a.request_bytes, a.response_bytes,
                                   a.throttled, a.records, a.batches)):
                t[i] += v
            t[7] = max(t[7], a.throttle_ms_max)
            max_ns[a.api] = max(max_ns[a.api], a.latency_max_ns)
            if a.latency:
                h = hists.get(a.api)
                decoded = HdrHistogram.decode(a.latency)
                if h is None:
                    hists[a.api] = h = latency_histogram()
                h.add(decoded)
        for api, name, n in r.errors:
            errors[(api, name)] += n
        faults.update(dict(r.faults))
        codecs.update(dict(r.codecs))
        conns.extend(r.connections)
        connections_total += r.connections_total
        decode_errors += r.decode_errors
    apis = {}
    for name, t in totals.items():
        h = hists.get(name)
        count = h.get_total_count() if h is not None else 0
        # One walk of the counts for all percentiles and one for the mean: hdrh's
        # get_mean_value() walks an iterator object per bucket (tens of ms of the
        # parent's CPU per snapshot under load, taken from the traffic it watches).
        apis[name] = ApiSnapshot(
            name, t[0], t[1], t[2], t[3],
            capped_percentiles(h, PERCENTILES, max_ns[name]),
            # The exact largest latency: HdrHistogram's max is its bucket's highest value
            # (3 significant digits: 23030.849 ms reads 23035.903 ms).
            max_ns[name] / 1000 if count else 0, histogram_mean(h) if count else 0.0,
            t[4], t[7], t[5], t[6])
    return StatsSnapshot(now_ns, apis, dict(errors), dict(faults),
                         tuple(sorted(conns, key=lambda c: c.id)), connections_total, decode_errors,
                         dict(codecs), processors if processors is not None else max(1, len(reports)),
                         lost)
