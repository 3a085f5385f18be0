"""``kctl analyze``: captures -> Parquet tables ``requests`` and ``partitions`` -> Spark SQL summaries.

How this works
--------------
1. Plan (driver): each capture becomes one or more SHARDS. A file larger than
   ``split_bytes`` is split so that several tasks work on it: a quick index
   pass over its first ``INDEX_SEGMENTS`` TCP segments counts payload bytes per
   connection, and the connections are dealt to ``k`` shards largest first
   (balanced by bytes). A connection first seen after the index window goes to
   the shard its stable hash names. A TCP stream is never split (reassembly is
   sequential), so a capture of one connection is one shard.
2. Decode (tasks, ``mapInArrow``): a task reads its file, keeps the segments of
   its connections, and runs the same ``CaptureDecoder`` that ``kctl decode``
   uses. Frames are paired per connection by correlation id into one row per
   request/response pair (a request never answered, e.g. acks=0, or a response
   whose request is not in the capture, is a row with the other side null); the
   record sets of Produce requests and Fetch responses ride along as a
   ``partitions`` array. Rows leave the task as Arrow record batches whose
   types match ``REQUEST_SCHEMA`` exactly.
3. Write: ``requests`` (the pair rows) and ``partitions`` (the array exploded,
   with the pair's time, connection and client) as Parquet under ``--out``.
4. Summaries, in Spark SQL over those tables: latency percentiles per API
   (exact nearest rank, as HdrHistogram ranks), throughput per topic per time bucket, top clients by
   bytes, errors by name. Counting follows ``kctl decode --summary``
   (inspect/summary.py): request bytes and response bytes include the 4-byte
   size prefix; every non-zero error code in a response counts once, and a frame
   that did not decode counts as ``DECODE_ERROR``.

Files must be readable at the same path by every executor (local mode, or a
shared file system on a cluster).
"""

from __future__ import annotations

import heapq
import math
import os
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from kctl.errors import ConfigError, DecodeError
from kctl.inspect.pcap import CaptureReader, TcpSegment, read_segments, tcp_segment
from kctl.inspect.report import error_codes, throttle_time_ms
from kctl.inspect.session import CaptureDecoder, CaptureNotice, DecodedFrame
from kctl.protocol.error_codes import error_for

#: Files above this size are split across tasks (by connection).
DEFAULT_SPLIT_BYTES = 64 << 20
#: Segments the driver's index pass reads per split file.
INDEX_SEGMENTS = 200_000
#: Rows per Arrow record batch a task yields.
ROWS_PER_BATCH = 8192
PERCENTILES = (0.5, 0.9, 0.99, 0.999, 1.0)


def conn_key(src: str, src_port: int, dst: str, dst_port: int) -> str:
    """The same key for both directions of one TCP connection."""
    a, b = f"{src}:{src_port}", f"{dst}:{dst_port}"
    return f"{a}|{b}" if a <= b else f"{b}|{a}"


def _hash_shard(key: str, shards: int) -> int:
    return zlib.crc32(key.encode()) % shards


@dataclass(frozen=True)
class Shard:
    file: str
    index: int              # this shard's number within its file
    shards: int             # how many shards the file has
    conns: tuple[str, ...]  # connections assigned by the index pass (others: by hash)


def plan_shards(paths: Sequence[str], *, split_bytes: int = DEFAULT_SPLIT_BYTES,
                max_shards_per_file: int = 64) -> list[Shard]:
    out: list[Shard] = []
    for path in paths:
        path = str(path)
        try:
            size = os.path.getsize(path)
            with open(path, "rb") as f:
                CaptureReader(f, name=path)        # fails now on a file that is no capture
        except OSError as e:
            raise ConfigError(f"{path}: cannot read: {e.strerror or e}") from None
        except DecodeError as e:
            raise ConfigError(f"{path}: not a pcap or pcapng capture ({e})") from None
        want = min(max_shards_per_file, max(1, math.ceil(size / max(1, split_bytes))))
        if want == 1:
            out.append(Shard(path, 0, 1, ()))
            continue
        by_conn: Counter = Counter()
        with open(path, "rb") as f:
            for n, seg in enumerate(read_segments(f, name=path)):
                if n >= INDEX_SEGMENTS:
                    break
                by_conn[conn_key(seg.src, seg.src_port, seg.dst, seg.dst_port)] += len(seg.payload) + 1
        k = max(1, min(want, len(by_conn)))
        heap = [(0, i) for i in range(k)]
        assigned: list[list[str]] = [[] for _ in range(k)]
        for key, nbytes in by_conn.most_common():
            load, i = heapq.heappop(heap)
            assigned[i].append(key)
            heapq.heappush(heap, (load + nbytes, i))
        out += [Shard(path, i, k, tuple(sorted(assigned[i]))) for i in range(k)]
    return out


