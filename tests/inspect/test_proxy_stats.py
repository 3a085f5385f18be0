"""merge_reports: the figures it reads from the added histograms are hdrh's own."""

from __future__ import annotations

import pytest
from hdrh.histogram import HdrHistogram

from kctl.inspect.proxy_stats import PERCENTILES, ProxyStats, merge_reports
from kctl.percentiles import value_at_percentile


def test_merged_latency_figures_are_hdrhs() -> None:
    stats = [ProxyStats(0), ProxyStats(1)]
    for i, s in enumerate(stats):
        s.on_connection_open(i, "c", "u", "l")
        for v in range(1, 2001):
            s.on_request(i, "Produce", 100, True)
            s.on_response(i, "Produce", 50, (v * 7 + i * 13_000) * 1000, 0, ())
    snap = merge_reports([s.report(0) for s in stats], 0)
    expected = HdrHistogram(1, 3_600_000_000, 3)
    for s in stats:
        expected.add(HdrHistogram.decode(s.report(0).apis[0].latency))
    produce = snap.apis["Produce"]
    assert produce.responses == 4000
    exact_max_us = (2000 * 7 + 13_000) * 1.0          # the largest latency recorded, not its bucket's
    assert produce.latency_us == {p: min(value_at_percentile(expected, p), exact_max_us) for p in PERCENTILES}
    assert produce.latency_max_us == exact_max_us
    assert produce.latency_mean_us == pytest.approx(expected.get_mean_value())


def test_errors_are_counted_per_api_in_the_view_the_lines_and_the_json() -> None:
    """NOT_LEADER_OR_FOLLOWER answering Produce (a producer retries after a metadata refresh)
    is not the one answering Fetch (a consumer moves to another replica): counted apart,
    merged over processors; the JSON keeps the by-name total beside them."""
    import io
    import json

    from rich.console import Console

    from kctl.commands.inspect import summary_json
    from kctl.ui.inspect_view import InspectView, stats_lines

    stats = [ProxyStats(0), ProxyStats(1)]
    for i, s in enumerate(stats):
        s.on_connection_open(i, "c", "u", "l")
        s.on_response(i, "Produce", 50, 1000, 0, ("NOT_LEADER_OR_FOLLOWER",) * (i + 1))
        s.on_response(i, "Fetch", 50, 1000, 0, ("NOT_LEADER_OR_FOLLOWER",))
    stats[1].on_response(1, "Fetch", 50, 1000, 0, ("OFFSET_OUT_OF_RANGE",))
    snap = merge_reports([s.report(0) for s in stats], 0)
    assert snap.errors == {("Produce", "NOT_LEADER_OR_FOLLOWER"): 3,
                           ("Fetch", "NOT_LEADER_OR_FOLLOWER"): 2,
                           ("Fetch", "OFFSET_OUT_OF_RANGE"): 1}
    assert [x for x in stats_lines(snap) if x.startswith("errors: ")] == [
        "errors: Fetch/NOT_LEADER_OR_FOLLOWER=2, Fetch/OFFSET_OUT_OF_RANGE=1, "
        "Produce/NOT_LEADER_OR_FOLLOWER=3"]
    out = io.StringIO()
    Console(file=out, width=120).print(InspectView(snap))
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in out.getvalue().splitlines()
            if line.count("│") == 4]
    assert rows == [["Produce", "NOT_LEADER_OR_FOLLOWER", "3"],
                    ["Fetch", "NOT_LEADER_OR_FOLLOWER", "2"],
                    ["Fetch", "OFFSET_OUT_OF_RANGE", "1"]]
    js = json.loads(json.dumps(summary_json(snap)))
    assert js["errors_by_api"] == {"Fetch": {"NOT_LEADER_OR_FOLLOWER": 2, "OFFSET_OUT_OF_RANGE": 1},
                                   "Produce": {"NOT_LEADER_OR_FOLLOWER": 3}}
    assert js["errors"] == {"NOT_LEADER_OR_FOLLOWER": 5, "OFFSET_OUT_OF_RANGE": 1}
