"""Pacing seen on the wire: at a fixed rate with linger.ms=0 every record leaves when the
schedule says. Send times come from a tcpdump capture of the Produce requests, each
record's intended time from its ``kctl`` identity header (wall-clock ns, the same clock
as the capture's timestamps), not from timing the test.

Issue 11's measure: no 10 ms window of the steady state holds more than
ceil(rate x 10 ms) + 1 records. The windows are laid on the schedule (each one starts
half a record's interval before an intended time, so no record is due on a boundary):
a stall in a worker (a generation-2 garbage collection walking everything setup
allocated, which ``gc.freeze()`` prevents; an interval report in the way) sends the
records it held up together, into one window. Beside it, each record's lateness: a
millisecond-rounded wait makes every other record about a millisecond late (p99), a
collector pause makes some tens of milliseconds late (max).

Windows slid to start at every send would also count the sub-millisecond jitter at
both of their edges: here (2 cores, broker and tcpdump beside two workers) one record
a millisecond late somewhere in the run already makes such a window hold 12 records.

On a small host a worker woken for a due record used to wait 1-3 ms for the CPU
behind whatever ran (the parent merging reports, the broker), both workers at once
when the parent merged: about one run in two had a window of 12. Paced workers now
ask for a short time slice and the parent's bookkeeping yields (load/priority.py,
where the measurement is), so a due worker preempts them. What is left on this
machine comes from below the guest's scheduler: a non-preemptible kernel thread
(kdamond, about 1 ms every 510 ms) and the host holding a vCPU for 2-7 ms while
the worker is runnable on it (perf sched shows the CPU idle meanwhile), a few times
a run; windows slid to start at every send count each of those (12-15 in most runs
here), windows laid on the schedule only the ones that cross a boundary. So the
measurement is made at most three times and must hold in one: a failure of all three is real."""

from __future__ import annotations

import json
import math
import statistics

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
    """(most records in one 10 ms window, p99 and max lateness in ns) of the steady state."""
    cap = tmp_path / f"pacing-{attempt}.pcap"
    out = tmp_path / f"s-{attempt}.json"
    topic = f"pacing-{attempt}"
    with tcpdump_on_lo(cap, broker.port):
        kctl("produce", "-b", broker.bootstrap, "-t", topic, "--rate", str(RATE),
             "--duration", "6s", "--workers", "2", "-X", "linger.ms=0", "-X", "acks=1",
             "--quiet", "--json-out", str(out))
    s = RunSummary.from_json(json.loads(out.read_text()))
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
    late = sorted(w - i for w, i in steady)
    base = statistics.median(late)         # the usual time from due to the wire
    return (max(per_window[k] for k in inner), int(late[int(0.99 * (len(late) - 1))] - base),
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