# -- rows -------------------------------------------------------------------------------------------

def _name(f: DecodedFrame) -> str:
    return f.api_name or ("unmatched" if "unmatched" in f.marks else f"api{f.api_key}")


def _partitions(f: DecodedFrame, direction: str) -> list[dict[str, Any]]:
    return [{"direction": direction, "topic": rs.topic, "partition": rs.partition,
             "batches": rs.batch_count, "records": rs.record_count,
             "codec": ",".join(rs.codecs) or None, "bytes": rs.size_bytes}
            for rs in f.record_sets]


def pair_row(req: DecodedFrame | None, resp: DecodedFrame | None) -> dict[str, Any]:
    f = req if req is not None else resp
    assert f is not None
    errors: list[str] = []
    if req is not None and req.error is not None:
        errors.append("DECODE_ERROR")
    throttle = None
    if resp is not None:
        if resp.body is not None:
            errors += [error_for(c).name for c in error_codes(resp.body) if c]
            throttle = throttle_time_ms(resp.body)
        if resp.error is not None:
            errors.append("DECODE_ERROR")
    parts = []
    if req is not None and req.api_key == 0 and req.body is not None:
        parts += _partitions(req, "produce")
    if resp is not None and resp.api_key == 1 and resp.body is not None:
        parts += _partitions(resp, "fetch")
    decode_error = next((str(x.error) for x in (req, resp) if x is not None and x.error is not None), None)
    marks = sorted({m for x in (req, resp) if x is not None for m in x.marks})
    return {
        "ts_ns": f.ts_ns, "file": f.file, "connection": str(f.conn), "client": str(f.conn.client),
        "broker": str(f.conn.broker), "client_id": req.client_id if req is not None else None,
        "api_key": f.api_key, "api_name": _name(f), "api_version": f.api_version,
        "correlation_id": f.correlation_id,
        "request_bytes": req.size + 4 if req is not None else None,
        "response_bytes": resp.size + 4 if resp is not None else None,
        "latency_ms": resp.latency_ns / 1e6 if resp is not None and resp.latency_ns is not None else None,
        "throttle_time_ms": throttle, "errors": errors, "decode_error": decode_error,
        "marks": marks, "partitions": parts,
    }


def _segments(shard: Shard, all_known: frozenset) -> Iterator[TcpSegment]:
    """The TCP segments of this shard's connections: those the index pass dealt it,
    and those it never saw whose hash names this shard."""
    mine = set(shard.conns)
    with open(shard.file, "rb") as f:
        for pkt in CaptureReader(f, name=shard.file):
            seg = tcp_segment(pkt)
            if not isinstance(seg, TcpSegment):
                continue
            if shard.shards > 1:
                key = conn_key(seg.src, seg.src_port, seg.dst, seg.dst_port)
                if key not in mine and (key in all_known
                                        or _hash_shard(key, shard.shards) != shard.index):
                    continue
            yield seg


def decode_shard(shard: Shard, broker_ports: Iterable[int], all_known: frozenset = frozenset(),
                 ) -> Iterator[dict[str, Any]]:
    """The pair rows of one shard (one file's connections)."""
    dec = CaptureDecoder(set(broker_ports), file=shard.file)
    pending: dict[tuple[Any, int], DecodedFrame] = {}

    def handle(items: list) -> Iterator[dict[str, Any]]:
        for it in items:
            if isinstance(it, CaptureNotice):
                continue
            if it.direction == "request":
                k = (it.conn, it.correlation_id)
                old = pending.pop(k, None)
                if old is not None:
                    yield pair_row(old, None)
                pending[k] = it
            else:
                req = pending.pop((it.conn, it.correlation_id), None)
                yield pair_row(req, it)

    try:
        for seg in _segments(shard, all_known):
            yield from handle(dec.on_segment(seg))
    except DecodeError:
        pass    # a broken tail: kctl decode reports it; the frames before it are kept
    yield from handle(dec.finish())
    for req in pending.values():
        yield pair_row(req, None)


# -- Spark -------------------------------------------------------------------------------------------

