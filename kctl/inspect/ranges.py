"""One capture decoded by many readers: byte ranges cut at packet boundaries, every frame
decoded exactly once, and a check that the readers agreed with a single sequential decode.

Why: a load-test capture is a few long TCP connections, so splitting work by connection
leaves most cores idle. Here the capture is cut into ranges of packets whatever their
connections, and each range is read by its own reader (a Spark task in ``kctl analyze``).

How this works
--------------
1. ``index_capture`` walks the capture's record headers once and cuts it at packet
   boundaries every ``range_bytes``; each cut is a ``ReaderState`` (pcap.py) from which a
   reader reads on in another process. A range also gets a *window* start,
   ``lookback_bytes`` before it (at a packet boundary).

2. ``RangeDecoder`` reads its range's window: the packets before the range (the
   lookback), the range, and past its end as far as needed. It runs the same
   ``Reassembler``/``CaptureDecoder`` as ``kctl decode``, starting mid-stream: framing
   is found by resynchronising on plausible headers (reassembly.py), which the lookback
   gives room to happen before the range begins, and requests seen in the lookback are
   *observed* (``CaptureDecoder.observe``) so the responses that follow decode and pair.

3. **Ownership rule.** A frame belongs to the range that holds the capture packet that
   first carried the frame's first byte (the first byte of its size prefix; the *first*
   copy in capture order, so a retransmission never moves a frame). Reassembly tells it
   for every frame (``Frame.first_packet``). A reader decodes the frames it owns and only
   observes the others. So a frame whose start lies before the range (the range began
   inside it) is the previous range's, and a frame that began inside the range is
   finished by reading past the range's end: the reader stops once no byte carried by a
   packet of its range is still unframed (held out of order, in a partial frame, or
   being scanned), or at the end of the file. Each frame thus has exactly one owner.

4. Pairing. A request and its response owned by one reader are paired by it (a
   ``FramePair``). Otherwise each is a half (``RequestHalf``/``ResponseHalf``), paired
   later by connection and correlation id (a Spark join in kctl/spark/analyze.py): a
   response pairs with the latest request of its connection and correlation id that came
   before it, and a request with at most one response, as ``CaptureDecoder`` pairs. A
   response whose request the reader never saw keeps its raw body (``unmatched``) and is
   decoded once its request is known.

5. The check (``check_coverage``). A reader that starts mid-stream may frame wrongly
   (a false header in record data) or too late (its lookback was too short for a
   response stream to resynchronise). Every reader reports, per stream direction, the
   byte ranges its range's packets carried (*claims*), the frames it owned, an
   incomplete tail, its initial skip, and any *break* (gap, lost framing, undecodable,
   TLS). The readers that saw a stream's first packet are *exact*: their state is the
   one ``kctl decode`` has. A stream passes when nothing broke, the owned frames (with
   the exact reader's initial skip and the tail) never overlap, and they cover every
   claimed byte: then, starting from the exact reader's first frame, they are the
   sequential decode's frames, one by one. A connection that does not pass is decoded
   again from the start of the file by one reader (``RangeDecoder`` with
   ``connections``), as ``kctl decode`` would; its rows replace the others'.

6. Notices (the damage ``kctl decode`` reports: gaps, frames cut off, bytes skipped...),
   each counted once. A reader that began mid-stream has notices of its own (its resync,
   holes before its window), so its stream notices are not decode's. A stream that passes
   the check has exactly two kinds in decode, both known to the check: the bytes skipped
   before the first frame when the capture began inside the stream (the exact readers'
   initial skip) and each frame the capture or the connection's end cuts off (a tail: the
   tail of the reader owning the packet of its first byte, as a frame's owner is chosen;
   every reader reading to the end sees it). Any other notice fails the check (a gap is a
   hole in the claimed bytes or claimed bytes no frame covers; lost framing, undecodable
   and TLS are breaks), so its connection is repaired, and the repair's reader, whose
   state is decode's, gives that connection's notices (``RangeDecoder.notices``). A
   malformed packet is the notice of the range holding it; a truncated file is the index
   pass's (``CaptureIndex.truncated``).

Limits kept on purpose: a stream longer than 2 GiB between two cuts, or retransmitted
bytes that differ from their first copy, could fool the check; the per-connection cap
on outstanding requests (``MAX_OUTSTANDING_PER_CONNECTION``) is applied per reader, and
so is the run's decompression budget (grown by the bytes each reader reads), so a
capture built to exhaust decode's budget can stop at other record sets here.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import OrderedDict, defaultdict
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO, Final

from kctl.errors import DecodeError
from kctl.inspect.pcap import CaptureReader, ReaderState, TcpSegment, tcp_segment
from kctl.inspect.reassembly import ConnectionId, Direction, Frame, StreamNotice
from kctl.inspect.session import (
    MAX_OUTSTANDING_PER_CONNECTION, CaptureDecoder, CaptureNotice, DecodedFrame,
)

__all__ = [
    "CaptureRange", "CaptureIndex", "index_capture", "RangeDecoder", "FramePair", "RequestHalf",
    "ResponseHalf", "StreamCoverage", "CoverageVerdict", "check_coverage", "connection_key",
    "decode_response_half",
    "DEFAULT_LOOKBACK_BYTES",
]

#: Capture bytes read before a range so that its streams are framed when it begins.
DEFAULT_LOOKBACK_BYTES: Final = 8 << 20
#: Segments of a stream a reader waits for a hole to fill before it skips it.
HOLE_PATIENCE: Final = 4
_MOD: Final = 1 << 32
_HALF: Final = 1 << 31
#: Notices after which a reader's framing may differ from a sequential decode's. Gaps are
#: not among them: a reader sees holes where packets before its window carried the bytes;
#: the check finds a real gap as a hole in what all readers' packets carried.
_BREAKS: Final = frozenset({"framing", "undecodable", "tls"})


def _sdiff(a: int, b: int) -> int:
    d = (a - b) % _MOD
    return d - _MOD if d >= _HALF else d


def connection_key(conn: ConnectionId) -> str:
    """``str(conn)``: how rows, halves and repairs name a connection."""
    return str(conn)


# -- the index -----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class CaptureRange:
    """Packets ``start`` .. ``end`` (excluded; None: to the end) of one capture, read from
    ``window`` on. Picklable: it is what a Spark task gets."""

    file: str
    index: int
    window: ReaderState
    start: ReaderState
    end: ReaderState | None

    @property
    def first_packet(self) -> int:
        return self.start.packets + 1

    @property
    def next_packet(self) -> int | None:
        return None if self.end is None else self.end.packets + 1

    def owns(self, packet: int) -> bool:
        nxt = self.next_packet
        return packet >= self.first_packet and (nxt is None or packet < nxt)


@dataclass(frozen=True, slots=True)
class CaptureIndex:
    file: str
    ranges: tuple[CaptureRange, ...]
    packets: int
    damage: str | None = None       # the index pass stopped at a broken record (it says where)
    truncated: str | None = None    # the file ends inside a record (decode's 'truncated')


def index_capture(stream: BinaryIO, *, file: str, range_bytes: int,
                  lookback_bytes: int = DEFAULT_LOOKBACK_BYTES) -> CaptureIndex:
    """Cuts a capture into ranges of about ``range_bytes`` at packet boundaries. Reads the
    record headers once (and the packets' bytes, in bounded chunks: a stream from any file
    system will do). Raises ``DecodeError`` when the file is no capture at all."""
    reader = CaptureReader(stream, name=file)
    range_bytes = max(1, range_bytes)
    grain = max(1, min(range_bytes, max(lookback_bytes, 1)) // 4)
    marks = [reader.state()]        # boundaries at least ``grain`` apart, for the windows
    cuts = [reader.state()]
    damage = None
    try:
        for _ in reader:
            st = reader.state()
            if st.offset - marks[-1].offset >= grain:
                marks.append(st)
            if st.offset - cuts[-1].offset >= range_bytes:
                cuts.append(st)
    except DecodeError as e:
        damage = f"{e.reason} at file offset {e.offset}"
    end = reader.state() if damage is None else None
    truncated = str(reader.truncated) if damage is None and reader.truncated is not None else None
    if len(cuts) > 1 and end is not None and cuts[-1].offset >= end.offset:
        cuts.pop()                  # nothing after the last cut
    ranges = []
    for i, start in enumerate(cuts):
        window = marks[0]
        for m in marks:
            if m.offset > start.offset - lookback_bytes:
                break
            window = m
        if window.offset > start.offset:
            window = start
        ranges.append(CaptureRange(file, i, window, start, cuts[i + 1] if i + 1 < len(cuts) else None))
    return CaptureIndex(file, tuple(ranges), reader.state().packets, damage, truncated)


# -- what a reader yields ------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class FramePair:
    """A request and its response, or a frame alone that will never get its other half
    (an unanswered request or an unmatched response of a whole-file reader).
    ``*_seq``: each frame's first byte's sequence number. ``*_unmarked``: this reader took
    the frame's 'resynced' mark off (a reader that is not reading the whole file cannot
    tell its own resynchronisations from decode's); the check gives it back where decode
    has it."""

    request: DecodedFrame | None
    response: DecodedFrame | None
    request_seq: int | None = None
    response_seq: int | None = None
    request_unmarked: bool = False
    response_unmarked: bool = False


@dataclass(frozen=True, slots=True)
class RequestHalf:
    """An owned request whose response this reader did not own: paired later."""

    request: DecodedFrame
    seq: int | None = None
    unmarked: bool = False


@dataclass(frozen=True, slots=True)
class ResponseHalf:
    """An owned response whose request this reader did not own. ``response`` is decoded
    when the reader observed the request; else it is ``unmatched`` with its raw body."""

    response: DecodedFrame
    seq: int | None = None
    unmarked: bool = False


@dataclass(slots=True)
class StreamCoverage:
    """What one reader saw of one direction of one connection (sequence numbers mod 2**32;
    intervals as (seq, length))."""

    file: str
    connection: str
    direction: Direction
    range_index: int
    first_seen_packet: int
    claims: list[tuple[int, int]] = field(default_factory=list)
    frames: list[tuple[int, int]] = field(default_factory=list)
    initial_skip: tuple[int, int] | None = None     # bytes skipped before the first frame
    tails: list[tuple[int, int]] = field(default_factory=list)  # cut-off frames (incomplete)
    breaks: int = 0
    owned: int = 0                  # frames this reader decoded (its rows' count, about)
    # internal bookkeeping
    base: int | None = None         # sequence number of stream offset 0 in this reader
    framed: bool = False
    started_unsynced: bool = False
    hole_age: int = 0               # segments seen while a hole waits

    def add(self, runs: list[tuple[int, int]], seq: int, length: int) -> None:
        if not length:
            return
        if runs:
            s, n = runs[-1]
            if (s + n) % _MOD == seq:
                runs[-1] = (s, n + length)
                return
        runs.append((seq, length))


class RangeDecoder:
    """Reads one ``CaptureRange`` and yields ``FramePair``/``RequestHalf``/``ResponseHalf``
    items for the frames it owns; ``coverage`` and ``topics`` are complete once the
    iteration ends. With ``connections`` (``connection_key`` strings) only those
    connections are read, every frame is owned, and nothing is a half: a repair.
    ``interfaces``: only packets captured on these pcapng interfaces (a leg of a kctl
    inspect capture, as ``decode_stream`` reads it); ``None``: every packet."""

    def __init__(self, rng: CaptureRange, broker_ports: Collection[int], *,
                 connections: Collection[str] | None = None, decode_records: bool = True,
                 interfaces: Collection[int] | None = None) -> None:
        self.range = rng
        self.interfaces = None if interfaces is None else frozenset(interfaces)
        self.decoder = CaptureDecoder(broker_ports, file=rng.file, decode_records=decode_records)
        self.connections = None if connections is None else frozenset(connections)
        self.coverage: dict[tuple[ConnectionId, Direction], StreamCoverage] = {}
        self.topics: dict[str, tuple[str, int]] = {}  # topic id -> (name, packet), first seen
        self.damage: str | None = None
        # The notices decode gives that this reader owns: a range reader's malformed packets
        # of its range; a repair's every stream notice of its connections (its state is
        # decode's). A range reader's stream notices are not decode's (it began mid-stream):
        # the check derives those of the streams it passes (``CoverageVerdict.notices``).
        self.notices: list[CaptureNotice] = []
        self.packets_read = 0
        self._reqs: dict[ConnectionId, OrderedDict[int, DecodedFrame | None]] = {}
        self._whole = connections is not None
        self._owned: dict[int, tuple[int, bool]] = {}   # id(decoded frame) -> (seq, unmarked)

    def _owns(self, packet: int) -> bool:
        return self._whole or self.range.owns(packet)

    def run(self, stream: BinaryIO) -> Iterator[FramePair | RequestHalf | ResponseHalf]:
        """``stream`` is positioned at ``range.window.offset``."""
        rng = self.range
        reasm = self.decoder.reassembler
        reader = CaptureReader.resume(stream, rng.window, name=rng.file)
        nxt = None if self._whole else rng.next_packet
        first = rng.first_packet
        open_conns: set[ConnectionId] | None = None
        at_eof = True
        try:
            for pkt in reader:
                n = pkt.number
                if nxt is not None and n >= nxt and open_conns is None:
                    open_conns = {c for c, p in reasm.unframed_packets().items() if p < nxt}
                    if not open_conns:
                        at_eof = False
                        break
                self.packets_read += 1
                if self.interfaces is not None and pkt.interface not in self.interfaces:
                    continue
                seg = tcp_segment(pkt)
                if not isinstance(seg, TcpSegment):
                    if seg.malformed and not self._whole and rng.owns(n):
                        self.notices.append(CaptureNotice(rng.file, "malformed",
                                                          f"packet {seg.number}: {seg.reason}",
                                                          seg.offset))
                    continue
                # The run's decompression budget grows with the bytes read, as in decode.
                self.decoder.budget.add_input(len(seg.payload))
                oriented = reasm.orient(seg)
                if oriented is None:
                    reasm.on_segment(seg)
                    continue
                conn, direction = oriented
                if self.connections is not None and connection_key(conn) not in self.connections:
                    continue
                cv = self._coverage(conn, direction, n)
                if cv.base is None:     # stream offset 0, as HalfStream counts it
                    cv.base = (seg.seq + (1 if seg.syn else 0)) % _MOD
                if n >= first and (nxt is None or n < nxt):
                    length = len(seg.payload) + seg.missing
                    cv.add(cv.claims, (seg.seq + (1 if seg.syn else 0)) % _MOD, length)
                yield from self._handle(reasm.on_segment(seg))
                if not self._whole:
                    yield from self._patience(cv, conn, direction)
                if open_conns is not None and conn in open_conns:
                    p = reasm.unframed_packet(conn)
                    if p is None or p >= nxt:
                        open_conns.discard(conn)
                        if not open_conns:
                            at_eof = False
                            break
        except DecodeError as e:
            self.damage = f"{e.reason} at file offset {e.offset}"
        if at_eof:
            if not self._whole:
                # Holes left at the end: skipped with the held segments' own times (see
                # _patience); a real gap is found by the check and repaired.
                for conn, direction in list(self.coverage):
                    while reasm.held_segments(conn, direction):
                        yield from self._handle(reasm.skip_hole(
                            conn, direction, "bytes this reader will not see (before its window)"))
            yield from self._handle(reasm.finish())
        yield from self._leftovers()

    def _patience(self, cv: StreamCoverage, conn: ConnectionId, direction: Direction,
                  ) -> Iterator[FramePair | RequestHalf | ResponseHalf]:
        """A hole in a stream that began mid-way may never fill: the missing bytes came
        before this reader's window (its first segment was a retransmission, or the
        segment that filled a reordering). Past ``HOLE_PATIENCE`` segments it is skipped
        as a gap; if decode had those bytes from this reader's packets, the check repairs."""
        if not self.decoder.reassembler.held_segments(conn, direction):
            cv.hole_age = 0
            return
        cv.hole_age += 1
        if cv.hole_age > HOLE_PATIENCE:
            cv.hole_age = 0
            yield from self._handle(self.decoder.reassembler.skip_hole(
                conn, direction, "bytes this reader will not see (before its window)"))

    def _coverage(self, conn: ConnectionId, direction: Direction, packet: int) -> StreamCoverage:
        cv = self.coverage.get((conn, direction))
        if cv is None:
            cv = self.coverage[(conn, direction)] = StreamCoverage(
                self.range.file, connection_key(conn), direction, self.range.index, packet)
        return cv

    def _handle(self, items: Iterable[Frame | StreamNotice],
                ) -> Iterator[FramePair | RequestHalf | ResponseHalf]:
        after_gap = False
        for it in items:
            if isinstance(it, Frame):
                yield from self._frame(it)
                continue
            if it.kind == "request_end":
                # A cut request's response decodes and is timed, as in decode (marked
                # request_cut). A header seen while resynchronising only after a gap: in
                # decode's stream that gap breaks the check and a whole reader repairs the
                # connection; a range reader's own gaps (before its window) are not decode's.
                if self._whole or not it.candidate:
                    self.decoder.stream_notice(it)
                continue
            notice = self.decoder.stream_notice(it)     # as CaptureDecoder says it
            gap, after_gap = after_gap, it.kind == "gap"
            if self._whole and notice is not None:
                self.notices.append(notice)
            cv = self.coverage.get((it.conn, it.direction))
            if cv is None:
                continue
            if it.kind in _BREAKS:
                cv.breaks += 1
            elif (it.kind == "incomplete" and not gap and cv.base is not None
                  and (not it.first_packet or self._owns(it.first_packet))):
                # The capture (or the connection) ends inside this frame, as decode sees it;
                # a frame cut by a gap is not a tail (the gap is judged by the check). Every
                # reader that reads to the end may see it: it is the tail of the one that
                # owns its first byte's packet, as a frame would be.
                cv.tails.append(((cv.base + it.offset) % _MOD, it.length))

    def _frame(self, fr: Frame) -> Iterator[FramePair | RequestHalf | ResponseHalf]:
        cv = self.coverage[(fr.conn, fr.direction)]
        first_frame = not cv.framed
        if first_frame:
            cv.framed = True
            if fr.resynced:
                cv.started_unsynced = True
                cv.initial_skip = (cv.base, fr.offset)
        reqs = self._reqs.setdefault(fr.conn, OrderedDict())
        if not self._owns(fr.first_packet):
            self.decoder.observe(fr)
            yield from self._requests_seen(fr, reqs, None)
            return
        df = self.decoder.decode(fr)
        cv.add(cv.frames, fr.seq, 4 + len(fr.data))
        cv.owned += 1
        unmarked = False
        if fr.resynced and not self._whole and "resynced" in df.marks:
            # This reader's resync may be its own (it began mid-stream, or packets before its
            # window filled a hole): the check gives the mark back where decode has it.
            df.marks = tuple(m for m in df.marks if m != "resynced")
            unmarked = True
        self._owned[id(df)] = (fr.seq, unmarked)
        if df.api_key == 3 and df.direction == "response" and df.body is not None:
            for t in getattr(df.body, "topics", ()):
                tid = getattr(t, "topic_id", None)
                if t.name and tid is not None and tid.int and str(tid) not in self.topics:
                    self.topics[str(tid)] = (t.name, df.packet)
        yield from self._requests_seen(fr, reqs, df)

    def _requests_seen(self, fr: Frame, reqs: OrderedDict[int, DecodedFrame | None],
                       df: DecodedFrame | None) -> Iterator[FramePair | RequestHalf | ResponseHalf]:
        """Mirrors ``CaptureDecoder``'s outstanding requests: owned ones as frames, observed
        ones as None. ``df`` is the decoded frame when ``fr`` is owned."""
        if fr.direction == "request":
            if len(fr.data) < 8:
                if df is not None:
                    yield self._half(df)
                return
            corr = int.from_bytes(fr.data[4:8], "big", signed=True)
            old = reqs.pop(corr, False)
            if isinstance(old, DecodedFrame):
                yield self._half(old)
            reqs[corr] = df
            while len(reqs) > MAX_OUTSTANDING_PER_CONNECTION:
                _, gone = reqs.popitem(last=False)
                if gone is not None:
                    yield self._half(gone)
            return
        if len(fr.data) < 4:
            if df is not None:
                yield self._half(df)
            return
        corr = int.from_bytes(fr.data[:4], "big", signed=True)
        req = reqs.pop(corr, False)
        if df is None:
            if isinstance(req, DecodedFrame):
                yield self._half(req)       # its response is another reader's
            return
        if isinstance(req, DecodedFrame):
            (qs, qu), (ss, su) = self._owned.pop(id(req)), self._owned.pop(id(df))
            yield FramePair(req, df, qs, ss, qu, su)
        else:
            yield self._half(df)

    def _half(self, df: DecodedFrame) -> FramePair | RequestHalf | ResponseHalf:
        seq, unmarked = self._owned.pop(id(df))
        if self._whole:
            return (FramePair(df, None, seq, None, unmarked) if df.direction == "request"
                    else FramePair(None, df, None, seq, False, unmarked))
        return (RequestHalf(df, seq, unmarked) if df.direction == "request"
                else ResponseHalf(df, seq, unmarked))

    def _leftovers(self) -> Iterator[FramePair | RequestHalf | ResponseHalf]:
        for reqs in self._reqs.values():
            for df in reqs.values():
                if df is not None:
                    yield self._half(df)
        self._reqs.clear()


