"""Plain views of decoded frames: the JSON object, the one-line gist, records.

No Rich here (that lives in ``kctl.ui``); everything returns str, dict or
lists so commands, tests and other tools share one definition. The JSON keys
are documented in docs/decode-json.md and are a stable interface.
"""

from __future__ import annotations

import base64
import datetime as _dt
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

from kctl.errors import BudgetExceededError, ConfigError, DecodeError
from kctl.inspect.session import CaptureNotice, DecodedFrame, RecordSet
from kctl.protocol.consumer_protocol import (
    CONSUMER_PROTOCOL_TYPE, decode_assignment, decode_subscription,
)
from kctl.protocol.error_codes import error_for
from kctl.protocol.messages import Message, in_version, present_fields, to_jsonable
from kctl.protocol.records import Record

__all__ = [
    "error_codes", "throttle_time_ms", "frame_json", "notice_json", "frame_line", "gist",
    "format_ts", "RecordView", "iter_records", "set_records", "records_left_out",
    "frame_records_left_out", "record_json", "format_record",
    "binary_json", "DEFAULT_RECORD_FORMAT", "JSON_KEYS", "topics_of", "has_errors", "dumps",
    "consumer_protocol_json",
]

DEFAULT_RECORD_FORMAT: Final = "%t %p %o %k %s"

#: The keys ``frame_json`` may write, in order (see docs/decode-json.md).
JSON_KEYS: Final = (
    "ts", "ts_ns", "file", "src", "dst", "src_port", "dst_port", "direction", "api_key",
    "api_name", "api_version", "correlation_id", "client_id", "size", "stream_offset", "packet", "marks",
    "latency_ms", "throttle_time_ms", "error_codes", "produce", "fetch", "topic_names",
    "consumer_protocol", "body", "raw_body",
    "decode_error",
)


def error_codes(msg: Any) -> list[int]:
    """Every ``*error_code`` value in a message tree, in tree order (zeros included)."""
    out: list[int] = []

    def walk(v: Any) -> None:
        if isinstance(v, Message):
            for f in v._fields:
                x = getattr(v, f)
                if f.endswith("error_code") and isinstance(x, int):
                    out.append(x)
                elif isinstance(x, (Message, list)):
                    walk(x)
        elif isinstance(v, list):
            for x in v:
                if isinstance(x, (Message, list)):
                    walk(x)
    walk(msg)
    return out


_ERROR_CODE_FIELDS: dict[tuple[type, int], bool] = {}


def _has_error_code_field(msg: Message, version: int) -> bool:
    """Whether the message has an ``*error_code`` field (at any depth) in ``version``."""
    key = (type(msg), version)
    has = _ERROR_CODE_FIELDS.get(key)
    if has is None:
        def walk(fields: Any) -> bool:
            return any(version in f.versions and (f.py_name.endswith("error_code") or (
                f.fields is not None and walk(f.fields))) for f in fields)
        spec = getattr(type(msg), "_spec", None)
        has = _ERROR_CODE_FIELDS[key] = spec is not None and walk(spec.fields)
    return has


def throttle_time_ms(msg: Any, version: int | None = None) -> int | None:
    """The message's throttle time; None when it has none (with ``version``: when that
    version of the message has none)."""
    if not isinstance(msg, Message) or (
            version is not None and not in_version(msg, "throttle_time_ms", version)):
        return None
    v = getattr(msg, "throttle_time_ms", None)
    return v if isinstance(v, int) else None


