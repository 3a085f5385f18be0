"""--find-max-rate's pieces without a broker: the --slo grammar, a step's verdict (a step
short of its target fails whatever its latency), and the bracketing search stepped
against a model cluster whose capacity is known."""

from __future__ import annotations

import pytest

from kctl.bench.max_rate import SHORTFALL, RateSearch, Slo, StepResult, judge_step, parse_slo, search
from kctl.errors import ConfigError

from tests.bench.summaries import summary_with


@pytest.mark.parametrize("text, slo", [
    ("p99<50ms", Slo("intended", "p99", 50.0)),
    ("e2e.p99<1s", Slo("e2e", "p99", 1000.0)),
    ("request:p99.9<250us", Slo("request", "p99.9", 0.25)),
    ("send.max<20ms", Slo("send", "max", 20.0)),
    (" P50 < 5ms ", Slo("intended", "p50", 5.0)),
    ("p999<7ms", Slo("intended", "p99.9", 7.0)),
])
def test_slo_grammar(text, slo):
    assert parse_slo(text) == slo


@pytest.mark.parametrize("text, says", [
    ("p99>50ms", "expected [clock.]percentile<bound"),
    ("p98<5ms", "expected"),
    ("disk.p99<5ms", "unknown clock 'disk'"),
    ("p99<0ms", "positive"),
    ("p99<1.2.3ms", "not a number"),
    ("p99<50", "give the bound's unit (ns, us, ms or s), e.g. p99<50ms"),   # README: the unit is required
])
def test_bad_slo_is_one_clear_line(text, says):
    with pytest.raises(ConfigError) as e:
        parse_slo(text)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_a_step_short_of_its_target_fails_whatever_its_latency():
    slo = [parse_slo("p99<50ms")]
    short = judge_step(1, 10_000, summary_with(rate=10_000 * (1 - SHORTFALL) - 50, p99_ms=1.0), slo)
    assert not short.passed and "short of 10,000/s" in short.reason
    kept = judge_step(2, 10_000, summary_with(rate=10_000 * (1 - SHORTFALL) + 50, p99_ms=1.0), slo)
    assert kept.passed and kept.reason == ""
    slow = judge_step(3, 10_000, summary_with(rate=10_000, p99_ms=50.0), slo)
    assert not slow.passed and "intended p99 50.0 ms >= 50 ms" in slow.reason


def test_a_step_above_its_target_fails_its_window_holds_other_records():
    """Records count by their scheduled time, so a window holds its target's records; a
    rate above it by more than SHORTFALL (494/s against 375/s was seen when a warm-up's
    backlog counted as measured) is not the window's and is not trusted."""
    slo = [parse_slo("p99<50ms")]
    over = judge_step(1, 375, summary_with(rate=494, p99_ms=1.0), slo)
    assert not over.passed and "above 375/s" in over.reason
    assert judge_step(2, 375, summary_with(rate=375 * (1 + SHORTFALL) - 1, p99_ms=1.0), slo).passed


def test_e2e_bound_needs_the_e2e_clock_and_every_record_consumed():
    slo = [parse_slo("e2e.p99<100ms")]
    unmeasured = judge_step(1, 1000, summary_with(rate=1000, p99_ms=1.0), slo)
    assert not unmeasured.passed and "e2e not measured" in unmeasured.reason
    partial = judge_step(2, 1000, summary_with(rate=1000, p99_ms=1.0, e2e_p99_ms=5.0, e2e_count=10), slo)
    assert not partial.passed and "only 10 of" in partial.reason
    full = judge_step(3, 1000, summary_with(rate=1000, p99_ms=1.0, e2e_p99_ms=5.0), slo)
    assert full.passed and full.figures == (5.0,)


def test_failed_records_fail_the_step():
    step = judge_step(1, 1000, summary_with(rate=1000, p99_ms=1.0, failed=3), [parse_slo("p99<50ms")])
    assert not step.passed and "3 failed" in step.reason


