"""Clock offset between hosts (load/clock_sync.py): NTP's four-timestamp estimate with
its hard error bound, the lowest-delay exchange kept, and a live exchange on loopback."""

from __future__ import annotations

import pytest

from kctl.errors import KctlError
from kctl.load.clock_sync import READ_RESOLUTION_NS, ClockSample, ClockServer, estimate, measure_offset


def _sample(t0: int, offset: int, out_ns: int, back_ns: int, serve_ns: int = 1000) -> ClockSample:
    """An exchange with the server ``offset`` ns ahead, ``out_ns`` there and ``back_ns`` back."""
    t1 = t0 + out_ns + offset
    t2 = t1 + serve_ns
    return ClockSample(t0, t1, t2, t2 - offset + back_ns)


def test_symmetric_delay_gives_the_offset_exactly():
    s = _sample(10**18, offset=7_000_000, out_ns=200_000, back_ns=200_000)
    assert s.offset_ns == 7_000_000 and s.delay_ns == 400_000


def test_the_error_bound_holds_for_any_split_of_the_delay():
    for out_ns, back_ns in ((1, 999_999), (500_000, 500_000), (999_999, 1)):
        c = estimate([_sample(10**18, offset=-3_000_000, out_ns=out_ns, back_ns=back_ns)], "peer")
        assert abs(c.offset_ns - (-3_000_000)) <= c.error_ns
        assert c.error_ns == 500_000 + READ_RESOLUTION_NS


def test_the_lowest_delay_exchange_is_kept():
    samples = [_sample(10**18, 1_000_000, 5_000_000, 100_000), _sample(10**18, 1_000_000, 50_000, 50_000),
               _sample(10**18, 1_000_000, 100_000, 9_000_000)]
    c = estimate(samples, "peer")
    assert c.offset_ns == 1_000_000 and c.round_trip_ns == 100_000 and c.samples == 3


def test_no_samples_is_an_error():
    with pytest.raises(KctlError, match="no clock samples"):
        estimate([], "peer")


def test_live_exchange_on_one_host_finds_no_offset():
    server = ClockServer("127.0.0.1:0")
    try:
        c = measure_offset(server.address, samples=8)
    finally:
        server.close()
    assert c.samples == 8
    assert abs(c.offset_ns) <= c.error_ns           # one kernel clock: 0 within the bound
    assert c.error_ns < 50_000_000


def test_unreachable_peer_is_one_clear_line():
    server = ClockServer("127.0.0.1:0")
    address = server.address
    server.close()
    with pytest.raises(KctlError, match="--clock-peer .*cannot measure the clock offset"):
        measure_offset(address, samples=2, timeout_s=0.5)


def test_a_server_closed_at_once_leaves_no_thread_error():
    """close() right after the start: the serving thread ends quietly, without a traceback
    on stderr (it once failed setting a timeout on the closed socket)."""
    import threading
    import time
    errors = []
    before = threading.excepthook
    threading.excepthook = lambda args: errors.append(args.exc_value)
    try:
        servers = []
        for _ in range(50):
            server = ClockServer("127.0.0.1:0")
            server.close()
            servers.append(server)
        deadline = time.monotonic() + 5
        for server in servers:
            server._thread.join(max(0.0, deadline - time.monotonic()))
            assert not server._thread.is_alive()
    finally:
        threading.excepthook = before
    assert errors == []
