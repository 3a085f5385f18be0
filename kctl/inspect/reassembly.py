"""TCP stream reassembly and Kafka framing for captured traffic, sans-IO.

How this works, bottom up:
- ``HalfStream`` turns the TCP segments of one direction into an in-order byte
  stream: ``StreamData`` (stream offset, bytes, time of the segment that made
  them deliverable) and ``StreamGap`` (bytes that were never captured).
  Sequence numbers are compared modulo 2**32, so wraparound is invisible.
  Retransmitted and overlapping bytes are trimmed (the first copy wins, as in
  the kernel); out-of-order segments wait in a table bounded by
  ``max_pending_bytes``: when it overflows, the hole before the earliest held
  segment is declared a gap and delivery goes on from there. A direction
  whose SYN was not captured starts at the first segment seen (mid-stream).
- ``FrameSplitter`` cuts one direction's byte stream into Kafka frames (4-byte
  size + payload). It starts *synchronised* only when the stream start (SYN)
  was seen; after a mid-stream start, a gap, or an impossible size it
  *resynchronises*: it scans for an offset where a plausible frame starts, a
  request header with a known API key and version (and a client id that fits)
  for requests, or a correlation id the other direction is waiting for, for
  responses. A candidate is taken only once its whole frame decodes (the
  ``verify`` callbacks; record data can look like a header). While scanning
  it keeps only the bytes that could still start a frame, at most one
  candidate frame (``max_resync_frame_bytes``), so memory stays bounded.
- ``Reassembler`` keys connections by (client, broker) endpoints, deciding
  which side is the broker from the broker ports (and the SYN when both
  ports qualify), and emits ``Frame`` and ``StreamNotice`` objects.

Time is never read here: every timestamp comes from the capture.
"""

from __future__ import annotations

import heapq
import re
from bisect import bisect_right, insort
import struct
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Final, Literal

from kctl.inspect.pcap import TCP_ACK, TcpSegment
from kctl.protocol.frames import DEFAULT_MAX_FRAME_BYTES
from kctl.protocol.schema import API_BY_KEY, request_header_version

__all__ = [
    "Endpoint", "ConnectionId", "StreamData", "StreamGap", "HalfStream", "Frame",
    "StreamNotice", "FrameSplitter", "Reassembler", "plausible_request_start",
    "request_prefilter", "response_prefilter", "DEFAULT_MAX_PENDING_BYTES", "MAX_RESYNC_ATTEMPTS",
    "RESYNC_DECODE_FACTOR",
]

Direction = Literal["request", "response"]

#: Out-of-order bytes held per direction before a missing range is given up on.
DEFAULT_MAX_PENDING_BYTES: Final = 4 * 1024 * 1024
#: While resynchronising, a candidate frame is held (to be verified) up to this size.
DEFAULT_MAX_RESYNC_FRAME_BYTES: Final = 8 * 1024 * 1024
_MAX_CANDIDATES: Final = 64
_MOD: Final = 1 << 32
_HALF: Final = 1 << 31
_I32: Final = struct.Struct(">i")
_I16I16I32: Final = struct.Struct(">hhi")
_I16: Final = struct.Struct(">h")


def _sdiff(a: int, b: int) -> int:
    """``a - b`` in sequence space: signed, modulo 2**32."""
    d = (a - b) % _MOD
    return d - _MOD if d >= _HALF else d


@dataclass(frozen=True, slots=True, order=True)
class Endpoint:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class ConnectionId:
    client: Endpoint
    broker: Endpoint

    def __str__(self) -> str:
        return f"{self.client}<->{self.broker}"


@dataclass(frozen=True, slots=True)
class StreamData:
    offset: int
    data: bytes
    ts_ns: int
    packet: int = 0     # capture packet number of the segment that made the bytes deliverable
    seq: int = 0        # TCP sequence number of the first byte
    carrier: int = 0    # capture packet number of the segment whose bytes these are (first copy)


@dataclass(frozen=True, slots=True)
class StreamGap:
    offset: int
    length: int
    ts_ns: int
    reason: str
    # The bytes were on the wire in a packet the capture holds, cut off by the snap length:
    # ``ts_ns`` is that packet's time (else they were never seen, and no time is theirs).
    captured: bool = False


