"""The run summary of ``kctl produce`` (and bench, replay, Spark runs), typed.

``RunStats.summary()`` (stats/aggregate.py) builds a ``RunSummary``; ``to_json()`` is
the JSON document docs/produce-summary.md specifies (schema
``kctl.produce.summary/1``), and ``from_json()`` reads one back (``kctl report``,
``kctl bench`` baselines). Readers use the attributes; only files hold the JSON.

Every section is a frozen dataclass; ``config`` is the one free-form map (the
options and producer properties as the command was given them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from kctl.stats.latency import LatencyFigures

if TYPE_CHECKING:
    from kctl.stats.consume_summary import ConsumeSummary   # it imports this module

__all__ = ["SUMMARY_SCHEMA", "Batching", "BrokerCount", "Counts", "PartitionCount", "Rates",
           "RunInfo", "RunSummary", "SparkStarts", "TaskStartFigures", "Throttle", "TransactionTotals",
           "VerifyResult", "WarmupTotals", "WorkerFailure"]

#: Bumped when a summary key changes meaning or goes away (adding keys does not bump it).
SUMMARY_SCHEMA = "kctl.produce.summary/1"


def numbers_to_json(obj: Any) -> dict[str, Any]:
    """A dataclass of plain numbers as its JSON object: every field by name, in order."""
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


def numbers_from_json(cls: Any, d: Mapping[str, Any]) -> Any:
    """``numbers_to_json`` read back: each field as its default's type (int or float);
    a field the document lacks is its default."""
    return cls(**{f.name: type(f.default)(d.get(f.name, f.default)) for f in fields(cls)})


@dataclass(frozen=True, slots=True)
class WarmupTotals:
    intervals: int = 0
    records_sent: int = 0
    records_acked: int = 0
    records_failed: int = 0
    bytes_sent: int = 0

    def to_json(self) -> dict[str, int]:
        return numbers_to_json(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> WarmupTotals:
        return numbers_from_json(cls, d)


@dataclass(frozen=True, slots=True)
class WorkerFailure:
    worker: int
    error: str


@dataclass(frozen=True, slots=True)
class RunInfo:
    id: str
    start: str
    end: str
    start_unix_ms: int
    end_unix_ms: int
    duration_s: float
    measured_s: float
    workers: int
    workers_reason: str
    workers_failed: tuple[WorkerFailure, ...]
    intervals: int
    max_throughput: bool
    warmup: WarmupTotals
    interrupted: bool = False     # Ctrl-C cut the run short: the figures cover what ran
    #: where a stop came: "set-up" (before the workers' common start: zero counts),
    #: "run", "verify" (the run had ended; its read back was cut short); None: no stop
    stopped_in: str | None = None

    @property
    def intended_from(self) -> str:
        return "send" if self.max_throughput else "schedule"

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "start": self.start, "end": self.end,
                "start_unix_ms": self.start_unix_ms, "end_unix_ms": self.end_unix_ms,
                "duration_s": self.duration_s, "measured_s": self.measured_s,
                "workers": self.workers, "workers_reason": self.workers_reason,
                "workers_failed": [{"worker": w.worker, "error": w.error} for w in self.workers_failed],
                "intervals": self.intervals, "max_throughput": self.max_throughput,
                "intended_from": self.intended_from, "warmup": self.warmup.to_json(),
                "interrupted": self.interrupted, "stopped_in": self.stopped_in}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RunInfo:
        return cls(str(d.get("id", "")), str(d.get("start", "")), str(d.get("end", "")),
                   int(d.get("start_unix_ms", 0)), int(d.get("end_unix_ms", 0)),
                   float(d.get("duration_s", 0.0)), float(d.get("measured_s", 0.0)),
                   int(d.get("workers", 0)), str(d.get("workers_reason", "")),
                   tuple(WorkerFailure(int(w["worker"]), str(w["error"]))
                         for w in d.get("workers_failed", ())),
                   int(d.get("intervals", 0)), bool(d.get("max_throughput", False)),
                   WarmupTotals.from_json(d.get("warmup") or {}), bool(d.get("interrupted", False)),
                   None if d.get("stopped_in") is None else str(d["stopped_in"]))


@dataclass(frozen=True, slots=True)
class Counts:
    sent: int = 0
    acked: int = 0
    failed: int = 0
    failed_by_error: Mapping[str, int] = field(default_factory=dict)
    abandoned: int = 0
    scheduled: int = 0
    bytes_sent: int = 0
    value_bytes: int = 0
    batches_sent: int = 0
    batches_acked: int = 0
    requests_sent: int = 0
    responses_received: int = 0
    abandoned_by_reason: Mapping[str, int] = field(default_factory=dict)
    reauthentications: int = 0       # whole run: SASL logins again on open connections (KIP-368)

    def to_json(self) -> dict[str, Any]:
        return {"sent": self.sent, "acked": self.acked, "failed": self.failed,
                "failed_by_error": dict(sorted(self.failed_by_error.items())),
                "abandoned": self.abandoned,
                "abandoned_by_reason": dict(sorted(self.abandoned_by_reason.items())),
                "scheduled": self.scheduled,
                "bytes_sent": self.bytes_sent, "value_bytes": self.value_bytes,
                "batches_sent": self.batches_sent, "batches_acked": self.batches_acked,
                "requests_sent": self.requests_sent, "responses_received": self.responses_received,
                "reauthentications": self.reauthentications}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Counts:
        ints = {k: int(d.get(k, 0)) for k in ("sent", "acked", "failed", "abandoned", "scheduled",
                                              "bytes_sent", "value_bytes", "batches_sent",
                                              "batches_acked", "requests_sent", "responses_received",
                                              "reauthentications")}
        return cls(failed_by_error={str(k): int(v) for k, v in (d.get("failed_by_error") or {}).items()},
                   abandoned_by_reason={str(k): int(v)
                                        for k, v in (d.get("abandoned_by_reason") or {}).items()},
                   **ints)


@dataclass(frozen=True, slots=True)
class Rates:
    records_per_s: float = 0.0
    mb_per_s: float = 0.0               # record values, MiB/s (kafka-producer-perf-test's MB/s)
    wire_mb_per_s: float = 0.0          # RecordBatch bytes written, MiB/s
    target_records_per_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"records_per_s": self.records_per_s, "mb_per_s": self.mb_per_s,
                "wire_mb_per_s": self.wire_mb_per_s, "target_records_per_s": self.target_records_per_s}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Rates:
        target = d.get("target_records_per_s")
        return cls(float(d.get("records_per_s", 0.0)), float(d.get("mb_per_s", 0.0)),
                   float(d.get("wire_mb_per_s", 0.0)), float(target) if target is not None else None)


@dataclass(frozen=True, slots=True)
class Batching:
    records_per_batch: float = 0.0
    batch_fill: float = 0.0
    queue_time_ms_mean: float = 0.0
    splits: int = 0
    # Java's compression-rate-avg (compressed / uncompressed records bytes per batch
    # sent, averaged); None without compression, and then left out of the JSON.
    compression_rate_avg: float | None = None

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"records_per_batch": self.records_per_batch,
                             "batch_fill": self.batch_fill,
                             "queue_time_ms_mean": self.queue_time_ms_mean, "splits": self.splits}
        if self.compression_rate_avg is not None:
            d["compression_rate_avg"] = self.compression_rate_avg
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Batching:
        rate = d.get("compression_rate_avg")
        return cls(float(d.get("records_per_batch", 0.0)), float(d.get("batch_fill", 0.0)),
                   float(d.get("queue_time_ms_mean", 0.0)), int(d.get("splits", 0)),
                   float(rate) if rate is not None else None)


@dataclass(frozen=True, slots=True)
class TransactionTotals:
    """A transactional run's transactions (``--transaction-duration-ms``)."""

    committed: int = 0
    aborted: int = 0
    commit_latency: LatencyFigures | None = None   # commitTransaction: flush and EndTxn

    def to_json(self) -> dict[str, Any]:
        lat = self.commit_latency
        return {"committed": self.committed, "aborted": self.aborted,
                "commit_latency": lat.to_dict() if lat is not None else None}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TransactionTotals:
        lat = d.get("commit_latency")
        return cls(int(d.get("committed", 0)), int(d.get("aborted", 0)),
                   LatencyFigures.from_dict(lat) if lat else None)


