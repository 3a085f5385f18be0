"""Kafka conversations out of captures: frames paired and decoded.

How this works: ``CaptureDecoder`` takes TCP segments (from ``pcap``), runs
them through the ``Reassembler``, and for each frame decodes the header and
body. Requests are remembered per connection by correlation id (bounded per
connection: an acks=0 Produce never gets an answer) so that a response, whose
header does not say what it answers, is decoded with its request's API key and
version, and gets a latency. Nothing is dropped:

- a response with no request seen (capture started mid-conversation) keeps its
  correlation id and raw body, marked ``unmatched``;
- a response to a request cut by a gap whose header was captured (tcpdump's snap length,
  a lost packet) is decoded as that request's API, marked ``request_cut``, and timed from
  the segment that carried the request's last byte when the capture holds it (the
  reassembler's ``request_end`` notices); a header seen only while resynchronising pairs
  only with a response that decodes wholly as its API;
- an API key or version not in the schema gives the header and the raw body,
  marked ``unknown_api``;
- a frame that does not decode gives a ``DecodeError`` (offset within the
  frame, field path) on the frame, marked ``decode_error``, and decoding goes
  on with the next frame.

Produce requests and Fetch responses also get their record batches decoded
(``record_sets``), batch errors staying on the record set.

``decode_stream`` reads one capture from a stream and ``decode_files`` capture files (one
reassembly per file), yielding ``DecodedFrame`` and ``CaptureNotice`` objects in capture
order;
``guess_broker_ports`` implements ``--port auto``.
"""

from __future__ import annotations

import struct
import uuid
from collections import Counter, OrderedDict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Final

from kctl.errors import BudgetExceededError, DecodeError
from kctl.inspect.pcap import CaptureReader, TcpSegment, read_segments, tcp_segment
from kctl.inspect.reassembly import (
    DEFAULT_MAX_PENDING_BYTES, ConnectionId, Direction, Endpoint, Frame, Reassembler,
    StreamNotice, plausible_request_start,
)
from kctl.protocol import schema
from kctl.protocol.frames import DEFAULT_MAX_FRAME_BYTES
from kctl.protocol.messages import (
    Message, RequestHeader, decode_from, decode_request, decode_response, in_version,
)
from kctl.protocol.primitives import Reader
from kctl.protocol.compression import DecompressionBudget
from kctl.protocol.records import BatchInfo, Record, iter_batch_records, scan_batches

__all__ = [
    "DecodedFrame", "RecordSet", "CaptureNotice", "CaptureDecoder", "decode_files", "decode_stream",
    "decode_frame_bytes", "decode_hex_frame", "HexReading", "guess_broker_ports", "MARKS",
    "DEFAULT_BROKER_PORT",
]

DEFAULT_BROKER_PORT: Final = 9092
#: Requests remembered per connection while waiting for their responses.
MAX_OUTSTANDING_PER_CONNECTION: Final = 4096
PRODUCE_KEY: Final = 0
FETCH_KEY: Final = 1
METADATA_KEY: Final = 3
JOIN_GROUP_KEY: Final = 11
SYNC_GROUP_KEY: Final = 14
SASL_AUTHENTICATE_KEY: Final = 36
#: What replaces SaslAuthenticate's auth_bytes (a PLAIN password, a SCRAM proof) in output.
REDACTED_AUTH_BYTES: Final = b"<redacted: SASL credentials; --show-secrets shows them>"


def redact_auth_bytes(body: Any) -> bool:
    """Replaces a decoded SaslAuthenticate body's ``auth_bytes`` (a PLAIN password, a SCRAM
    proof) in place; True if there was something to hide. ``kctl decode`` and the live
    frame view of ``kctl inspect`` both use it."""
    if body is not None and getattr(body, "auth_bytes", None):
        body.auth_bytes = REDACTED_AUTH_BYTES
        return True
    return False


def _redact_auth_bytes(df: DecodedFrame) -> None:
    """SaslAuthenticate carries credentials: keep them out of decoded output."""
    if redact_auth_bytes(df.body):
        df.marks += ("redacted",)
    elif df.raw_body:
        df.raw_body = REDACTED_AUTH_BYTES
        df.marks += ("redacted",)

#: What a frame's ``marks`` may hold.
MARKS: Final = ("unmatched", "unknown_api", "decode_error", "resynced", "redacted",
                "request_cut")