class HalfStream:
    """One direction of a TCP connection, as an ordered byte stream.

    Out-of-order segments are held by their *stream offset* (the sequence number
    unwrapped against the next byte to deliver) in a dict, with a heap of those
    offsets: a segment costs O(log n) to hold and to release whatever the arrival
    order, and draining never rescans what is held.
    """

    __slots__ = ("next_seq", "offset", "saw_syn", "closed", "fin_seq", "_pending", "_heap",
                 "_pending_bytes", "max_pending_bytes", "retransmitted_bytes", "gap_bytes")

    def __init__(self, max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES) -> None:
        self.next_seq: int | None = None   # sequence number of the next byte to deliver
        self.offset = 0                    # stream offset of that byte
        self.saw_syn = False
        self.closed = False
        self.fin_seq: int | None = None
        # stream offset -> (captured bytes, bytes missing after them, ts_ns, packet);
        # every key is ahead of ``offset`` and in ``_heap`` exactly once.
        self._pending: dict[int, tuple[bytes, int, int, int]] = {}
        self._heap: list[int] = []
        self._pending_bytes = 0
        self.max_pending_bytes = max_pending_bytes
        self.retransmitted_bytes = 0
        self.gap_bytes = 0

    @property
    def pending_bytes(self) -> int:
        return self._pending_bytes

    @property
    def started(self) -> bool:
        return self.next_seq is not None

    def on_segment(self, seg: TcpSegment) -> list[StreamData | StreamGap]:
        out: list[StreamData | StreamGap] = []
        seq = seg.seq
        if seg.syn:
            if self.next_seq is None or not self.saw_syn:
                self.saw_syn = True
                self.next_seq = (seq + 1) % _MOD
                self.offset = 0
            seq = (seq + 1) % _MOD
        if self.closed:
            return out
        length = len(seg.payload) + seg.missing
        if self.next_seq is None:
            # Mid-stream: the first byte we see is where the stream starts for us.
            self.next_seq = seq
        if seg.fin and self.fin_seq is None:
            self.fin_seq = (seq + length) % _MOD
        if length:
            self._accept(seq, seg.payload, seg.missing, seg.ts_ns, out, seg.number)
        if seg.rst:
            out.extend(self.finish(seg.ts_ns, "connection reset"))
            self.closed = True
        elif self.fin_seq is not None and self.next_seq == self.fin_seq:
            self.closed = True
        return out

    def _accept(self, seq: int, data: bytes, hole: int, ts_ns: int,
                out: list[StreamData | StreamGap], packet: int = 0) -> None:
        assert self.next_seq is not None
        at = self.offset + _sdiff(seq, self.next_seq)
        if at > self.offset:
            length = len(data) + hole
            held = self._pending.get(at)
            if held is not None:
                if len(held[0]) + held[1] >= length:
                    self.retransmitted_bytes += length
                    return
                self._pending_bytes -= len(held[0])     # the longer copy replaces it
            else:
                heapq.heappush(self._heap, at)
            self._pending[at] = (data, hole, ts_ns, packet)
            self._pending_bytes += len(data)
            while self._pending_bytes > self.max_pending_bytes:
                self._skip_to_pending(ts_ns, "out-of-order bytes exceed the reassembly limit", out,
                                      packet)
            return
        self._deliver_from(at, data, hole, ts_ns, out, packet, packet)
        self._drain(ts_ns, out, packet)

    def _deliver_from(self, at: int, data: bytes, hole: int, ts_ns: int,
                      out: list[StreamData | StreamGap], packet: int, carrier: int) -> None:
        """Delivers a piece that starts at or before ``offset``, trimming what was already
        delivered (the first copy of a byte wins, as in the kernel)."""
        cut = self.offset - at
        if cut >= len(data) + hole:
            self.retransmitted_bytes += len(data) + hole
            return
        if cut:
            self.retransmitted_bytes += cut
            if cut <= len(data):
                data = data[cut:]
            else:
                hole -= cut - len(data)
                data = b""
        assert self.next_seq is not None
        if data:
            out.append(StreamData(self.offset, data, ts_ns, packet, self.next_seq, carrier))
            self.offset += len(data)
        if hole:
            out.append(StreamGap(self.offset, hole, ts_ns, "bytes cut off by the snap length",
                                 captured=True))
            self.offset += hole
            self.gap_bytes += hole
        self.next_seq = (self.next_seq + len(data) + hole) % _MOD

    def _drain(self, ts_ns: int, out: list[StreamData | StreamGap], packet: int = 0) -> None:
        """Delivers every held piece that now starts at or before ``offset``, in order."""
        heap = self._heap
        pending = self._pending
        while heap and heap[0] <= self.offset:
            at = heapq.heappop(heap)
            data, hole, _, carrier = pending.pop(at)
            self._pending_bytes -= len(data)
            self._deliver_from(at, data, hole, ts_ns, out, packet, carrier)

    def _skip_to_pending(self, ts_ns: int, reason: str, out: list[StreamData | StreamGap],
                         packet: int = 0) -> None:
        """Declares the hole before the earliest held segment a gap and moves past it."""
        assert self.next_seq is not None
        first = self._heap[0]
        missing = first - self.offset
        out.append(StreamGap(self.offset, missing, ts_ns, reason))
        self.gap_bytes += missing
        self.offset = first
        self.next_seq = (self.next_seq + missing) % _MOD
        self._drain(ts_ns, out, packet)

    @property
    def held_segments(self) -> int:
        return len(self._heap)

    def skip_hole(self, reason: str) -> list[StreamData | StreamGap]:
        """Declares the hole before the earliest held segment a gap and delivers on from
        there, for a reader that started mid-stream and knows the missing bytes came before
        it began. Unlike the reassembly limit's gap, each held segment is delivered with its
        own time and packet: for a reader that had the missing bytes, nothing held them."""
        out: list[StreamData | StreamGap] = []
        heap = self._heap
        if not heap:
            return out
        assert self.next_seq is not None
        first = heap[0]
        missing = first - self.offset
        out.append(StreamGap(self.offset, missing, self._pending[first][2], reason))
        self.gap_bytes += missing
        self.offset = first
        self.next_seq = (self.next_seq + missing) % _MOD
        while heap and heap[0] <= self.offset:
            at = heapq.heappop(heap)
            data, hole, ts_ns, packet = self._pending.pop(at)
            self._pending_bytes -= len(data)
            self._deliver_from(at, data, hole, ts_ns, out, packet, packet)
        return out

    def held_packet(self) -> int | None:
        """The earliest capture packet whose bytes are held out of order, if any."""
        return min((p for _, _, _, p in self._pending.values()), default=None)

    def finish(self, ts_ns: int, reason: str = "capture ended before the missing bytes") -> list[StreamData | StreamGap]:
        """Delivers everything still held, with gaps for the holes (end of capture)."""
        out: list[StreamData | StreamGap] = []
        while self._heap:
            self._skip_to_pending(ts_ns, reason, out)
        return out


