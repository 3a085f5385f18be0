"""A pcapng writer that synthesises Ethernet/IPv4/TCP around proxied byte streams.

How this works
--------------
The proxy does not sniff packets; it knows the bytes each connection carried.
To make a capture that Wireshark, tshark and kctl's own reader open, every
connection becomes a ``TcpFlow`` with made-up but consistent TCP state:

- ``open_flow`` writes the three-way handshake (SYN, SYN-ACK, ACK) with fixed
  initial sequence numbers; each side's ``seq`` then advances by the bytes it sent
  and every segment acknowledges everything the other side has sent so far;
- ``data`` writes one segment per call, split at ``MAX_SEGMENT_PAYLOAD`` (65495,
  so an IPv4 packet stays within 65535 bytes), preserving the write boundaries
  the proxy used (tiny-segment faults show up as tiny segments);
- ``close`` writes FIN/ACK from the closing side and the peer's FIN/ACK and ACK
  (or a RST when the connection was dropped).

Legs: the proxy has two TCP connections per client connection, so a capture has two
interfaces (``legs.Leg``): 0, the *client leg* (clients to the proxy's listeners),
and 1, the *upstream leg* (the proxy to the brokers), each named for its leg. Each
interface's description lists the broker-side ports of its leg; they are only all
known at the end (listeners appear as responses name brokers), so the description
is written as a reserved run of spaces and filled in by ``close`` (``legs.py``
reads it back). A capture cut short before ``close`` is still a valid pcapng.

File layout: one Section Header Block, two Interface Description Blocks
(LINKTYPE_ETHERNET, ``if_tsresol`` = 9 so timestamps are nanoseconds), then an
Enhanced Packet Block per segment. IPv4 and TCP checksums are real: the payload's
16-bit one's complement sum is computed once with integer arithmetic in C
(``payload_sum``), and a caller writing the same bytes on both legs passes it in.

Cost: a packet is its headers (one small ``bytes``) and the payload the proxy already
holds (not copied); they are written with ``os.writev`` once ``buffer_bytes`` (or a
thousand pieces) are waiting, never per frame; ``flush`` and ``close`` write the rest.

One writer has one owner (the processor that writes it); it is not thread-safe.
Several processors write several files; ``merge_captures`` joins them into one,
packets in time order (a connection belongs to one processor, so each
connection's packets keep their order), each packet once.
"""

from __future__ import annotations

import heapq
import ipaddress
import os
import struct
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final

from kctl.inspect.legs import LEG_NAMES, Leg, describe_ports

MAX_SEGMENT_PAYLOAD: Final = 65535 - 20 - 20   # IPv4 total length minus IP and TCP headers
_SUM_PIECE: Final = 4096                          # bytes read as one integer by payload_sum
LINKTYPE_ETHERNET: Final = 1
#: Bytes reserved in each interface description for its broker ports (about 300 ports).
PORTS_RESERVED: Final = 2048

_SHB: Final = 0x0A0D0D0A
_IDB: Final = 0x00000001
_EPB: Final = 0x00000006
_BYTE_ORDER_MAGIC: Final = 0x1A2B3C4D
_OPT_COMMENT: Final = 1
_OPT_IF_NAME: Final = 2
_OPT_IF_DESCRIPTION: Final = 3
_OPT_IF_TSRESOL: Final = 9
_OPT_SHB_USERAPPL: Final = 4

FIN: Final = 0x01
SYN: Final = 0x02
RST: Final = 0x04
PSH: Final = 0x08
ACK: Final = 0x10

_MAC_CLIENT: Final = bytes.fromhex("020000000001")
_MAC_SERVER: Final = bytes.fromhex("020000000002")
_ETH_IPV4: Final = b"\x08\x00"
_ETH_TO_CLIENT: Final = _MAC_CLIENT + _MAC_SERVER + _ETH_IPV4   # destination MAC first
_ETH_TO_SERVER: Final = _MAC_SERVER + _MAC_CLIENT + _ETH_IPV4
_ETH_BY_SIDE: Final = (_ETH_TO_SERVER, _ETH_TO_CLIENT)   # index: the sending side (0: the client)
_IP_HDR: Final = struct.Struct(">BBHHHBBH4s4s")
_TCP_HDR: Final = struct.Struct(">HHIIBBHHH")
_EPB_HDR: Final = struct.Struct("<IIIIIII")
#: Ethernet (prebuilt), IPv4 and TCP headers of a segment, in one pack.
_HEADERS: Final = struct.Struct(">14s" + _IP_HDR.format[1:] + _TCP_HDR.format[1:])
_BLOCK_HEAD: Final = struct.Struct("<II")
_TRAILERS: Final = (b"", b"\0", b"\0\0", b"\0\0\0")       # padding to 4 bytes, by its length
_SECTION_COMMENT: Final = (
    "kctl inspect capture. Interface 0 is the client leg (clients to kctl inspect's "
    "listeners), interface 1 the upstream leg (kctl inspect to the brokers); each "
    "interface's description lists the broker ports of its leg.")