@dataclass(frozen=True, slots=True)
class RecordSet:
    """The records of one partition inside a Produce request or Fetch response.

    Decoding checks every batch and counts its records without keeping them
    (``scan_batches``): a compressed batch is walked a decompressed chunk at a time and
    released. ``iter_records()`` decodes them again, a window at a time, for whoever
    prints them. ``data`` is the records field as captured (the body's own bytes).
    """

    topic: str
    partition: int
    size_bytes: int
    batches: tuple[BatchInfo, ...] = ()
    truncated: int = 0                  # bytes of a cut-off last batch (a Fetch may do so)
    error: DecodeError | None = None    # what stopped the walk; batches before it are kept
    data: bytes | None = None

    @property
    def batch_count(self) -> int:
        return len(self.batches)

    @property
    def record_count(self) -> int:
        return sum(b.record_count for b in self.batches)

    @property
    def codecs(self) -> list[str]:
        return sorted({b.compression.name.lower() for b in self.batches})

    def iter_records(self) -> Iterator[tuple[BatchInfo, Record]]:
        """Every record of the batches that were checked, with its batch."""
        if not self.data or not self.batches:
            return
        # These batches already passed their decompression budget once; the same bytes
        # decompress to the same size again.
        budget = DecompressionBudget.fixed(1 << 62)
        for i, r in iter_batch_records(self.data, budget=budget, max_batches=len(self.batches)):
            yield self.batches[i], r


def _topic_name(names: Mapping[uuid.UUID, str], name: str | None,
                topic_id: uuid.UUID | None) -> str:
    if name:
        return name
    if topic_id is not None and topic_id.int:
        return names.get(topic_id, str(topic_id))
    return ""


@dataclass(slots=True)
class DecodedFrame:
    """One Kafka frame from a capture, decoded as far as it goes."""

    file: str
    ts_ns: int
    conn: ConnectionId
    direction: Direction
    offset: int                     # stream offset of the size prefix
    size: int                       # payload bytes (without the size prefix)
    api_key: int | None
    api_version: int | None
    correlation_id: int | None
    client_id: str | None = None
    header: Message | None = None
    body: Message | None = None
    raw_body: bytes | None = None   # set when the body was not decoded
    error: DecodeError | None = None
    latency_ns: int | None = None   # responses: time since the request
    marks: tuple[str, ...] = ()
    record_sets: list[RecordSet] = field(default_factory=list)
    packet: int = 0                 # capture packet number of the segment completing the frame
    # Topic id -> name, learnt from the capture's Metadata responses (the decoder's map,
    # shared: KIP-516 requests such as Fetch v13+ and Produce v13+ name topics by id only).
    topic_names: Mapping[uuid.UUID, str] = field(default_factory=dict)
    # JoinGroup/SyncGroup: the group's protocol_type ("consumer": the metadata and
    # assignments are the consumer protocol's), from the frame or, for versions without the
    # field, from the group's JoinGroup earlier in the capture.
    group_protocol_type: str | None = None

    @property
    def api_name(self) -> str | None:
        api = schema.API_BY_KEY.get(self.api_key) if self.api_key is not None else None
        return api.name if api is not None else None

    def topic_name(self, name: str | None, topic_id: uuid.UUID | None) -> str:
        """A topic as a reader knows it: its name, else the name its id had in the capture's
        Metadata, else the id; "" when the frame gives neither."""
        return _topic_name(self.topic_names, name, topic_id)

    @property
    def src(self) -> Endpoint:
        return self.conn.client if self.direction == "request" else self.conn.broker

    @property
    def dst(self) -> Endpoint:
        return self.conn.broker if self.direction == "request" else self.conn.client


@dataclass(frozen=True, slots=True)
class CaptureNotice:
    """Something worth telling that is not a frame (a gap, a skipped packet,
    a cut-off file, a file that is not a capture)."""

    file: str
    kind: str
    message: str
    offset: int | None = None       # file offset for file/packet notices, stream offset else
    ts_ns: int | None = None
    conn: ConnectionId | None = None
    direction: Direction | None = None

    def __str__(self) -> str:
        where = [self.file]
        if self.conn is not None:
            where.append(f"{self.conn} {self.direction}")
        if self.offset is not None:
            where.append(f"{'stream' if self.conn else 'file'} offset {self.offset}")
        return f"{', '.join(where)}: {self.kind}: {self.message}"


