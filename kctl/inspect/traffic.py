"""The TCP ports a capture holds, with their payload bytes: what ``kctl decode`` and ``kctl
analyze`` list when they find no Kafka traffic, so the user sees which ``--port`` to give;
and the ``--port`` values themselves (numbers or ``auto``).

One pass over the file(s), sans-IO below the file read (``pcap.read_segments``); each
segment's payload counts for both of its ports. Unreadable or broken files count as far
as they read.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO

from kctl.errors import ConfigError, DecodeError
from kctl.inspect.pcap import read_segments


def broker_ports(values: Iterable[str], guess: Callable[[], Iterable[int]]) -> set[int]:
    """``--port`` values (kctl decode, kctl analyze): port numbers, or ``auto`` (``guess()``)."""
    ports: set[int] = set()
    for v in values:
        if v == "auto":
            ports |= set(guess())
            continue
        try:
            p = int(v)
        except ValueError:
            raise ConfigError(f"--port {v!r}: a port number or 'auto'") from None
        if not 0 < p < 65536:
            raise ConfigError(f"--port {p}: outside 1..65535")
        ports.add(p)
    return ports


def tcp_port_bytes(paths: Iterable[str | Path], *, max_segments: int = 2_000_000,
                   open_file: Callable[[str | Path], BinaryIO] | None = None) -> Counter[int]:
    """TCP port -> payload bytes seen on it (either direction). ``open_file`` opens a path
    for reading (default: a local file; kctl analyze: a URI on a cluster's store)."""
    opener = open_file or (lambda p: open(p, "rb"))
    ports: Counter[int] = Counter()
    seen = 0
    for path in paths:
        try:
            with opener(path) as f:
                for seg in read_segments(f, name=str(path)):
                    seen += 1
                    if seen > max_segments:
                        return ports
                    n = len(seg.payload) + seg.missing
                    ports[seg.src_port] += n
                    ports[seg.dst_port] += n
        except (DecodeError, OSError):
            continue
    return ports


def no_kafka_traffic(command: str, files: Iterable[str], tried: Iterable[int], *,
                     auto: bool, auto_found: bool, seen: Counter[int]) -> str:
    """The one line ``kctl decode``/``kctl analyze`` print when no Kafka frame was found.
    ``tried``: the broker ports read; ``auto``: ``--port auto`` was asked (alone or with
    ports); ``auto_found``: it found broker ports (a kctl capture's legs, or connections
    carrying Kafka requests) rather than falling back to Kafka's default port;
    ``seen``: ``tcp_port_bytes`` of the files."""
    names = ", ".join(map(str, files))
    if not seen:
        return (f"kctl {command}: no TCP traffic at all in {names}"
                + (" (nothing for --port auto to find)" if auto else ""))
    tried = sorted(set(tried))
    ports = f"port{'s' if len(tried) > 1 else ''} {', '.join(map(str, tried))}"
    if auto and not auto_found:
        where = (f"--port auto found no connection carrying Kafka requests, and {ports} "
                 "(Kafka's default, or given) holds none")
        return (f"kctl {command}: no Kafka traffic found in {names}: {where}; TCP ports seen, "
                f"with their payload bytes: {describe_ports(seen)}; give the broker's with --port")
    how = " (found by --port auto)" if auto else ""
    return (f"kctl {command}: no Kafka traffic found in {names} on {ports}{how}; TCP ports seen, "
            f"with their payload bytes: {describe_ports(seen)}; give the broker's with --port")


def describe_ports(ports: Counter[int], *, top: int = 10) -> str:
    """"9093 (1.2 MB), 51234 (1.2 MB), ..." largest first; "none" when empty."""
    if not ports:
        return "none"
    items = ports.most_common()
    text = ", ".join(f"{port} ({_size(n)})" for port, n in items[:top])
    if len(items) > top:
        text += f", and {len(items) - top} more"
    return text


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"
