"""A pcapng writer that synthesises Ethernet/IPv4/TCP around proxied byte streams.

How this works
--------------
The proxy does not sniff packets; it knows the bytes each connection carried.
To make a capture that Wireshark, tshark and kctl's own reader open, every
connection becomes a ``TcpFlow`` with made-up but consistent TCP state:

- ``open`` writes the three-way handshake (SYN, SYN-ACK, ACK) with fixed initial
  sequence numbers; each side's ``seq`` then advances by the bytes it sent and
  every segment acknowledges everything the other side has sent so far;
- ``data`` writes one segment per call, split at ``MAX_SEGMENT_PAYLOAD`` (65495,
  so an IPv4 packet stays within 65535 bytes), preserving the write boundaries
  the proxy used (tiny-segment faults show up as tiny segments);
- ``close`` writes FIN/ACK from the closing side and the peer's FIN/ACK and ACK
  (or a RST when the connection was dropped).

File layout: one Section Header Block, one Interface Description Block
(LINKTYPE_ETHERNET, ``if_tsresol`` = 9 so timestamps are nanoseconds), then an
Enhanced Packet Block per segment. IPv4 and TCP checksums are real. Addresses
that are not IPv4 (a v6 peer) are written as 127.0.0.1 with the real ports.

Thread safety: one lock around each block write, so flows may be fed from any
thread; within a flow, callers keep each direction's writes in stream order.
"""

from __future__ import annotations

import ipaddress
import struct
import threading
from pathlib import Path
from typing import BinaryIO, Final

MAX_SEGMENT_PAYLOAD: Final = 65535 - 20 - 20   # IPv4 total length minus IP and TCP headers
LINKTYPE_ETHERNET: Final = 1

_SHB: Final = 0x0A0D0D0A
_IDB: Final = 0x00000001
_EPB: Final = 0x00000006
_BYTE_ORDER_MAGIC: Final = 0x1A2B3C4D
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
_IP_HDR: Final = struct.Struct(">BBHHHBBH4s4s")
_TCP_HDR: Final = struct.Struct(">HHIIBBHHH")
_EPB_HDR: Final = struct.Struct("<IIIIIII")


def _ones_complement_sum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\x00"
    # Sum 16-bit big-endian words; int.from_bytes on slices is slow, so sum the
    # native-order halfwords and swap at the end (the one's complement sum is
    # byte-order independent up to a final byte swap).
    total = sum(memoryview(data).cast("H"))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    if struct.pack("=H", 1) == b"\x01\x00":  # little-endian host
        total = ((total & 0xFF) << 8) | (total >> 8)
    return total


def _checksum(data: bytes) -> int:
    return ~_ones_complement_sum(data) & 0xFFFF


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