@dataclass(slots=True)
class _Pending:
    api_key: int
    api_version: int
    ts_ns: int | None       # the request's completing segment; None: it was not captured
    known: bool
    group_protocol_type: str | None = None     # JoinGroup/SyncGroup requests
    # A cut request whose header was seen while resynchronising: it may be record data that
    # looks like a header, so only a response that decodes wholly as its API pairs with it.
    resync: bool = False


class CaptureDecoder:
    """Segments in, decoded frames and notices out; one instance per capture."""

    def __init__(self, broker_ports: Collection[int], *, file: str = "",
                 max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 decode_records: bool = True, show_secrets: bool = False,
                 budget: DecompressionBudget | None = None) -> None:
        self.file = file
        self.decode_records = decode_records
        self.show_secrets = show_secrets
        # Decompression of record batches, per frame and per run (one budget may be shared
        # by the decoders of several files: the run is the whole command).
        self.budget = budget if budget is not None else DecompressionBudget()
        self._budget_noticed = False
        self._outstanding: dict[ConnectionId, OrderedDict[int, _Pending]] = {}
        # Requests cut by a gap whose header was captured (an ``incomplete`` notice, or a
        # ``request_end`` of a header seen while resynchronising): their responses decode,
        # marked ``request_cut``, timed from the request's completing segment when it was
        # captured. Looked at only when ``_outstanding`` has no request for a response.
        self._cut_requests: dict[ConnectionId, OrderedDict[int, _Pending]] = {}
        self.topic_names: dict[Any, str] = {}      # topic id (UUID) -> name, from Metadata
        self.group_protocol_types: dict[str, str] = {}  # group id -> protocol_type, from JoinGroup
        self.reassembler = Reassembler(broker_ports, expects_response=self._expects,
                                       verify_request=_request_decodes,
                                       verify_response=self._response_decodes,
                                       max_pending_bytes=max_pending_bytes,
                                       max_frame_bytes=max_frame_bytes)

    def _expects(self, conn: ConnectionId, corr: int) -> bool:
        pending = self._outstanding.get(conn)
        cut = self._cut_requests.get(conn)
        return (pending is not None and corr in pending) or (cut is not None and corr in cut)

    def _response_decodes(self, conn: ConnectionId, data: bytes) -> bool:
        if len(data) < 4:
            return False
        corr = struct.unpack_from(">i", data, 0)[0]
        pending = self._outstanding.get(conn)
        req = pending.get(corr) if pending else None
        if req is None:
            cut = self._cut_requests.get(conn)
            req = cut.get(corr) if cut else None
        if req is None:
            return False
        if not req.known:
            return True
        try:
            decode_response(data, req.api_key, req.api_version)
        except DecodeError:
            return False
        return True

    def on_segment(self, seg: TcpSegment) -> list[DecodedFrame | CaptureNotice]:
        self.budget.add_input(len(seg.payload))
        return self._convert(self.reassembler.on_segment(seg))

    def finish(self) -> list[DecodedFrame | CaptureNotice]:
        return self._convert(self.reassembler.finish())

    def _convert(self, items: Iterable[Frame | StreamNotice]) -> list[DecodedFrame | CaptureNotice]:
        out: list[DecodedFrame | CaptureNotice] = []
        notice: CaptureNotice | None
        for it in items:
            if isinstance(it, Frame):
                df = self.decode(it)
                out.append(df)
                if not self._budget_noticed and any(isinstance(rs.error, BudgetExceededError)
                                                    for rs in df.record_sets):
                    # Said once; each record set it stops carries the error too.
                    self._budget_noticed = True
                    out.append(CaptureNotice(
                        self.file, "budget", "records past the decompression budget are not "
                        f"decoded (first here: {self.budget.exhausted_reason()}; "
                        "--max-decompress-ratio raises it)", None,
                        it.ts_ns, it.conn, it.direction))
            elif (notice := self.stream_notice(it)) is not None:
                out.append(notice)
        return out

    def stream_notice(self, n: StreamNotice) -> CaptureNotice | None:
        """What decode reports for a reassembler's notice, after keeping what it tells of cut
        requests (so that their responses decode and are timed); None for bookkeeping that is
        no damage (a retransmission, a cut request's end). For a reader that takes the
        reassembler's notices itself (``ranges.RangeDecoder``) too."""
        if n.kind == "retransmission":
            return None
        if n.kind == "request_end":
            self._cut_request_ended(n)
            return None
        what = self.cut_frame(n) if n.head else None
        return CaptureNotice(self.file, n.kind,
                             n.message if what is None else f"{what}: {n.message}",
                             n.offset, n.ts_ns, n.conn, n.direction)

    def _cut_request_ended(self, n: StreamNotice) -> None:
        """A cut request's last byte has passed: its response's latency runs from then. A
        header seen while resynchronising is remembered here (no ``incomplete`` notice
        named it), as tshark pairs a response with any request whose header it read."""
        api_key, api_version, corr = struct.unpack_from(">hhi", n.head, 4)
        cut = self._cut_requests.setdefault(n.conn, OrderedDict())
        if not n.candidate:
            req = cut.get(corr)
            if req is not None and (req.api_key, req.api_version) == (api_key, api_version):
                req.ts_ns = n.end_ts_ns
            return
        pending = self._outstanding.get(n.conn)
        if pending is not None and corr in pending:
            return      # a whole request of that id is waiting: its response is its own
        api = schema.API_BY_KEY.get(api_key)
        known = api is not None and api_version in api.request.valid_versions
        cut[corr] = _Pending(api_key, api_version, n.end_ts_ns, known, resync=True)
        cut.move_to_end(corr)
        if len(cut) > MAX_OUTSTANDING_PER_CONNECTION:
            cut.popitem(last=False)

    def cut_frame(self, n: StreamNotice) -> str | None:
        """What an ``incomplete`` frame was, from the header bytes captured before the cut:
        a request's API, version and correlation id (the request is remembered, so that its
        response decodes, marked ``request_cut``); a response's correlation id and its
        request's API (that request is answered). None when too little of it was captured.
        For a reader that takes the reassembler's notices itself (``ranges.RangeDecoder``)."""
        head = n.head
        if len(head) < 8:
            return None
        size, corr = struct.unpack_from(">ii", head, 0)
        if n.direction == "request":
            if len(head) < 12:
                return None
            api_key, api_version, corr = struct.unpack_from(">hhi", head, 4)
            api = schema.API_BY_KEY.get(api_key)
            known = api is not None and api_version in api.request.valid_versions
            cut = self._cut_requests.setdefault(n.conn, OrderedDict())
            # Timed when the stream passes its last byte (a ``request_end`` notice).
            cut[corr] = _Pending(api_key, api_version, None, known)
            cut.move_to_end(corr)
            if len(cut) > MAX_OUTSTANDING_PER_CONNECTION:
                cut.popitem(last=False)
            return f"{_api_name(api_key)} v{api_version} request #{corr} of {size + 4} bytes"
        pending = self._outstanding.get(n.conn)
        req = pending.pop(corr, None) if pending else None
        if req is None:
            cut = self._cut_requests.get(n.conn)
            req = cut.pop(corr, None) if cut else None
        if req is None:
            return f"response #{corr} of {size + 4} bytes (its request not captured)"
        return (f"{_api_name(req.api_key)} v{req.api_version} response #{corr} "
                f"of {size + 4} bytes")

    def observe(self, fr: Frame) -> None:
        """Keeps what ``decode(fr)`` would keep for the frames after it, without decoding
        ``fr``: a request's API key, version and time (so its response decodes, pairs and
        resynchronises), a response's request forgotten, topic names from a Metadata
        response. For a reader that sees a frame which another reader decodes."""
        data = fr.data
        if fr.direction == "request":
            if len(data) >= 8:
                api_key, api_version, corr = struct.unpack_from(">hhi", data, 0)
                api = schema.API_BY_KEY.get(api_key)
                known = api is not None and api_version in api.request.valid_versions
                self._remember(fr.conn, corr, _Pending(api_key, api_version, fr.ts_ns, known))
            return
        if len(data) < 4:
            return
        corr = struct.unpack_from(">i", data, 0)[0]
        pending = self._outstanding.get(fr.conn)
        req = pending.pop(corr, None) if pending else None
        if req is None and (cut := self._cut_requests.get(fr.conn)):
            req = cut.pop(corr, None)
        if req is not None and req.known and req.api_key == METADATA_KEY:
            try:
                self._learn_topics(decode_response(data, req.api_key, req.api_version).body)
            except DecodeError:
                pass

    def _learn_topics(self, metadata: Message) -> None:
        learn_topic_names(metadata, self.topic_names)

    def decode(self, fr: Frame) -> DecodedFrame:
        if fr.direction == "request":
            df = self._request(fr)
        else:
            df = self._response(fr)
        if fr.resynced:
            df.marks += ("resynced",)
        df.packet = fr.packet
        df.topic_names = self.topic_names
        if df.api_key == SASL_AUTHENTICATE_KEY and not self.show_secrets:
            _redact_auth_bytes(df)
        return df

    # -- requests -------------------------------------------------------

    def _request(self, fr: Frame) -> DecodedFrame:
        data = fr.data
        base = dict(file=self.file, ts_ns=fr.ts_ns, conn=fr.conn, direction=fr.direction,
                    offset=fr.offset, size=len(data))
        if len(data) < 8:
            return DecodedFrame(**base, api_key=None, api_version=None, correlation_id=None,
                                raw_body=data, marks=("decode_error",),
                                error=DecodeError(f"{len(data)} bytes is too short for a request "
                                                  "header", offset=len(data), field="header"))
        api_key, api_version, corr = struct.unpack_from(">hhi", data, 0)
        api = schema.API_BY_KEY.get(api_key)
        known = api is not None and api_version in api.request.valid_versions
        self._remember(fr.conn, corr, _Pending(api_key, api_version, fr.ts_ns, known))
        df = DecodedFrame(**base, api_key=api_key, api_version=api_version, correlation_id=corr)
        if not known:
            df.marks = ("unknown_api",)
            df.client_id, used = _best_effort_client_id(data)
            df.raw_body = data[used:]
            return df
        try:
            req = decode_request(data)
        except DecodeError as e:
            df.error = e
            df.marks = ("decode_error",)
            try:
                r = Reader(data)
                df.header = decode_from(r, RequestHeader, schema.request_header_version(api_key, api_version))
                df.client_id = getattr(df.header, "client_id", None)
                df.raw_body = data[r.pos:]
            except DecodeError:
                df.raw_body = data[8:]
            return df
        df.header, df.body = req.header, req.body
        df.client_id = getattr(req.header, "client_id", None)
        if api_key == PRODUCE_KEY and self.decode_records:
            df.record_sets = self._produce_sets(req.body, len(data))
        elif api_key in (JOIN_GROUP_KEY, SYNC_GROUP_KEY):
            df.group_protocol_type = self._group_protocol_type(req.body, api_key, api_version)
            self._outstanding[fr.conn][corr].group_protocol_type = df.group_protocol_type
        return df

    def _group_protocol_type(self, body: Message, api_key: int, api_version: int) -> str | None:
        """A JoinGroup/SyncGroup request's protocol_type: its own (JoinGroup; SyncGroup v5+),
        else the one its group joined with earlier in the capture."""
        own = body.protocol_type if in_version(body, "protocol_type", api_version) else None
        if api_key == JOIN_GROUP_KEY and own is not None:
            self.group_protocol_types[body.group_id] = own
        return own if own is not None else self.group_protocol_types.get(body.group_id)

    def _remember(self, conn: ConnectionId, corr: int, p: _Pending) -> None:
        pending = self._outstanding.setdefault(conn, OrderedDict())
        pending[corr] = p
        pending.move_to_end(corr)
        while len(pending) > MAX_OUTSTANDING_PER_CONNECTION:
            pending.popitem(last=False)

    # -- responses ------------------------------------------------------

    def _response(self, fr: Frame) -> DecodedFrame:
        data = fr.data
        base = dict(file=self.file, ts_ns=fr.ts_ns, conn=fr.conn, direction=fr.direction,
                    offset=fr.offset, size=len(data))
        if len(data) < 4:
            return DecodedFrame(**base, api_key=None, api_version=None, correlation_id=None,
                                raw_body=data, marks=("decode_error",),
                                error=DecodeError(f"{len(data)} bytes is too short for a response "
                                                  "header", offset=len(data), field="correlation_id"))
        (corr,) = struct.unpack_from(">i", data, 0)
        pending = self._outstanding.get(fr.conn)
        req = pending.pop(corr, None) if pending is not None else None
        if req is None:
            return self._response_without_request(fr, base, corr)
        df = DecodedFrame(**base, api_key=req.api_key, api_version=req.api_version,
                          correlation_id=corr,
                          latency_ns=None if req.ts_ns is None else fr.ts_ns - req.ts_ns)
        if not req.known:
            df.raw_body = data[4:]
            df.marks = ("unknown_api",)
            return df
        try:
            resp = decode_response(data, req.api_key, req.api_version)
        except DecodeError as e:
            df.error = e
            df.marks = ("decode_error",)
            df.raw_body = data[4:]
            return df
        df.header, df.body = resp.header, resp.body
        df.group_protocol_type = req.group_protocol_type
        if (df.group_protocol_type is None and req.api_key in (JOIN_GROUP_KEY, SYNC_GROUP_KEY)
                and in_version(resp.body, "protocol_type", req.api_version)):
            df.group_protocol_type = resp.body.protocol_type   # JoinGroup v7+, SyncGroup v5+
        if req.api_key == FETCH_KEY and self.decode_records:
            df.record_sets = self._fetch_sets(resp.body, len(data))
        elif req.api_key == METADATA_KEY:
            self._learn_topics(resp.body)
        return df

    def _response_without_request(self, fr: Frame, base: dict[str, Any],
                                  corr: int) -> DecodedFrame:
        """A response whose request is not outstanding: the answer to a request cut by a
        gap (its header captured) is decoded as the request's API and version, marked
        ``request_cut``, with a latency from the request's completing segment when the
        capture holds it (a snap length cuts every packet but keeps it; a lost packet
        does not); else ``unmatched``, its raw body kept. A header seen only while
        resynchronising pairs only with a response that decodes wholly as its API."""
        cut = self._cut_requests.get(fr.conn)
        req = cut.pop(corr, None) if cut else None
        if req is not None:
            self._remember(fr.conn, corr, req)
            df = self._response(fr)
            if not req.resync or (df.error is None and df.body is not None):
                df.marks += ("request_cut",)
                return df
        return DecodedFrame(**base, api_key=None, api_version=None, correlation_id=corr,
                            raw_body=fr.data[4:], marks=("unmatched",))

    # -- record sets ----------------------------------------------------

    def _topic(self, name: str | None, topic_id: Any) -> str:
        return _topic_name(self.topic_names, name, topic_id)

    def _produce_sets(self, body: Message, frame_bytes: int) -> list[RecordSet]:
        self.budget.start_frame(frame_bytes)
        out = []
        for t in body.topic_data:
            topic = self._topic(t.name, getattr(t, "topic_id", None))
            for p in t.partition_data:
                out.append(_record_set(topic, p.index, p.records, self.budget))
        return out

    def _fetch_sets(self, body: Message, frame_bytes: int) -> list[RecordSet]:
        self.budget.start_frame(frame_bytes)
        out = []
        for t in body.responses:
            topic = self._topic(t.topic, getattr(t, "topic_id", None))
            for p in t.partitions:
                out.append(_record_set(topic, p.partition_index, p.records, self.budget))
        return out