def _model(capacity: float, calls: list[float]):
    """A cluster that sustains ``capacity`` records/s: below it latency is low, above it
    the achieved rate is the capacity."""
    def run(number: int, rate: float) -> StepResult:
        calls.append(rate)
        achieved = min(rate, capacity)
        return judge_step(number, rate, summary_with(rate=achieved, p99_ms=5.0 if rate <= capacity else 900.0),
                          [parse_slo("p99<50ms")])
    return run


@pytest.mark.parametrize("start", [100.0, 3000.0, 50_000.0])
def test_search_brackets_and_converges_on_the_capacity(start):
    calls: list[float] = []
    result = search(start, [parse_slo("p99<50ms")], _model(7_300.0, calls), precision=0.05, max_steps=30)
    assert result.converged
    assert result.found_rate is not None and result.failed_rate is not None
    assert 7_300 * 0.95 <= result.found_rate <= 7_300 < result.failed_rate
    assert result.failed_rate - result.found_rate <= 0.05 * result.found_rate
    assert [s.target_rate for s in result.steps] == calls
    # Every step below the capacity passed, every one above failed.
    assert all(s.passed == (s.target_rate <= 7_300) for s in result.steps)


def test_search_expands_then_bisects():
    calls: list[float] = []
    search(1000, [parse_slo("p99<50ms")], _model(5_000.0, calls), precision=0.1, max_steps=30)
    assert calls[:4] == [1000, 2000, 4000, 8000]           # doubling until a failure
    assert calls[4] == 6000                                 # then the middle of [4000, 8000]
    assert calls[5] == 5000


def test_search_contracts_when_the_first_step_fails():
    calls: list[float] = []
    result = search(10_000, [parse_slo("p99<50ms")], _model(1_500.0, calls), precision=0.05, max_steps=30)
    assert calls[:4] == [10_000, 5_000, 2_500, 1_250]
    assert result.converged and 1_400 <= result.found_rate <= 1_500


def test_search_stopped_by_max_steps_says_so():
    result = search(1000, [parse_slo("p99<50ms")], _model(1e9, []), max_steps=3)
    assert not result.converged and result.failed_rate is None
    assert result.found_rate == 4000 and "--max-steps 3" in result.note


def test_a_stop_keeps_the_steps_completed():
    """Ctrl-C or SIGTERM during step 3 (KeyboardInterrupt out of the step): the search ends
    with steps 1 and 2 and the best rate so far, the cut step named; before, the stop went
    through and every step was lost."""
    model = _model(5_000.0, [])

    def run(number: int, rate: float) -> StepResult:
        if number == 3:
            raise KeyboardInterrupt
        return model(number, rate)

    result = search(1000, [parse_slo("p99<50ms")], run, max_steps=30)
    assert result.interrupted and not result.converged
    assert [s.target_rate for s in result.steps] == [1000, 2000] and result.found_rate == 2000
    assert result.note == "interrupted: step 3 (4,000/s) was cut short and is left out"
    assert result.to_json()["interrupted"] is True


def test_no_passing_step_finds_nothing():
    result = search(8, [parse_slo("p99<50ms")], _model(0.5, []), max_steps=30)
    assert result.found_rate is None and "no rate" in result.note


def test_search_refuses_nonsense_parameters():
    with pytest.raises(ConfigError):
        RateSearch(0)
    with pytest.raises(ConfigError):
        RateSearch(100, precision=0)
    with pytest.raises(ConfigError):
        RateSearch(100, max_steps=1)


def test_result_json_has_every_step():
    result = search(1000, [parse_slo("p99<50ms")], _model(3000.0, []), max_steps=30)
    doc = result.to_json()
    assert doc["found_rate"] == result.found_rate and len(doc["steps"]) == len(result.steps)
    assert doc["slo"] == ["intended.p99<50ms"] and doc["shortfall"] == SHORTFALL


def test_precision_is_a_fraction():
    from kctl.bench.max_rate import parse_precision
    assert parse_precision("5%") == 0.05 and parse_precision("0.1") == 0.1
    for bad in ("5", "abc%", "0%", "100%"):
        with pytest.raises(ConfigError):
            parse_precision(bad)