# ---------------------------------------------------------------------------
# framing


@dataclass(frozen=True, slots=True)
class Frame:
    """One whole Kafka frame (``data`` excludes the size prefix).

    ``offset`` is the stream offset of its size prefix; ``ts_ns`` the time of
    the segment that completed it, ``first_ts_ns`` of the one that began it;
    ``resynced`` marks the first frame after the framing was (re)found by
    scanning, which is a guess that decoding confirms. ``seq`` is the TCP sequence
    number of its first byte and ``first_packet`` the capture packet that carried that
    byte (its first copy seen): the same in any reader of the capture, wherever that
    reader started, which is what lets several readers of one capture agree on frames.
    """

    conn: ConnectionId
    direction: Direction
    offset: int
    data: bytes
    ts_ns: int
    first_ts_ns: int
    resynced: bool = False
    packet: int = 0         # capture packet number of the segment that completed it
    seq: int = 0
    first_packet: int = 0


#: Bytes of a cut frame an ``incomplete`` notice keeps: the size prefix and a request
#: header's API key, version and correlation id.
_HEAD_BYTES: Final = 12


@dataclass(frozen=True, slots=True)
class StreamNotice:
    """Something about a stream that is not a frame: a gap, lost framing,
    bytes skipped while resynchronising, a frame cut off by the capture's end."""

    conn: ConnectionId
    direction: Direction
    offset: int
    ts_ns: int
    kind: Literal["gap", "framing", "skipped", "incomplete", "retransmission", "tls", "undecodable",
                  "request_end"]
    message: str
    length: int = 0
    first_packet: int = 0   # 'incomplete' at the end: the packet that carried its first byte
    # ``incomplete``: the cut frame's first bytes (up to ``_HEAD_BYTES``: its size prefix and
    # a request header's fixed fields), for a reader that knows the protocol to name it.
    head: bytes = b""
    # ``request_end`` (bookkeeping, no damage): the stream has passed the last byte of a
    # request a gap cut (``head``: its first bytes; ``offset``: its size prefix). ``end_ts_ns``
    # is the time of the segment that carried that byte (the request's completing segment,
    # as a whole frame's ``ts_ns``), None when that segment was not captured. ``candidate``:
    # the header was seen while resynchronising (no ``incomplete`` notice named it; its bytes
    # are in a ``skipped`` one), so it may be record data that looks like a header.
    end_ts_ns: int | None = None
    candidate: bool = False


def _looks_like_tls(data: bytes) -> bool:
    """A TLS record header at a stream start: handshake (22), version 3.0-3.4 (SSL 3 .. TLS 1.3's legacy field).

    A Kafka frame can never start so: its size would be at least 0x16030000 (369 MB),
    far above any frame limit."""
    return len(data) >= 3 and data[0] == 0x16 and data[1] == 0x03 and data[2] <= 0x04


# A client id is printable text in every client we know of.
_NOT_PRINTABLE: Final = re.compile(rb"[\x00-\x1f\x7f]")


def plausible_request_start(buf: bytes | bytearray, i: int, max_frame_bytes: int) -> bool | None:
    """Whether a request frame can start at ``buf[i]``; ``None`` when more bytes are needed.

    Cheap and bounded: the header's fixed fields, and the client id's bytes up to the first
    one that is not printable (found by a regex search, never a copy of the client id)."""
    n = len(buf) - i
    if n < 12:
        return None
    (size,) = _I32.unpack_from(buf, i)
    if size < 8 or size > max_frame_bytes:
        return False
    api_key, version, corr = _I16I16I32.unpack_from(buf, i + 4)
    api = API_BY_KEY.get(api_key)
    if api is None or version not in api.request.valid_versions or corr < 0:
        return False
    if request_header_version(api_key, version) == 0:
        return True
    if size < 10:
        return False
    if n < 14:
        return None
    (cid_len,) = _I16.unpack_from(buf, i + 12)
    if cid_len < -1 or cid_len > size - 10:
        return False
    if cid_len > 0 and _NOT_PRINTABLE.search(buf, i + 14, min(len(buf), i + 14 + cid_len)):
        return False
    return True


def _byte_class(values: Iterable[int]) -> bytes:
    return b"[" + b"".join(re.escape(bytes([v])) for v in sorted(set(values))) + b"]"


def request_prefilter(max_frame_bytes: int) -> re.Pattern[bytes]:
    """Offsets where a request header may start, found in C: a size of at least 8 whose top
    byte fits ``max_frame_bytes``, a known API key and version (both below 256), a
    correlation id that is not negative. ``plausible_request_start`` decides at each match
    (runs of zeros, common in record data, never match)."""
    keys = _byte_class(k for k in API_BY_KEY if k < 256)
    versions = _byte_class(v for a in API_BY_KEY.values() for v in a.request.valid_versions
                           if v < 256)
    return re.compile(b"(?=" + _size_at_least(8, max_frame_bytes) + rb"\x00" + keys + rb"\x00"
                      + versions + rb"[\x00-\x7f])", re.DOTALL)


