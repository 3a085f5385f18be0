"""Which pcapng interface of a kctl capture is which leg of the proxy, and its broker ports.

``kctl inspect`` writes each leg of the proxy on its own pcapng interface
(``capture_writer``): interface 0 is the *client leg* (clients to kctl inspect's
listeners), interface 1 the *upstream leg* (kctl inspect to the brokers). Each
interface is named for its leg (``if_name``) and its description (``if_description``)
lists the ports on the broker side of that leg: the proxy's listener ports on the
client leg, the brokers' ports upstream. So ``kctl decode`` shows each frame once
(one leg) and needs no ``--port``; tshark shows the names as ``frame.interface_name``.

``read_legs(path)`` reads only the head of a file (the section header and the
interface descriptions before the first packet) and returns ``None`` for anything
that is not a kctl capture: a foreign capture, or one cut short before its interfaces.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import BinaryIO, Callable, Final


class Leg(IntEnum):
    """A leg of the proxy; the value is its pcapng interface id."""

    CLIENT = 0
    UPSTREAM = 1


#: ``--leg`` values (kctl decode, kctl analyze) -> the legs read.
LEG_CHOICES: Final = {"client": (Leg.CLIENT,), "upstream": (Leg.UPSTREAM,),
                      "both": (Leg.CLIENT, Leg.UPSTREAM)}

#: ``if_name`` of each leg's interface.
LEG_NAMES: Final = {Leg.CLIENT: "kctl client leg", Leg.UPSTREAM: "kctl upstream leg"}
#: ``if_description`` starts with this, then comma-separated port numbers.
PORTS_PREFIX: Final = "broker ports: "
_PORTS: Final = re.compile(r"broker ports: ([0-9, ]*)")

_SHB: Final = 0x0A0D0D0A
_IDB: Final = 1
_OPT_IF_NAME: Final = 2
_OPT_IF_DESCRIPTION: Final = 3
_HEAD_LIMIT: Final = 1 << 20      # the header blocks of a kctl capture are a few KiB


@dataclass(frozen=True, slots=True)
class CaptureLegs:
    """The legs a kctl capture holds: interface id per leg, and each interface's broker ports."""

    interfaces: dict[Leg, int]
    broker_ports: dict[int, frozenset[int]]     # interface id -> ports

    def interfaces_for(self, legs: tuple[Leg, ...]) -> frozenset[int]:
        return frozenset(self.interfaces[leg] for leg in legs if leg in self.interfaces)

    def ports_for(self, legs: tuple[Leg, ...]) -> frozenset[int]:
        ports: set[int] = set()
        for iid in self.interfaces_for(legs):
            ports |= self.broker_ports.get(iid, frozenset())
        return frozenset(ports)


def describe_ports(ports: list[int] | tuple[int, ...] | set[int] | frozenset[int]) -> str:
    return PORTS_PREFIX + ",".join(str(p) for p in sorted(ports))


def parse_ports(description: str) -> frozenset[int]:
    m = _PORTS.search(description)
    if m is None:
        return frozenset()
    return frozenset(int(p) for p in m.group(1).replace(" ", "").split(",") if p.isdigit())


def read_legs(path: str | Path, *,
              open_file: Callable[[str | Path], BinaryIO] | None = None) -> CaptureLegs | None:
    """The legs of a kctl capture (``None`` when the file is not one, or unreadable).
    ``open_file`` opens it for reading (default: a local file; kctl analyze: a URI)."""
    try:
        with (open_file or (lambda p: open(p, "rb")))(path) as f:
            head = f.read(_HEAD_LIMIT)
    except OSError:
        return None
    if len(head) < 12 or struct.unpack_from("<I", head, 0)[0] != _SHB:
        return None
    order = "<" if head[8:12] == b"\x4d\x3c\x2b\x1a" else ">"
    pos = 0
    interfaces: dict[Leg, int] = {}
    ports: dict[int, frozenset[int]] = {}
    iid = 0
    first = True
    while pos + 12 <= len(head):
        btype, blen = struct.unpack_from(order + "II", head, pos)
        if blen < 12 or pos + blen > len(head):
            break
        if btype == _SHB:
            if not first:
                break           # a second section: only the first one's interfaces count
            first = False
        elif btype == _IDB:
            name = description = ""
            for code, value in _options(head[pos + 16:pos + blen - 4], order):
                if code == _OPT_IF_NAME:
                    name = value.decode("utf-8", "replace").rstrip("\0 ")
                elif code == _OPT_IF_DESCRIPTION:
                    description = value.decode("utf-8", "replace")
            for leg, leg_name in LEG_NAMES.items():
                if name == leg_name:
                    interfaces[leg] = iid
                    ports[iid] = parse_ports(description)
            iid += 1
        else:
            break               # packets begin: interfaces are all described
        pos += blen
    if not interfaces:
        return None
    return CaptureLegs(interfaces, ports)


def _options(body: bytes, order: str):
    pos = 0
    while pos + 4 <= len(body):
        code, length = struct.unpack_from(order + "HH", body, pos)
        if code == 0:
            return
        pos += 4
        yield code, body[pos:pos + length]
        pos += (length + 3) & ~3
