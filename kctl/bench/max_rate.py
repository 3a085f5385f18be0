"""``kctl bench --find-max-rate``: the highest fixed rate at which a latency bound holds.

How this works
--------------
A ``Slo`` is one bound on one clock's percentile (``p99<50ms`` on the intended clock,
``e2e.p99<50ms`` on the end-to-end clock; ``parse_slo``). ``RateSearch`` is the search,
sans-IO: ``next_rate()`` says which rate to try, ``on_step(step)`` takes the verdict.
It is a bracketing search, a small state table (``_NEXT_PHASE``):

- ``expand``: from the starting rate, multiply by ``factor`` while steps pass, until one
  fails (the bracket is then [last pass, first fail]);
- ``contract``: if the first step fails, divide by ``factor`` until one passes;
- ``bisect``: try the middle of the bracket, moving the passing or the failing end,
  until the bracket is narrower than ``precision`` (relative to its low end);
- ``done``: the rate found is the highest passing rate (``None`` if none passed).

``max_steps`` bounds the whole search; a search cut short by it says so.

A step (``StepResult``) passes only if (1) the achieved rate (acknowledged records per
second over the measured part) is within ``SHORTFALL`` of its target, whatever its
latency: a producer or cluster that cannot keep up has not "met the bound at that rate"
(the records counted are those scheduled in the measured part, acknowledged whenever,
so a rate above the target by more than ``SHORTFALL`` is a miscount and fails too);
(2) no record failed and no worker or consumer failed; (3) every ``Slo`` holds on its
clock (an e2e bound also needs every acknowledged record consumed). ``run_step`` runs
one step as an ordinary ``kctl produce`` run (its own warm-up, then the measured part;
with ``--consume`` when a bound is on e2e), so a step's figures mean what a produce
run's figures mean.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kctl.errors import ConfigError
from kctl.stats.summary import RunSummary

__all__ = ["SHORTFALL", "MaxRateResult", "RateSearch", "Slo", "StepResult", "judge_step", "parse_precision",
           "parse_slo", "search"]

#: A step whose achieved rate is below (1 - SHORTFALL) x its target failed (or above
#: (1 + SHORTFALL) x: the measured records are not the window's).
SHORTFALL = 0.03
CLOCKS = ("intended", "send", "request", "e2e")
#: percentile name -> the LatencyFigures field
_PERCENTILES = {"p50": "p50_ms", "p90": "p90_ms", "p95": "p95_ms", "p99": "p99_ms", "p99.9": "p999_ms",
                "p999": "p999_ms", "p99.99": "p9999_ms", "p9999": "p9999_ms", "max": "max_ms",
                "mean": "mean_ms"}
_SLO = re.compile(r"\s*(?:(?P<clock>[a-z][a-z0-9]*)[.:])?(?P<pct>p[0-9.]+|max|mean)\s*<\s*(?P<num>[0-9.]+)\s*"
                  r"(?P<unit>ns|us|µs|ms|s)?\s*")
_UNIT_MS = {"ns": 1e-6, "us": 1e-3, "µs": 1e-3, "ms": 1.0, "s": 1000.0}


@dataclass(frozen=True)
class Slo:
    clock: str          # intended | send | request | e2e
    percentile: str     # p50 ... p99.99, max, mean
    bound_ms: float

    @property
    def field(self) -> str:
        return _PERCENTILES[self.percentile]

    def text(self) -> str:
        return f"{self.clock}.{self.percentile}<{self.bound_ms:g}ms"

    def figure(self, summary: RunSummary) -> float | None:
        """This bound's figure in a run's summary (``None``: the clock was not measured)."""
        fig = summary.latency.get(self.clock)
        if fig is None or not fig.count:
            return None
        return float(getattr(fig, self.field))


def parse_slo(text: str) -> Slo:
    """``p99<50ms``, ``e2e.p99<50ms``, ``request:p99.9<10ms``, ``max<1s`` (default clock:
    intended, the one a schedule's stalls show on)."""
    m = _SLO.fullmatch(text.lower())
    if not m or m.group("pct") not in _PERCENTILES:
        raise ConfigError(f"--slo {text!r}: expected [clock.]percentile<bound, e.g. p99<50ms or e2e.p99.9<200ms "
                          f"(clocks: {', '.join(CLOCKS)}; percentiles: p50 p90 p95 p99 p99.9 p99.99 max mean)")
    if m.group("unit") is None:
        raise ConfigError(f"--slo {text!r}: give the bound's unit (ns, us, ms or s), e.g. "
                          f"{m.group('pct')}<{m.group('num')}ms")
    clock = m.group("clock") or "intended"
    if clock not in CLOCKS:
        raise ConfigError(f"--slo {text!r}: unknown clock {clock!r} (one of {', '.join(CLOCKS)})")
    try:
        bound = float(m.group("num")) * _UNIT_MS[m.group("unit")]
    except ValueError:
        raise ConfigError(f"--slo {text!r}: {m.group('num')!r} is not a number") from None
    if bound <= 0:
        raise ConfigError(f"--slo {text!r}: the bound must be positive")
    pct = "p99.9" if m.group("pct") == "p999" else "p99.99" if m.group("pct") == "p9999" else m.group("pct")
    return Slo(clock, pct, bound)


def parse_precision(text: str) -> float:
    """``--precision 5%`` (or ``0.05``) as a fraction, strictly between 0 and 1."""
    t = text.strip()
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise ConfigError(f"--precision must be a percentage such as 5%, not {text!r}") from None
    if not 0 < value < 1:
        raise ConfigError(f"--precision must be between 0% and 100%, not {text!r}")
    return value


@dataclass(frozen=True)
class StepResult:
    """One fixed-rate step and its verdict."""

    step: int
    target_rate: float
    achieved_rate: float
    #: the SLOs' figures, in the order given (``None``: not measured)
    figures: tuple[float | None, ...]
    passed: bool
    reason: str                 # why it failed ("" when it passed)
    summary: RunSummary | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "target_rate": self.target_rate, "achieved_rate": self.achieved_rate,
                "figures_ms": list(self.figures), "passed": self.passed, "reason": self.reason}