def response_prefilter(max_frame_bytes: int) -> re.Pattern[bytes]:
    """Offsets where a response may start: a size of 4..``max_frame_bytes`` (by its bytes)
    and a correlation id that is not negative; whether that id is awaited is decided after."""
    return re.compile(b"(?=" + _size_at_least(4, max_frame_bytes) + rb"[\x00-\x7f])", re.DOTALL)


def _size_at_least(least: int, max_frame_bytes: int) -> bytes:
    """A regex for a big-endian int32 of ``least`` (< 256) up to about ``max_frame_bytes``
    (the top byte is checked; the exact bound is checked after)."""
    top = re.escape(bytes([min(0x7F, max_frame_bytes >> 24)]))
    low = re.escape(bytes([least]))
    alts = [rb"\x00\x00\x00[" + low + rb"-\xff]", rb"\x00\x00[\x01-\xff].", rb"\x00[\x01-\xff].."]
    if max_frame_bytes >> 24:
        alts.append(rb"[\x01-" + top + rb"]...")
    return b"(?:" + b"|".join(alts) + b")"


#: Full decodes tried while resynchronising, before the direction is given up as undecodable.
MAX_RESYNC_ATTEMPTS: Final = 16
#: The bytes those decodes read may not exceed this many times the bytes scanned since the
#: framing was lost, plus ``_RESYNC_DECODE_SLACK``: resynchronising stays O(bytes).
RESYNC_DECODE_FACTOR: Final = 2
_RESYNC_DECODE_SLACK: Final = 64 * 1024


