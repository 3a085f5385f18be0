"""Pacing seen on the wire: at a fixed rate with linger.ms=0 every record leaves when the
schedule says, so no 10 ms window of the steady state holds more than
ceil(rate x 10 ms) + 1 records. A stall in a worker (a generation-2 garbage collection
walking everything setup allocated, which ``gc.freeze()`` prevents) would send the
records it held up together. Send times come from a tcpdump capture of the Produce
requests, not from timing the test."""

from __future__ import annotations

import json
import math
from bisect import bisect_right

import pytest

from tests.inspect.live_capture import decode_keeping_bytes, tcpdump_on_lo

from .test_produce_cli import kctl

pytestmark = [pytest.mark.broker, pytest.mark.slow]

RATE = 1000
WINDOW_NS = 10_000_000


def test_fixed_rate_sends_no_bursts(broker, tmp_path):
    cap = tmp_path / "pacing.pcap"
    out = tmp_path / "s.json"
    with tcpdump_on_lo(cap, broker.port):
        kctl("produce", "-b", broker.bootstrap, "-t", "pacing", "--rate", str(RATE),
             "--duration", "6s", "--workers", "2", "-X", "linger.ms=0", "-X", "acks=1",
             "--quiet", "--json-out", str(out))
    s = json.loads(out.read_text())
    sends: list[int] = []
    for f in decode_keeping_bytes(cap, broker.port).frames:
        if f.api_name == "Produce" and f.direction == "request":
            n = sum(rs.record_count for rs in f.record_sets if rs.topic == "pacing")
            sends += [f.ts_ns] * n
    sends.sort()
    assert len(sends) == s["counts"]["sent"] == 6 * RATE
    # The steady state: after the first second, before the last half second.
    lo, hi = sends[0] + 1_000_000_000, sends[-1] - 500_000_000
    steady = [t for t in sends if lo <= t <= hi]
    limit = math.ceil(RATE * WINDOW_NS / 1e9) + 1
    worst = max(bisect_right(steady, t + WINDOW_NS - 1) - i for i, t in enumerate(steady))
    assert worst <= limit, f"a 10 ms window held {worst} sends (limit {limit})"
