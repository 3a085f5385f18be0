"""What a consumer process sends the parent: a ``ConsumerInterval`` per interval, a
``ConsumerReady`` once it stands where it starts reading, ``ConsumerFailed`` when it dies.
All frozen and picklable (they cross a multiprocessing queue or a Spark boundary).

As for producers: histograms are the interval's only, ``metrics`` the engine's
CUMULATIVE counters (the parent diffs them), so a lost report costs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from kctl.engine.consumer_metrics import ConsumerMetricsSnapshot

__all__ = ["ClockOffset", "ConsumerFailed", "ConsumerInterval", "ConsumerReady", "PartitionProgress", "SeenRun"]


@dataclass(frozen=True, slots=True)
class PartitionProgress:
    """One assigned partition at the end of an interval."""

    topic: str
    partition: int
    position: int          # next offset to read (-1: none yet)
    end_offset: int        # the log's end as the last Fetch answer said (high watermark, or
                           # last stable offset with read_committed); -1: not known yet
    target: int = -1       # where this run must read to (backlog / produced range); -1: none

    @property
    def lag(self) -> int | None:
        if self.position < 0 or self.end_offset < 0:
            return None
        return max(0, self.end_offset - self.position)


@dataclass(frozen=True, slots=True)
class ClockOffset:
    """How far this host's wall clock is from the reference's (the producer's side):
    ``offset_ns`` = reference clock - this clock, within +/- ``error_ns``."""

    offset_ns: int
    error_ns: int
    round_trip_ns: int
    samples: int
    method: str

    def to_json(self) -> dict:
        return {"offset_ms": round(self.offset_ns / 1e6, 6), "error_ms": round(self.error_ns / 1e6, 6),
                "round_trip_ms": round(self.round_trip_ns / 1e6, 6), "samples": self.samples,
                "method": self.method}

    @classmethod
    def from_json(cls, d: dict) -> ClockOffset:
        return cls(int(round(float(d["offset_ms"]) * 1e6)), int(round(float(d["error_ms"]) * 1e6)),
                   int(round(float(d.get("round_trip_ms", 0.0)) * 1e6)), int(d.get("samples", 0)),
                   str(d.get("method", "")))


#: (first offset, count, run tag, producer worker, first sequence): records of one producer
#: worker with consecutive sequences at consecutive offsets, as the consumer saw them.
SeenRun = tuple[int, int, bytes, int, int]


@dataclass(frozen=True, slots=True)
class ConsumerInterval:
    consumer: int
    start_wall_ns: int
    end_wall_ns: int
    histograms: dict[str, bytes]             # e2e clocks, this interval only
    metrics: ConsumerMetricsSnapshot         # cumulative
    partitions: tuple[PartitionProgress, ...] = ()
    matched: int = 0                         # cumulative: records with the run's identity
    warmup: bool = False
    final: bool = False
    caught_up: bool = False                  # every assigned partition at its target
    caught_up_wall_ns: int = 0               # when it first was (0: not yet)
    first_record_wall_ns: int = 0            # when it first handed a record out
    seen: dict[int, list[SeenRun]] | None = None          # final report of a --verify run
    unidentified: int = 0                    # cumulative: records without a kctl identity
    foreign: int = 0                         # cumulative: records of another run (other tag)
    rejoin_ns: int = 0                       # cumulative: time after the start spent rejoining
                                             # (every partition revoked until assigned again)
    close_commit_error: str = ""             # final report: why closing left committed offsets behind
                                             # what was read (its commit, the revoke listener's; "": not)
    rebalance_commit_failures: int = 0       # cumulative: commits before a rebalance that failed for
    rebalance_commit_error: str = ""         # good (ConsumerCoordinator.on_join_prepare), the last's why

    @property
    def duration_ns(self) -> int:
        return max(0, self.end_wall_ns - self.start_wall_ns)


@dataclass(frozen=True, slots=True)
class ConsumerReady:
    """Positions taken (partitions assigned and sought, or the group joined)."""

    consumer: int
    clock: ClockOffset | None = None
    setup_wall_ns: int = 0                   # when it began to subscribe / assign (before joining)


@dataclass(frozen=True, slots=True)
class ConsumerFailed:
    consumer: int
    error: str