class FrameSplitter:
    """Cuts one direction's byte stream into frames; resynchronises when lost.

    Resynchronising is linear in the bytes scanned: a regex finds the offsets where a
    header may start (``prefilter``), ``candidate`` judges each in O(1), and a candidate is
    fully decoded (``verify``) once, when its whole frame is here. At most
    ``MAX_RESYNC_ATTEMPTS`` decodes, reading at most ``RESYNC_DECODE_FACTOR`` times the
    bytes scanned, are spent per resynchronisation; past that the direction is *skipped as
    undecodable*: one ``undecodable`` notice, its bytes dropped and counted, and a
    ``skipped`` notice with the total when the stream ends. If an older candidate is still
    incomplete when the budget runs out, it alone gets one last decode once whole.
    """

    __slots__ = ("conn", "direction", "max_frame_bytes", "_buf", "_buf_offset", "synced",
                 "_first_ts", "_resynced_next", "_candidate", "_prefilter", "_verify",
                 "max_resync_frame_bytes", "_scan", "_cands", "_skipped", "_skipped_at", "tls",
                 "undecodable", "_dropped", "_lost_at", "_attempts", "_attempt_bytes", "_chunks",
                 "_last_chance", "_watches")

    def __init__(self, conn: ConnectionId, direction: Direction, *, synced: bool,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 candidate: Callable[[bytes | bytearray, int], bool | None] | None = None,
                 verify: Callable[[bytes], bool] | None = None,
                 max_resync_frame_bytes: int = DEFAULT_MAX_RESYNC_FRAME_BYTES,
                 prefilter: re.Pattern[bytes] | None = None) -> None:
        self.conn = conn
        self.direction = direction
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._buf_offset = 0        # stream offset of _buf[0]
        self.synced = synced
        self._first_ts: int | None = None
        self._resynced_next = False
        if candidate is None:
            if direction != "request":
                raise ValueError("a response splitter needs a candidate test")
            candidate = lambda b, i: plausible_request_start(b, i, max_frame_bytes)  # noqa: E731
            if prefilter is None:
                prefilter = _cached_request_prefilter(max_frame_bytes)
        self._candidate = candidate
        # Every offset is a possible start without a prefilter (a custom candidate test).
        self._prefilter = prefilter or _ANY_OFFSET
        # A header that looks right can sit inside record data; with ``verify``
        # a candidate is only taken once its whole frame decodes. Waiting for
        # the whole frame is what bounds the buffer by max_resync_frame_bytes.
        self._verify = verify
        self.max_resync_frame_bytes = max_resync_frame_bytes
        self._scan = 0                              # index in _buf of the next offset to examine
        self._cands: list[tuple[int, int]] = []     # (index in _buf, size): held candidates
        self._skipped = 0                           # bytes discarded by the current resync
        self._skipped_at = 0
        self.tls = False                            # the stream is TLS: its bytes are dropped
        self.undecodable = False                    # given up: its bytes are dropped
        self._dropped = 0
        self._lost_at = -1 if not synced else 0     # stream offset where the framing was lost
        self._attempts = 0                          # full decodes spent on this resync
        self._attempt_bytes = 0                     # and the bytes they read
        # The budget ran out while an older candidate was still incomplete: that one alone is
        # kept and decoded when whole (see _try_candidates).
        self._last_chance = False
        # (stream offset, sequence number, carrier packet) of each chunk in _buf, in order;
        # the first one holds _buf[0]. Gives frames their ``seq`` and ``first_packet``.
        self._chunks: list[tuple[int, int, int]] = []
        # Requests cut by a gap whose header was captured, until the stream passes their last
        # byte: (end offset, offset, head, seen while resynchronising), sorted by end offset.
        self._watches: list[tuple[int, int, bytes, bool]] = []

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def unframed_packet(self) -> int | None:
        """The earliest capture packet that carried bytes held here, not yet framed or
        skipped (a partial frame, or bytes still scanned for a frame start)."""
        return min(c[2] for c in self._chunks) if self._buf else None

    def _origin(self, offset: int) -> tuple[int, int]:
        """(sequence number, carrier packet) of the buffered byte at stream ``offset``."""
        chunks = self._chunks
        i = bisect_right(chunks, offset, key=_chunk_offset) - 1
        at, seq, carrier = chunks[i]
        return (seq + offset - at) % _MOD, carrier

    def feed(self, chunk: StreamData) -> list[Frame | StreamNotice]:
        out: list[Frame | StreamNotice] = []
        if self._watches:
            self._passed(chunk.offset + len(chunk.data), chunk.ts_ns, out)
        if self.tls:
            return out
        if self.undecodable:
            self._dropped += len(chunk.data)
            return out
        if chunk.offset == 0 and not self._buf and _looks_like_tls(chunk.data):
            # A TLS handshake record at the stream start: encrypted Kafka (SSL / SASL_SSL
            # listener). Say so once and drop the stream, instead of "decoding" ciphertext.
            self.tls = True
            out.append(StreamNotice(
                self.conn, self.direction, 0, chunk.ts_ns, "tls",
                "TLS on a Kafka port: this connection is encrypted and cannot be decoded "
                "(capture between the TLS terminator and the broker, or put kctl inspect in front)"))
            return out
        if not self._buf:
            self._buf_offset = chunk.offset
            self._first_ts = chunk.ts_ns
            if self._lost_at < 0:
                self._lost_at = chunk.offset
        elif self._first_ts is None:
            self._first_ts = chunk.ts_ns
        self._chunks.append((chunk.offset, chunk.seq, chunk.carrier))
        self._buf += chunk.data
        self._run(chunk.ts_ns, out, chunk.packet)
        return out

    def gap(self, gap: StreamGap) -> list[Frame | StreamNotice]:
        out: list[Frame | StreamNotice] = []
        end = gap.offset + gap.length
        end_ts = gap.ts_ns if gap.captured else None
        if self.tls or self.undecodable:
            if self._watches:
                self._passed(end, end_ts, out)
            return out
        out.append(StreamNotice(self.conn, self.direction, gap.offset, gap.ts_ns, "gap",
                                f"{gap.length} bytes missing ({gap.reason})", gap.length))
        if self._buf and self.synced:
            head = bytes(self._buf[:_HEAD_BYTES])
            out.append(StreamNotice(self.conn, self.direction, self._buf_offset, gap.ts_ns,
                                    "incomplete", f"frame cut by a gap after {len(self._buf)} bytes",
                                    len(self._buf), head=head))
            self._watch(self._buf_offset, head, False)
        elif self._buf and not self.synced:
            # Bytes held while resynchronising (an open candidate) are given up too; a
            # request candidate's header is still told (``request_end``), as tshark pairs a
            # response with a request whose header it read.
            for ci, size in self._cands:
                if ci + 4 + size > len(self._buf):     # cut by this gap (a whole one was tried)
                    self._watch(self._buf_offset + ci, bytes(self._buf[ci:ci + _HEAD_BYTES]), True)
            if not self._skipped:
                self._skipped_at = self._buf_offset
            self._skipped += len(self._buf)
        self._flush_skipped(gap.ts_ns, out)
        if self._watches:
            self._passed(end, end_ts, out)
        self._buf.clear()
        self._chunks.clear()
        self._buf_offset = gap.offset + gap.length
        self._first_ts = None
        self._lose_framing(self._buf_offset)
        return out

    def finish(self, ts_ns: int) -> list[StreamNotice]:
        out: list[StreamNotice] = []
        self._watches.clear()       # the connection ends: no answer can follow
        if self.undecodable:
            if self._dropped:
                out.append(StreamNotice(self.conn, self.direction, self._buf_offset, ts_ns,
                                        "skipped", f"{self._dropped} bytes not decoded (stream "
                                        "skipped as undecodable)", self._dropped))
                self._dropped = 0
            return out
        self._flush_skipped(ts_ns, out)
        if not self._buf:
            return out
        kind = "incomplete" if self.synced else "skipped"
        msg = (f"capture ends inside a frame ({len(self._buf)} bytes of it present)" if self.synced
               else f"{len(self._buf)} trailing bytes where no frame start was found")
        n = len(self._buf)
        first_packet = self._origin(self._buf_offset)[1] if self._chunks else 0
        head = bytes(self._buf[:_HEAD_BYTES]) if self.synced else b""
        self._buf.clear()
        self._chunks.clear()
        out.append(StreamNotice(self.conn, self.direction, self._buf_offset, ts_ns, kind, msg, n,
                                first_packet=first_packet, head=head))
        return out

    def _watch(self, at: int, head: bytes, candidate: bool) -> None:
        """Waits for the stream to pass the last byte of the request at stream offset ``at``
        that a gap cut (requests only: the time a response's latency runs from)."""
        if self.direction != "request" or len(head) < _HEAD_BYTES:
            return
        (size,) = _I32.unpack_from(head, 0)
        insort(self._watches, (at + 4 + size, at, head, candidate))
        if len(self._watches) > _MAX_CANDIDATES:
            self._watches.pop()     # the farthest end: record data that looked like a header

    def _passed(self, end: int, ts_ns: int | None, out: list) -> None:
        """The stream's bytes before offset ``end`` are delivered, the last of them by a
        segment of time ``ts_ns`` (None: not captured): the requests they end are told."""
        watches = self._watches
        while watches and watches[0][0] <= end:
            _end, at, head, candidate = watches.pop(0)
            out.append(StreamNotice(self.conn, self.direction, at,
                                    ts_ns if ts_ns is not None else 0, "request_end",
                                    "the stream passed a cut request's last byte", head=head,
                                    end_ts_ns=ts_ns, candidate=candidate))

    def _lose_framing(self, at: int) -> None:
        """Start a resynchronisation at stream offset ``at``, with a fresh work budget."""
        self.synced = False
        self._scan = 0
        self._cands = []
        self._lost_at = at
        self._attempts = 0
        self._attempt_bytes = 0
        self._last_chance = False

    def _run(self, ts_ns: int, out: list[Frame | StreamNotice], packet: int = 0) -> None:
        buf = self._buf
        pos = 0
        while True:
            if not self.synced:
                pos = self._resync(pos, ts_ns, out)
                if not self.synced:
                    break
            if len(buf) - pos < 4:
                break
            (size,) = _I32.unpack_from(buf, pos)
            if size < 0 or size > self.max_frame_bytes:
                out.append(StreamNotice(self.conn, self.direction, self._buf_offset + pos, ts_ns,
                                        "framing", f"frame size {size} outside 0..{self.max_frame_bytes}; "
                                        "resynchronising"))
                self._lose_framing(self._buf_offset + pos)
                pos += 1
                self._scan = pos
                continue
            end = pos + 4 + size
            if len(buf) < end:
                break
            seq, first_packet = self._origin(self._buf_offset + pos)
            with memoryview(buf) as view:   # one copy of the frame, not a slice and a copy
                data = bytes(view[pos + 4:end])
            out.append(Frame(self.conn, self.direction, self._buf_offset + pos, data,
                             ts_ns, self._first_ts if self._first_ts is not None else ts_ns,
                             self._resynced_next, packet, seq, first_packet))
            self._resynced_next = False
            self._first_ts = ts_ns
            pos = end
        if self.undecodable:
            return
        if pos:
            del buf[:pos]
            self._buf_offset += pos
            if not self.synced:
                self._scan = max(0, self._scan - pos)
                self._cands = [(ci - pos, size) for ci, size in self._cands]
            if buf:
                chunks = self._chunks
                del chunks[:bisect_right(chunks, self._buf_offset, key=_chunk_offset) - 1]
        if not buf:
            self._first_ts = None
            self._chunks.clear()

    def _resync(self, pos: int, ts_ns: int, out: list[Frame | StreamNotice]) -> int:
        """Scans ``_buf`` from ``pos``; returns the index from which bytes must be kept
        (the frame start once synchronised, else the earliest open candidate)."""
        buf = self._buf
        start = pos
        n = len(buf)
        i = max(pos, self._scan)
        cands = self._cands
        found: int | None = None
        # Every offset below ``i`` has been judged; the regex skips, in C, the offsets
        # that cannot start a frame. A match too close to the end to judge waits for bytes.
        scanned_to = max(i, n - 11)
        for m in self._prefilter.finditer(buf, i):
            j = m.start()
            scanned_to = max(scanned_to, j + 1)
            verdict = self._candidate(buf, j)
            if verdict is None:
                scanned_to = j      # need more bytes to judge this offset
                break
            if verdict:
                if self._verify is None:
                    found = j
                    scanned_to = j
                    break
                (size,) = _I32.unpack_from(buf, j)
                if size <= self.max_resync_frame_bytes and not self._last_chance:
                    cands.append((j, size))
        i = self._scan = max(i, scanned_to) if found is None else scanned_to
        if found is None and cands:
            found = self._try_candidates(n)
            if self.undecodable:
                self._give_up(start, ts_ns, out)
                return n
        if found is not None:
            self.synced = True
            self._resynced_next = True
            cands.clear()
            self._scan = 0
            self._attempts = 0
            self._attempt_bytes = 0
            self._last_chance = False
            keep = found
        else:
            keep = min(cands[0][0] if cands else i, i)
        if keep > start:
            if not self._skipped:
                self._skipped_at = self._buf_offset + start
            self._skipped += keep - start
        if found is not None:
            self._flush_skipped(ts_ns, out)
        return keep

    def _try_candidates(self, n: int) -> int | None:
        """Decodes held candidates whose whole frame is here, oldest first, within the
        resync budget; returns the index of the first that decodes. Sets ``undecodable``
        when the budget is spent first."""
        assert self._verify is not None
        cands = self._cands
        scanned = self._buf_offset + n - self._lost_at
        still = []
        found = None
        for ci, size in cands:
            if found is not None:
                break
            if ci + 4 + size > n:
                still.append((ci, size))
                continue
            if self._last_chance:
                if self._verify(bytes(self._buf[ci + 4:ci + 4 + size])):
                    found = ci
                    break
                self.undecodable = True
                return None
            if (self._attempts >= MAX_RESYNC_ATTEMPTS or self._attempt_bytes + size
                    > RESYNC_DECODE_FACTOR * scanned + _RESYNC_DECODE_SLACK):
                if still:
                    # An older candidate is still incomplete (a large frame whose true start
                    # was found early, while small false ones in its data completed first):
                    # it alone is kept and decoded once whole; one more decode of at most
                    # max_resync_frame_bytes, so the work stays bounded.
                    self._last_chance = True
                    cands[:] = still[:1]
                    return None
                self.undecodable = True
                return None
            self._attempts += 1
            self._attempt_bytes += size
            if self._verify(bytes(self._buf[ci + 4:ci + 4 + size])):
                found = ci
        if found is None:
            # Bound the held bytes: forget the oldest open candidates first.
            while still and (len(still) > _MAX_CANDIDATES
                             or n - still[0][0] > self.max_resync_frame_bytes + 4):
                still.pop(0)
            cands[:] = still
        return found

    def _give_up(self, start: int, ts_ns: int, out: list[Frame | StreamNotice]) -> None:
        at = self._buf_offset + start
        self._flush_skipped(ts_ns, out)
        out.append(StreamNotice(
            self.conn, self.direction, at, ts_ns, "undecodable",
            f"stream skipped as undecodable: {self._attempts} frames that started plausibly "
            f"did not decode ({self._attempt_bytes} bytes tried) since the framing was lost at "
            f"stream offset {self._lost_at}; the rest of this direction is not decoded"))
        self._dropped += len(self._buf) - start
        self._buf_offset += len(self._buf)
        self._buf.clear()
        self._chunks.clear()
        self._cands = []
        self._scan = 0

    def _flush_skipped(self, ts_ns: int, out: list) -> None:
        if self._skipped:
            out.append(StreamNotice(self.conn, self.direction, self._skipped_at, ts_ns, "skipped",
                                    f"skipped {self._skipped} bytes looking for a frame start",
                                    self._skipped))
            self._skipped = 0