def _api_name(api_key: int) -> str:
    api = schema.API_BY_KEY.get(api_key)
    return api.name if api is not None else f"api{api_key}"


def _request_decodes(data: bytes) -> bool:
    try:
        decode_request(data)
    except DecodeError:
        return False
    return True


def _record_set(topic: str, partition: int, records: bytes | None,
                budget: DecompressionBudget) -> RecordSet:
    if not records:
        return RecordSet(topic, partition, 0)
    scan = scan_batches(records, budget=budget)
    return RecordSet(topic, partition, len(records), scan.batches, scan.truncated,
                     scan.error.within("records") if scan.error is not None else None, records)


def _best_effort_client_id(data: bytes) -> tuple[str | None, int]:
    """A header v1 client id after the first 8 bytes when one plausibly is there."""
    if len(data) >= 10:
        (n,) = struct.unpack_from(">h", data, 8)
        if n == -1:
            return None, 10
        if 0 <= n <= len(data) - 10:
            raw = data[10:10 + n]
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                return None, 8
            if text.isprintable():
                return text, 10 + n
    return None, 8


# ---------------------------------------------------------------------------
# files


def decode_stream(stream: BinaryIO, name: str, broker_ports: Collection[int], *,
                  max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
                  max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                  decode_records: bool = True, show_secrets: bool = False,
                  budget: DecompressionBudget | None = None,
                  interfaces: Collection[int] | None = None) -> Iterator[DecodedFrame | CaptureNotice]:
    """Every frame and notice of one capture read from ``stream`` (a file, a pipe, bytes),
    in capture order; ``interfaces``: only packets captured on these pcapng interfaces
    (a leg of a ``kctl inspect`` capture, ``legs.py``), ``None``: every packet. Damage ends it with a ``CaptureNotice`` of kind ``"error"`` naming the
    file offset, after the frames before it (held segments flushed); a file cut short
    ends with a ``"truncated"`` notice. Only ``OSError`` from the stream escapes."""
    dec = CaptureDecoder(broker_ports, file=name, max_pending_bytes=max_pending_bytes,
                         max_frame_bytes=max_frame_bytes, decode_records=decode_records,
                         show_secrets=show_secrets, budget=budget)
    try:
        reader = CaptureReader(stream, name=name)
        for pkt in reader:
            if interfaces is not None and pkt.interface not in interfaces:
                continue
            seg = tcp_segment(pkt)
            if isinstance(seg, TcpSegment):
                yield from dec.on_segment(seg)
            elif seg.malformed:
                yield CaptureNotice(name, "malformed", f"packet {seg.number}: {seg.reason}",
                                    seg.offset)
        yield from dec.finish()
        if reader.truncated is not None:
            yield CaptureNotice(name, "truncated", str(reader.truncated), reader.truncated.offset)
    except DecodeError as e:
        # The damage ends this capture: what came before it is still decoded and flushed.
        yield from dec.finish()
        yield CaptureNotice(name, "error", e.reason + (f" (field {e.field})" if e.field else ""),
                            e.offset)


