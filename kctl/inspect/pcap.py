"""Streaming reader for pcap and pcapng captures, down to TCP segments.

How this works:
- ``CaptureReader(stream)`` looks at the first four bytes and reads either a
  classic pcap file (either byte order, microsecond or nanosecond magic) or a
  pcapng file (any number of sections, each with its own byte order; several
  interfaces with their own link types and ``if_tsresol``/``if_tsoffset``;
  EPB, SPB and the obsolete Packet Block; every other block is skipped by its
  length). Iterating yields ``CapturedPacket``s in file order.
- ``tcp_segment(packet)`` strips the link layer (Ethernet with 802.1Q/802.1ad
  tags, Linux cooked SLL and SLL2, BSD null/loop, raw IP), the IP layer (IPv4
  with options, IPv6 with extension headers) and returns a ``TcpSegment`` or
  ``None`` for anything that is not a TCP segment we can use (other
  protocols, IP fragments: ``PacketSkip`` says why).

Robustness: no length field is trusted beyond the bytes actually present.
Packets are read in bounded chunks, so a length of 4 GiB in a 100-byte file
costs 100 bytes, not 4 GiB. A structurally broken file (bad magic, a block
length that is not a multiple of 4 or disagrees with its trailer, an EPB for
an interface never described) raises ``DecodeError`` with the *file* offset;
a file that simply ends mid-packet (tcpdump killed) stops iteration and sets
``reader.truncated`` to a ``Truncation`` saying where. Nothing here reads the
clock or the network.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO, Final

from kctl.errors import DecodeError

__all__ = [
    "CapturedPacket", "TcpSegment", "PacketSkip", "Truncation", "CaptureReader", "ReaderState",
    "InterfaceState",
    "tcp_segment", "read_segments", "LINKTYPE_NULL", "LINKTYPE_ETHERNET", "LINKTYPE_RAW",
    "LINKTYPE_LOOP", "LINKTYPE_LINUX_SLL", "LINKTYPE_IPV4", "LINKTYPE_IPV6",
    "LINKTYPE_LINUX_SLL2", "TCP_FIN", "TCP_SYN", "TCP_RST", "TCP_PSH", "TCP_ACK",
]

LINKTYPE_NULL: Final = 0
LINKTYPE_ETHERNET: Final = 1
LINKTYPE_RAW: Final = 101
LINKTYPE_LOOP: Final = 108
LINKTYPE_LINUX_SLL: Final = 113
LINKTYPE_IPV4: Final = 228
LINKTYPE_IPV6: Final = 229
LINKTYPE_LINUX_SLL2: Final = 276
# DLT_RAW's historical numbers on some BSDs, as written in old pcap files.
_RAW_ALIASES: Final = frozenset({LINKTYPE_RAW, 12, 14})

TCP_FIN: Final = 0x01
TCP_SYN: Final = 0x02
TCP_RST: Final = 0x04
TCP_PSH: Final = 0x08
TCP_ACK: Final = 0x10

_PCAP_MAGICS: Final = {
    b"\xd4\xc3\xb2\xa1": ("<", 1_000), b"\xa1\xb2\xc3\xd4": (">", 1_000),
    b"\x4d\x3c\xb2\xa1": ("<", 1), b"\xa1\xb2\x3c\x4d": (">", 1),
}
_PCAPNG_SHB: Final = b"\x0a\x0d\x0d\x0a"
_BYTE_ORDER_MAGIC: Final = 0x1A2B3C4D

#: No link-layer frame is bigger than this; Wireshark's own limit is 256 KiB
#: for most link types and 16 MiB in the worst case.
MAX_PACKET_BYTES: Final = 16 * 1024 * 1024
#: pcapng blocks other than packets (name resolution, statistics, ...) are
#: skipped; they may be big but never this big in a sane file.
MAX_BLOCK_BYTES: Final = 64 * 1024 * 1024
_CHUNK: Final = 1 << 20

_SHB: Final = 0x0A0D0D0A
_IDB: Final = 1
_PB: Final = 2          # the obsolete Packet Block
_SPB: Final = 3
_EPB: Final = 6
_BLOCK_NAMES: Final = {_SHB: "section header", _IDB: "interface description", _PB: "packet",
                       _SPB: "simple packet", _EPB: "enhanced packet"}
#: Smallest valid total length of each block type (pcapng spec: fixed fields + 12).
_MIN_BLOCK: Final = {_SHB: 28, _IDB: 20, _PB: 32, _SPB: 16, _EPB: 32}


def _check_block_length(btype: int, blen: int, start: int) -> None:
    """The pcapng rules for a block's total length, checked before anything is read."""
    if blen % 4:
        raise DecodeError(f"pcapng block length {blen} is not a multiple of 4", offset=start + 4,
                          field="block_total_length")
    least = _MIN_BLOCK.get(btype, 12)
    if blen < least:
        name = _BLOCK_NAMES.get(btype, f"type {btype:#x}")
        raise DecodeError(f"pcapng {name} block length {blen} is below its minimum of {least}",
                          offset=start + 4, field="block_total_length")
    limit = MAX_PACKET_BYTES + 64 if btype in (_PB, _SPB, _EPB) else MAX_BLOCK_BYTES
    if blen > limit:
        raise DecodeError(f"pcapng block of type {btype:#x} claims {blen} bytes "
                          f"(more than {limit})", offset=start + 4, field="block_total_length")