def payload_sum(data: bytes | bytearray | memoryview) -> int:
    """The 16-bit one's complement sum of ``data`` (big-endian words, an odd byte padded),
    in 0..0xFFFF: RFC 1071's sum, before the final complement.

    ``2**16 = 1 (mod 0xFFFF)``, so the end-around-carry sum of the words is the payload
    read as one big integer, modulo 0xFFFF; and so is the sum of its even-length pieces
    read as integers, which keeps the final division small. All of it runs in C:
    well under 1 ns a byte."""
    n = len(data)
    if not n:
        return 0
    mv = memoryview(data)
    v = 0
    if n & 1:
        n -= 1
        v = mv[n] << 8
        mv = mv[:n]
    if n > _SUM_PIECE:
        fb = int.from_bytes
        v += sum([fb(mv[i:i + _SUM_PIECE]) for i in range(0, n, _SUM_PIECE)])
    else:
        v += int.from_bytes(mv)
    s = v % 0xFFFF
    return 0xFFFF if s == 0 and v else s


def _ipv4(host: str) -> bytes:
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return bytes([127, 0, 0, 1])
    if isinstance(addr, ipaddress.IPv6Address):
        mapped = addr.ipv4_mapped
        return mapped.packed if mapped else bytes([127, 0, 0, 1])
    return addr.packed


def _pad4(n: int) -> int:
    return (4 - n % 4) % 4


def _option(code: int, value: bytes) -> bytes:
    return struct.pack("<HH", code, len(value)) + value + b"\x00" * _pad4(len(value))


def _block(block_type: int, body: bytes) -> bytes:
    total = 12 + len(body)
    return _BLOCK_HEAD.pack(block_type, total) + body + struct.pack("<I", total)


def _section_header(application: str) -> bytes:
    opts = (_option(_OPT_COMMENT, _SECTION_COMMENT.encode())
            + _option(_OPT_SHB_USERAPPL, application.encode()) + b"\x00\x00\x00\x00")
    return _block(_SHB, struct.pack("<IHHq", _BYTE_ORDER_MAGIC, 1, 0, -1) + opts)


def _interface(leg: Leg, ports: Iterable[int] | None) -> tuple[bytes, int]:
    """An IDB for ``leg`` and the offset of its description's value inside the block."""
    head = struct.pack("<HHI", LINKTYPE_ETHERNET, 0, 0) + _option(_OPT_IF_NAME, LEG_NAMES[leg].encode())
    value_at = 8 + len(head) + 4          # block header, fields and name, option header
    desc = _description(ports)
    opts = _option(_OPT_IF_DESCRIPTION, desc) + _option(_OPT_IF_TSRESOL, bytes([9])) + b"\x00\x00\x00\x00"
    return _block(_IDB, head + opts), value_at


def _description(ports: Iterable[int] | None) -> bytes:
    text = describe_ports(list(ports or ())).encode()
    if len(text) > PORTS_RESERVED:           # cut at a whole port number
        text = text[:text.rfind(b",", 0, PORTS_RESERVED)]
    return text.ljust(PORTS_RESERVED)


