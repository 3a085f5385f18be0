"""The regression gate on made-up cells: bounds, the repetitions' spread, JUnit XML."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from kctl.bench.gate import check, parse_bounds
from kctl.bench.junit import write_junit
from kctl.bench.results import CellResult, RepResult, best_cells
from kctl.errors import ConfigError


def cell(name, rates, p99s):
    reps = [RepResult(i + 1, {"records_per_s": r, "p99_ms": p}) for i, (r, p) in enumerate(zip(rates, p99s))]
    return CellResult(name, name, {}, reps)


def test_parse_bounds():
    b = parse_bounds("records_per_s=10%, p99_ms=20%+0.5ms,max_ms=3")
    assert [(x.metric, x.relative, x.absolute) for x in b] == [
        ("records_per_s", 0.10, 0.0), ("p99_ms", 0.20, 0.5), ("max_ms", 0.0, 3.0)]
    for bad, msg in (("records_per_s", "metric=N% pairs"), ("rps=10%", "unknown metric 'rps'"),
                     ("p99_ms=lots", "not N%, Nms"), ("requests_per_s=5%", "unknown metric"), ("", "empty"),
                     # a unit that does not fit the metric (it was taken as 5 records/s)
                     ("records_per_s=5ms", "records_per_s is not in milliseconds"),
                     ("records_per_batch=10%+1ms", "not in milliseconds")):
        with pytest.raises(ConfigError, match=msg):
            parse_bounds(bad)


def test_absolute_bounds_in_the_metrics_own_unit():
    b = parse_bounds("records_per_s=500,throttle_ms=5ms,errors=2")
    assert [(x.metric, x.absolute) for x in b] == [("records_per_s", 500.0), ("throttle_ms", 5.0),
                                                   ("errors", 2.0)]


def test_same_figures_pass_and_a_drop_beyond_bound_and_spread_fails():
    bounds = parse_bounds("records_per_s=10%,p99_ms=20%")
    base = [cell("a", [1000, 1010, 990], [10, 11, 9]), cell("b", [500, 500, 500], [5, 5, 5])]
    same = check(base, base, bounds)
    assert same.ok and len(same.checks) == 4
    # a: -13% throughput; its runs scatter by 2% (1% each side, both runs): allowed 10% + 1% + 1% -> fails;
    # b: p99 +30% with no spread -> fails; b's throughput -5% -> passes.
    now = [cell("a", [870, 880, 860], [10, 10, 10]), cell("b", [475, 475, 475], [6.5, 6.5, 6.5]),
           cell("c", [1, 1, 1], [1, 1, 1])]
    r = check(now, base, bounds)
    assert not r.ok
    assert {(c.cell, c.metric) for c in r.regressions} == {("a", "records_per_s"), ("b", "p99_ms")}
    a = next(c for c in r.regressions if c.cell == "a")
    assert a.change_pct == pytest.approx(-13.0) and a.allowed_pct == pytest.approx(12.0)
    assert r.missing_in_baseline == ("c",)
    # A wide spread absorbs the same drop.
    noisy = [cell("a", [700, 880, 1050], [10, 10, 10])]
    assert check(noisy, base[:1], bounds).ok


def test_junit_xml(tmp_path):
    base = [cell("a", [1000], [10])]
    r = check([cell("a", [800], [10]), cell("new", [1], [1])], base, parse_bounds("records_per_s=10%,p99_ms=20%"))
    write_junit(r, tmp_path / "j.xml")
    root = ET.parse(tmp_path / "j.xml").getroot()
    suite = root.find("testsuite")
    assert suite.get("tests") == "3" and suite.get("failures") == "1" and suite.get("skipped") == "1"
    fail = root.find(".//testcase[@name='records_per_s']/failure")
    assert "-20.0%" in fail.get("message") and "allowed 10.0%" in fail.get("message")


def test_best_cells_marks_the_best_median_and_no_ties():
    cells = [cell("a", [1000, 1200], [10, 10]), cell("b", [900, 900], [5, 5])]
    for c in cells:
        for r in c.reps:
            r.metrics["errors"] = 0.0
    best = best_cells(cells)
    assert best["records_per_s"] == "a" and best["p99_ms"] == "b" and best["errors"] is None