@dataclass(frozen=True, slots=True)
class Throttle:
    time_ms: int = 0
    requests: int = 0


@dataclass(frozen=True, slots=True)
class PartitionCount:
    topic: str
    partition: int
    records_acked: int


@dataclass(frozen=True, slots=True)
class BrokerCount:
    node_id: int
    records_acked: int


@dataclass(frozen=True)
class VerifyResult:
    """What ``--verify`` found (kctl/load/verify.py)."""

    expected: int
    found: int
    lost: int
    duplicated: int
    reordered: int
    misplaced: int
    lost_examples: tuple[tuple[int, int], ...] = ()        # (worker, seq)
    duplicate_examples: tuple[tuple[int, int], ...] = ()
    partitions: dict[int, dict[str, int]] = field(default_factory=dict)
    read_s: float = 0.0                                     # time spent reading and checking
    aborted: int = 0     # the run's records read in aborted transactions, left out (read_committed)
    #: the run's records reported failed or abandoned (never acknowledged) yet read in the
    #: log: at-least-once's surprise, apart from the verdict
    written_unacked: int = 0

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.reordered or self.misplaced)

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "expected": self.expected, "found": self.found, "lost": self.lost,
                "duplicated": self.duplicated, "reordered": self.reordered,
                "misplaced": self.misplaced,
                "lost_examples": [list(x) for x in self.lost_examples],
                "duplicate_examples": [list(x) for x in self.duplicate_examples],
                "partitions": {str(k): v for k, v in self.partitions.items()},
                "read_s": round(self.read_s, 6), "aborted": self.aborted,
                "written_unacked": self.written_unacked}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> VerifyResult:
        return cls(int(d["expected"]), int(d["found"]), int(d["lost"]), int(d["duplicated"]),
                   int(d["reordered"]), int(d["misplaced"]),
                   tuple((int(x[0]), int(x[1])) for x in d.get("lost_examples", ())),
                   tuple((int(x[0]), int(x[1])) for x in d.get("duplicate_examples", ())),
                   {int(k): {str(a): int(b) for a, b in v.items()}
                    for k, v in (d.get("partitions") or {}).items()},
                   float(d.get("read_s", 0.0)), int(d.get("aborted", 0)), int(d.get("written_unacked", 0)))