class CaptureWriter:
    """Writes a pcapng file of synthetic TCP flows, one interface per leg of the proxy.
    Use as a context manager or ``close()``."""

    def __init__(self, path: str | Path, *, application: str = "kctl inspect",
                 buffer_bytes: int = 1 << 20) -> None:
        self.path = Path(path)
        self._file: BinaryIO = open(self.path, "wb", buffering=0)
        self._fd = self._file.fileno()
        self._parts: list[bytes | bytearray | memoryview] = []
        self._waiting = 0
        self._limit = buffer_bytes
        self._closed = False
        self.packets = 0
        self._broker_ports: dict[Leg, set[int]] = {Leg.CLIENT: set(), Leg.UPSTREAM: set()}
        head = _section_header(application)
        self._description_at: dict[Leg, int] = {}
        for leg in Leg:
            idb, value_at = _interface(leg, None)
            self._description_at[leg] = len(head) + value_at
            head += idb
        self._parts.append(head)

    # -- blocks ------------------------------------------------------------------------------
    def write_packet(self, ts_ns: int, leg: Leg, head: bytes, payload: bytes | bytearray | memoryview = b""
                     ) -> None:
        """One Ethernet frame (``head`` then ``payload``) as an Enhanced Packet Block on
        ``leg``'s interface (timestamp in nanoseconds). ``payload`` is kept by reference
        until written: leave it unchanged."""
        if self._closed:
            return
        n = len(head) + len(payload)
        pad = -n & 3
        total = 32 + n + pad
        parts = self._parts
        parts.append(_EPB_HDR.pack(_EPB, total, leg, (ts_ns >> 32) & 0xFFFFFFFF, ts_ns & 0xFFFFFFFF, n, n)
                     + head)
        if payload:
            parts.append(payload)
        parts.append(_TRAILERS[pad] + total.to_bytes(4, "little"))
        self.packets += 1
        self._waiting += total
        if self._waiting >= self._limit or len(parts) >= 1000:
            self._write_out()

    def _write_out(self) -> None:
        parts = self._parts
        while parts:
            batch = parts[:1000]
            n = os.writev(self._fd, batch)
            i = 0
            while i < len(batch) and n >= len(batch[i]):
                n -= len(batch[i])
                i += 1
            del parts[:i]
            if n:                       # a piece written in part
                parts[0] = memoryview(parts[0])[n:]
        self._waiting = 0

    # -- flows -------------------------------------------------------------------------------
    def open_flow(self, client: tuple[str, int], server: tuple[str, int], ts_ns: int,
                  leg: Leg = Leg.CLIENT) -> TcpFlow:
        """A new TCP connection from ``client`` to ``server`` on ``leg``; writes its handshake."""
        flow = TcpFlow(self, client, server, leg)
        flow.handshake(ts_ns)
        return flow

    def add_broker_ports(self, leg: Leg, ports: Iterable[int]) -> None:
        """Ports on the broker side of ``leg``: written into its interface description at close."""
        self._broker_ports[leg].update(ports)

    def flush(self) -> None:
        if not self._closed:
            self._write_out()

    def close(self) -> None:
        if self._closed:
            return
        self.flush()
        self._closed = True
        try:
            for leg, at in self._description_at.items():
                self._file.seek(at)
                self._file.write(_description(self._broker_ports[leg]))
        finally:
            self._file.close()

    def __enter__(self) -> CaptureWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TcpFlow:
    """One synthetic TCP connection inside a ``CaptureWriter``.

    ``from_client`` says which side sent a segment; sequence numbers are kept per
    side (``seq`` is the next byte each side will send)."""

    __slots__ = ("_w", "_ips", "_ports", "_seq", "_ip_id", "_leg", "_ip_const", "_tcp_const", "closed")

    _ISN: Final = (0x10000000, 0x20000000)   # client, server initial sequence numbers

    def __init__(self, writer: CaptureWriter, client: tuple[str, int], server: tuple[str, int],
                 leg: Leg = Leg.CLIENT) -> None:
        self._w = writer
        self._ips = (_ipv4(client[0]), _ipv4(server[0]))
        self._ports = (client[1], server[1])
        self._seq = [self._ISN[0], self._ISN[1]]
        self._ip_id = [0, 0]
        self._leg = leg
        # The header words that never change, summed once, the same both ways: the IP
        # header's (version/IHL, DF, TTL/protocol, addresses) and the TCP checksum's
        # (pseudo header's addresses and protocol, ports, data offset, window).
        addr_sum = sum(struct.unpack(">4H", self._ips[0] + self._ips[1]))
        self._ip_const = 0x4500 + 0x4000 + (64 << 8 | 6) + addr_sum
        self._tcp_const = addr_sum + 6 + client[1] + server[1] + (5 << 12) + 65535
        self.closed = False

    def _segment(self, ts_ns: int, side: int, flags: int, payload: bytes | memoryview = b"",
                 psum: int = 0) -> None:
        # Checksums from the words that change (lengths, IP id, sequence numbers, flags)
        # added to the per-side constants: one header pack per segment, nothing unpacked.
        other = 1 - side
        seqs = self._seq
        seq = seqs[side]
        ack = seqs[other] if flags & ACK else 0
        n = len(payload)
        tcp_len = 20 + n
        s = (self._tcp_const + tcp_len + psum + (seq >> 16) + (seq & 0xFFFF)
             + (ack >> 16) + (ack & 0xFFFF) + flags)
        while s >> 16:
            s = (s & 0xFFFF) + (s >> 16)
        ids = self._ip_id
        ids[side] = ip_id = (ids[side] + 1) & 0xFFFF
        ip_s = self._ip_const + 20 + tcp_len + ip_id
        while ip_s >> 16:
            ip_s = (ip_s & 0xFFFF) + (ip_s >> 16)
        ips = self._ips
        ports = self._ports
        head = _HEADERS.pack(_ETH_BY_SIDE[side], 0x45, 0, 20 + tcp_len, ip_id, 0x4000, 64, 6, ~ip_s & 0xFFFF,
                             ips[side], ips[other], ports[side], ports[other], seq, ack, 5 << 4, flags,
                             65535, ~s & 0xFFFF, 0)
        self._w.write_packet(ts_ns, self._leg, head, payload)
        advance = n + (1 if flags & (SYN | FIN) else 0)
        seqs[side] = (seq + advance) & 0xFFFFFFFF

    def handshake(self, ts_ns: int) -> None:
        self._segment(ts_ns, 0, SYN)
        self._segment(ts_ns, 1, SYN | ACK)
        self._segment(ts_ns, 0, ACK)

    def data(self, ts_ns: int, from_client: bool, payload: bytes | bytearray | memoryview,
             sums: tuple[int, ...] | None = None) -> tuple[int, ...]:
        """Bytes one side sent, as one segment (several when over ``MAX_SEGMENT_PAYLOAD``).
        Returns each segment's ``payload_sum``; a caller writing the same bytes on the
        other leg passes them back as ``sums`` and they are not computed again."""
        if self.closed or not payload:
            return ()
        side = 0 if from_client else 1
        n = len(payload)
        if n <= MAX_SEGMENT_PAYLOAD:
            psum = sums[0] if sums else payload_sum(payload)
            self._segment(ts_ns, side, PSH | ACK, payload, psum)
            return (psum,)
        view = memoryview(payload)
        out = []
        for k, i in enumerate(range(0, n, MAX_SEGMENT_PAYLOAD)):
            piece = view[i:i + MAX_SEGMENT_PAYLOAD]
            psum = sums[k] if sums else payload_sum(piece)
            self._segment(ts_ns, side, PSH | ACK, piece, psum)
            out.append(psum)
        return tuple(out)

    def close(self, ts_ns: int, from_client: bool = True, *, reset: bool = False) -> None:
        """The connection's end: FIN from the closing side answered by the peer's FIN
        and the last ACK, or a single RST when ``reset``."""
        if self.closed:
            return
        self.closed = True
        side = 0 if from_client else 1
        if reset:
            self._segment(ts_ns, side, RST | ACK)
            return
        self._segment(ts_ns, side, FIN | ACK)
        self._segment(ts_ns, 1 - side, FIN | ACK)
        self._segment(ts_ns, side, ACK)