def decode_files(paths: Iterable[str | Path], broker_ports: Collection[int], *,
                 max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 decode_records: bool = True, show_secrets: bool = False,
                 budget: DecompressionBudget | None = None,
                 interfaces: Collection[int] | None = None) -> Iterator[DecodedFrame | CaptureNotice]:
    """Every frame and notice of each capture file, file by file, in capture order.
    ``interfaces``: only packets captured on these pcapng interfaces (a leg of a
    ``kctl inspect`` capture, ``legs.py``); ``None``: every packet.

    A file that is not a capture, or whose structure breaks, ends with a
    ``CaptureNotice`` of kind ``"error"`` naming the file offset; the frames
    before it are still yielded and the next file is read. One
    ``DecompressionBudget`` (default: ``DecompressionBudget()``) covers the whole run.
    """
    budget = budget if budget is not None else DecompressionBudget()
    for path in paths:
        name = str(path)
        try:
            with open(path, "rb") as f:
                yield from decode_stream(f, name, broker_ports, max_pending_bytes=max_pending_bytes,
                                         max_frame_bytes=max_frame_bytes,
                                         decode_records=decode_records, show_secrets=show_secrets,
                                         budget=budget, interfaces=interfaces)
        except OSError as e:
            yield CaptureNotice(name, "error", f"cannot read: {e.strerror or e}")