@dataclass(frozen=True, slots=True)
class TaskStartFigures:
    """One Spark load task's start: ``launched_ms`` after the first task's launch,
    ``late_ms`` after the start the tasks agreed on."""

    task: int
    host: str
    launched_ms: float
    late_ms: float


@dataclass(frozen=True, slots=True)
class SparkStarts:
    """How together the load tasks of a Spark run started (``kctl produce --spark``,
    ``kctl replay``): the summary's ``spark`` section. Times are each task's wall clock."""

    tasks: int
    hosts: int
    launch_spread_ms: float
    start_skew_ms: float
    max_late_ms: float
    per_task: tuple[TaskStartFigures, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"tasks": self.tasks, "hosts": self.hosts, "launch_spread_ms": self.launch_spread_ms,
                "start_skew_ms": self.start_skew_ms, "max_late_ms": self.max_late_ms,
                "per_task": [{"task": t.task, "host": t.host, "launched_ms": t.launched_ms,
                              "late_ms": t.late_ms} for t in self.per_task]}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SparkStarts:
        return cls(int(d["tasks"]), int(d["hosts"]), float(d["launch_spread_ms"]),
                   float(d["start_skew_ms"]), float(d["max_late_ms"]),
                   tuple(TaskStartFigures(int(t["task"]), str(t["host"]), float(t["launched_ms"]),
                                          float(t["late_ms"])) for t in d.get("per_task") or ()))