def format_ts(ts_ns: int) -> str:
    """RFC 3339 UTC with nanoseconds: ``2024-05-01T12:00:00.123456789Z``."""
    secs, ns = divmod(ts_ns, 1_000_000_000)
    try:
        base = _dt.datetime.fromtimestamp(secs, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return f"{ts_ns / 1e9:.9f}"
    return f"{base}.{ns:09d}Z"


def _b64(b: bytes) -> dict[str, str]:
    return {"$base64": base64.b64encode(b).decode()}


def binary_json(b: bytes | None) -> Any:
    """Text when ``b`` is valid UTF-8 without control characters, else ``{"$base64": ...}``."""
    if b is None:
        return None
    try:
        s = b.decode("utf-8")
    except UnicodeDecodeError:
        return _b64(b)
    if any(ord(c) < 0x20 and c not in "\t\n\r" for c in s):
        return _b64(b)
    return s


def _record_set_json(rs: RecordSet) -> dict[str, Any]:
    d: dict[str, Any] = {"topic": rs.topic, "partition": rs.partition, "bytes": rs.size_bytes,
                         "batches": rs.batch_count, "records": rs.record_count,
                         "codec": ",".join(rs.codecs) or None}
    if rs.truncated:
        d["truncated_bytes"] = rs.truncated
    if rs.error is not None:
        d["decode_error"] = {"reason": rs.error.reason, "offset": rs.error.offset,
                             "field": rs.error.field}
    return d


def frame_json(f: DecodedFrame) -> dict[str, Any]:
    """The documented JSON object for one frame."""
    d: dict[str, Any] = {
        "ts": format_ts(f.ts_ns), "ts_ns": f.ts_ns, "file": f.file,
        "src": str(f.src), "dst": str(f.dst), "src_port": f.src.port, "dst_port": f.dst.port,
        "direction": f.direction, "api_key": f.api_key, "api_name": f.api_name,
        "api_version": f.api_version, "correlation_id": f.correlation_id,
    }
    if f.direction == "request":
        d["client_id"] = f.client_id
    d["size"] = f.size
    d["stream_offset"] = f.offset
    d["packet"] = f.packet
    d["marks"] = list(f.marks)
    if f.latency_ns is not None:
        d["latency_ms"] = f.latency_ns / 1e6
    if f.direction == "response" and f.body is not None:
        t = throttle_time_ms(f.body, f.api_version)
        if t is not None:
            d["throttle_time_ms"] = t
        if _has_error_code_field(f.body, f.api_version):
            # A field the version lacks holds its default, 0: the non-zero codes are the sent ones.
            d["error_codes"] = [{"code": c, "name": error_for(c).name}
                                for c in error_codes(f.body) if c]
    if f.api_key == 0 and f.direction == "request" and f.body is not None:
        d["produce"] = [_record_set_json(rs) for rs in f.record_sets]
    if f.api_key == 1 and f.direction == "response" and f.body is not None:
        d["fetch"] = [_record_set_json(rs) for rs in f.record_sets]
    if f.body is not None and f.topic_names and _names_topic_ids(type(f.body)):
        named = _named_topic_ids(f)
        if named:
            d["topic_names"] = named
    if f.body is not None and f.group_protocol_type == CONSUMER_PROTOCOL_TYPE:
        embedded = consumer_protocol_json(f)
        if embedded:
            d["consumer_protocol"] = embedded
    # Only the fields of the frame's version (a default in a field the version lacks would
    # read as something the peer sent).
    d["body"] = to_jsonable(f.body, f.api_version) if f.body is not None else None
    if f.raw_body is not None:
        d["raw_body"] = _b64(f.raw_body)
    if f.error is not None:
        d["decode_error"] = {"reason": f.error.reason, "offset": f.error.offset,
                             "field": f.error.field}
    return d


def _embedded_json(field: str, data: bytes | None, kind: str) -> dict[str, Any]:
    out: dict[str, Any] = {"field": field}
    if not data:
        out[kind] = None        # an empty assignment: the member got nothing
        return out
    try:
        e = decode_subscription(data) if kind == "subscription" else decode_assignment(data)
    except DecodeError as err:
        out["decode_error"] = {"reason": err.reason, "offset": err.offset, "field": err.field}
        return out
    out["version"] = e.version
    if e.read_as != e.version:
        out["read_as"] = e.read_as
    view = to_jsonable(e.message, e.read_as)
    user_data = view.pop("user_data", None)
    if in_version(e.message, "user_data", e.read_as):
        view["user_data_bytes"] = None if user_data is None else len(e.message.user_data)
    out[kind] = view
    return out


def consumer_protocol_json(f: DecodedFrame) -> list[dict[str, Any]]:
    """A consumer group's JoinGroup metadata (subscriptions) and SyncGroup assignments,
    decoded (docs/decode-json.md, ``consumer_protocol``): one object per embedded message,
    naming the body field it is in."""
    body, k, req = f.body, f.api_key, f.direction == "request"
    if k == 11 and req:
        return [_embedded_json(f"protocols[{i}].metadata", p.metadata, "subscription")
                | {"protocol": p.name} for i, p in enumerate(body.protocols)]
    if k == 11:
        return [_embedded_json(f"members[{i}].metadata", m.metadata, "subscription")
                | {"member_id": m.member_id} for i, m in enumerate(body.members)]
    if k == 14 and req:
        return [_embedded_json(f"assignments[{i}].assignment", a.assignment, "assignment")
                | {"member_id": a.member_id} for i, a in enumerate(body.assignments)]
    if k == 14:
        return [_embedded_json("assignment", body.assignment, "assignment")]
    return []


_TOPIC_ID_MESSAGES: dict[type, bool] = {}


def _names_topic_ids(cls: type) -> bool:
    """Whether some version of the message has a ``topic_id`` field (cached per class)."""
    has = _TOPIC_ID_MESSAGES.get(cls)
    if has is None:
        def walk(fields: Any) -> bool:
            return any(f.py_name == "topic_id" or (f.fields is not None and walk(f.fields))
                       for f in fields)
        spec = getattr(cls, "_spec", None)
        has = _TOPIC_ID_MESSAGES[cls] = spec is not None and walk(spec.fields)
    return has


def _named_topic_ids(f: DecodedFrame) -> dict[str, str]:
    """The topic ids the body mentions whose names the capture's Metadata gave, id -> name."""
    out: dict[str, str] = {}
    for v, _ in _structs(f.body):
        tid = getattr(v, "topic_id", None)
        if isinstance(tid, uuid.UUID) and tid in f.topic_names:
            out[str(tid)] = f.topic_names[tid]
    return out


def _structs(v: Any, version: int | None = None) -> Iterator[tuple[Message, tuple[str, ...]]]:
    """Every struct of a message tree, each before the structs inside it, with its fields
    (only those ``version`` has, given one)."""
    if isinstance(v, Message):
        fields = tuple(v._fields if version is None else present_fields(v, version))
        yield v, fields
        for name in fields:
            x = getattr(v, name)
            if isinstance(x, (Message, list)):
                yield from _structs(x, version)
    elif isinstance(v, list):
        for x in v:
            if isinstance(x, (Message, list)):
                yield from _structs(x, version)


def notice_json(n: CaptureNotice) -> dict[str, Any]:
    d: dict[str, Any] = {"notice": n.kind, "message": n.message, "file": n.file}
    if n.ts_ns is not None:
        d["ts"] = format_ts(n.ts_ns)
    if n.conn is not None:
        d["conn"] = str(n.conn)
        d["direction"] = n.direction
        d["stream_offset"] = n.offset
    elif n.offset is not None:
        d["file_offset"] = n.offset
    return d


# ---------------------------------------------------------------------------
# one line per frame

def _sets_gist(sets: list[RecordSet], limit: int = 4) -> str:
    parts = []
    for rs in sets[:limit]:
        if rs.error is not None:
            what = "records not decoded" if isinstance(rs.error, BudgetExceededError) else "bad records"
            parts.append(f"{rs.topic}/{rs.partition}: {what} ({rs.error.reason})")
            continue
        codec = "/".join(rs.codecs)
        part = f"{rs.topic}/{rs.partition}: {rs.batch_count}b {rs.record_count}r"
        if codec and codec != "none":
            part += f" {codec}"
        parts.append(part)
    if len(sets) > limit:
        parts.append(f"+{len(sets) - limit} more")
    return "; ".join(parts)


def _field(msg: Any, name: str, version: int | None) -> Any:
    """``msg.name`` when that version of the message has the field, else None."""
    if not isinstance(msg, Message) or not hasattr(msg, name):
        return None
    if version is not None and not in_version(msg, name, version):
        return None
    return getattr(msg, name)


def group_ids(body: Message, version: int | None) -> list[str]:
    """The consumer/share/streams group ids a request names, wherever its version keeps them:
    ``group_id``, OffsetFetch v8+'s ``groups[].group_id``, ``group_ids``
    (ConsumerGroupDescribe), DescribeGroups' ``groups``, DeleteGroups' ``groups_names``."""
    one = _field(body, "group_id", version)
    if isinstance(one, str):
        return [one]
    out: list[str] = []
    for name in ("group_ids", "groups", "groups_names"):
        for g in _field(body, name, version) or ():
            if isinstance(g, str):
                out.append(g)
            elif isinstance(_field(g, "group_id", version), str):
                out.append(g.group_id)
    return out


def transactional_ids(body: Message, version: int | None) -> list[str]:
    """The transactional ids a request names (non-null): ``transactional_id``,
    AddPartitionsToTxn v0-3's ``v3_and_below_transactional_id`` and v4+'s
    ``transactions[].transactional_id``, DescribeTransactions' ``transactional_ids``."""
    out: list[str] = []
    for name in ("transactional_id", "v3_and_below_transactional_id"):
        x = _field(body, name, version)
        if isinstance(x, str):
            out.append(x)
    for t in _field(body, "transactions", version) or ():
        x = _field(t, "transactional_id", version)
        if isinstance(x, str):
            out.append(x)
    out += [x for x in _field(body, "transactional_ids", version) or () if isinstance(x, str)]
    return out


def _ids_gist(word: str, ids: list[str], limit: int = 3) -> list[str]:
    if not ids:
        return []
    text = f"{word}={','.join(ids[:limit])}"
    if len(ids) > limit:
        text += f" +{len(ids) - limit} more"
    return [text]


def gist(f: DecodedFrame) -> str:
    """A few words on what the frame says."""
    if f.error is not None:
        return f"decode error: {f.error}"
    if "unmatched" in f.marks:
        return f"response to a request not captured, {len(f.raw_body or b'')} raw bytes"
    if "unknown_api" in f.marks:
        return f"unknown API/version, {len(f.raw_body or b'')} raw bytes"
    body = f.body
    if body is None:
        return ""
    words: list[str] = []
    k = f.api_key
    if f.direction == "request":
        if k == 0:
            words.append(f"acks={body.acks}")
            if body.transactional_id:
                words.append(f"txn={body.transactional_id}")
            words.append(_sets_gist(f.record_sets))
        elif k == 1:
            parts = []
            for t in body.topics[:4]:
                for p in t.partitions[:4]:
                    parts.append(f"{f.topic_name(t.topic, t.topic_id)}/{p.partition}@{p.fetch_offset}")
            session = _field(body, "session_id", f.api_version)     # v7+ (KIP-227)
            words.append(" ".join(parts) or (f"session={session}" if session is not None
                                             else "no partitions"))
        elif k == 3:
            topics = body.topics
            # v0 asks for every topic with an empty array; v1+ with null (KIP-4).
            words.append("all topics" if topics is None or (not topics and f.api_version == 0) else
                         "topics: " + ",".join(f.topic_name(t.name, t.topic_id) for t in topics[:6])
                         if topics else "no topics")
        elif k == 10:
            # v0-3: one key; v4+: coordinator_keys (KIP-699); key_type 0 group, 1 transaction.
            keys = _field(body, "coordinator_keys", f.api_version)
            if keys is None:
                keys = [body.key]
            words += _ids_gist("txn" if _field(body, "key_type", f.api_version) == 1 else "group",
                               [x for x in keys if isinstance(x, str)])
        else:
            words += _ids_gist("txn", transactional_ids(body, f.api_version))
            words += _ids_gist("group", group_ids(body, f.api_version))
    else:
        if k == 0:
            parts = []
            for t in body.responses[:4]:
                for p in t.partition_responses[:4]:
                    s = f"{f.topic_name(t.name, t.topic_id)}/{p.index}@{p.base_offset}"
                    if p.error_code:
                        s += f" {error_for(p.error_code).name}"
                    parts.append(s)
            words.append(" ".join(parts))
        elif k == 1:
            words.append(_sets_gist(f.record_sets) or "no records")
        elif k == 3:
            words.append(f"{len(body.brokers)} brokers, {len(body.topics)} topics")
        elif k == 18:
            words.append(f"{len(body.api_keys)} APIs")
        errs = sorted({error_for(c).name for c in error_codes(body) if c})
        if errs and k != 0:
            words.append("errors: " + ",".join(errs))
        t = throttle_time_ms(body, f.api_version)
        if t:
            words.append(f"throttled {t}ms")
    return " ".join(w for w in words if w)


def frame_line(f: DecodedFrame) -> str:
    secs, ns = divmod(f.ts_ns, 1_000_000_000)
    try:
        clock = _dt.datetime.fromtimestamp(secs, _dt.timezone.utc).strftime("%H:%M:%S")
    except (OverflowError, OSError, ValueError):
        clock = str(secs)
    arrow = "->" if f.direction == "request" else "<-"
    name = f.api_name or (f"api{f.api_key}" if f.api_key is not None else "?")
    api = f"{name} v{f.api_version}" if f.api_version is not None else name
    kind = "req " if f.direction == "request" else "resp"
    line = f"{clock}.{ns // 1000:06d} {f.conn.client} {arrow} {f.conn.broker} {kind} {api} #{f.correlation_id}"
    if f.direction == "request" and f.client_id:
        line += f" [{f.client_id}]"
    if f.latency_ns is not None:
        line += f" {f.latency_ns / 1e6:.3f}ms"
    g = gist(f)
    if g:
        line += " " + g
    if f.marks:
        line += " (" + ",".join(f.marks) + ")"
    return line


# ---------------------------------------------------------------------------
# records

@dataclass(frozen=True, slots=True)
class RecordView:
    topic: str
    partition: int
    record: Record
    direction: str


def iter_records(f: DecodedFrame) -> Iterator[RecordView]:
    """The data records of a frame's record sets. Control records (the COMMIT/ABORT markers
    of transactions, in batches with the control bit) are left out, as a Java consumer and
    kcat leave them out: they are not data (``--summary`` and the frame views count them).
    A record set that did not decode gives the records of its batches before the damage
    (``records_left_out`` says what is missing)."""
    for rs in f.record_sets:
        yield from set_records(f, rs)


def set_records(f: DecodedFrame, rs: RecordSet) -> Iterator[RecordView]:
    """``iter_records`` for one record set of ``f``."""
    for batch, r in rs.iter_records():
        if not batch.is_control:
            yield RecordView(rs.topic, rs.partition, r, f.direction)


def frame_records_left_out(f: DecodedFrame) -> CaptureNotice | None:
    """A ``records`` notice for a frame whose body was not decoded and may hold records: a
    Produce request or Fetch response that does not decode or whose version kctl's schema
    does not know, or a response whose request was not captured (its API is not known)."""
    if f.body is not None:
        return None
    if "unmatched" in f.marks:
        what, why = f"response #{f.correlation_id}", "its request was not captured"
    elif (f.api_key, f.direction) in ((0, "request"), (1, "response")):
        what = f"{f.api_name} v{f.api_version} #{f.correlation_id}"
        why = (f"the frame does not decode ({f.error})" if f.error is not None
               else "kctl's schema does not know this version")
    else:
        return None
    return CaptureNotice(f.file, "records", f"{what}{_packet(f)}: not decoded, any records in "
                         f"it left out: {why}", f.offset, f.ts_ns, f.conn, f.direction)


def _packet(f: DecodedFrame) -> str:
    """`` (packet N)``: the capture packet completing the frame (none with --hex)."""
    return f" (packet {f.packet})" if f.packet else ""


def records_left_out(f: DecodedFrame, rs: RecordSet) -> CaptureNotice | None:
    """A ``records`` notice for a record set of ``f`` whose records cannot all be given
    (bad bytes, an unknown codec, a CRC-32C mismatch, corrupt compressed data, the
    decompression budget): the frame, the partition and why; None when nothing is missing."""
    if rs.error is None:
        return None
    name = f.api_name or (f"api{f.api_key}" if f.api_key is not None else "?")
    n = rs.batch_count
    after = f" after its first {n} batch{'es' if n > 1 else ''}" if n else ""
    why = (f"not decoded past the decompression budget ({rs.error.reason}; "
           "--max-decompress-ratio raises it)" if isinstance(rs.error, BudgetExceededError)
           else f"they do not decode ({rs.error})")
    return CaptureNotice(
        f.file, "records", f"{name} v{f.api_version} #{f.correlation_id}{_packet(f)} "
        f"{rs.topic}/{rs.partition}: left out{after}, {why}",
        f.offset, f.ts_ns, f.conn, f.direction)


def record_json(v: RecordView) -> dict[str, Any]:
    r = v.record
    return {"topic": v.topic, "partition": v.partition, "offset": r.offset,
            "timestamp": r.timestamp, "key": binary_json(r.key), "value": binary_json(r.value),
            "headers": [{"key": h.key, "value": binary_json(h.value)} for h in r.headers]}


def _text(b: bytes | None) -> str:
    if b is None:
        return ""
    return b.decode("utf-8", errors="backslashreplace")


#: The formatters ``format_record`` knows (kcat's letters for the same things).
RECORD_FORMATTERS = "tpokKsSTh%"


def check_record_format(fmt: str, option: str = "--format") -> None:
    """Refuses a formatter ``format_record`` does not know, as kcat does (rather than
    printing it literally on every record)."""
    i = 0
    while i < len(fmt):
        if fmt[i] == "%":
            d = fmt[i + 1:i + 2]
            if not d or d not in RECORD_FORMATTERS:
                what = f"unknown formatter %{d}" if d else "a lone % at the end"
                raise ConfigError(f"{option} {fmt!r}: {what} (formatters: %t topic, %p partition, "
                                  "%o offset, %k key, %s value, %K key length, %S value length, "
                                  "%T timestamp, %h headers, %% a percent sign)")
            i += 2
        else:
            i += 1


def format_record(fmt: str, v: RecordView) -> str:
    """kcat-style ``-f``: %t topic, %p partition, %o offset, %k key, %s value,
    %K key length, %S value length, %T timestamp, %h headers, %%; \\n \\t escapes.
    Binary bytes are shown with backslash escapes."""
    r = v.record
    out = []
    i = 0
    n = len(fmt)
    while i < n:
        c = fmt[i]
        if c == "%" and i + 1 < n:
            d = fmt[i + 1]
            i += 2
            if d == "t":
                out.append(v.topic)
            elif d == "p":
                out.append(str(v.partition))
            elif d == "o":
                out.append(str(r.offset))
            elif d == "k":
                out.append(_text(r.key))
            elif d == "s":
                out.append(_text(r.value))
            elif d == "K":
                out.append(str(-1 if r.key is None else len(r.key)))
            elif d == "S":
                out.append(str(-1 if r.value is None else len(r.value)))
            elif d == "T":
                out.append(str(r.timestamp))
            elif d == "h":
                out.append(",".join(f"{h.key}={_text(h.value)}" for h in r.headers))
            elif d == "%":
                out.append("%")
            else:
                out.append("%" + d)
        elif c == "\\" and i + 1 < n:
            d = fmt[i + 1]
            i += 2
            out.append({"n": "\n", "t": "\t", "\\": "\\"}.get(d, "\\" + d))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, default=str)