def decode_response_half(resp: DecodedFrame, api_key: int, api_version: int,
                         request_ts_ns: int) -> DecodedFrame:
    """An ``unmatched`` response half decoded once the join found its request: as
    ``CaptureDecoder`` would have decoded it had it seen the request."""
    from kctl.inspect.session import decode_frame_bytes
    data = (resp.correlation_id or 0).to_bytes(4, "big", signed=True) + (resp.raw_body or b"")
    df = decode_frame_bytes(data, size_prefix=False, api_key=api_key, api_version=api_version)
    df.file, df.ts_ns, df.conn, df.direction = resp.file, resp.ts_ns, resp.conn, resp.direction
    df.offset, df.packet = resp.offset, resp.packet
    df.latency_ns = resp.ts_ns - request_ts_ns
    if "resynced" in resp.marks:
        df.marks += ("resynced",)
    return df


# -- the check -----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class CoverageVerdict:
    """``repair``: (file, connection) to decode again from the file's start.
    ``resynced``: (file, connection, direction, seq) of frames that keep their 'resynced'
    mark (a stream's first frame after the capture began inside it). ``notices``: (file,
    kind) of each notice decode gives the streams that pass: the bytes skipped before the
    first frame of a stream the capture began inside ('skipped', where the 'resynced' mark
    is given back) and each frame the capture or the connection's end cuts off
    ('incomplete', a tail). Any other notice breaks the check (a gap is a hole in the
    claimed bytes or claimed bytes no frame covers; lost framing, undecodable, TLS are
    breaks): its connection is repaired and the repair's reader, whose state is decode's,
    gives its notices."""

    repair: frozenset[tuple[str, str]]
    resynced: frozenset[tuple[str, str, str, int]]
    notices: tuple[tuple[str, str], ...] = ()