@dataclass(frozen=True, slots=True)
class CapturedPacket:
    """One captured link-layer frame.

    ``number`` counts packets from 1 (as Wireshark's ``frame.number``);
    ``offset`` is the file offset of its record/block; ``orig_len`` is the
    length on the wire (``len(data)`` is less when the snap length cut it).
    """

    number: int
    offset: int
    ts_ns: int
    link_type: int
    data: bytes
    orig_len: int
    interface: int = 0


@dataclass(frozen=True, slots=True)
class TcpSegment:
    """One TCP segment. ``payload`` holds the captured bytes; ``missing`` the
    payload bytes the snap length cut off (they follow ``payload`` on the wire)."""

    ts_ns: int
    src: str
    dst: str
    src_port: int
    dst_port: int
    seq: int
    ack: int
    flags: int
    payload: bytes
    number: int = 0
    offset: int = 0
    missing: int = 0

    @property
    def syn(self) -> bool:
        return bool(self.flags & TCP_SYN)

    @property
    def fin(self) -> bool:
        return bool(self.flags & TCP_FIN)

    @property
    def rst(self) -> bool:
        return bool(self.flags & TCP_RST)

    @property
    def seq_len(self) -> int:
        """Sequence space taken: payload on the wire plus one each for SYN and FIN."""
        return len(self.payload) + self.missing + (1 if self.syn else 0) + (1 if self.fin else 0)


@dataclass(frozen=True, slots=True)
class PacketSkip:
    """Why a packet gave no TCP segment (not an error: ARP, UDP, fragments...)."""

    number: int
    offset: int
    reason: str
    malformed: bool = False


@dataclass(frozen=True, slots=True)
class Truncation:
    """The file ended inside a record: ``offset`` is where that record starts."""

    offset: int
    needed: int
    present: int

    def __str__(self) -> str:
        return f"capture ends inside a record ({self.present} of its {self.needed} bytes present)"


@dataclass(frozen=True, slots=True)
class InterfaceState:
    """A pcapng interface as a section describes it (what its packets need to be read)."""

    link_type: int
    snaplen: int
    tsresol: int
    tsoffset_ns: int


@dataclass(frozen=True, slots=True)
class ReaderState:
    """Where a ``CaptureReader`` stands between two records: the file offset of the next
    one, the packets before it, and what reading on needs from the headers before it (pcap's
    byte order, time unit and link type; pcapng's section byte order and interfaces).
    ``CaptureReader.resume`` reads on from it, in another process if need be."""

    format: str                     # "pcap" | "pcapng"
    offset: int
    packets: int
    byte_order: str = "<"
    unit_ns: int = 0                # pcap: nanoseconds per timestamp fraction unit
    link_type: int = 0              # pcap
    snaplen: int = 0                # pcap
    interfaces: tuple[InterfaceState, ...] = ()     # pcapng: the current section's


class _Source:
    """A byte stream read with an absolute offset, in bounded chunks."""

    __slots__ = ("_f", "offset")

    def __init__(self, f: BinaryIO, offset: int = 0) -> None:
        self._f = f
        self.offset = offset

    def read(self, n: int) -> bytes:
        """Up to ``n`` bytes; fewer only at end of file. Memory grows with the
        bytes actually present, never with ``n``."""
        if n <= _CHUNK:
            b = self._f.read(n)
        else:
            parts = []
            left = n
            while left:
                part = self._f.read(min(left, _CHUNK))
                if not part:
                    break
                parts.append(part)
                left -= len(part)
            b = b"".join(parts)
        b = b or b""
        self.offset += len(b)
        return b


