"""The run summary of ``kctl consume`` (and the ``consume`` section of ``kctl produce
--consume``), typed.

``ConsumeStats.summary()`` (stats/consume_aggregate.py) builds a ``ConsumeSummary``;
``to_json()`` is the document docs/consume-summary.md specifies (schema
``kctl.consume.summary/1``) and ``from_json()`` reads one back. Readers use the
attributes; only files hold the JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kctl.stats.consume_report import ClockOffset
from kctl.stats.latency import LatencyFigures
from kctl.stats.summary import VerifyResult, numbers_from_json, numbers_to_json

__all__ = ["BacklogResult", "CONSUME_SCHEMA", "ConsumeCounts", "ConsumeRates", "ConsumeRunInfo",
           "ConsumeSummary", "FailedCommit", "LagPoint", "PartitionState"]

CONSUME_SCHEMA = "kctl.consume.summary/1"


@dataclass(frozen=True, slots=True)
class ConsumeRunInfo:
    id: str
    start: str
    end: str
    start_unix_ms: int
    end_unix_ms: int
    duration_s: float
    measured_s: float
    consumers: int
    consumers_failed: tuple[tuple[int, str], ...]
    mode: str                    # "assign" or "group"
    intervals: int
    caught_up: bool              # every consumer reached its targets (when there were targets)
    interrupted: bool = False    # Ctrl-C (or SIGTERM) cut the run short; the figures cover what ran
    #: where a stop came: "set-up" (before the consumers' common start: the topic, a
    #: --backlog, the consumers starting or joining their group; zero counts), "run"; None: no stop
    stopped_in: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "start": self.start, "end": self.end, "start_unix_ms": self.start_unix_ms,
                "end_unix_ms": self.end_unix_ms, "duration_s": self.duration_s, "measured_s": self.measured_s,
                "consumers": self.consumers,
                "consumers_failed": [{"consumer": c, "error": e} for c, e in self.consumers_failed],
                "mode": self.mode, "intervals": self.intervals, "caught_up": self.caught_up,
                "interrupted": self.interrupted, "stopped_in": self.stopped_in}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ConsumeRunInfo:
        return cls(str(d.get("id", "")), str(d.get("start", "")), str(d.get("end", "")),
                   int(d.get("start_unix_ms", 0)), int(d.get("end_unix_ms", 0)),
                   float(d.get("duration_s", 0.0)), float(d.get("measured_s", 0.0)), int(d.get("consumers", 0)),
                   tuple((int(x["consumer"]), str(x["error"])) for x in d.get("consumers_failed", ())),
                   str(d.get("mode", "assign")), int(d.get("intervals", 0)), bool(d.get("caught_up", False)),
                   bool(d.get("interrupted", False)),
                   None if d.get("stopped_in") is None else str(d["stopped_in"]))


@dataclass(frozen=True, slots=True)
class ConsumeCounts:
    records: int = 0               # handed out (warm-up excluded)
    key_value_bytes: int = 0       # their keys and values
    batch_bytes: int = 0           # record batches fetched (the wire's records part)
    batches: int = 0
    fetch_requests: int = 0
    fetch_responses: int = 0
    matched: int = 0               # records with the run's identity (on the e2e clock)
    unidentified: int = 0          # records without a kctl identity header
    foreign: int = 0               # kctl records of other runs
    aborted_records_skipped: int = 0
    control_batches: int = 0
    records_decoded: int = 0       # records that needed the full decoder (not the per-batch scan)
    rebalances: int = 0
    commits: int = 0
    commit_failures: int = 0
    offset_resets: int = 0
    throttle_time_ms: int = 0
    reauthentications: int = 0     # whole run: SASL logins again on open connections (KIP-368)

    def to_json(self) -> dict[str, int]:
        return numbers_to_json(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ConsumeCounts:
        return numbers_from_json(cls, d)


@dataclass(frozen=True, slots=True)
class ConsumeRates:
    records_per_s: float = 0.0
    mb_per_s: float = 0.0              # keys + values, MiB/s (kafka-consumer-perf-test's MB.sec)
    wire_mb_per_s: float = 0.0         # record batch bytes fetched, MiB/s
    fetch_requests_per_s: float = 0.0
    records_per_fetch: float = 0.0     # records per Fetch answer

    def to_json(self) -> dict[str, float]:
        return numbers_to_json(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ConsumeRates:
        return numbers_from_json(cls, d)


@dataclass(frozen=True, slots=True)
class PartitionState:
    topic: str
    partition: int
    records: int        # consumed from it (warm-up included: positions are cumulative)
    position: int
    end_offset: int
    lag: int | None

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "records": self.records,
                "position": self.position, "end_offset": self.end_offset, "lag": self.lag}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PartitionState:
        lag = d.get("lag")
        return cls(str(d["topic"]), int(d["partition"]), int(d.get("records", 0)), int(d.get("position", -1)),
                   int(d.get("end_offset", -1)), int(lag) if lag is not None else None)


@dataclass(frozen=True, slots=True)
class LagPoint:
    """Consumer lag at one interval's end: total and per partition ("topic-partition")."""

    t_s: float
    total: int
    partitions: Mapping[str, int]

    def to_json(self) -> dict[str, Any]:
        return {"t_s": self.t_s, "total": self.total, "partitions": dict(self.partitions)}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> LagPoint:
        return cls(float(d["t_s"]), int(d["total"]), {str(k): int(v) for k, v in d.get("partitions", {}).items()})


