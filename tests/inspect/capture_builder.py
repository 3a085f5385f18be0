"""Synthesises pcap and pcapng bytes for the reader and reassembly tests.

Deliberately independent of kctl's production pcapng writer: a test helper
that shares code with the thing under test would agree with its bugs.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10


@dataclass
class Seg:
    src: str
    dst: str
    sport: int
    dport: int
    seq: int
    payload: bytes = b""
    flags: int = ACK | PSH
    ack: int = 0
    ts_ns: int = 0


def tcp(seg: Seg, options: bytes = b"") -> bytes:
    assert len(options) % 4 == 0
    doff = (20 + len(options)) // 4
    return struct.pack(">HHIIHHHH", seg.sport, seg.dport, seg.seq % 2**32, seg.ack % 2**32,
                       (doff << 12) | seg.flags, 65535, 0, 0) + options + seg.payload


def ipv4(seg: Seg, *, options: bytes = b"", frag: int = 0x4000, proto: int = 6,
         body: bytes | None = None) -> bytes:
    body = tcp(seg) if body is None else body
    ihl = (20 + len(options)) // 4
    return struct.pack(">BBHHHBBH4s4s", 0x40 | ihl, 0, 20 + len(options) + len(body), 1, frag, 64,
                       proto, 0, ipaddress.IPv4Address(seg.src).packed,
                       ipaddress.IPv4Address(seg.dst).packed) + options + body


def ipv6(seg: Seg, *, ext: list[tuple[int, bytes]] = (), body: bytes | None = None) -> bytes:
    """``ext``: (header type, header bytes without its first two bytes) in order."""
    body = tcp(seg) if body is None else body
    chain = b""
    types = [t for t, _ in ext] + [6]
    for i, (_t, data) in enumerate(ext):
        total = 2 + len(data)
        assert total % 8 == 0
        chain += bytes([types[i + 1], total // 8 - 1]) + data
    payload = chain + body
    return struct.pack(">IHBB16s16s", 0x60000000, len(payload), types[0], 64,
                       ipaddress.IPv6Address(seg.src).packed,
                       ipaddress.IPv6Address(seg.dst).packed) + payload


def ip(seg: Seg) -> bytes:
    return ipv6(seg) if ":" in seg.src else ipv4(seg)


def link(link_type: int, ip_packet: bytes, *, vlan: int = 0) -> bytes:
    v6 = ip_packet[0] >> 4 == 6
    etype = 0x86DD if v6 else 0x0800
    if link_type == 1:
        tags = b"".join(struct.pack(">HH", 0x8100, 100 + i) for i in range(vlan))
        return b"\x00\x11\x22\x33\x44\x55\x66\x77\x88\x99\xaa\xbb" + tags + struct.pack(">H", etype) + ip_packet
    if link_type == 113:
        return struct.pack(">HHH8sH", 0, 772, 6, b"\0" * 8, etype) + ip_packet
    if link_type == 276:
        return struct.pack(">HHIHBB8s", etype, 0, 1, 772, 0, 6, b"\0" * 8) + ip_packet
    if link_type == 0:
        return struct.pack("<I", 30 if v6 else 2) + ip_packet
    if link_type == 108:
        return struct.pack(">I", 24 if v6 else 2) + ip_packet
    if link_type in (101, 228, 229, 12):
        return ip_packet
    raise ValueError(link_type)


def pcap(packets: list[tuple[int, bytes]], *, link_type: int = 1, big_endian: bool = False,
         nano: bool = False, snaplen: int = 262144, orig_lens: dict[int, int] | None = None) -> bytes:
    """``packets``: (ts_ns, link-layer bytes)."""
    o = ">" if big_endian else "<"
    magic = 0xA1B23C4D if nano else 0xA1B2C3D4
    out = [struct.pack(o + "IHHiIII", magic, 2, 4, 0, 0, snaplen, link_type)]
    for i, (ts, data) in enumerate(packets):
        frac = ts % 10**9 if nano else (ts % 10**9) // 1000
        orig = (orig_lens or {}).get(i, len(data))
        out.append(struct.pack(o + "IIII", ts // 10**9, frac, len(data), orig) + data)
    return b"".join(out)


def _opt(o: str, code: int, value: bytes) -> bytes:
    return struct.pack(o + "HH", code, len(value)) + value + b"\0" * (-len(value) % 4)


def _block(o: str, btype: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    n = len(body) + 12
    return struct.pack(o + "II", btype, n) + body + struct.pack(o + "I", n)


def pcapng_shb(*, big_endian: bool = False) -> bytes:
    o = ">" if big_endian else "<"
    return _block(o, 0x0A0D0D0A, struct.pack(o + "IHHq", 0x1A2B3C4D, 1, 0, -1)
                  + _opt(o, 4, b"kctl tests") + _opt(o, 0, b""))


def pcapng_idb(link_type: int, *, tsresol: int | None = None, big_endian: bool = False,
               snaplen: int = 0) -> bytes:
    o = ">" if big_endian else "<"
    opts = b""
    if tsresol is not None:
        opts += _opt(o, 9, bytes([tsresol]))
    opts += _opt(o, 2, b"lo") + _opt(o, 0, b"")
    return _block(o, 1, struct.pack(o + "HHI", link_type, 0, snaplen) + opts)


def pcapng_epb(iface: int, ts_units: int, data: bytes, *, big_endian: bool = False,
               orig_len: int | None = None) -> bytes:
    o = ">" if big_endian else "<"
    return _block(o, 6, struct.pack(o + "IIIII", iface, ts_units >> 32, ts_units & 0xFFFFFFFF,
                                    len(data), orig_len or len(data)) + data)


def pcapng_spb(data: bytes, *, big_endian: bool = False) -> bytes:
    o = ">" if big_endian else "<"
    return _block(o, 3, struct.pack(o + "I", len(data)) + data)


def pcapng_unknown(btype: int = 0x0BAD, *, big_endian: bool = False) -> bytes:
    return _block(">" if big_endian else "<", btype, b"whatever")


def pcapng(packets: list[tuple[int, bytes]], *, link_type: int = 1, big_endian: bool = False) -> bytes:
    """A one-interface pcapng (nanosecond resolution)."""
    out = [pcapng_shb(big_endian=big_endian), pcapng_idb(link_type, tsresol=9, big_endian=big_endian)]
    out += [pcapng_epb(0, ts, d, big_endian=big_endian) for ts, d in packets]
    return b"".join(out)


class Conversation:
    """A TCP connection between a client and a broker, as segments.

    Keeps both sequence numbers so a test can write ``conv.send(b"...")`` and
    ``conv.reply(b"...")`` and then reorder, duplicate or split the segments.
    """

    def __init__(self, client: str = "10.0.0.1", cport: int = 50000, broker: str = "10.0.0.2",
                 bport: int = 9092, *, cisn: int = 1000, bisn: int = 5000, ts_ns: int = 10**18,
                 handshake: bool = True) -> None:
        self.client, self.cport, self.broker, self.bport = client, cport, broker, bport
        self.cseq = cisn
        self.bseq = bisn
        self.ts = ts_ns
        self.segs: list[Seg] = []
        if handshake:
            self._add(True, b"", SYN)
            self.cseq += 1
            self._add(False, b"", SYN | ACK)
            self.bseq += 1
            self._add(True, b"", ACK)

    def _add(self, from_client: bool, payload: bytes, flags: int) -> Seg:
        self.ts += 1000
        if from_client:
            s = Seg(self.client, self.broker, self.cport, self.bport, self.cseq, payload, flags,
                    self.bseq, self.ts)
        else:
            s = Seg(self.broker, self.client, self.bport, self.cport, self.bseq, payload, flags,
                    self.cseq, self.ts)
        self.segs.append(s)
        return s

    def send(self, data: bytes, mss: int = 1 << 20) -> list[Seg]:
        out = []
        for i in range(0, len(data), mss):
            chunk = data[i:i + mss]
            out.append(self._add(True, chunk, ACK | PSH))
            self.cseq += len(chunk)
        return out

    def reply(self, data: bytes, mss: int = 1 << 20) -> list[Seg]:
        out = []
        for i in range(0, len(data), mss):
            chunk = data[i:i + mss]
            out.append(self._add(False, chunk, ACK | PSH))
            self.bseq += len(chunk)
        return out

    def close(self) -> None:
        self._add(True, b"", FIN | ACK)
        self.cseq += 1
        self._add(False, b"", FIN | ACK)
        self.bseq += 1


def capture(segs: list[Seg], *, fmt: str = "pcap", link_type: int = 1) -> bytes:
    pk = [(s.ts_ns, link(link_type, ip(s))) for s in segs]
    if fmt == "pcap":
        return pcap(pk, link_type=link_type, nano=True)
    return pcapng(pk, link_type=link_type)