def check_coverage(coverages: Iterable[StreamCoverage]) -> CoverageVerdict:
    streams: dict[tuple[str, str, str], list[StreamCoverage]] = defaultdict(list)
    # A reader's state for a connection is decode's only if it saw the connection's first
    # packet, in either direction: a response stream resynchronises on the requests seen.
    seen: dict[tuple[str, str, int], int] = {}
    for cv in coverages:
        streams[(cv.file, cv.connection, cv.direction)].append(cv)
        key = (cv.file, cv.connection, cv.range_index)
        seen[key] = min(seen.get(key, cv.first_seen_packet), cv.first_seen_packet)
    first: dict[tuple[str, str], int] = {}
    for (file, conn, _), p in seen.items():
        first[(file, conn)] = min(first.get((file, conn), p), p)
    repair: set[tuple[str, str]] = set()
    resynced: set[tuple[str, str, str, int]] = set()
    notices: list[tuple[str, str, str]] = []     # (file, connection, kind)
    for (file, conn, direction), covs in streams.items():
        exact = [c for c in covs if seen[(file, conn, c.range_index)] == first[(file, conn)]]
        ok, first_frame = _stream_ok(covs, exact)
        if not ok:
            repair.add((file, conn))
            continue
        if first_frame is not None:
            resynced.add((file, conn, direction, first_frame))
            skip = next(c.initial_skip for c in exact if c.started_unsynced)
            if skip is not None and skip[1]:
                notices.append((file, conn, "skipped"))
        notices += [(file, conn, "incomplete")] * sum(len(c.tails) for c in covs)
    # Only the connections that pass (both directions): a repaired one's are its repair's.
    kept = tuple((file, kind) for file, conn, kind in notices if (file, conn) not in repair)
    return CoverageVerdict(frozenset(repair), frozenset(resynced), kept)


