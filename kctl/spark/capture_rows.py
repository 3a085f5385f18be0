"""The rows ``kctl analyze`` tasks make from a capture range, as Arrow record batches.

One *stage* schema carries everything a task reports, told apart by ``kind``:

- ``pair``: a request and its response (or a frame that will never get its other half),
  in the columns of the final ``requests`` table;
- ``request`` / ``response``: a half whose other half another task owns, in the same
  columns (the request's or the response's alone), paired by the join in analyze.py;
  an ``unmatched`` response keeps its frame in ``raw`` until its request is known;
- ``coverage``: what the task saw of one stream direction (``StreamCoverage``);
- ``topic``: a topic id and the name a Metadata response gave it, with the packet;
- ``notice``: a notice ``kctl decode`` gives that the reader owns (``RangeDecoder.notices``).

Internal columns (``req_packet``, ``req_seq``, ...) order the halves in the join and let
the driver give 'resynced' marks back; they are not in the written table. The record
sets' ``topic_id`` (Produce v13+, Fetch v13+ name topics by id) lets the driver name
topics whose Metadata answer came before the task's window.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from typing import Any

from kctl.errors import BudgetExceededError
from kctl.inspect.ranges import (
    FramePair, RangeDecoder, RequestHalf, ResponseHalf, StreamCoverage, connection_key,
)
from kctl.inspect.report import error_codes, throttle_time_ms
from kctl.inspect.session import DecodedFrame, RecordSet, decode_frame_bytes
from kctl.protocol.error_codes import error_for
from kctl.spark.arrow_arrays import record_batch

#: Rows per Arrow record batch a task yields.
ROWS_PER_BATCH = 4096

#: The ``requests`` table, in order.
REQUEST_COLUMNS = ("ts_ns", "file", "connection", "client", "broker", "client_id", "api_key",
                   "api_name", "api_version", "correlation_id", "request_bytes", "response_bytes",
                   "latency_ms", "throttle_time_ms", "errors", "decode_error", "marks",
                   "partitions")
PARTITION_FIELDS = ("direction", "topic", "partition", "batches", "records", "codec", "bytes",
                    "decode_error")


def arrow_schemas() -> tuple[Any, Any]:
    """(stage schema, requests schema), pyarrow; Spark's are derived from them."""
    import pyarrow as pa
    span = pa.list_(pa.struct([("seq", pa.int64()), ("len", pa.int64())]))
    part = [("direction", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
            ("batches", pa.int32()), ("records", pa.int64()), ("codec", pa.string()),
            ("bytes", pa.int64()), ("decode_error", pa.string())]
    requests = [
        ("ts_ns", pa.int64()), ("file", pa.string()), ("connection", pa.string()),
        ("client", pa.string()), ("broker", pa.string()), ("client_id", pa.string()),
        ("api_key", pa.int32()), ("api_name", pa.string()), ("api_version", pa.int32()),
        ("correlation_id", pa.int32()), ("request_bytes", pa.int64()),
        ("response_bytes", pa.int64()), ("latency_ms", pa.float64()),
        ("throttle_time_ms", pa.int32()), ("errors", pa.list_(pa.string())),
        ("decode_error", pa.string()), ("marks", pa.list_(pa.string()))]
    stage = pa.schema(
        [("kind", pa.string()), ("range_index", pa.int32())] + requests
        + [("partitions", pa.list_(pa.struct(part + [("topic_id", pa.string())]))),
           ("req_packet", pa.int64()), ("resp_packet", pa.int64()),
           ("req_seq", pa.int64()), ("resp_seq", pa.int64()),
           ("req_unmarked_seq", pa.int64()), ("resp_unmarked_seq", pa.int64()),
           ("raw", pa.binary()),
           ("coverage", pa.struct([
               ("direction", pa.string()), ("first_seen_packet", pa.int64()),
               ("base", pa.int64()), ("framed", pa.bool_()), ("started_unsynced", pa.bool_()),
               ("breaks", pa.int32()), ("owned", pa.int64()), ("skip_seq", pa.int64()),
               ("skip_len", pa.int64()),
               ("claims", span), ("frames", span), ("tails", span)])),
           ("topic", pa.struct([("topic_id", pa.string()), ("name", pa.string()),
                                ("packet", pa.int64())])),
           ("notice", pa.struct([("kind", pa.string()), ("direction", pa.string()),
                                 ("offset", pa.int64()), ("message", pa.string())]))])
    return stage, pa.schema(requests + [("partitions", pa.list_(pa.struct(part)))])


# -- frames -> rows ---------------------------------------------------------------------------------

def _name(f: DecodedFrame) -> str:
    return f.api_name or ("unmatched" if "unmatched" in f.marks else f"api{f.api_key}")


def _topic_ids(f: DecodedFrame) -> list[str | None]:
    """The topic id of each record set when the frame named its topic by id alone."""
    body = f.body
    if f.api_key == 0 and f.direction == "request":
        topics = [(t.name, getattr(t, "topic_id", None), len(t.partition_data)) for t in body.topic_data]
    else:
        topics = [(t.topic, getattr(t, "topic_id", None), len(t.partitions)) for t in body.responses]
    out: list[str | None] = []
    for name, tid, n in topics:
        out += [str(tid) if not name and tid is not None and tid.int else None] * n
    return out


def _records_error(rs: RecordSet) -> str | None:
    """Why a record set's batches were not all walked, as decode's one-line view says it."""
    if rs.error is None:
        return None
    what = "records not decoded" if isinstance(rs.error, BudgetExceededError) else "bad records"
    return f"{what} ({rs.error.reason})"


def _partitions(f: DecodedFrame, direction: str) -> list[dict[str, Any]]:
    ids = _topic_ids(f) if f.record_sets else []
    return [{"direction": direction, "topic": rs.topic, "partition": rs.partition,
             "batches": rs.batch_count, "records": rs.record_count,
             "codec": ",".join(rs.codecs) or None, "bytes": rs.size_bytes,
             "decode_error": _records_error(rs), "topic_id": ids[i] if i < len(ids) else None}
            for i, rs in enumerate(f.record_sets)]


def _records_errors(f: DecodedFrame) -> list[str]:
    """The error names decode --summary counts for a frame's record sets."""
    return ["RECORDS_OVER_BUDGET" if isinstance(rs.error, BudgetExceededError)
            else "RECORDS_DECODE_ERROR" for rs in f.record_sets if rs.error is not None]


def pair_row(req: DecodedFrame | None, resp: DecodedFrame | None) -> dict[str, Any]:
    """A ``requests`` row (with the stage's internal columns) for a request and/or response.
    Counting follows ``kctl decode --summary``: sizes include the 4-byte size prefix; every
    non-zero error code counts once; a frame that did not decode counts as DECODE_ERROR, a
    record set whose batches did not as RECORDS_DECODE_ERROR (RECORDS_OVER_BUDGET when the
    decompression budget stopped it), and the row's ``decode_error`` says the first of them."""
    f = req if req is not None else resp
    assert f is not None
    errors: list[str] = []
    if req is not None:
        if req.error is not None:
            errors.append("DECODE_ERROR")
        errors += _records_errors(req)
    throttle = None
    if resp is not None:
        if resp.body is not None:
            errors += [error_for(c).name for c in error_codes(resp.body) if c]
            throttle = throttle_time_ms(resp.body, resp.api_version)
        if resp.error is not None:
            errors.append("DECODE_ERROR")
        errors += _records_errors(resp)
    parts = []
    if req is not None and req.api_key == 0 and req.body is not None:
        parts += _partitions(req, "produce")
    if resp is not None and resp.api_key == 1 and resp.body is not None:
        parts += _partitions(resp, "fetch")
    decode_error = next((str(x.error) for x in (req, resp) if x is not None and x.error is not None), None)
    if decode_error is None:
        decode_error = next((f"{p['topic']}/{p['partition']}: {p['decode_error']}" for p in parts
                             if p["decode_error"] is not None), None)
    marks = sorted({m for x in (req, resp) if x is not None for m in x.marks})
    latency = None
    if resp is not None and resp.latency_ns is not None:
        latency = resp.latency_ns / 1e6
    return {
        "kind": "pair", "ts_ns": f.ts_ns, "file": f.file, "connection": str(f.conn),
        "client": str(f.conn.client), "broker": str(f.conn.broker),
        "client_id": req.client_id if req is not None else None,
        "api_key": f.api_key, "api_name": _name(f), "api_version": f.api_version,
        "correlation_id": f.correlation_id,
        "request_bytes": req.size + 4 if req is not None else None,
        "response_bytes": resp.size + 4 if resp is not None else None,
        "latency_ms": latency, "throttle_time_ms": throttle, "errors": errors,
        "decode_error": decode_error, "marks": marks, "partitions": parts,
        "req_packet": req.packet if req is not None else None,
        "resp_packet": resp.packet if resp is not None else None,
    }


def merge_halves(r: dict[str, Any], s: dict[str, Any]) -> dict[str, Any]:
    """A request half and the response half the join paired with it, as one pair row. A
    response that its task could not decode (``raw``) is decoded now, with its request's
    API key and version, as ``CaptureDecoder`` would have."""
    if s.get("raw") is not None:
        s = _decoded_response(s, r)
    out = dict(r)
    out.update(kind="pair", response_bytes=s["response_bytes"],
               latency_ms=(s["ts_ns"] - r["ts_ns"]) / 1e6,
               throttle_time_ms=s["throttle_time_ms"],
               errors=list(r["errors"] or []) + list(s["errors"] or []),
               decode_error=r["decode_error"] if r["decode_error"] is not None else s["decode_error"],
               marks=sorted(set(r["marks"] or []) | set(s["marks"] or [])),
               partitions=list(r["partitions"] or []) + list(s["partitions"] or []),
               resp_packet=s["resp_packet"], resp_seq=s["resp_seq"],
               resp_unmarked_seq=s["resp_unmarked_seq"], raw=None)
    return out


def _decoded_response(s: dict[str, Any], r: dict[str, Any]) -> dict[str, Any]:
    if r["api_key"] is None or r["api_version"] is None:
        return dict(s, raw=None)
    df = decode_frame_bytes(s["raw"], size_prefix=False, api_key=r["api_key"],
                            api_version=r["api_version"])
    from kctl.inspect.reassembly import ConnectionId, Endpoint
    df.file, df.ts_ns = s["file"], s["ts_ns"]
    df.conn = ConnectionId(Endpoint("-", 0), Endpoint("-", 0))
    row = pair_row(None, df)
    marks = set(row["marks"]) | (set(s["marks"] or []) - {"unmatched"})
    return dict(s, raw=None, throttle_time_ms=row["throttle_time_ms"], errors=row["errors"],
                decode_error=row["decode_error"], marks=sorted(marks),
                partitions=row["partitions"])


# -- a task ---------------------------------------------------------------------------------------

def range_rows(reader: RangeDecoder, stream: Any) -> Iterator[dict[str, Any]]:
    """Every stage row of one range: pairs and halves as they come, then the coverage, the
    notices the reader owns and the topic names it saw."""
    index = reader.range.index
    for it in reader.run(stream):
        if isinstance(it, FramePair):
            row = pair_row(it.request, it.response)
            row.update(req_seq=it.request_seq, resp_seq=it.response_seq,
                       req_unmarked_seq=it.request_seq if it.request_unmarked else None,
                       resp_unmarked_seq=it.response_seq if it.response_unmarked else None)
        elif isinstance(it, RequestHalf):
            row = pair_row(it.request, None)
            row.update(kind="request", req_seq=it.seq,
                       req_unmarked_seq=it.seq if it.unmarked else None)
        else:
            assert isinstance(it, ResponseHalf)
            resp = it.response
            row = pair_row(None, resp)
            row.update(kind="response", resp_seq=it.seq,
                       resp_unmarked_seq=it.seq if it.unmarked else None)
            if "unmatched" in resp.marks and resp.correlation_id is not None:
                row["raw"] = struct.pack(">i", resp.correlation_id) + (resp.raw_body or b"")
        row["range_index"] = index
        yield row
    for cv in reader.coverage.values():
        yield {"kind": "coverage", "range_index": index, "file": cv.file,
               "connection": cv.connection, "coverage": coverage_struct(cv)}
    for n in reader.notices:
        yield {"kind": "notice", "range_index": index, "file": n.file,
               "connection": None if n.conn is None else connection_key(n.conn),
               "notice": {"kind": n.kind, "direction": n.direction, "offset": n.offset,
                          "message": n.message}}
    for tid, (name, packet) in reader.topics.items():
        yield {"kind": "topic", "range_index": index, "file": reader.range.file,
               "topic": {"topic_id": tid, "name": name, "packet": packet}}


def coverage_struct(cv: StreamCoverage) -> dict[str, Any]:
    spans = lambda xs: [{"seq": s, "len": n} for s, n in xs]  # noqa: E731
    skip = cv.initial_skip
    return {"direction": cv.direction, "first_seen_packet": cv.first_seen_packet, "base": cv.base,
            "framed": cv.framed, "started_unsynced": cv.started_unsynced, "breaks": cv.breaks,
            "owned": cv.owned,
            "skip_seq": skip[0] if skip else None, "skip_len": skip[1] if skip else None,
            "claims": spans(cv.claims), "frames": spans(cv.frames), "tails": spans(cv.tails)}


def coverage_from(file: str, connection: str, range_index: int, c: dict[str, Any]) -> StreamCoverage:
    """The driver's ``StreamCoverage`` back from a coverage struct."""
    spans = lambda xs: [(x["seq"], x["len"]) for x in xs or ()]  # noqa: E731
    skip = (c["skip_seq"], c["skip_len"]) if c["skip_seq"] is not None else None
    return StreamCoverage(file, connection, c["direction"], range_index, c["first_seen_packet"],
                          spans(c["claims"]), spans(c["frames"]), skip, spans(c["tails"]),
                          breaks=c["breaks"], owned=c["owned"], base=c["base"],
                          framed=c["framed"], started_unsynced=c["started_unsynced"])


def arrow_batches(rows: Iterable[dict[str, Any]], schema: Any) -> Iterator[Any]:
    """Rows (missing keys are null) as record batches of ``schema``, built without
    ``pa.array`` (arrow_arrays.py: it would import pandas into every Python worker)."""
    buf: list[dict[str, Any]] = []
    for r in rows:
        buf.append(r)
        if len(buf) >= ROWS_PER_BATCH:
            yield record_batch(buf, schema)
            buf = []
    if buf:
        yield record_batch(buf, schema)
