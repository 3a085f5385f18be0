"""Clock offset between two kctl hosts, NTP style, for the e2e clock.

Why: e2e latency subtracts a producer host's wall clock (the intended send time in the
identity header) from a consumer host's. On one host both are the same kernel clock
(offset 0 by construction, reported as such). On two hosts their difference adds to
every e2e value; kctl measures it and reports it beside the figures (it does not
silently correct them: negative values stay visible, and the reader can subtract).

Method (the four timestamps of NTP's on-wire protocol, RFC 5905 section 8): the
consumer sends its wall time t0; the reference (``kctl produce --clock-server``) stamps
t1 when the request arrives and t2 when it answers; the consumer stamps t3 on arrival.

    offset = ((t1 - t0) + (t2 - t3)) / 2        reference clock - consumer clock
    delay  = (t3 - t0) - (t2 - t1)              the exchange's network round trip

The true offset lies within offset +/- delay/2 for ANY split of the delay between the two
directions, so ``error = delay / 2`` is a hard bound (plus the clocks' read resolution,
1 µs here). Of ``samples`` exchanges the one with the smallest delay is kept (the least
queueing, the tightest bound), as NTP's clock filter does. On a LAN the bound is tens of
microseconds; through a loaded host, milliseconds: it is reported, so the reader knows.

The wire: 8-byte big-endian t0 from the client; 24 bytes t0, t1, t2 back. TCP, one
connection per measurement. The estimator (``estimate``) is pure; only the two small
socket functions below read clocks.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from kctl.errors import ConfigError, KctlError
from kctl.stats.consume_report import ClockOffset

__all__ = ["ClockSample", "ClockServer", "SAME_HOST", "estimate", "measure_offset"]

_REQ = struct.Struct(">q")
_RESP = struct.Struct(">qqq")
#: time.time_ns() is read with microsecond resolution on some systems: added to the bound.
READ_RESOLUTION_NS = 1_000


@dataclass(frozen=True, slots=True)
class ClockSample:
    t0: int   # client sends (client clock)
    t1: int   # server receives (server clock)
    t2: int   # server answers (server clock)
    t3: int   # client receives (client clock)

    @property
    def offset_ns(self) -> float:
        return ((self.t1 - self.t0) + (self.t2 - self.t3)) / 2

    @property
    def delay_ns(self) -> int:
        return max(0, (self.t3 - self.t0) - (self.t2 - self.t1))


def estimate(samples: Sequence[ClockSample], where: str) -> ClockOffset:
    """The offset from the exchange with the smallest round trip (module docstring)."""
    if not samples:
        raise KctlError(f"no clock samples from {where}")
    best = min(samples, key=lambda s: s.delay_ns)
    return ClockOffset(int(round(best.offset_ns)), best.delay_ns // 2 + READ_RESOLUTION_NS, best.delay_ns,
                       len(samples), f"NTP-style exchange with {where} (best of {len(samples)})")


#: Producer and consumer on one host read one kernel clock.
SAME_HOST = ClockOffset(0, 0, 0, 0, "same host: producer and consumer read one clock")


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise OSError("closed")
        buf += chunk
    return buf


def check_peer_address(address: str, option: str = "--clock-peer") -> None:
    """Refuses a clock peer that is not ``host:port`` (``[v6]:port`` too), before anything starts."""
    host, sep, port = address.rpartition(":")
    if not sep or not host.strip("[]") or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{option} {address!r}: expected host:port of 'kctl produce --clock-server' "
                          "(e.g. 10.0.0.5:7070)")


def measure_offset(address: str, *, samples: int = 16, timeout_s: float = 2.0) -> ClockOffset:
    """Exchanges ``samples`` times with a ``ClockServer`` at ``host:port``."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            got = []
            for _ in range(samples):
                t0 = time.time_ns()
                sock.sendall(_REQ.pack(t0))
                echo, t1, t2 = _RESP.unpack(_recv_exact(sock, _RESP.size))
                t3 = time.time_ns()
                if echo == t0:
                    got.append(ClockSample(t0, t1, t2, t3))
    except (OSError, ValueError) as e:
        raise KctlError(f"--clock-peer {address}: cannot measure the clock offset: {e}") from None
    return estimate(got, address)


class ClockServer:
    """Answers clock exchanges on ``host:port`` from a daemon thread until closed."""

    def __init__(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        try:
            self._sock = socket.create_server((host.strip("[]") or "0.0.0.0", int(port)), reuse_port=False)
        except (OSError, ValueError) as e:
            raise KctlError(f"--clock-server {address}: {e}") from None
        self.address = "%s:%d" % self._sock.getsockname()[:2]
        # Set here, not in the thread: a close() before the thread runs would make it fail
        # on a closed socket (a thread traceback on stderr).
        self._sock.settimeout(0.2)
        self._stop = False
        self._thread = threading.Thread(target=self._serve, name="kctl-clock-server", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self._sock.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    @staticmethod
    def _answer(conn: socket.socket) -> None:
        with conn:
            try:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conn.settimeout(5.0)
                while True:
                    (t0,) = _REQ.unpack(_recv_exact(conn, _REQ.size))
                    t1 = time.time_ns()
                    conn.sendall(_RESP.pack(t0, t1, time.time_ns()))
            except OSError:
                return

    def close(self) -> None:
        self._stop = True
        try:
            self._sock.close()
        except OSError:
            pass

    def __enter__(self) -> ClockServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
