"""``kctl decode --summary``: totals over every frame of a capture.

Per API: requests, responses, bytes, request->response latency percentiles
(an HdrHistogram in microseconds, 3 significant digits, beside the exact max); per topic/partition
(separately for what was produced and what was fetched): records, bytes,
batches and codecs; errors per (API, error name), beside their totals by name; throttling
totals; marks and notices by kind.

A frame is counted under its own API (a response under its request's; ``unmatched`` when
its request was not captured, ``api<key>`` when the API is unknown). A request cut by a gap
is not a frame but an ``incomplete`` (or ``skipped``) notice, so it is not in its API's
``requests``, while its response, decoded as its API (``request_cut``), is in
``responses``: an API's responses can outnumber its requests.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from hdrh.histogram import HdrHistogram

from kctl.errors import BudgetExceededError
from kctl.inspect.report import error_codes, throttle_time_ms
from kctl.inspect.session import CaptureNotice, DecodedFrame
from kctl.percentiles import latency_histogram, latency_us, values_at_percentiles
from kctl.protocol.error_codes import error_for

__all__ = ["CaptureSummary", "ApiStats", "PartitionStats", "PERCENTILES", "capped_percentiles"]

PERCENTILES: Final = (50.0, 90.0, 99.0, 99.9, 100.0)


def capped_percentiles(h: HdrHistogram | None, percentiles: Sequence[float], max_ns: int, *,
                       unit_ns: int = 1000) -> dict[float, float]:
    """Percentile -> value in units of ``unit_ns`` (µs by default, 1_000_000: ms) of a
    latency histogram in µs, beside the exact largest value measured, ``max_ns``: bucket
    values ranked as Java's HdrHistogram ranks them (kctl/percentiles.py; one walk of the
    counts for all percentiles), never above ``max_ns`` (a
    bucket's highest value can be, at 3 significant digits: p99 would read above max).
    No histogram, or an empty one: 0 each. Here and in the proxy's snapshot
    (``proxy_stats.merge_reports``)."""
    if h is None or not h.get_total_count():
        return dict.fromkeys(percentiles, 0)
    per_us = unit_ns / 1000
    cap = max_ns / unit_ns
    pct = values_at_percentiles(h, percentiles)
    return {p: min(pct[p] / per_us, cap) for p in percentiles}


@dataclass(slots=True)
class ApiStats:
    requests: int = 0
    responses: int = 0
    request_bytes: int = 0
    response_bytes: int = 0
    # kctl/percentiles.py: whole µs rounded up, so the cap at the largest latency is the
    # only thing between a bucket value and its latency (one sample: every percentile is it).
    latency_us: HdrHistogram = field(default_factory=latency_histogram)
    # The mean is kept exactly, in ns (as analyze's): HdrHistogram.get_mean_value() walks every
    # bucket of this 1 µs..1 h range (about 0.4 s per API, most of a small capture's decode time).
    latency_sum_ns: int = 0
    # The largest latency measured, exact: the histogram's p100 is the highest value of its
    # bucket (3 significant digits: 23030.849 ms reads 23035.903 ms).
    latency_max_ns: int = 0

    def record_latency(self, latency_ns: int) -> None:
        self.latency_us.record_value(latency_us(latency_ns))
        self.latency_sum_ns += latency_ns
        self.latency_max_ns = max(self.latency_max_ns, latency_ns)

    def to_dict(self) -> dict[str, Any]:
        h = self.latency_us
        d: dict[str, Any] = {"requests": self.requests, "responses": self.responses,
                             "request_bytes": self.request_bytes,
                             "response_bytes": self.response_bytes,
                             "latency_count": h.get_total_count()}
        if h.get_total_count():
            # One pass over the buckets for all percentiles (one walk each cost ~5 ms per API).
            values = capped_percentiles(h, PERCENTILES, self.latency_max_ns, unit_ns=1_000_000)
            d["latency_ms"] = {f"p{p:g}": v for p, v in values.items()}
            d["latency_ms"]["max"] = self.latency_max_ns / 1e6
            d["latency_ms"]["mean"] = self.latency_sum_ns / h.get_total_count() / 1e6
        return d


@dataclass(slots=True)
class PartitionStats:
    records: int = 0
    bytes: int = 0
    batches: int = 0
    codecs: Counter = field(default_factory=Counter)   # codec -> batches

    def to_dict(self) -> dict[str, Any]:
        return {"records": self.records, "bytes": self.bytes, "batches": self.batches,
                "codecs": dict(sorted(self.codecs.items()))}


class CaptureSummary:
    """Feed it every frame and notice (``add``); read ``to_dict()``."""

    def __init__(self) -> None:
        self.frames = 0
        self.apis: dict[str, ApiStats] = {}
        self.produced: dict[tuple[str, int], PartitionStats] = {}
        self.fetched: dict[tuple[str, int], PartitionStats] = {}
        # (API, Kafka error name) -> times: NOT_LEADER_OR_FOLLOWER answering Produce is not
        # the one answering Fetch.
        self.errors: Counter[tuple[str, str]] = Counter()
        self.marks: Counter = Counter()
        self.notices: Counter = Counter()
        self.throttled_responses = 0
        self.throttle_ms_total = 0
        self.connections: set = set()
        self.first_ts_ns: int | None = None
        self.last_ts_ns: int | None = None

    def add(self, item: DecodedFrame | CaptureNotice) -> None:
        if isinstance(item, CaptureNotice):
            self.notices[item.kind] += 1
            return
        f = item
        self.frames += 1
        self.connections.add(f.conn)
        self.first_ts_ns = f.ts_ns if self.first_ts_ns is None else min(self.first_ts_ns, f.ts_ns)
        self.last_ts_ns = f.ts_ns if self.last_ts_ns is None else max(self.last_ts_ns, f.ts_ns)
        for m in f.marks:
            self.marks[m] += 1
        name = f.api_name or ("unmatched" if "unmatched" in f.marks else f"api{f.api_key}")
        st = self.apis.get(name)
        if st is None:      # not setdefault: an ApiStats allocates a histogram
            st = self.apis[name] = ApiStats()
        if f.direction == "request":
            st.requests += 1
            st.request_bytes += f.size + 4
        else:
            st.responses += 1
            st.response_bytes += f.size + 4
            if f.latency_ns is not None:
                st.record_latency(f.latency_ns)
            if f.body is not None:
                for c in error_codes(f.body):
                    if c:
                        self.errors[(name, error_for(c).name)] += 1
                t = throttle_time_ms(f.body, f.api_version)
                if t:
                    self.throttled_responses += 1
                    self.throttle_ms_total += t
        if f.error is not None:
            self.errors[(name, "DECODE_ERROR")] += 1
        if f.record_sets:
            target = self.produced if f.direction == "request" else self.fetched
            for rs in f.record_sets:
                ps = target.setdefault((rs.topic, rs.partition), PartitionStats())
                ps.records += rs.record_count
                ps.bytes += rs.size_bytes
                ps.batches += rs.batch_count
                for b in rs.batches:
                    ps.codecs[b.compression.name.lower()] += 1
                if isinstance(rs.error, BudgetExceededError):
                    self.errors[(name, "RECORDS_OVER_BUDGET")] += 1
                elif rs.error is not None:
                    self.errors[(name, "RECORDS_DECODE_ERROR")] += 1

    @property
    def errors_by_name(self) -> Counter[str]:
        """Kafka error name -> times seen, whatever the API."""
        out: Counter[str] = Counter()
        for (_api, error), n in self.errors.items():
            out[error] += n
        return out

    def errors_by_api(self) -> dict[str, dict[str, int]]:
        """API name -> Kafka error name -> times seen; APIs by name, errors most seen first."""
        out: dict[str, dict[str, int]] = {}
        for (api, error), n in sorted(self.errors.items(), key=lambda kv: (kv[0][0], -kv[1], kv[0][1])):
            out.setdefault(api, {})[error] = n
        return out

    def to_dict(self) -> dict[str, Any]:
        def parts(d: dict[tuple[str, int], PartitionStats]) -> list[dict[str, Any]]:
            return [{"topic": t, "partition": p, **s.to_dict()} for (t, p), s in sorted(d.items())]
        return {
            "frames": self.frames,
            "connections": len(self.connections),
            "duration_s": ((self.last_ts_ns - self.first_ts_ns) / 1e9
                           if self.first_ts_ns is not None and self.last_ts_ns is not None else 0.0),
            "apis": {k: v.to_dict() for k, v in sorted(self.apis.items())},
            "produced": parts(self.produced),
            "fetched": parts(self.fetched),
            "errors": dict(self.errors_by_name.most_common()),
            "errors_by_api": self.errors_by_api(),
            "throttle": {"responses": self.throttled_responses, "total_ms": self.throttle_ms_total},
            "marks": dict(sorted(self.marks.items())),
            "notices": dict(sorted(self.notices.items())),
        }