def _schemas() -> tuple[Any, Any]:
    import pyarrow as pa
    from pyspark.sql import types as T
    part = T.StructType([
        T.StructField("direction", T.StringType()), T.StructField("topic", T.StringType()),
        T.StructField("partition", T.IntegerType()), T.StructField("batches", T.IntegerType()),
        T.StructField("records", T.LongType()), T.StructField("codec", T.StringType()),
        T.StructField("bytes", T.LongType())])
    spark_schema = T.StructType([
        T.StructField("ts_ns", T.LongType()), T.StructField("file", T.StringType()),
        T.StructField("connection", T.StringType()), T.StructField("client", T.StringType()),
        T.StructField("broker", T.StringType()), T.StructField("client_id", T.StringType()),
        T.StructField("api_key", T.IntegerType()), T.StructField("api_name", T.StringType()),
        T.StructField("api_version", T.IntegerType()), T.StructField("correlation_id", T.IntegerType()),
        T.StructField("request_bytes", T.LongType()), T.StructField("response_bytes", T.LongType()),
        T.StructField("latency_ms", T.DoubleType()), T.StructField("throttle_time_ms", T.IntegerType()),
        T.StructField("errors", T.ArrayType(T.StringType())),
        T.StructField("decode_error", T.StringType()),
        T.StructField("marks", T.ArrayType(T.StringType())),
        T.StructField("partitions", T.ArrayType(part))])
    pa_part = pa.struct([("direction", pa.string()), ("topic", pa.string()),
                         ("partition", pa.int32()), ("batches", pa.int32()),
                         ("records", pa.int64()), ("codec", pa.string()), ("bytes", pa.int64())])
    arrow_schema = pa.schema([
        ("ts_ns", pa.int64()), ("file", pa.string()), ("connection", pa.string()),
        ("client", pa.string()), ("broker", pa.string()), ("client_id", pa.string()),
        ("api_key", pa.int32()), ("api_name", pa.string()), ("api_version", pa.int32()),
        ("correlation_id", pa.int32()), ("request_bytes", pa.int64()),
        ("response_bytes", pa.int64()), ("latency_ms", pa.float64()),
        ("throttle_time_ms", pa.int32()), ("errors", pa.list_(pa.string())),
        ("decode_error", pa.string()), ("marks", pa.list_(pa.string())),
        ("partitions", pa.list_(pa_part))])
    return spark_schema, arrow_schema


def _arrow_batches(rows: Iterator[dict[str, Any]], arrow_schema: Any) -> Iterator[Any]:
    import pyarrow as pa
    names = arrow_schema.names
    buf: list[dict[str, Any]] = []

    def flush() -> Any:
        cols = [pa.array([r[n] for r in buf], type=arrow_schema.field(n).type) for n in names]
        return pa.RecordBatch.from_arrays(cols, schema=arrow_schema)

    for r in rows:
        buf.append(r)
        if len(buf) >= ROWS_PER_BATCH:
            yield flush()
            buf = []
    if buf:
        yield flush()


def _decode_batches(broker_ports: list[int], known: dict[str, frozenset]):
    def run(batches: Iterator[Any]) -> Iterator[Any]:
        _, arrow_schema = _schemas()
        for b in batches:
            for d in b.to_pylist():
                shard = Shard(d["file"], d["index"], d["shards"], tuple(d["conns"] or ()))
                yield from _arrow_batches(
                    decode_shard(shard, broker_ports, known.get(shard.file, frozenset())), arrow_schema)
    return run


@dataclass
class AnalyzeResult:
    out: str
    shards: int
    requests: int
    partitions: int
    latency: list[dict[str, Any]] = field(default_factory=list)
    throughput: list[dict[str, Any]] = field(default_factory=list)
    clients: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"out": self.out, "shards": self.shards, "requests": self.requests,
                "partitions": self.partitions, "latency": self.latency,
                "throughput": self.throughput, "top_clients": self.clients, "errors": self.errors}