#: Fields holding lists of topic names (DeleteTopics v0-5, group heartbeats, Streams topologies).
_TOPIC_NAME_LISTS: Final = frozenset({"topic_names", "subscribed_topic_names", "source_topics",
                                      "repartition_sink_topics"})


def topics_of(f: DecodedFrame) -> set[str]:
    """Topic names a frame mentions: its record sets; in the fields of the frame's version, a
    ``*Topic*`` struct's ``name``/``topic``, any ``topic_name`` (or ``topic`` string), lists
    of topic names, and a topic id (Fetch v13+, Produce v13+, ...) by the name that id has in
    the capture's Metadata (else the id's text) when its struct gives no name."""
    out = {rs.topic for rs in f.record_sets}
    for v, fields in _structs(f.body, f.api_version):
        topic_struct = "Topic" in type(v).__qualname__.rsplit(".", 1)[-1]
        named = False
        tid = None
        for fname in fields:
            x = getattr(v, fname)
            if isinstance(x, str):
                if x and (fname == "topic_name" or fname == "topic"
                          or (fname == "name" and topic_struct)):
                    out.add(x)
                    named = True
            elif fname == "topic_id" and isinstance(x, uuid.UUID):
                tid = x
            elif isinstance(x, list) and fname in _TOPIC_NAME_LISTS:
                out.update(t for t in x if isinstance(t, str) and t)
        if not named and tid is not None and tid.int:
            out.add(f.topic_name(None, tid))
    return out


def has_errors(f: DecodedFrame) -> bool:
    """A decode error, or a non-zero error code anywhere in the body."""
    if f.error is not None or any(rs.error is not None for rs in f.record_sets):
        return True
    return f.body is not None and any(c for c in error_codes(f.body))
