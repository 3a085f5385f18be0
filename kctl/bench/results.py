"""The results of a bench run (``results.json``) and of anything ``kctl report`` reads.

How this works: every source becomes a list of ``CellResult`` — a named cell with one
``RepResult`` per repetition (the figures of ``METRICS``, a throughput/p99 timeline) and
its latency histograms merged over the repetitions (for the percentile chart). A bench
run writes them as ``results.json``; ``load_run`` reads one back, or builds the same
shape from a ``kctl produce`` summary JSON (one repetition; no histogram, so the
percentile curve is drawn through the summary's percentiles) or from an HdrHistogram
interval log (kctl's or another tool's; one repetition; figures from the histograms).

``CellResult.stat(metric)`` is the median with its min and max over repetitions; the
comparison table and the regression gate use nothing else.

Latency columns: "intended" is the coordinated-omission-safe clock (from the record's
place on the schedule); "service" is the ``send`` clock (from when kctl handed the record
to the engine). Without a rate there is no schedule and the two are the same figure.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hdrh.histogram import HdrHistogram

from kctl.errors import ConfigError
from kctl.percentiles import value_at_percentile, values_at_percentiles
from kctl.stats.hlog import HlogDamaged, LoggedInterval, read_interval_log
from kctl.stats.latency import EMPTY_FIGURES, decode_histogram, encode_histogram, new_histogram
from kctl.stats.summary import RunSummary

__all__ = ["METRICS", "RESULTS_SCHEMA", "BenchResults", "best_cells", "CellResult", "Interruption",
           "Metric", "RepResult", "Stat", "load_run", "merge_intervals", "metrics_from_summary", "timeline_from_intervals"]

RESULTS_SCHEMA = "kctl.bench.results/1"


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    #: +1: higher is better; -1: lower is better; 0: neither (not marked, not gated).
    better: int
    fmt: str = "{:.2f}"


METRICS: tuple[Metric, ...] = (
    Metric("records_per_s", "records/s", +1, "{:,.0f}"),
    Metric("mb_per_s", "MB/s", +1, "{:.2f}"),
    Metric("p50_ms", "p50 ms", -1),
    Metric("p99_ms", "p99 ms", -1),
    Metric("p999_ms", "p99.9 ms", -1),
    Metric("max_ms", "max ms", -1),
    Metric("service_p50_ms", "svc p50 ms", -1),
    Metric("service_p99_ms", "svc p99 ms", -1),
    Metric("service_p999_ms", "svc p99.9 ms", -1),
    Metric("service_max_ms", "svc max ms", -1),
    # kctl bench --consume: consumed minus intended send time (the e2e clock).
    Metric("e2e_p50_ms", "e2e p50 ms", -1),
    Metric("e2e_p99_ms", "e2e p99 ms", -1),
    Metric("e2e_max_ms", "e2e max ms", -1),
    Metric("records_per_batch", "rec/batch", +1, "{:.1f}"),
    # More requests per second is neither good nor bad on its own (it follows throughput
    # and linger), so it is shown but never marked best or gated by default.
    Metric("requests_per_s", "req/s", 0, "{:,.0f}"),
    Metric("throttle_ms", "throttle ms", -1, "{:,.0f}"),
    Metric("errors", "errors", -1, "{:,.0f}"),
)
METRIC_BY_KEY = {m.key: m for m in METRICS}


@dataclass(frozen=True)
class Stat:
    median: float
    min: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Stat:
        if not values:
            return cls(0.0, 0.0, 0.0)
        return cls(float(statistics.median(values)), float(min(values)), float(max(values)))

    @property
    def spread(self) -> float:
        return self.max - self.min

    def to_dict(self) -> dict[str, float]:
        return {"median": self.median, "min": self.min, "max": self.max}


@dataclass
class RepResult:
    repetition: int
    metrics: dict[str, float]
    #: ``[{"t_s": seconds from the first measured interval's start, "records_per_s", "p99_ms"}]``
    timeline: list[dict[str, float]] = field(default_factory=list)
    summary: RunSummary | None = None
    topic: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"repetition": self.repetition, "topic": self.topic, "metrics": self.metrics,
                "timeline": self.timeline,
                "summary": self.summary.to_json() if self.summary is not None else None}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RepResult:
        summary = d.get("summary")
        return cls(int(d["repetition"]), {k: float(v) for k, v in d["metrics"].items()},
                   list(d.get("timeline") or []),
                   RunSummary.from_json(summary) if summary else None, d.get("topic"))


@dataclass
class CellResult:
    name: str
    label: str
    properties: dict[str, str] = field(default_factory=dict)
    reps: list[RepResult] = field(default_factory=list)
    #: clock -> histogram merged over the repetitions ("intended", "send", "request")
    histograms: dict[str, HdrHistogram] = field(default_factory=dict)
    #: percentile curve when there is no histogram (a produce summary): [(percentile, ms)]
    percentile_points: list[tuple[float, float]] = field(default_factory=list)
    hlog: str | None = None

    def stat(self, key: str) -> Stat:
        return Stat.of([r.metrics[key] for r in self.reps if key in r.metrics])

    def has(self, key: str) -> bool:
        """Whether the source measured ``key`` at all (an .hlog has no bytes, batches or
        errors): a figure it lacks is n/a, never 0."""
        return any(key in r.metrics for r in self.reps)

    def stats(self) -> dict[str, Stat]:
        return {m.key: self.stat(m.key) for m in METRICS if self.has(m.key)}

    def latency_histogram(self) -> HdrHistogram | None:
        """The intended clock's histogram, or the send clock's in max-throughput mode."""
        for clock in ("intended", "send", None):
            h = self.histograms.get(clock)  # type: ignore[arg-type]
            if h is not None and h.get_total_count():
                return h
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "label": self.label, "properties": self.properties,
                "hlog": self.hlog,
                "stats": {k: s.to_dict() for k, s in self.stats().items()},
                "histograms": {str(c): encode_histogram(h).decode("ascii")
                               for c, h in self.histograms.items()},
                "repetitions": [r.to_dict() for r in self.reps]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CellResult:
        return cls(d["name"], d.get("label") or d["name"], dict(d.get("properties") or {}),
                   [RepResult.from_dict(r) for r in d.get("repetitions") or []],
                   {c: decode_histogram(h) for c, h in (d.get("histograms") or {}).items()},
                   hlog=d.get("hlog"))


@dataclass(frozen=True)
class Interruption:
    """Where a bench run stopped by Ctrl-C or SIGTERM was cut short: the run under way then
    (``"rep/cell"``; left out of the results, since its figures cover part of a repetition,
    or None when the stop came between runs) and the runs never started."""

    cut_short: str | None
    not_run: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"cut_short": self.cut_short, "not_run": list(self.not_run)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Interruption:
        return cls(d.get("cut_short"), tuple(d.get("not_run") or ()))


@dataclass
class BenchResults:
    cells: list[CellResult]
    workload: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    started: str | None = None
    ended: str | None = None
    #: interleaving actually used: ["rep/cell", ...], the completed runs
    order: list[str] = field(default_factory=list)
    #: set when Ctrl-C or SIGTERM stopped the run: ``cells`` hold the completed runs only
    #: (a cell none of whose runs completed is left out)
    interrupted: Interruption | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"schema": RESULTS_SCHEMA, "started": self.started, "ended": self.ended,
                "workload": self.workload, "environment": self.environment,
                "order": self.order,
                "interrupted": self.interrupted.to_dict() if self.interrupted else None,
                "cells": [c.to_dict() for c in self.cells]}

    def write(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> BenchResults:
        interrupted = d.get("interrupted")
        return cls([CellResult.from_dict(c) for c in d.get("cells") or []], dict(d.get("workload") or {}),
                   dict(d.get("environment") or {}), d.get("started"), d.get("ended"),
                   list(d.get("order") or []),
                   Interruption.from_dict(interrupted) if interrupted else None)


# -- figures from a produce summary or from interval logs ---------------------------------------
def metrics_from_summary(s: RunSummary) -> dict[str, float]:
    """The ``METRICS`` of one ``kctl produce`` summary (docs/produce-summary.md)."""
    intended, send = s.latency.get("intended", EMPTY_FIGURES), s.latency.get("send", EMPTY_FIGURES)
    measured = s.run.measured_s
    counts = s.counts
    out = {
        "records_per_s": s.rates.records_per_s,
        "mb_per_s": s.rates.mb_per_s,
        "records_per_batch": s.batching.records_per_batch,
        "requests_per_s": counts.requests_sent / measured if measured else 0.0,
        "throttle_ms": float(s.throttle.time_ms),
        "errors": float(counts.failed + sum(s.errors_by_name.values())),
    }
    for k in ("p50_ms", "p99_ms", "p999_ms", "max_ms"):
        out[k] = float(getattr(intended, k))
        out[f"service_{k}"] = float(getattr(send, k))
    e2e = s.latency.get("e2e")
    if e2e is not None:
        for k in ("p50_ms", "p99_ms", "max_ms"):
            out[f"e2e_{k}"] = float(getattr(e2e, k))
    return out


def merge_intervals(intervals: Sequence[LoggedInterval]) -> dict[str | None, HdrHistogram]:
    out: dict[str | None, HdrHistogram] = {}
    for iv in intervals:
        h = out.get(iv.tag)
        if h is None:
            h = out[iv.tag] = new_histogram()
        h.add(iv.histogram)
    return out


def _main_tag(intervals: Sequence[LoggedInterval]) -> str | None:
    tags = {iv.tag for iv in intervals}
    for t in ("intended", "send"):
        if t in tags:
            return t
    return sorted(tags, key=lambda t: (t is not None, t or ""))[0] if tags else None


def timeline_from_intervals(intervals: Sequence[LoggedInterval], *, unit_ms: float = 1e-3,
                            t0_s: float | None = None) -> list[dict[str, float]]:
    """Throughput (values recorded per second) and p99 per interval of the main tag."""
    tag = _main_tag(intervals)
    rows = [iv for iv in intervals if iv.tag == tag]
    if not rows:
        return []
    t0 = min(iv.start_s for iv in rows) if t0_s is None else t0_s
    out = []
    for iv in rows:
        length = iv.end_s - iv.start_s
        n = iv.histogram.get_total_count()
        out.append({"t_s": round(iv.end_s - t0, 3),
                    "records_per_s": round(n / length, 3) if length > 0 else 0.0,
                    "p99_ms": value_at_percentile(iv.histogram, 99.0) * unit_ms if n else 0.0})
    return out


def covered_s(spans: Sequence[tuple[float, float]]) -> float:
    """Seconds covered by the union of (start_s, end_s) spans. A log may hold several
    repetitions (a bench cell's log holds each of its repetitions, with other cells' runs
    in between) or intervals that overlap: a rate over first start -> last end would count
    the gaps, one over the summed lengths would count an overlap twice."""
    total = 0.0
    cur_start = cur_end = None
    for start, end in sorted(spans):
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None:
        total += cur_end - cur_start
    return total


def _metrics_from_intervals(intervals: Sequence[LoggedInterval], unit_ms: float) -> dict[str, float]:
    merged = merge_intervals(intervals)
    tag = _main_tag(intervals)
    main = merged.get(tag)
    span = covered_s([(iv.start_s, iv.end_s) for iv in intervals if iv.tag == tag])
    out: dict[str, float] = {}
    n = main.get_total_count() if main is not None else 0
    out["records_per_s"] = n / span if span > 0 else 0.0
    # Service time is the send clock's: a log without a "send" tag (a Java or hdrh writer's
    # untagged one) did not measure it, so its svc figures are n/a, not the main clock's.
    service = merged.get("send")
    for prefix, h in (("", main), ("service_", service)):
        if h is None or not h.get_total_count():
            continue
        pct = values_at_percentiles(h, (50.0, 99.0, 99.9))
        out[f"{prefix}p50_ms"] = pct[50.0] * unit_ms
        out[f"{prefix}p99_ms"] = pct[99.0] * unit_ms
        out[f"{prefix}p999_ms"] = pct[99.9] * unit_ms
        out[f"{prefix}max_ms"] = h.get_max_value() * unit_ms
    return out


_READS = ("kctl report reads a bench results.json or its --out directory, a kctl produce "
          "--json-out summary, or an HdrHistogram .hlog")
_MAX_RATE_REFUSAL = ("{}: a bench --find-max-rate search, which kctl report does not compare: its "
                     "steps are in that file and max-rate.png beside it; " + _READS)

_UNIT_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}


def _read_json(p: Path) -> Any:
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"cannot read {p}: {e}") from None


#: The first bytes of files report is often handed by mistake, and what reads them.
_FOREIGN_MAGIC = {
    b"\x0a\x0d\x0d\x0a": "a pcapng capture (kctl decode reads those)",
    b"\xd4\xc3\xb2\xa1": "a pcap capture (kctl decode reads those)",
    b"\xa1\xb2\xc3\xd4": "a pcap capture (kctl decode reads those)",
    b"\x4d\x3c\xb2\xa1": "a pcap capture (kctl decode reads those)",
    b"\xa1\xb2\x3c\x4d": "a pcap capture (kctl decode reads those)",
    b"PAR1": "a Parquet file (kctl analyze writes those; kctl replay reads them)",
}


def load_run(path: str | Path, *, hlog_unit: str = "us",
             on_warning: Callable[[str], None] | None = None) -> list[CellResult]:
    """The cells of one earlier run: a bench ``results.json`` (or its directory), a
    ``kctl produce`` summary JSON, or an HdrHistogram interval log (values in
    ``hlog_unit``: kctl writes microseconds; other tools often nanoseconds). An interval
    log cut short in its last line gives the whole intervals before it, said through
    ``on_warning`` (without it, the log is refused)."""
    p = Path(path)
    if p.is_dir():
        if not (p / "results.json").exists() and (p / "max-rate.json").exists():
            raise ConfigError(_MAX_RATE_REFUSAL.format(p / "max-rate.json"))
        if not (p / "results.json").exists():
            raise ConfigError(f"{path}: a directory without results.json ({_READS})")
        p = p / "results.json"
    if not p.exists():
        raise ConfigError(f"{path}: no such file ({_READS})")
    if hlog_unit not in _UNIT_MS:
        raise ConfigError(f"--hlog-unit must be one of {', '.join(_UNIT_MS)}, not {hlog_unit!r}")
    with open(p, "rb") as f:
        head = f.read(4096)
    foreign = _FOREIGN_MAGIC.get(head[:4])
    if foreign is not None:
        raise ConfigError(f"{p}: not a kctl summary, .hlog or bench directory: looks like {foreign}")
    head = head.lstrip()
    if head.startswith(b"{"):
        doc = _read_json(p)
        schema = doc.get("schema") if isinstance(doc, dict) else None
        if schema == RESULTS_SCHEMA:
            try:
                return BenchResults.from_dict(doc).cells
            except (KeyError, TypeError, ValueError) as e:
                raise ConfigError(f"{p}: malformed bench results ({e})") from None
        if isinstance(schema, str) and schema.startswith("kctl.bench.max_rate/"):
            raise ConfigError(_MAX_RATE_REFUSAL.format(p))
        if isinstance(schema, str) and schema.startswith("kctl.produce.summary/"):
            name = p.stem
            try:
                summary = RunSummary.from_json(doc)
            except ValueError as e:
                raise ConfigError(f"{p}: {e}") from None
            lat = summary.latency.get("intended")
            points = [(p_, float(getattr(lat, k))) for p_, k in (
                (50.0, "p50_ms"), (90.0, "p90_ms"), (99.0, "p99_ms"), (99.9, "p999_ms"),
                (99.99, "p9999_ms"))] if lat is not None else []
            props = {k: str(v) for k, v in (summary.config.get("producer") or {}).items()
                     if k != "bootstrap.servers"}
            return [CellResult(name, name, props,
                               [RepResult(1, metrics_from_summary(summary), summary=summary)],
                               percentile_points=points)]
        raise ConfigError(f"{p}: a JSON file that is neither bench results ({RESULTS_SCHEMA}) "
                          "nor a kctl produce summary")
    try:
        intervals = read_interval_log(p)
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: not a kctl summary, .hlog or bench directory: not text ({_READS})") from None
    except HlogDamaged as d:
        if not (d.last and d.before and on_warning is not None):
            raise ConfigError(f"{p}: a damaged HdrHistogram interval log: line {d.line} cannot be read "
                              f"({type(d.error).__name__}: {d.error}); {len(d.before)} whole interval(s) "
                              "before it") from None
        on_warning(f"{p}: the log is cut short at line {d.line} (its last interval cannot be "
                   f"read); reporting the {len(d.before)} whole interval(s) before it")
        intervals = d.before
    except Exception as e:  # hdrh raises assorted errors on foreign input
        raise ConfigError(f"{p}: not an HdrHistogram interval log ({type(e).__name__}: {e})") from None
    if not intervals:
        raise ConfigError(f"{p}: no histogram intervals found (is it an HdrHistogram interval log?)")
    unit_ms = _UNIT_MS[hlog_unit]
    merged = merge_intervals(intervals)
    hists = {(t if t is not None else "intended"): h for t, h in merged.items()}
    if unit_ms != 1e-3:
        # Charts read histograms in kctl's microseconds: rescale foreign units once.
        hists = {t: _rescale(h, unit_ms / 1e-3) for t, h in hists.items()}
    rep = RepResult(1, _metrics_from_intervals(intervals, unit_ms),
                    timeline_from_intervals(intervals, unit_ms=unit_ms))
    return [CellResult(p.stem, p.stem, {}, [rep], hists, hlog=str(p))]


def _rescale(h: HdrHistogram, factor: float) -> HdrHistogram:
    out = new_histogram()
    for item in h.get_recorded_iterator():
        v = max(1, int(round(item.value_iterated_to * factor)))
        out.record_value(min(v, out.highest_trackable_value), item.count_at_value_iterated_to)
    return out


def best_cells(cells: Sequence[CellResult]) -> dict[str, str | None]:
    """Per metric, the name of the cell with the best median (``None`` when there is one
    cell, the metric has no direction, or every cell has the same median: a tie marks
    nobody). Cells that did not measure a metric take no part in it."""
    out: dict[str, str | None] = {}
    for m in METRICS:
        out[m.key] = None
        measured = [c for c in cells if c.has(m.key)]
        if m.better == 0 or len(measured) < 2:
            continue
        medians = [(c.stat(m.key).median, c.name) for c in measured]
        values = {v for v, _ in medians}
        if len(values) < 2:
            continue
        v, name = max(medians, key=lambda x: x[0] * m.better)
        if sum(1 for x, _ in medians if x == v) == 1:
            out[m.key] = name
    return out