def _scaled_ns(ts: int, resol: int) -> int:
    """``ts`` in units of the pcapng ``if_tsresol`` byte, as nanoseconds."""
    if resol & 0x80:
        return (ts * 1_000_000_000) >> (resol & 0x7F)
    exp = resol
    if exp <= 9:
        return ts * 10 ** (9 - exp)
    return ts // 10 ** (exp - 9)


class _Interface:
    __slots__ = ("link_type", "snaplen", "tsresol", "tsoffset_ns")

    def __init__(self, link_type: int, snaplen: int) -> None:
        self.link_type = link_type
        self.snaplen = snaplen
        self.tsresol = 6             # pcapng default: microseconds
        self.tsoffset_ns = 0


class CaptureReader:
    """Iterates the packets of a pcap or pcapng stream (``format`` says which).

    ``truncated`` is set once iteration stops at a cut-off record. Between two packets,
    ``state()`` says where the reader stands; ``CaptureReader.resume`` reads on from there.
    """

    def __init__(self, stream: BinaryIO, *, name: str = "") -> None:
        self.name = name
        self._src = _Source(stream)
        self.truncated: Truncation | None = None
        self._number = 0
        self._order = "<"
        self._interfaces: list[_Interface] = []
        head = self._src.read(4)
        if len(head) < 4:
            raise DecodeError(f"{len(head)} bytes is too short for a capture file header", offset=0,
                              field="magic")
        if head in _PCAP_MAGICS:
            self.format = "pcap"
            self._pcap_header(head)
        elif head == _PCAPNG_SHB:
            self.format = "pcapng"
        else:
            raise DecodeError(f"not a pcap or pcapng file (magic {head.hex()})", offset=0,
                              field="magic")
        self._head = head       # pcapng: the first block's type, read before iterating

    @classmethod
    def resume(cls, stream: BinaryIO, state: ReaderState, *, name: str = "") -> CaptureReader:
        """A reader of ``stream``, positioned by the caller at ``state.offset``, that reads on
        as the reader that gave ``state`` would have (packet numbers go on from
        ``state.packets``; file offsets in errors and packets are the file's)."""
        self = cls.__new__(cls)
        self.name = name
        self._src = _Source(stream, state.offset)
        self.truncated = None
        self._number = state.packets
        self.format = state.format
        self._order = state.byte_order
        self._head = b""
        self._interfaces = []
        for i in state.interfaces:
            iface = _Interface(i.link_type, i.snaplen)
            iface.tsresol, iface.tsoffset_ns = i.tsresol, i.tsoffset_ns
            self._interfaces.append(iface)
        if state.format == "pcap":
            self._unit_ns, self._link, self._snaplen = state.unit_ns, state.link_type, state.snaplen
            self._rec = struct.Struct(state.byte_order + "IIII")
        return self

    def state(self) -> ReaderState:
        """Where the reader stands: valid before iterating and between two packets."""
        ifaces = tuple(InterfaceState(i.link_type, i.snaplen, i.tsresol, i.tsoffset_ns)
                       for i in self._interfaces)
        if self.format == "pcap":
            return ReaderState("pcap", self._src.offset, self._number, self._order, self._unit_ns,
                               self._link, self._snaplen)
        return ReaderState("pcapng", self._src.offset - len(self._head), self._number, self._order,
                           interfaces=ifaces)

    # -- pcap -----------------------------------------------------------

    def _pcap_header(self, magic: bytes) -> None:
        order, self._unit_ns = _PCAP_MAGICS[magic]
        self._order = order
        rest = self._src.read(20)
        if len(rest) < 20:
            raise DecodeError("pcap file header cut short", offset=self._src.offset,
                              field="header")
        _vmaj, _vmin, _zone, _sigfigs, snaplen, link = struct.unpack(order + "HHiIII", rest)
        # The top bits of the link-type word hold the FCS length (pcap-savefile(5)).
        self._link = link & 0x0FFFFFFF
        self._snaplen = snaplen
        self._rec = struct.Struct(order + "IIII")

    def _pcap_packets(self) -> Iterator[CapturedPacket]:
        src = self._src
        while True:
            start = src.offset
            hdr = src.read(16)
            if not hdr:
                return
            if len(hdr) < 16:
                self.truncated = Truncation(start, 16, len(hdr))
                return
            sec, frac, incl, orig = self._rec.unpack(hdr)
            if incl > MAX_PACKET_BYTES:
                raise DecodeError(f"packet record claims {incl} captured bytes "
                                  f"(more than {MAX_PACKET_BYTES})", offset=start + 8,
                                  field="incl_len")
            data = src.read(incl)
            if len(data) < incl:
                self.truncated = Truncation(start, 16 + incl, 16 + len(data))
                return
            self._number += 1
            yield CapturedPacket(self._number, start, sec * 1_000_000_000 + frac * self._unit_ns,
                                 self._link, data, max(orig, incl))

    # -- pcapng ---------------------------------------------------------

    def _pcapng_packets(self) -> Iterator[CapturedPacket]:
        src = self._src
        order = self._order
        interfaces = self._interfaces
        btype_raw = self._head or src.read(4)
        self._head = b""
        while True:
            start = src.offset - len(btype_raw)
            if not btype_raw:
                return
            if len(btype_raw) < 4:
                self.truncated = Truncation(start, 12, len(btype_raw))
                return
            if btype_raw == _PCAPNG_SHB:
                # The byte order of a section is only known from its byte-order magic,
                # which follows the length: read both before interpreting the length.
                head = src.read(8)
                if len(head) < 8:
                    self.truncated = Truncation(start, _MIN_BLOCK[_SHB], 4 + len(head))
                    return
                bom = head[4:8]
                if bom == b"\x4d\x3c\x2b\x1a":
                    self._order = order = "<"
                elif bom == b"\x1a\x2b\x3c\x4d":
                    self._order = order = ">"
                else:
                    raise DecodeError(f"bad pcapng byte-order magic {bom.hex()}", offset=start + 8,
                                      field="SHB.byte_order_magic")
                (blen,) = struct.unpack(order + "I", head[:4])
                self._interfaces = interfaces = []     # interface ids are per section
                body_pre = bom
                btype = _SHB
            else:
                lb = src.read(4)
                if len(lb) < 4:
                    self.truncated = Truncation(start, 12, 4 + len(lb))
                    return
                (btype,) = struct.unpack(order + "I", btype_raw)
                (blen,) = struct.unpack(order + "I", lb)
                body_pre = b""
            _check_block_length(btype, blen, start)
            want = blen - 8 - len(body_pre)
            rest = src.read(want)
            if len(rest) < want:
                self.truncated = Truncation(start, blen, 8 + len(body_pre) + len(rest))
                return
            body = body_pre + rest[:-4]
            (trailer,) = struct.unpack(order + "I", rest[-4:])
            if trailer != blen:
                raise DecodeError(f"pcapng block trailer length {trailer} differs from its "
                                  f"header's {blen}", offset=start + blen - 4,
                                  field="block_total_length")
            pkt = self._pcapng_block(btype, body, order, interfaces, start)
            if pkt is not None:
                yield pkt
            btype_raw = src.read(4)

    def _pcapng_block(self, btype: int, body: bytes, order: str, interfaces: list[_Interface],
                      start: int) -> CapturedPacket | None:
        if btype == _SHB:
            (major,) = struct.unpack_from(order + "H", body, 4)
            if major != 1:
                raise DecodeError(f"unsupported pcapng major version {major}", offset=start + 12,
                                  field="SHB.major_version")
            return None
        if btype == _IDB:   # Interface Description Block
            link, _res, snaplen = struct.unpack_from(order + "HHI", body, 0)
            iface = _Interface(link, snaplen)
            for code, value in _options(body, 8, order):
                if code == 9 and len(value) >= 1:
                    iface.tsresol = value[0]
                elif code == 14 and len(value) >= 8:
                    iface.tsoffset_ns = struct.unpack(order + "q", value[:8])[0] * 1_000_000_000
            interfaces.append(iface)
            return None
        if btype in (_EPB, _PB):    # Enhanced Packet Block, obsolete Packet Block
            if btype == _EPB:
                iid, hi, lo, cap, orig = struct.unpack_from(order + "IIIII", body, 0)
            else:
                iid, _drops, hi, lo, cap, orig = struct.unpack_from(order + "HHIIII", body, 0)
            if cap > len(body) - 20:
                raise DecodeError(f"packet block claims {cap} captured bytes but holds "
                                  f"{len(body) - 20}", offset=start + 20, field="EPB.captured_len")
            iface = self._iface(interfaces, iid, start)
            ts = _scaled_ns((hi << 32) | lo, iface.tsresol) + iface.tsoffset_ns
            self._number += 1
            return CapturedPacket(self._number, start, ts, iface.link_type,
                                  body[20:20 + cap], max(orig, cap), iid)
        if btype == _SPB:   # Simple Packet Block: interface 0, no timestamp
            (orig,) = struct.unpack_from(order + "I", body, 0)
            iface = self._iface(interfaces, 0, start)
            cap = min(orig, len(body) - 4)
            if iface.snaplen:
                cap = min(cap, iface.snaplen)
            self._number += 1
            return CapturedPacket(self._number, start, 0, iface.link_type, body[4:4 + cap],
                                  max(orig, cap), 0)
        return None         # NRB, ISB, DSB, custom...: not packets

    @staticmethod
    def _iface(interfaces: list[_Interface], iid: int, start: int) -> _Interface:
        if iid >= len(interfaces):
            raise DecodeError(f"packet names interface {iid} but the section describes "
                              f"{len(interfaces)}", offset=start + 8, field="interface_id")
        return interfaces[iid]

    def __iter__(self) -> Iterator[CapturedPacket]:
        if self.format == "pcap":
            return self._pcap_packets()
        return self._pcapng_packets()