def _chunk_offset(chunk: tuple[int, int, int]) -> int:
    return chunk[0]


_ANY_OFFSET: Final = re.compile(b"", re.DOTALL)
_REQUEST_PREFILTERS: dict[int, re.Pattern[bytes]] = {}


def _cached_request_prefilter(max_frame_bytes: int) -> re.Pattern[bytes]:
    p = _REQUEST_PREFILTERS.get(max_frame_bytes)
    if p is None:
        p = _REQUEST_PREFILTERS[max_frame_bytes] = request_prefilter(max_frame_bytes)
    return p


# ---------------------------------------------------------------------------
# connections


@dataclass(slots=True)
class _Connection:
    conn: ConnectionId
    streams: dict[str, HalfStream]
    splitters: dict[str, FrameSplitter] = field(default_factory=dict)
    last_ts: int = 0


ResponseExpected = Callable[[ConnectionId, int], bool]


class Reassembler:
    """Turns TCP segments into Kafka frames per connection and direction.

    ``broker_ports``: a segment to one of them is a request, from one a
    response; segments touching none are ignored (``ignored_segments``).
    ``expects_response(conn, correlation_id)`` tells the response splitter
    which correlation ids may start a frame when resynchronising.
    """

    def __init__(self, broker_ports: Collection[int], *,
                 expects_response: ResponseExpected | None = None,
                 verify_request: Callable[[bytes], bool] | None = None,
                 verify_response: Callable[[ConnectionId, bytes], bool] | None = None,
                 max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.broker_ports = frozenset(broker_ports)
        self.expects_response = expects_response or (lambda conn, corr: False)
        self.verify_request = verify_request
        self.verify_response = verify_response
        self.max_pending_bytes = max_pending_bytes
        self.max_frame_bytes = max_frame_bytes
        self._conns: dict[ConnectionId, _Connection] = {}
        self._response_prefilter = response_prefilter(max_frame_bytes)
        self.ignored_segments = 0
        self.last_ts_ns = 0

    def orient(self, seg: TcpSegment) -> tuple[ConnectionId, Direction] | None:
        """The connection and direction ``seg`` belongs to (None: no broker port), as
        ``on_segment`` would decide it now; changes nothing."""
        return self._orient(seg)

    def unframed_packet(self, conn: ConnectionId) -> int | None:
        """The earliest capture packet that carried bytes of ``conn`` that no frame (or
        skip) has taken yet: held out of order, in a partial frame, or still scanned for a
        frame start. None when every byte seen is framed (or the connection is closed)."""
        c = self._conns.get(conn)
        if c is None:
            return None
        found = [p for p in (c.streams["request"].held_packet(), c.streams["response"].held_packet(),
                             *(sp.unframed_packet() for sp in c.splitters.values()))
                 if p is not None]
        return min(found, default=None)

    def held_segments(self, conn: ConnectionId, direction: Direction) -> int:
        """Out-of-order segments held for one direction of ``conn`` (waiting for a hole)."""
        c = self._conns.get(conn)
        return 0 if c is None else c.streams[direction].held_segments

    def skip_hole(self, conn: ConnectionId, direction: Direction,
                  reason: str) -> list[Frame | StreamNotice]:
        """``HalfStream.skip_hole`` for one direction of ``conn``, framed on from there."""
        c = self._conns.get(conn)
        if c is None:
            return []
        events = c.streams[direction].skip_hole(reason)
        return self._frames(c, direction, events) if events else []

    def unframed_packets(self) -> dict[ConnectionId, int]:
        """``unframed_packet`` of every connection that has such bytes."""
        out = {}
        for conn in self._conns:
            p = self.unframed_packet(conn)
            if p is not None:
                out[conn] = p
        return out

    def _orient(self, seg: TcpSegment) -> tuple[ConnectionId, Direction] | None:
        src = Endpoint(seg.src, seg.src_port)
        dst = Endpoint(seg.dst, seg.dst_port)
        to_broker = seg.dst_port in self.broker_ports
        from_broker = seg.src_port in self.broker_ports
        if to_broker and from_broker:
            # Both ports qualify: a known connection decides, else the SYN, else the lower port.
            if ConnectionId(dst, src) in self._conns:
                to_broker = False
            elif ConnectionId(src, dst) in self._conns:
                from_broker = False
            elif seg.syn:
                to_broker = not (seg.flags & TCP_ACK)
                from_broker = not to_broker
            else:
                to_broker = seg.dst_port <= seg.src_port
                from_broker = not to_broker
        if to_broker:
            return ConnectionId(src, dst), "request"
        if from_broker:
            return ConnectionId(dst, src), "response"
        return None

    def _response_candidate(self, conn: ConnectionId) -> Callable[[bytes | bytearray, int], bool | None]:
        maxf = self.max_frame_bytes

        def candidate(buf: bytes | bytearray, i: int) -> bool | None:
            if len(buf) - i < 8:
                return None
            size, corr = struct.unpack_from(">ii", buf, i)
            if size < 4 or size > maxf:
                return False
            return self.expects_response(conn, corr)
        return candidate

    def on_segment(self, seg: TcpSegment) -> list[Frame | StreamNotice]:
        self.last_ts_ns = max(self.last_ts_ns, seg.ts_ns)
        oriented = self._orient(seg)
        if oriented is None:
            self.ignored_segments += 1
            return []
        conn_id, direction = oriented
        out: list[Frame | StreamNotice] = []
        c = self._conns.get(conn_id)
        if (c is not None and seg.syn and not (seg.flags & TCP_ACK) and direction == "request"
                and (c.streams["request"].offset or c.streams["request"].closed)):
            # A new connection on the same four-tuple: close the old one.
            out.extend(self._close(c, seg.ts_ns))
            c = None
        if c is None:
            c = _Connection(conn_id, {"request": HalfStream(self.max_pending_bytes),
                                      "response": HalfStream(self.max_pending_bytes)})
            self._conns[conn_id] = c
        c.last_ts = seg.ts_ns
        hs = c.streams[direction]
        before = hs.retransmitted_bytes
        events = hs.on_segment(seg)
        if hs.retransmitted_bytes > before:
            out.append(StreamNotice(conn_id, direction, hs.offset, seg.ts_ns, "retransmission",
                                    f"{hs.retransmitted_bytes - before} bytes seen again",
                                    hs.retransmitted_bytes - before))
        if events:
            out.extend(self._frames(c, direction, events))
        return out

    def _splitter(self, c: _Connection, direction: Direction) -> FrameSplitter:
        sp = c.splitters.get(direction)
        if sp is None:
            synced = c.streams[direction].saw_syn
            if direction == "request":
                cand, verify = None, self.verify_request
            else:
                cand = self._response_candidate(c.conn)
                vr = self.verify_response
                verify = None if vr is None else (lambda data, conn=c.conn: vr(conn, data))
            sp = FrameSplitter(c.conn, direction, synced=synced, max_frame_bytes=self.max_frame_bytes,
                               candidate=cand, verify=verify,
                               prefilter=self._response_prefilter if direction == "response" else None)
            c.splitters[direction] = sp
        return sp

    def _frames(self, c: _Connection, direction: Direction,
                events: Iterable[StreamData | StreamGap]) -> list[Frame | StreamNotice]:
        sp = self._splitter(c, direction)
        out: list[Frame | StreamNotice] = []
        for ev in events:
            if isinstance(ev, StreamData):
                out.extend(sp.feed(ev))
            else:
                out.extend(sp.gap(ev))
        return out

    def _close(self, c: _Connection, ts_ns: int) -> list[Frame | StreamNotice]:
        out: list[Frame | StreamNotice] = []
        for direction in ("request", "response"):
            events = c.streams[direction].finish(ts_ns)
            if events:
                out.extend(self._frames(c, direction, events))  # type: ignore[arg-type]
            sp = c.splitters.get(direction)
            if sp is not None:
                out.extend(sp.finish(ts_ns))
        self._conns.pop(c.conn, None)
        return out

    def finish(self) -> list[Frame | StreamNotice]:
        """End of capture: flush every connection (held segments become gaps)."""
        out: list[Frame | StreamNotice] = []
        for c in list(self._conns.values()):
            out.extend(self._close(c, self.last_ts_ns))
        return out