@dataclass(frozen=True, slots=True)
class BacklogResult:
    """``--backlog N``: N records written before the consumers started; how long they took
    to read all of them (first consumer start to the last partition reaching the end)."""

    records: int
    drained: bool
    drain_s: float
    records_per_s: float
    produce_s: float = 0.0          # how long writing the backlog took

    def to_json(self) -> dict[str, Any]:
        return {"records": self.records, "drained": self.drained, "drain_s": self.drain_s,
                "records_per_s": self.records_per_s, "produce_s": self.produce_s}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> BacklogResult:
        return cls(int(d["records"]), bool(d["drained"]), float(d["drain_s"]), float(d["records_per_s"]),
                   float(d.get("produce_s", 0.0)))


@dataclass(frozen=True, slots=True)
class FailedCommit:
    """A group member's commits that failed for good and left the group's committed offsets
    behind what it read: ``when`` is ``rebalance`` (the commits before rebalances, ``count``
    of them) or ``close`` (its closing commit); ``error`` says why (the last one's why)."""

    consumer: int
    when: str
    count: int
    error: str

    def to_json(self) -> dict[str, Any]:
        return {"consumer": self.consumer, "when": self.when, "count": self.count, "error": self.error}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> FailedCommit:
        return cls(int(d["consumer"]), str(d["when"]), int(d.get("count", 1)), str(d.get("error", "")))

    def warning(self) -> str:
        """The run's one line for it (stderr)."""
        if self.when == "close":
            # "may": a commit left unanswered may still have been stored by the coordinator.
            return (f"WARNING: consumer {self.consumer}: the commit on close failed ({self.error}): the group's "
                    "committed offsets may be behind what was read")
        times = "a commit" if self.count == 1 else f"{self.count} commits"
        return (f"WARNING: consumer {self.consumer}: {times} before a rebalance failed (last: {self.error}): "
                "the group's committed offsets were behind what was read, so the partitions' next owners "
                "read those records again")