def _options(body: bytes, pos: int, order: str) -> Iterator[tuple[int, bytes]]:
    """pcapng options from ``pos``; a malformed option list just ends the options."""
    n = len(body)
    while pos + 4 <= n:
        code, length = struct.unpack_from(order + "HH", body, pos)
        if code == 0:
            return
        pos += 4
        if pos + length > n:
            return
        yield code, body[pos:pos + length]
        pos += (length + 3) & ~3


# ---------------------------------------------------------------------------
# link, IP and TCP layers

_ETH_VLAN: Final = frozenset({0x8100, 0x88A8, 0x9100})
_ETH_IPV4: Final = 0x0800
_ETH_IPV6: Final = 0x86DD
_AF_INET6: Final = frozenset({10, 24, 28, 30})
_IPV6_EXT: Final = frozenset({0, 43, 60, 135, 139, 140})


def _network_layer(pkt: CapturedPacket) -> tuple[int, int] | str:
    """(ethertype-like protocol, offset of the IP header) or a reason to skip."""
    d = pkt.data
    lt = pkt.link_type
    if lt == LINKTYPE_ETHERNET:
        if len(d) < 14:
            return "short Ethernet header"
        pos = 12
        etype = int.from_bytes(d[12:14], "big")
        while etype in _ETH_VLAN:
            if len(d) < pos + 6:
                return "short VLAN tag"
            pos += 4
            etype = int.from_bytes(d[pos:pos + 2], "big")
        return etype, pos + 2
    if lt == LINKTYPE_LINUX_SLL:
        if len(d) < 16:
            return "short Linux cooked header"
        return int.from_bytes(d[14:16], "big"), 16
    if lt == LINKTYPE_LINUX_SLL2:
        if len(d) < 20:
            return "short Linux cooked v2 header"
        return int.from_bytes(d[0:2], "big"), 20
    if lt in (LINKTYPE_NULL, LINKTYPE_LOOP):
        if len(d) < 4:
            return "short loopback header"
        if lt == LINKTYPE_LOOP:
            family = int.from_bytes(d[:4], "big")
        else:
            # DLT_NULL's family is in the capturing host's byte order.
            family = int.from_bytes(d[:4], "little" if d[0] else "big")
        if family == 2:
            return _ETH_IPV4, 4
        if family in _AF_INET6:
            return _ETH_IPV6, 4
        return f"loopback family {family}"
    if lt in _RAW_ALIASES:
        if not d:
            return "empty raw IP packet"
        v = d[0] >> 4
        return (_ETH_IPV4 if v == 4 else _ETH_IPV6 if v == 6 else -1), 0
    if lt == LINKTYPE_IPV4:
        return _ETH_IPV4, 0
    if lt == LINKTYPE_IPV6:
        return _ETH_IPV6, 0
    return f"link type {lt} not supported"