def guess_broker_ports(paths: Iterable[str | Path], *, max_segments: int = 200_000,
                       open_file: Callable[[str | Path], BinaryIO] | None = None,
                       default: int | None = DEFAULT_BROKER_PORT) -> set[int]:
    """``--port auto``: the ports that receive frames which start like Kafka requests.

    Per connection (unordered endpoints), payloads that begin with a plausible
    request header vote for their destination port; a SYN without ACK is a
    weaker vote for its destination. The majority port of each connection is a
    broker port. Falls back to ``default`` (9092; ``None``: the empty set) when nothing
    looks like Kafka. ``open_file`` opens a
    path for reading (default: a local file; a URI opener for captures on a cluster's store).
    """
    opener = open_file or (lambda p: open(p, "rb"))
    votes: dict[tuple, Counter] = {}
    syn_votes: Counter = Counter()
    seen = 0
    for path in paths:
        try:
            with opener(path) as f:
                for seg in read_segments(f, name=str(path)):
                    seen += 1
                    if seen > max_segments:
                        break
                    if seg.syn and not (seg.flags & 0x10):
                        syn_votes[seg.dst_port] += 1
                    if len(seg.payload) >= 14 and plausible_request_start(
                            seg.payload, 0, DEFAULT_MAX_FRAME_BYTES):
                        key = tuple(sorted([(seg.src, seg.src_port), (seg.dst, seg.dst_port)]))
                        votes.setdefault(key, Counter())[seg.dst_port] += 1
        except (DecodeError, OSError):
            continue
    ports = set()
    for counter in votes.values():
        (port, _n), = counter.most_common(1)
        ports.add(port)
    if not ports:
        ports = {p for p, _ in syn_votes.most_common(1)}
    return ports or ({default} if default is not None else set())