# -- joining the files of several processors ---------------------------------------------------

@dataclass(frozen=True, slots=True)
class MergeResult:
    packets: int
    damaged: tuple[str, ...]        # one line per part that ended inside a block (its owner died)


def _packets_of(path: Path, damaged: list[str]) -> Iterator[tuple[int, bytes]]:
    """(timestamp, EPB bytes) of each packet of a part written by ``CaptureWriter``
    (little-endian, nanosecond timestamps); stops at a block cut short."""
    with open(path, "rb") as f:
        while True:
            head = f.read(8)
            if not head:
                return
            if len(head) < 8:
                damaged.append(f"{path.name}: ends inside a block header")
                return
            btype, total = _BLOCK_HEAD.unpack(head)
            if total < 12 or total % 4:
                damaged.append(f"{path.name}: broken block length {total}")
                return
            rest = f.read(total - 8)
            if len(rest) < total - 8:
                damaged.append(f"{path.name}: ends inside a block ({len(rest) + 8} of {total} bytes)")
                return
            if btype == _EPB:
                hi, lo = struct.unpack_from("<II", rest, 4)
                yield (hi << 32) | lo, head + rest


def merge_captures(parts: Iterable[str | Path], out: str | Path,
                   broker_ports: Mapping[Leg, Iterable[int]], *,
                   application: str = "kctl inspect") -> MergeResult:
    """Writes one capture at ``out`` holding every packet of ``parts`` (files written by
    ``CaptureWriter``), in time order; interface descriptions name ``broker_ports``."""
    damaged: list[str] = []
    streams = [_packets_of(Path(p), damaged) for p in parts]
    packets = 0
    with open(out, "wb") as f:
        head = _section_header(application)
        for leg in Leg:
            head += _interface(leg, broker_ports.get(leg, ()))[0]
        f.write(head)
        buf = bytearray()
        # heapq.merge is stable: equal timestamps keep each part's own order.
        for _, block in heapq.merge(*streams, key=lambda item: item[0]):
            buf += block
            packets += 1
            if len(buf) >= 1 << 20:
                f.write(buf)
                buf.clear()
        f.write(buf)
    return MergeResult(packets, tuple(damaged))