def tcp_segment(pkt: CapturedPacket) -> TcpSegment | PacketSkip:
    """The TCP segment in ``pkt``, or a ``PacketSkip`` saying why there is none."""
    d = pkt.data
    nl = _network_layer(pkt)
    if isinstance(nl, str):
        return PacketSkip(pkt.number, pkt.offset, nl, malformed=nl.startswith("short"))
    proto, pos = nl
    # Bytes of the IP packet on the wire beyond what was captured.
    wire_extra = pkt.orig_len - len(d)
    if proto == _ETH_IPV4:
        if len(d) < pos + 20:
            return PacketSkip(pkt.number, pkt.offset, "short IPv4 header", True)
        vihl = d[pos]
        ihl = (vihl & 0x0F) * 4
        if vihl >> 4 != 4 or ihl < 20:
            return PacketSkip(pkt.number, pkt.offset, "bad IPv4 version/header length", True)
        total = int.from_bytes(d[pos + 2:pos + 4], "big")
        frag = int.from_bytes(d[pos + 6:pos + 8], "big")
        nh = d[pos + 9]
        if total == 0:      # TSO on the capturing host: length left to the NIC
            total = len(d) - pos + wire_extra
        if total < ihl:
            return PacketSkip(pkt.number, pkt.offset, "IPv4 total length below header length", True)
        if total > len(d) - pos + wire_extra:
            return PacketSkip(pkt.number, pkt.offset, f"IPv4 total length {total} exceeds the "
                              f"{len(d) - pos + wire_extra} bytes on the wire", True)
        if frag & 0x3FFF:   # MF set or a non-zero fragment offset
            return PacketSkip(pkt.number, pkt.offset, "IPv4 fragment (not reassembled)")
        src = str(ipaddress.IPv4Address(d[pos + 12:pos + 16]))
        dst = str(ipaddress.IPv4Address(d[pos + 16:pos + 20]))
        end = pos + total
        pos += ihl
    elif proto == _ETH_IPV6:
        if len(d) < pos + 40:
            return PacketSkip(pkt.number, pkt.offset, "short IPv6 header", True)
        if d[pos] >> 4 != 6:
            return PacketSkip(pkt.number, pkt.offset, "bad IPv6 version", True)
        plen = int.from_bytes(d[pos + 4:pos + 6], "big")
        nh = d[pos + 6]
        src = str(ipaddress.IPv6Address(d[pos + 8:pos + 24]))
        dst = str(ipaddress.IPv6Address(d[pos + 24:pos + 40]))
        if plen == 0:       # jumbogram or TSO: take what is there
            plen = len(d) - pos - 40 + wire_extra
        end = pos + 40 + plen
        if end > len(d) + wire_extra:
            return PacketSkip(pkt.number, pkt.offset, f"IPv6 payload length {plen} exceeds the "
                              f"{len(d) - pos - 40 + wire_extra} bytes on the wire", True)
        pos += 40
        while nh in _IPV6_EXT or nh in (44, 51):
            if len(d) < pos + 8:
                return PacketSkip(pkt.number, pkt.offset, "short IPv6 extension header", True)
            if nh == 44:
                return PacketSkip(pkt.number, pkt.offset, "IPv6 fragment (not reassembled)")
            ext_len = (d[pos + 1] + 2) * 4 if nh == 51 else (d[pos + 1] + 1) * 8
            nh = d[pos]
            pos += ext_len
        if pos > end:
            return PacketSkip(pkt.number, pkt.offset, "IPv6 extension headers overrun the packet", True)
    else:
        return PacketSkip(pkt.number, pkt.offset, f"network protocol {proto:#06x} is not IP")
    if nh != 6:
        return PacketSkip(pkt.number, pkt.offset, f"IP protocol {nh} is not TCP")
    if len(d) < pos + 20:
        return PacketSkip(pkt.number, pkt.offset, "short TCP header", True)
    sport, dport, seq, ack, off_flags = struct.unpack_from(">HHIIH", d, pos)
    doff = (off_flags >> 12) * 4
    if doff < 20 or pos + doff > end:
        return PacketSkip(pkt.number, pkt.offset, "bad TCP data offset", True)
    if len(d) < pos + doff:
        return PacketSkip(pkt.number, pkt.offset, "TCP options cut off by the snap length", True)
    payload = d[pos + doff:end]
    missing = max(0, end - pos - doff - len(payload))
    return TcpSegment(pkt.ts_ns, src, dst, sport, dport, seq, ack, off_flags & 0x1FF, payload,
                      pkt.number, pkt.offset, missing)


def read_segments(stream: BinaryIO, *, name: str = "",
                  skipped: list[PacketSkip] | None = None) -> Iterator[TcpSegment]:
    """Every TCP segment of a capture stream; non-TCP packets go to ``skipped``."""
    reader = CaptureReader(stream, name=name)
    for pkt in reader:
        seg = tcp_segment(pkt)
        if isinstance(seg, TcpSegment):
            yield seg
        elif skipped is not None:
            skipped.append(seg)