def learn_topic_names(metadata: Message, names: dict[Any, str]) -> None:
    """Adds a Metadata response's topic id -> name pairs to ``names`` (ids of zero, which
    versions before 10 and unknown topics answer, are not names)."""
    for t in getattr(metadata, "topics", ()):
        if t.name and getattr(t, "topic_id", None) is not None and t.topic_id.int:
            names[t.topic_id] = t.name


def decode_frame_bytes(data: bytes, *, size_prefix: bool, api_key: int | None = None,
                       api_version: int | None = None, show_secrets: bool = False) -> DecodedFrame:
    """One frame given as bytes. ``size_prefix``: ``data`` begins with the frame's 4-byte
    size, which must match the bytes after it (``ValueError`` if not); else ``data`` is
    the frame without it. The caller says which: a response whose correlation id
    equals its length minus 4 looks size-prefixed (``decode_hex_frame`` decides for
    bytes a user gives).

    Without ``api_key`` the frame is a request; with it, a response to that
    API key and ``api_version``.
    """
    if size_prefix:
        if len(data) < 4:
            raise ValueError(f"{len(data)} bytes: too short for a 4-byte size prefix")
        size = struct.unpack_from(">i", data, 0)[0]
        if size != len(data) - 4:
            raise ValueError(f"the size prefix says {size} bytes but {len(data) - 4} follow it")
        data = data[4:]
    conn = ConnectionId(Endpoint("-", 0), Endpoint("-", 0))
    dec = CaptureDecoder((0,), file="<stdin>", show_secrets=show_secrets)
    dec.budget.add_input(len(data))     # the frame is the whole input
    if api_key is None:
        return dec.decode(Frame(conn, "request", 0, data, 0, 0))
    if api_version is None:
        raise ValueError("a response needs its request's API version")
    if len(data) >= 4:
        corr = struct.unpack_from(">i", data, 0)[0]
        api = schema.API_BY_KEY.get(api_key)
        known = api is not None and api_version in api.request.valid_versions
        dec._remember(conn, corr, _Pending(api_key, api_version, 0, known))
    df = dec.decode(Frame(conn, "response", 0, data, 0, 0))
    df.latency_ns = None
    return df


