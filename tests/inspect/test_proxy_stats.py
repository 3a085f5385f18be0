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