@dataclass(frozen=True)
class ConsumeSummary:
    run: ConsumeRunInfo
    config: Mapping[str, Any]
    counts: ConsumeCounts
    rates: ConsumeRates
    latency: Mapping[str, LatencyFigures]          # "e2e"
    lag_final: int
    lag_max: int
    lag_timeline: tuple[LagPoint, ...]
    partitions: tuple[PartitionState, ...]
    errors_by_name: Mapping[str, int] = field(default_factory=dict)
    clock: ClockOffset | None = None
    backlog: BacklogResult | None = None
    verify: VerifyResult | None = None
    schema: str = CONSUME_SCHEMA
    lag_unknown: tuple[int, ...] = ()             # partitions whose final lag is not known
                                                  # (lag_final leaves them out)
    failed_commits: tuple[FailedCommit, ...] = ()  # group mode: commits that left offsets behind

    def with_verify(self, verify: VerifyResult | None) -> ConsumeSummary:
        return replace(self, verify=verify)

    def with_backlog(self, backlog: BacklogResult | None) -> ConsumeSummary:
        return replace(self, backlog=backlog)

    def with_end_offsets(self, ends: Mapping[int, int]) -> ConsumeSummary:
        """The final lag with the end offsets asked after the run (ListOffsets) for the
        partitions whose end the consumers never learned (never fetched); a partition
        still without a position or an end offset is named in ``lag_unknown``."""
        parts = []
        for p in self.partitions:
            end = p.end_offset if p.end_offset >= 0 else ends.get(p.partition, -1)
            lag = max(0, end - p.position) if end >= 0 and p.position >= 0 else None
            parts.append(replace(p, end_offset=end, lag=lag))
        final = sum(p.lag for p in parts if p.lag is not None)
        # The timeline covers fetched partitions only; the final lag adds the others: the
        # maximum is over everything reported, the final lag included.
        return replace(self, partitions=tuple(parts), lag_final=final, lag_max=max(self.lag_max, final),
                       lag_unknown=tuple(sorted(p.partition for p in parts if p.lag is None)))

    def to_json(self, *, with_config: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {"schema": self.schema, "run": self.run.to_json()}
        if with_config:
            out["config"] = dict(self.config)
        out.update({
            "counts": self.counts.to_json(),
            "rates": self.rates.to_json(),
            "latency": {c: f.to_dict() for c, f in self.latency.items()},
            "clock": self.clock.to_json() if self.clock is not None else None,
            "lag": {"final": self.lag_final, "max": self.lag_max,
                    "unknown_partitions": list(self.lag_unknown),
                    "timeline": [p.to_json() for p in self.lag_timeline]},
            "backlog": self.backlog.to_json() if self.backlog is not None else None,
            "partitions": [p.to_json() for p in self.partitions],
            "errors_by_name": dict(sorted(self.errors_by_name.items())),
            "failed_commits": [f.to_json() for f in self.failed_commits],
        })
        if self.verify is not None:
            out["verify"] = self.verify.to_json()
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ConsumeSummary:
        schema = d.get("schema")
        if not isinstance(schema, str) or not schema.startswith("kctl.consume.summary/"):
            raise ValueError(f"not a kctl consume summary (schema {schema!r})")
        try:
            lag = d.get("lag") or {}
            return cls(
                run=ConsumeRunInfo.from_json(d.get("run") or {}), config=dict(d.get("config") or {}),
                counts=ConsumeCounts.from_json(d.get("counts") or {}),
                rates=ConsumeRates.from_json(d.get("rates") or {}),
                latency={str(c): LatencyFigures.from_dict(f) for c, f in (d.get("latency") or {}).items()},
                lag_final=int(lag.get("final", 0)), lag_max=int(lag.get("max", 0)),
                lag_timeline=tuple(LagPoint.from_json(p) for p in lag.get("timeline") or ()),
                partitions=tuple(PartitionState.from_json(p) for p in d.get("partitions") or ()),
                errors_by_name={str(k): int(v) for k, v in (d.get("errors_by_name") or {}).items()},
                clock=ClockOffset.from_json(d["clock"]) if d.get("clock") else None,
                backlog=BacklogResult.from_json(d["backlog"]) if d.get("backlog") else None,
                verify=VerifyResult.from_json(d["verify"]) if d.get("verify") else None,
                schema=schema, lag_unknown=tuple(int(x) for x in lag.get("unknown_partitions") or ()),
                failed_commits=tuple(FailedCommit.from_json(f) for f in d.get("failed_commits") or ()))
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            raise ValueError(f"malformed kctl consume summary ({type(e).__name__}: {e})") from None