class CaptureWriter:
    """Writes a pcapng file of synthetic TCP flows. Use as a context manager or ``close()``."""

    def __init__(self, path: str | Path, *, application: str = "kctl inspect") -> None:
        self.path = Path(path)
        self._file: BinaryIO = open(self.path, "wb")
        self._lock = threading.Lock()
        self._closed = False
        self.packets = 0
        self._write_shb(application)
        self._write_idb()

    # -- blocks ------------------------------------------------------------------------------
    def _write_block(self, block_type: int, body: bytes) -> None:
        total = 12 + len(body)
        self._file.write(struct.pack("<II", block_type, total) + body + struct.pack("<I", total))

    @staticmethod
    def _option(code: int, value: bytes) -> bytes:
        return struct.pack("<HH", code, len(value)) + value + b"\x00" * _pad4(len(value))

    def _write_shb(self, application: str) -> None:
        opts = self._option(_OPT_SHB_USERAPPL, application.encode()) + b"\x00\x00\x00\x00"
        body = struct.pack("<IHHq", _BYTE_ORDER_MAGIC, 1, 0, -1) + opts
        self._write_block(_SHB, body)

    def _write_idb(self) -> None:
        opts = self._option(_OPT_IF_TSRESOL, bytes([9])) + b"\x00\x00\x00\x00"
        body = struct.pack("<HHI", LINKTYPE_ETHERNET, 0, 0) + opts
        self._write_block(_IDB, body)

    def write_packet(self, ts_ns: int, packet: bytes) -> None:
        """One Ethernet frame as an Enhanced Packet Block (timestamp in nanoseconds)."""
        n = len(packet)
        pad = _pad4(n)
        total = 32 + n + pad
        head = _EPB_HDR.pack(_EPB, total, 0, (ts_ns >> 32) & 0xFFFFFFFF, ts_ns & 0xFFFFFFFF, n, n)
        with self._lock:
            if self._closed:
                return
            self._file.write(head)
            self._file.write(packet)
            self._file.write(b"\x00" * pad + struct.pack("<I", total))
            self.packets += 1

    # -- flows -------------------------------------------------------------------------------
    def open_flow(self, client: tuple[str, int], server: tuple[str, int], ts_ns: int) -> TcpFlow:
        """A new TCP connection from ``client`` to ``server``; writes its handshake."""
        flow = TcpFlow(self, client, server)
        flow.handshake(ts_ns)
        return flow

    def flush(self) -> None:
        with self._lock:
            if not self._closed:
                self._file.flush()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._file.close()

    def __enter__(self) -> CaptureWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TcpFlow:
    """One synthetic TCP connection inside a ``CaptureWriter``.

    ``from_client`` says which side sent a segment; sequence numbers are kept per
    side (``seq`` is the next byte each side will send)."""

    __slots__ = ("_w", "_ips", "_ports", "_seq", "_ip_id", "closed")

    _ISN: Final = (0x10000000, 0x20000000)   # client, server initial sequence numbers

    def __init__(self, writer: CaptureWriter, client: tuple[str, int], server: tuple[str, int]) -> None:
        self._w = writer
        self._ips = (_ipv4(client[0]), _ipv4(server[0]))
        self._ports = (client[1], server[1])
        self._seq = [self._ISN[0], self._ISN[1]]
        self._ip_id = [0, 0]
        self.closed = False

    def _segment(self, ts_ns: int, side: int, flags: int, payload: bytes = b"") -> None:
        other = 1 - side
        src_ip, dst_ip = self._ips[side], self._ips[other]
        seq = self._seq[side]
        ack = self._seq[other] if flags & ACK else 0
        tcp_len = 20 + len(payload)
        tcp = _TCP_HDR.pack(self._ports[side], self._ports[other], seq, ack,
                            5 << 4, flags, 65535, 0, 0)
        pseudo = src_ip + dst_ip + struct.pack(">BBH", 0, 6, tcp_len)
        csum = _checksum(pseudo + tcp + payload)
        tcp = tcp[:16] + struct.pack(">H", csum) + tcp[18:]
        self._ip_id[side] = (self._ip_id[side] + 1) & 0xFFFF
        ip = _IP_HDR.pack(0x45, 0, 20 + tcp_len, self._ip_id[side], 0x4000, 64, 6, 0, src_ip, dst_ip)
        ip = ip[:10] + struct.pack(">H", _checksum(ip)) + ip[12:]
        macs = (_MAC_SERVER + _MAC_CLIENT) if side == 0 else (_MAC_CLIENT + _MAC_SERVER)
        self._w.write_packet(ts_ns, macs + _ETH_IPV4 + ip + tcp + payload)
        advance = len(payload) + (1 if flags & (SYN | FIN) else 0)
        self._seq[side] = (seq + advance) & 0xFFFFFFFF

    def handshake(self, ts_ns: int) -> None:
        self._segment(ts_ns, 0, SYN)
        self._segment(ts_ns, 1, SYN | ACK)
        self._segment(ts_ns, 0, ACK)

    def data(self, ts_ns: int, from_client: bool, payload: bytes | bytearray | memoryview) -> None:
        """Bytes one side sent, as one segment (several when over ``MAX_SEGMENT_PAYLOAD``)."""
        if self.closed or not payload:
            return
        side = 0 if from_client else 1
        data = bytes(payload)
        for i in range(0, len(data), MAX_SEGMENT_PAYLOAD):
            self._segment(ts_ns, side, PSH | ACK, data[i:i + MAX_SEGMENT_PAYLOAD])

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