def analyze(paths: Sequence[str], broker_ports: Iterable[int], out: str, *, spark: Any,
            split_bytes: int = DEFAULT_SPLIT_BYTES, bucket_s: float = 1.0,
            top: int = 10) -> AnalyzeResult:
    """Decodes the captures into ``out``/requests and ``out``/partitions; returns the summaries."""
    from pyspark.sql import functions as F
    from kctl.spark.session import run_job

    if bucket_s <= 0:
        raise ConfigError(f"--bucket must be positive, not {bucket_s}")
    shards = plan_shards([str(p) for p in paths], split_bytes=split_bytes)
    known = {s.file: frozenset(c for t in shards if t.file == s.file for c in t.conns) for s in shards}
    ports = sorted(set(broker_ports))
    spark_schema, _ = _schemas()
    sc = spark.sparkContext
    rows = [(s.file, s.index, s.shards, list(s.conns)) for s in shards]
    shard_df = spark.createDataFrame(
        sc.parallelize(rows, len(rows)), "file string, index int, shards int, conns array<string>")
    pairs = shard_df.mapInArrow(_decode_batches(ports, known), spark_schema)
    req_path = os.path.join(out, "requests")
    part_path = os.path.join(out, "partitions")

    def write() -> None:
        # Decode once into the requests table; the partitions table is derived from it.
        pairs.write.mode("overwrite").parquet(req_path)
        r = spark.read.parquet(req_path)
        (r.select("ts_ns", "file", "connection", "client", "client_id", "api_name",
                  "correlation_id", F.explode("partitions").alias("p"))
          .select("ts_ns", "file", "connection", "client", "client_id", "api_name",
                  "correlation_id", "p.*")
          .write.mode("overwrite").parquet(part_path))

    run_job(spark, write, description="kctl analyze: decode")
    requests = spark.read.parquet(req_path)
    partitions = spark.read.parquet(part_path)
    requests.createOrReplaceTempView("requests")
    partitions.createOrReplaceTempView("partitions")
    # Nearest rank as HdrHistogram (kctl decode --summary) defines it: the value of rank
    # max(1, round(p * n)) in ascending order; no interpolation. A window sort per API
    # keeps it distributed (no list of every latency in one place).
    pct = ", ".join(f"max(CASE WHEN rn = greatest(1, floor({p} * n + 0.5)) THEN latency_ms END) AS p{i}"
                    for i, p in enumerate(PERCENTILES))

    def sql(q: str) -> list[dict[str, Any]]:
        return run_job(spark, lambda: [r.asDict(recursive=True) for r in spark.sql(q).collect()],
                       description="kctl analyze: summary")

    result = AnalyzeResult(out, len(shards), requests.count(), partitions.count())
    lat = sql(f"""
        WITH ranked AS (
            SELECT api_name, latency_ms,
                   row_number() OVER (PARTITION BY api_name ORDER BY latency_ms) AS rn,
                   count(*) OVER (PARTITION BY api_name) AS n
            FROM requests WHERE latency_ms IS NOT NULL),
        pcts AS (SELECT api_name, {pct} FROM ranked GROUP BY api_name)
        SELECT r.api_name, count(request_bytes) AS requests, count(response_bytes) AS responses,
               coalesce(sum(request_bytes), 0) AS request_bytes,
               coalesce(sum(response_bytes), 0) AS response_bytes,
               count(latency_ms) AS latency_count, avg(latency_ms) AS latency_mean,
               {", ".join(f"first(pcts.p{i}) AS p{i}" for i in range(len(PERCENTILES)))}
        FROM requests r LEFT JOIN pcts ON r.api_name = pcts.api_name
        GROUP BY r.api_name ORDER BY r.api_name""")
    for r in lat:
        p = [r.pop(f"p{i}") for i in range(len(PERCENTILES))]
        mean = r.pop("latency_mean")
        r["latency_ms"] = ({f"p{q * 100:g}": v for q, v in zip(PERCENTILES, p)} | {"mean": mean}
                           if r["latency_count"] else None)
    result.latency = lat
    bucket_ns = int(bucket_s * 1e9)
    result.throughput = sql(f"""
        SELECT topic, direction, CAST(floor(ts_ns / {bucket_ns}) * {bucket_ns} AS BIGINT) AS bucket_ns,
               sum(records) AS records, sum(bytes) AS bytes,
               sum(records) / {bucket_s} AS records_per_s, sum(bytes) / {bucket_s} / 1048576 AS mb_per_s
        FROM partitions GROUP BY topic, direction, bucket_ns ORDER BY topic, direction, bucket_ns""")
    result.clients = sql(f"""
        SELECT client_id, count(DISTINCT connection) AS connections, count(*) AS requests,
               coalesce(sum(request_bytes), 0) + coalesce(sum(response_bytes), 0) AS bytes,
               coalesce(sum(request_bytes), 0) AS request_bytes,
               coalesce(sum(response_bytes), 0) AS response_bytes
        FROM requests GROUP BY client_id ORDER BY bytes DESC, client_id LIMIT {int(top)}""")
    result.errors = sql("""
        SELECT error, count(*) AS count FROM requests LATERAL VIEW explode(errors) e AS error
        GROUP BY error ORDER BY count DESC, error""")
    return result