@dataclass(frozen=True)
class RunSummary:
    run: RunInfo
    config: Mapping[str, Any]
    counts: Counts
    rates: Rates
    latency: Mapping[str, LatencyFigures]
    batching: Batching
    throttle: Throttle
    retries: int
    errors_by_name: Mapping[str, int]
    partitions: tuple[PartitionCount, ...]
    brokers: tuple[BrokerCount, ...]
    verify: VerifyResult | None = None
    #: ``kctl produce --consume``: the consume side's summary (stats/consume_summary.py);
    #: its e2e figures are also ``latency["e2e"]``.
    consume: ConsumeSummary | None = None
    spark: SparkStarts | None = None          # Spark runs only
    schema: str = SUMMARY_SCHEMA
    transactions: TransactionTotals | None = None   # transactional runs only
    #: ``--verify`` asked for and the read back failed: why (``verify`` is then None)
    verify_error: str | None = None

    def with_verify(self, verify: VerifyResult | None, error: str | None = None) -> RunSummary:
        return replace(self, verify=verify, verify_error=error)

    def interrupted_now(self, stopped_in: str) -> RunSummary:
        """The summary of a run a stop cut short in ``stopped_in`` (after its figures were taken)."""
        return replace(self, run=replace(self.run, interrupted=True, stopped_in=stopped_in))

    @property
    def unaccounted(self) -> int:
        """Scheduled records that are none of acked, failed or abandoned (warm-up
        included); 0 at the end of every complete run: the accounting invariant."""
        c, w = self.counts, self.run.warmup
        return c.scheduled - (c.acked + c.failed + c.abandoned + w.records_acked + w.records_failed)

    def with_consume(self, consume: ConsumeSummary | None) -> RunSummary:
        """The consume side added: its summary, and the e2e clock beside the other three."""
        if consume is None:
            return self
        return replace(self, consume=consume, latency={**self.latency, **consume.latency})

    def with_spark(self, spark: SparkStarts | None) -> RunSummary:
        return replace(self, spark=spark)

    def to_json(self) -> dict[str, Any]:
        """The summary JSON document (docs/produce-summary.md)."""
        out: dict[str, Any] = {
            "schema": self.schema,
            "run": self.run.to_json(),
            "config": dict(self.config),
            "counts": self.counts.to_json(),
            "rates": self.rates.to_json(),
            "latency": {c: f.to_dict() for c, f in self.latency.items()},
            "batching": self.batching.to_json(),
            "throttle": {"time_ms": self.throttle.time_ms, "requests": self.throttle.requests},
            "retries": self.retries,
            "errors_by_name": dict(sorted(self.errors_by_name.items())),
            "partitions": [{"topic": p.topic, "partition": p.partition, "records_acked": p.records_acked}
                           for p in self.partitions],
            "brokers": [{"node_id": b.node_id, "records_acked": b.records_acked} for b in self.brokers],
        }
        if self.transactions is not None:
            out["transactions"] = self.transactions.to_json()
        if self.verify is not None:
            out["verify"] = self.verify.to_json()
        if self.verify_error is not None:
            out["verify_error"] = self.verify_error
        if self.consume is not None:
            out["consume"] = self.consume.to_json(with_config=False)
        if self.spark is not None:
            out["spark"] = self.spark.to_json()
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RunSummary:
        """A summary document read back; ValueError when it is not one."""
        schema = d.get("schema")
        if not isinstance(schema, str) or not schema.startswith("kctl.produce.summary/"):
            raise ValueError(f"not a kctl produce summary (schema {schema!r})")
        try:
            throttle = d.get("throttle") or {}
            verify = d.get("verify")
            txn = d.get("transactions")
            consume = d.get("consume")
            if consume:
                from kctl.stats.consume_summary import ConsumeSummary   # it imports this module
                consume = ConsumeSummary.from_json(consume)
            spark = d.get("spark")
            return cls(
                run=RunInfo.from_json(d.get("run") or {}),
                config=dict(d.get("config") or {}),
                counts=Counts.from_json(d.get("counts") or {}),
                rates=Rates.from_json(d.get("rates") or {}),
                latency={str(c): LatencyFigures.from_dict(f) for c, f in (d.get("latency") or {}).items()},
                batching=Batching.from_json(d.get("batching") or {}),
                throttle=Throttle(int(throttle.get("time_ms", 0)), int(throttle.get("requests", 0))),
                retries=int(d.get("retries", 0)),
                errors_by_name={str(k): int(v) for k, v in (d.get("errors_by_name") or {}).items()},
                partitions=tuple(PartitionCount(str(p["topic"]), int(p["partition"]), int(p["records_acked"]))
                                 for p in d.get("partitions") or ()),
                brokers=tuple(BrokerCount(int(b["node_id"]), int(b["records_acked"]))
                              for b in d.get("brokers") or ()),
                verify=VerifyResult.from_json(verify) if verify else None,
                consume=consume or None,
                spark=SparkStarts.from_json(spark) if spark else None,
                schema=schema,
                transactions=TransactionTotals.from_json(txn) if txn else None,
                verify_error=str(d["verify_error"]) if d.get("verify_error") is not None else None)
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"malformed kctl produce summary ({type(e).__name__}: {e})") from None