def _stream_ok(covs: list[StreamCoverage], exact: list[StreamCoverage]) -> tuple[bool, int | None]:
    """Whether the readers' frames of one stream are the sequential decode's; and the seq of
    the first frame when that decode resynchronised on it (the capture began mid-stream).
    ``exact``: the readers that saw the connection's first packet."""
    if any(c.breaks for c in covs):
        return False, None
    covs = sorted(covs, key=lambda c: c.range_index)
    skips = {c.initial_skip for c in exact if c.started_unsynced}
    if len(skips) > 1:
        return False, None
    # Unwrap sequence numbers reader by reader (neighbours are < 2 GiB apart).
    ref_seq: int | None = None
    ref_abs = 0
    cover: list[tuple[int, int]] = []       # (start, end): frames, tails, the exact skip
    claims: list[tuple[int, int]] = []
    first: tuple[int, int] | None = None    # (absolute, seq) of the first owned frame
    skip = next(iter(skips)) if skips else None
    base_abs: int | None = None             # the stream's first byte, as decode counts
    for c in covs:
        mine = [(s, n, "frame") for s, n in c.frames] + [(s, n, "tail") for s, n in c.tails]
        is_exact = any(c is e for e in exact)
        if skip is not None and is_exact:
            mine.append((skip[0], skip[1], "skip"))
            skip = None
        mine += [(s, n, "claim") for s, n in c.claims]
        if base_abs is None and is_exact and c.base is not None:
            mine.append((c.base, 0, "base"))
        if not mine:
            continue
        if ref_seq is None:
            ref_seq = mine[0][0]
        last = ref_abs
        for s, n, kind in mine:
            a = ref_abs + _sdiff(s, ref_seq)
            if kind == "base":
                base_abs = a
                continue
            (claims if kind == "claim" else cover).append((a, a + n))
            if kind == "frame" and (first is None or a < first[0]):
                first = (a, s)
            last = max(last, a + n)
        ref_seq, ref_abs = (ref_seq + last - ref_abs) % _MOD, last
    if ref_seq is None:
        return True, None
    cover.sort()
    for (_, e1), (s2, _) in zip(cover, cover[1:]):
        if s2 < e1:
            return False, None             # two readers framed the same bytes
    if base_abs is not None:        # bytes before the capture's first: decode drops them too
        claims = [(max(s, base_abs), e) for s, e in claims if e > base_abs]
    claims.sort()
    reach = claims[0][1] if claims else 0
    for s2, e2 in claims[1:]:
        if s2 > reach:
            return False, None             # bytes the capture never had: a real gap
        reach = max(reach, e2)
    if not _covered(claims, cover):
        return False, None
    if not skips or first is None:
        return True, None
    return True, first[1]


def _covered(claims: list[tuple[int, int]], cover: list[tuple[int, int]]) -> bool:
    """Every claimed byte lies in ``cover`` (sorted, disjoint)."""
    merged: list[list[int]] = []
    for s, e in cover:
        if merged and s == merged[-1][1]:
            merged[-1][1] = e
        else:
            merged.append([s, e])
    starts = [m[0] for m in merged]
    for s, e in claims:
        if s >= e:
            continue
        i = bisect_right(starts, s) - 1
        if i < 0 or merged[i][1] < e:
            return False
    return True