@dataclass(frozen=True, slots=True)
class HexReading:
    """How ``decode_hex_frame`` read a user's bytes: the frame, whether the first 4 bytes
    were taken as its size, and whether the other reading decoded wholly too."""

    frame: DecodedFrame
    size_prefix: bool
    both_decode: bool = False


def decode_hex_frame(data: bytes, *, size_prefix: bool | None = None, api_key: int | None = None,
                     api_version: int | None = None, show_secrets: bool = False) -> HexReading:
    """``kctl decode --hex``: one frame a user gives, with or without its size prefix.
    ``size_prefix`` True/False: as the user says. ``None``: bytes whose first int32
    equals the length of the rest are read both ways (a response whose correlation id
    is its length minus 4 looks the same) and the reading that decodes wholly wins;
    when both do, or neither, the size-prefixed one. Other bytes have no prefix."""
    if size_prefix is not None:
        return HexReading(decode_frame_bytes(data, size_prefix=size_prefix, api_key=api_key,
                                             api_version=api_version, show_secrets=show_secrets),
                          size_prefix)
    bare = decode_frame_bytes(data, size_prefix=False, api_key=api_key,
                              api_version=api_version, show_secrets=show_secrets)
    if len(data) < 4 or struct.unpack_from(">i", data, 0)[0] != len(data) - 4:
        return HexReading(bare, False)
    framed = decode_frame_bytes(data, size_prefix=True, api_key=api_key,
                                api_version=api_version, show_secrets=show_secrets)
    if framed.error is not None and bare.error is None:
        return HexReading(bare, False)
    return HexReading(framed, True, both_decode=framed.error is None and bare.error is None)
