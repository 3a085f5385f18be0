"""Pacing seen on the wire: at a fixed rate with linger.ms=0 every record leaves when the
schedule says. Send times come from a tcpdump capture of the Produce requests, each
record's intended time from its ``kctl`` identity header (wall-clock ns, the same clock
as the capture's timestamps), not from timing the test.

Issue 11's measure: no 10 ms window of the steady state holds more than
ceil(rate x 10 ms) + 1 records. Checked three ways: windows laid on the schedule
(each starts half an interval before an intended time), windows aligned to the
clock (floor of t / 10 ms), and windows slid to start at every send (the strictest:
a record a millisecond late already puts 12 in one when the records it held up go
together). Beside it, each record's lateness.

What it guards (measured, load/priority.py and load/schedule.py): a worker stalled
by a generation-2 collection over what setup allocated (``gc.freeze()``), by the
parent merging reports, by the time slice of whatever ran when it woke, or by what
is below the guest's scheduler (kdamond, a vCPU held by the host: 1-7 ms a few
times a run on this VM) used to send the records it held up together. A sparse
schedule now catches up at most one record above the schedule per 10.5 ms, and a
paced rate one worker carries runs one worker (one timeline). Measured: 12 runs of
12 within the limit on all three windows, where most runs slid windows to 12-15
before. A broker that stops answering for longer than max.in.flight requests' worth
of records can still make the producer send several records in one request (the
Java client does the same), so the measurement is made at most three times and must
hold in one: a failure of all three is real."""

from __future__ import annotations

import bisect
import json
import math
import statistics
from collections import Counter

import pytest

from kctl.protocol.identity import find_identity
from kctl.protocol.records import decode_batches
from kctl.stats.summary import RunSummary
from tests.inspect.live_capture import decode_keeping_bytes, tcpdump_on_lo

from .test_produce_cli import kctl

pytestmark = [pytest.mark.broker, pytest.mark.slow]

RATE = 1000
WINDOW_NS = 10_000_000
LIMIT = math.ceil(RATE * WINDOW_NS / 1e9) + 1
P99_LATE_NS = 500_000        # a millisecond-rounded wait: about half the records ~1 ms late
MAX_LATE_NS = 5_000_000      # a collector pause: tens of milliseconds


def _measure(broker, tmp_path, attempt: int) -> tuple[int, int, int]:
    """(most records in one 10 ms window of any of the three kinds, p99 and max lateness
    in ns) of the steady state."""
    cap = tmp_path / f"pacing-{attempt}.pcap"
    out = tmp_path / f"s-{attempt}.json"
    topic = f"pacing-{attempt}"
    with tcpdump_on_lo(cap, broker.port):
        kctl("produce", "-b", broker.bootstrap, "-t", topic, "--rate", str(RATE),
             "--duration", "6s", "-X", "linger.ms=0", "-X", "acks=1",
             "--quiet", "--json-out", str(out))
    s = RunSummary.from_json(json.loads(out.read_text()))
    assert s.run.workers == 1          # a paced rate one worker carries
    sends: list[tuple[int, int]] = []      # (on the wire, intended)
    for f in decode_keeping_bytes(cap, broker.port).frames:
        if f.api_name == "Produce" and f.direction == "request":
            for rs in f.record_sets:
                if rs.topic == topic:
                    for batch in decode_batches(rs.data).batches:
                        for r in batch.records:
                            ident = find_identity(r.headers)
                            assert ident is not None
                            sends.append((f.ts_ns, ident.intended_ns))
    assert len(sends) == s.counts.sent == 6 * RATE
    # The steady state: after the first second, before the last half second.
    first = min(i for _, i in sends)
    last = max(i for _, i in sends)
    steady = [(w, i) for w, i in sends if first + 1_000_000_000 <= i <= last - 500_000_000]
    step = 1_000_000_000 // RATE
    origin = first - step // 2
    per_window: dict[int, int] = {}
    for w, _ in steady:
        k = (w - origin) // WINDOW_NS
        per_window[k] = per_window.get(k, 0) + 1
    inner = sorted(per_window)[1:-1]       # the first and last windows are cut by the range
    laid = max(per_window[k] for k in inner)
    on_wire = sorted(w for w, _ in steady)
    aligned = Counter(w // WINDOW_NS for w in on_wire)
    clock = max(aligned[k] for k in sorted(aligned)[1:-1])
    slid = max(bisect.bisect_left(on_wire, w + WINDOW_NS) - n for n, w in enumerate(on_wire))
    late = sorted(w - i for w, i in steady)
    base = statistics.median(late)         # the usual time from due to the wire
    return (max(laid, clock, slid), int(late[int(0.99 * (len(late) - 1))] - base),
            int(late[-1] - base))


def test_fixed_rate_sends_no_bursts(broker, tmp_path):
    tries = [_measure(broker, tmp_path, 0)]

    def ok(m: tuple[int, int, int]) -> bool:
        return m[0] <= LIMIT and m[1] <= P99_LATE_NS and m[2] <= MAX_LATE_NS

    while not ok(tries[-1]) and len(tries) < 3:
        tries.append(_measure(broker, tmp_path, len(tries)))
    print(f"pacing (window max, p99 late ns, max late ns): {tries}")
    assert any(ok(m) for m in tries), (
        f"(most sends in a 10 ms window, p99 late ns, max late ns) = {tries}; "
        f"limits {LIMIT}, {P99_LATE_NS}, {MAX_LATE_NS}")
