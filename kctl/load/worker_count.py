"""How many load workers a run starts when ``--workers`` is not given.

A worker is a process that keeps one core busy. When the broker runs on the same
host (the embedded broker, or a bootstrap address that is a loopback or one of this
host's own addresses), one worker per core would take the broker's core too, and
the run would measure the two fighting over it: the default leaves the broker one
core (cores - 1, at least 1). Against remote brokers every core can produce: one
worker per core. benchmarks/produce.py measures both counts side by side.

A paced run (``--rate``) that one worker carries (up to ``ONE_WORKER_RATE``
records/s and ``ONE_WORKER_BYTES`` of values a second) gets one worker whatever
the host: more would add nothing but a merged schedule, whose records each keep
their own worker's timing jitter. Measured at 1,000 records/s with linger.ms=0
(tcpdump): one worker kept every 10 ms window at 11 sends or fewer in 9 runs of
9; two workers put 12 in one in 3 of 4. One worker paces 200,000 records/s of
100 bytes here with the same p99 latency as two (4.9 and 4.6 ms), and at full
speed one worker sent 1.2 M records/s of 100 bytes with zstd (benchmarks/produce.py):
the limits leave a wide margin for compression and larger values.

Only this host's own interface addresses and name resolution are consulted; nothing
is sent anywhere.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass

from kctl.engine.blocking_client import parse_address

__all__ = ["WorkerCount", "default_workers", "is_local_host", "paced_workers"]


#: The largest paced rate that gets one worker by default: records/s, value bytes/s.
ONE_WORKER_RATE = 100_000
ONE_WORKER_BYTES = 20 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class WorkerCount:
    count: int
    reason: str          # shown in the dashboard and the summary (run.workers_reason)


def _interface_addresses() -> set[str]:
    """This host's IPv4 interface addresses (Linux ioctl), best effort."""
    out: set[str] = set()
    try:
        import fcntl
        import struct
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for _, name in socket.if_nameindex():
                try:
                    req = struct.pack("256s", name.encode()[:15])
                    out.add(socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, req)[20:24]))  # SIOCGIFADDR
                except OSError:
                    continue
    except (ImportError, OSError):
        pass
    return out


def _own_addresses() -> set[str]:
    out = _interface_addresses()
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None):
            out.add(str(info[4][0]))
    except OSError:
        pass
    return out


def is_local_host(host: str, own: set[str] | None = None) -> bool | None:
    """True if every address ``host`` resolves to is a loopback or this host's own;
    None when it does not resolve."""
    try:
        infos = socket.getaddrinfo(host, None)
    except (OSError, UnicodeError):
        return None
    own = _own_addresses() if own is None else own
    for info in infos:
        ip = str(info[4][0]).split("%")[0]
        try:
            addr = ipaddress.ip_address(ip)
        except ValueError:
            return False
        if not (addr.is_loopback or addr.is_unspecified or ip in own):
            return False
    return bool(infos)


def default_workers(bootstrap: str | None, cores: int | None = None) -> WorkerCount:
    """The default for a run against ``bootstrap`` (None: the embedded broker)."""
    cores = cores or os.cpu_count() or 1
    local = max(1, cores - 1)
    if bootstrap is None:
        return WorkerCount(local, f"cores - 1 of {cores}: the embedded broker runs on this host")
    hosts = []
    for address in (a.strip() for a in bootstrap.split(",")):
        if address:
            try:
                hosts.append(parse_address(address)[0])
            except Exception:  # noqa: BLE001 - a bad address is reported by the connection
                hosts.append(address)
    own = _own_addresses()
    answers = [is_local_host(h, own) for h in hosts]
    if hosts and all(a is True for a in answers):
        return WorkerCount(local, f"cores - 1 of {cores}: the broker runs on this host ({hosts[0]})")
    if any(a is None for a in answers):
        unknown = next(h for h, a in zip(hosts, answers) if a is None)
        return WorkerCount(cores, f"one per core ({cores}): cannot resolve {unknown}, taken as remote")
    return WorkerCount(cores, f"one per core ({cores}): the brokers are on other hosts")


def paced_workers(default: WorkerCount, rate: float, mean_value_size: float) -> WorkerCount:
    """The default for a run at ``rate`` records/s (0: as fast as possible) of values of
    ``mean_value_size`` bytes: one worker when one carries the rate, else ``default``."""
    if rate <= 0 or default.count == 1:
        return default
    if rate > ONE_WORKER_RATE or rate * mean_value_size > ONE_WORKER_BYTES:
        return default
    shown = f"{rate:,.0f}" if rate >= 10 else f"{rate:g}"
    return WorkerCount(1, f"one worker carries {shown} records/s, and one schedule keeps "
                          f"them evenly spaced; at full speed it would be {default.count}")