def judge_step(step: int, target: float, summary: RunSummary, slos: Sequence[Slo], *,
               failures: int = 0) -> StepResult:
    """The verdict on one step's summary (module docstring: the three conditions)."""
    achieved = summary.rates.records_per_s
    figures = tuple(s.figure(summary) for s in slos)
    reasons = []
    if achieved < (1 - SHORTFALL) * target:
        reasons.append(f"achieved {achieved:,.0f}/s, short of {target:,.0f}/s")
    elif achieved > (1 + SHORTFALL) * target:
        # Records count by when they were scheduled, so a measured window holds its
        # target's records: more means the figures are not that window's (never trusted).
        reasons.append(f"achieved {achieved:,.0f}/s, above {target:,.0f}/s: not the window's records")
    failed = summary.counts.failed + failures
    if failed:
        reasons.append(f"{failed:,} failed")
    for slo, fig in zip(slos, figures, strict=True):
        if fig is None:
            reasons.append(f"{slo.clock} not measured")
        elif fig >= slo.bound_ms:
            reasons.append(f"{slo.clock} {slo.percentile} {fig:,.1f} ms >= {slo.bound_ms:g} ms")
    e2e = summary.latency.get("e2e")
    if any(s.clock == "e2e" for s in slos) and e2e is not None and e2e.count < summary.counts.acked:
        # Figures over part of the records are not the records' figures: unread records
        # are the slowest of all.
        reasons.append(f"only {e2e.count:,} of {summary.counts.acked:,} acknowledged records consumed")
    return StepResult(step, target, achieved, figures, not reasons, "; ".join(reasons), summary)


# -- the search -------------------------------------------------------------------------------
# phase -> (next phase after a passing step, after a failing step)
_NEXT_PHASE = {
    "expand": ("expand", "bisect"),
    "contract": ("bisect", "contract"),
    "bisect": ("bisect", "bisect"),
}


@dataclass(frozen=True)
class MaxRateResult:
    slos: tuple[Slo, ...]
    found_rate: float | None        # highest passing rate; None: none passed
    failed_rate: float | None       # lowest failing rate above it (the bracket's top)
    steps: tuple[StepResult, ...]
    converged: bool                 # False: stopped by max_steps or the rate bounds
    note: str = ""
    #: Ctrl-C or SIGTERM ended the search: ``steps`` are those completed (the step under
    #: way is left out, ``note`` names it), ``found_rate`` the best passing rate so far
    interrupted: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"schema": "kctl.bench.max_rate/1", "slo": [s.text() for s in self.slos],
                "found_rate": self.found_rate, "failed_rate": self.failed_rate, "converged": self.converged,
                "note": self.note, "interrupted": self.interrupted, "shortfall": SHORTFALL,
                "steps": [s.to_json() for s in self.steps]}


