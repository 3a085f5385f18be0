"""The CI regression gate: this run's cells against a baseline's, within bounds.

How this works: a bound is ``metric=N%`` (of the baseline's median), ``metric=Nms`` /
``metric=N`` (absolute, in the metric's unit) or both, ``metric=20%+0.5ms``. For each
cell present in both runs and each bounded metric, the change is taken in the metric's
bad direction (lower throughput, higher latency):

    worse    = (baseline median - current median) * better   (> 0: got worse)
    allowed  = bound + (baseline max - min) / 2 + (current max - min) / 2

and the cell regresses when ``worse > allowed``. The two half-spreads are the
repetitions' own noise: a cell whose runs scatter by 8 % cannot be said to have
regressed by 5 %. With one repetition the spread is zero and the bound is all there is.
Cells are matched by name and shown by label (``acks=1``, as in the comparison table). A
cell missing from either side is reported; a metric one side did not measure (an .hlog
has no MB/s) is not checked. A gate with no check at all fails: a renamed matrix must
not turn CI's gate off silently.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from kctl.bench.results import METRIC_BY_KEY, CellResult, Stat
from kctl.errors import ConfigError

__all__ = ["DEFAULT_MAX_REGRESSION", "Bound", "Check", "GateResult", "check", "parse_bounds",
           "workload_differences"]

DEFAULT_MAX_REGRESSION = "records_per_s=10%,p99_ms=20%"

_PART = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(%|ms)?\s*$")


@dataclass(frozen=True)
class Bound:
    metric: str
    relative: float = 0.0   # fraction of the baseline median
    absolute: float = 0.0   # in the metric's unit

    def text(self) -> str:
        parts = []
        if self.relative:
            parts.append(f"{self.relative * 100:g}%")
        if self.absolute or not parts:
            parts.append(f"{self.absolute:g}{'ms' if self.metric.endswith('_ms') else ''}")
        return "+".join(parts)


def parse_bounds(text: str) -> list[Bound]:
    """``'records_per_s=10%,p99_ms=20%+0.5ms'`` -> bounds; ConfigError naming the bad part."""
    bounds = []
    for item in (x for x in text.split(",") if x.strip()):
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep:
            raise ConfigError(f"--max-regression expects metric=N% pairs, got {item.strip()!r} "
                              f"(for example {DEFAULT_MAX_REGRESSION})")
        metric = METRIC_BY_KEY.get(name)
        if metric is None or metric.better == 0:
            known = ", ".join(m.key for m in METRIC_BY_KEY.values() if m.better)
            raise ConfigError(f"--max-regression: unknown metric {name!r} (known: {known})")
        rel = ab = 0.0
        in_ms = name.endswith("_ms")
        for part in value.split("+"):
            m = _PART.match(part)
            if not m:
                raise ConfigError(f"--max-regression {name}: {value.strip()!r} is not N%, Nms or N%+Nms")
            if m.group(2) == "ms" and not in_ms:
                raise ConfigError(f"--max-regression {name}: {value.strip()!r}: {name} is not in "
                                  f"milliseconds; give N% or N {metric.label}")
            if m.group(2) == "%":
                rel += float(m.group(1)) / 100.0
            else:
                ab += float(m.group(1))
        bounds.append(Bound(name, rel, ab))
    if not bounds:
        raise ConfigError("--max-regression is empty")
    return bounds


@dataclass(frozen=True)
class Check:
    cell: str
    metric: str
    baseline: Stat
    current: Stat
    bound: Bound
    worse: float       # in the metric's unit; > 0 means worse than the baseline
    allowed: float

    @property
    def regressed(self) -> bool:
        return self.worse > self.allowed

    @property
    def change_pct(self) -> float:
        """Signed change of the median, in percent of the baseline's (+: bigger)."""
        b = self.baseline.median
        return (self.current.median - b) / b * 100.0 if b else 0.0

    @property
    def allowed_pct(self) -> float:
        b = self.baseline.median
        return self.allowed / abs(b) * 100.0 if b else 0.0


@dataclass(frozen=True)
class GateResult:
    checks: tuple[Check, ...]
    missing_in_baseline: tuple[str, ...]
    missing_now: tuple[str, ...]

    @property
    def regressions(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.regressed)

    @property
    def ok(self) -> bool:
        """Nothing regressed, and something was checked."""
        return bool(self.checks) and not self.regressions


#: The workload settings of a produce run (its summary's config) that make two runs
#: comparable: a gate across different ones compares different work.
WORKLOAD_KEYS = ("record_size", "payload", "compressibility", "keys", "rate", "partitions",
                 "headers", "id_headers", "workers", "duration_s", "warmup_s", "warmup_records",
                 "num_records")


def _workload(cell: CellResult) -> dict[str, object] | None:
    for rep in cell.reps:
        if rep.summary is not None:
            return {k: rep.summary.config.get(k) for k in WORKLOAD_KEYS}
    return None


def workload_differences(current: Sequence[CellResult], baseline: Sequence[CellResult]) -> list[str]:
    """``"record_size 100 -> 200"`` per workload setting in which a cell differs from the
    baseline's cell of the same name (each setting once); cells without a produce summary
    (an .hlog) have no known workload and are not compared."""
    base = {c.name: c for c in baseline}
    out: dict[str, str] = {}
    for cell in current:
        b = base.get(cell.name)
        now, then = _workload(cell), _workload(b) if b is not None else None
        if now is None or then is None:
            continue
        for k in WORKLOAD_KEYS:
            if now[k] != then[k] and k not in out:
                out[k] = f"{k} {then[k]} -> {now[k]}"
    return list(out.values())


def check(current: Sequence[CellResult], baseline: Sequence[CellResult],
          bounds: Sequence[Bound]) -> GateResult:
    base = {c.name: c for c in baseline}
    now = {c.name: c for c in current}
    checks = []
    for cell in current:
        b = base.get(cell.name)
        if b is None:
            continue
        for bound in bounds:
            if not (cell.has(bound.metric) and b.has(bound.metric)):
                continue
            better = METRIC_BY_KEY[bound.metric].better
            bs, cs = b.stat(bound.metric), cell.stat(bound.metric)
            worse = (bs.median - cs.median) * better
            allowed = bound.relative * abs(bs.median) + bound.absolute + bs.spread / 2 + cs.spread / 2
            checks.append(Check(cell.label, bound.metric, bs, cs, bound, worse, allowed))
    return GateResult(tuple(checks), tuple(c.label for n, c in now.items() if n not in base),
                      tuple(c.label for n, c in base.items() if n not in now))