class RateSearch:
    """The bracketing search (module docstring), one step at a time."""

    def __init__(self, start_rate: float, *, factor: float = 2.0, precision: float = 0.05,
                 max_steps: int = 12, min_rate: float = 1.0, max_rate: float = 10_000_000.0) -> None:
        if start_rate <= 0:
            raise ConfigError(f"--rate (the search's first step) must be positive, not {start_rate:g}")
        if factor <= 1:
            raise ConfigError(f"the search's factor must be above 1, not {factor:g}")
        if not 0 < precision < 1:
            raise ConfigError(f"--precision must be between 0 and 100%, not {precision * 100:g}%")
        if max_steps < 2:
            raise ConfigError(f"--max-steps must be at least 2, not {max_steps}")
        self.factor = factor
        self.precision = precision
        self.max_steps = max_steps
        self.min_rate = min_rate
        self.max_rate = max_rate
        self.phase = "start"
        self.low: float | None = None       # highest passing rate
        self.high: float | None = None      # lowest failing rate
        self.steps: list[StepResult] = []
        self._next: float | None = step_rate(start_rate)
        self.note = ""
        self.stopped = False                # by stop(): Ctrl-C or SIGTERM

    def next_rate(self) -> float | None:
        """The next step's target rate, or ``None`` when the search is over."""
        return self._next

    def on_step(self, step: StepResult) -> None:
        if self._next is None:
            raise RuntimeError("on_step after the search ended")
        self.steps.append(step)
        rate = step.target_rate
        if step.passed:
            self.low = rate if self.low is None else max(self.low, rate)
        else:
            self.high = rate if self.high is None else min(self.high, rate)
        if self.phase == "start":
            self.phase = "expand" if step.passed else "contract"
        else:
            self.phase = _NEXT_PHASE[self.phase][0 if step.passed else 1]
        self._next = self._choose()

    def _choose(self) -> float | None:
        if len(self.steps) >= self.max_steps:
            if not self.converged:
                self.note = f"stopped after --max-steps {self.max_steps} before the bracket closed"
            return None
        if self.phase == "expand":
            assert self.low is not None
            nxt = self.low * self.factor
            if nxt > self.max_rate:
                self.note = f"every rate up to {self.low:,.0f}/s met the bound (search ceiling {self.max_rate:,.0f}/s)"
                return None
            return step_rate(nxt)
        if self.phase == "contract":
            assert self.high is not None
            nxt = self.high / self.factor
            if nxt < self.min_rate:
                self.note = f"no rate down to {self.high:,.0f}/s met the bound"
                return None
            return step_rate(nxt)
        assert self.low is not None and self.high is not None
        if self.converged:
            return None
        mid = step_rate((self.low + self.high) / 2)
        if mid <= self.low or mid >= self.high:
            return None     # whole records per second: nothing left between them
        return mid

    @property
    def converged(self) -> bool:
        return (self.low is not None and self.high is not None
                and (self.high - self.low <= self.precision * self.low or self.high - self.low <= 1))

    def stop(self, note: str) -> None:
        """Ends the search before its next step (Ctrl-C, SIGTERM), saying why in ``note``."""
        self._next = None
        self.note = note
        self.stopped = True

    def result(self, slos: Sequence[Slo]) -> MaxRateResult:
        return MaxRateResult(tuple(slos), self.low, self.high, tuple(self.steps), self.converged, self.note,
                             interrupted=self.stopped)


def search(start_rate: float, slos: Sequence[Slo], run: Callable[[int, float], StepResult], *,
           on_step: Callable[[StepResult], None] = lambda _s: None, **kwargs: Any) -> MaxRateResult:
    """Runs the search: ``run(step_number, target_rate)`` runs and judges one step. A stop
    (``KeyboardInterrupt`` out of ``run``) ends it with the steps completed so far."""
    s = RateSearch(start_rate, **kwargs)
    while (rate := s.next_rate()) is not None:
        number = len(s.steps) + 1
        try:
            step = run(number, rate)
        except KeyboardInterrupt:
            s.stop(f"interrupted: step {number} ({rate:,.0f}/s) was cut short and is left out")
            break
        s.on_step(step)
        on_step(step)
    return s.result(slos)


def step_rate(rate: float) -> float:
    """A rate as steps run it: whole records per second (at least 1)."""
    return max(1.0, float(math.floor(rate + 0.5)))
