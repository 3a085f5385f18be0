"""``kctl analyze``: captures -> Parquet tables ``requests`` and ``partitions`` -> Spark SQL summaries.

How this works
--------------
1. Index (driver): each capture, a path or a URI (storage.py), is cut into ranges at
   packet boundaries (``kctl.inspect.ranges.index_capture``), about ``range_bytes`` each:
   by default enough for ``TASKS_PER_SLOT`` tasks per task slot of the cluster (one task
   on a single slot, where more would only add their cost), so one
   long TCP connection keeps every core busy. Only the ranges (typed, picklable
   ``CaptureRange`` values) go to the tasks; each task opens its capture itself, at its
   window's byte offset.

2. Decode (tasks, ``mapInArrow``): a ``RangeDecoder`` per range reassembles the streams
   from a lookback window before the range, decodes the frames its range owns (a frame
   belongs to the range of the packet that first carried its first byte) and reads past
   the range's end until they are whole. Rows leave as Arrow batches of the stage schema
   (capture_rows.py): pairs, halves, stream coverage, topic names. The stage is cached.

3. Check (driver): the coverage rows go through ``check_coverage``; a connection whose
   readers may differ from a sequential decode is decoded again from the start of its
   file by one task, and its rows replace the others'. Notices (decode's damage report)
   are counted once each: the passing streams' from the check, the repaired connections'
   from their repair, malformed packets from the range holding them, a truncated or
   broken file from the index (ranges.py, 6.).

4. Pair (Spark): request and response halves that landed in different tasks are joined on
   (file, connection, correlation id), sort-merge style: shuffled by that key, sorted by
   capture order (packet, then sequence number) and merged in one pass that keeps, per
   key, the one outstanding request ``CaptureDecoder`` keeps (a later request replaces an
   unanswered one; a response takes the waiting request). A response decoded without its
   request is decoded once its request is known.

5. Write: ``requests`` (the pair rows; topic ids named from the Metadata answers that came
   before them in the file; 'resynced' marks where decode has them) and ``partitions`` (the
   record sets exploded) as Parquet under ``--out``. The requests are cached, and both
   writes and the summaries run at once from them (each row made once), in one partition
   per ``FRAMES_PER_PARTITION`` frames the readers owned (the coverage rows count them):
   a partition per range would only add tasks to every job after the decode.

6. Summaries, in Spark SQL over those tables: latency percentiles per API (exact nearest
   rank, as Java's HdrHistogram ranks, then given as decode's histogram gives that rank:
   kctl/percentiles.py ``bucket_latency_ms``), throughput per topic per time bucket, top clients by
   bytes, errors per (API, error name) and their totals by name, notices by kind. Counting
   follows ``kctl decode --summary`` (an error under the API of the row that carried it,
   ``unmatched`` for a response whose request no reader saw).
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from kctl.errors import ConfigError, DecodeError
from kctl.inspect.ranges import (
    DEFAULT_LOOKBACK_BYTES, CaptureIndex, CaptureRange, RangeDecoder, check_coverage,
    index_capture,
)
from kctl.percentiles import bucket_latency_ms, requested_percentile
from kctl.spark import capture_rows as rows_
from kctl.spark.storage import CaptureFile, locate, open_at

#: Tasks per task slot when the range size is not given: more than one, so that a slow
#: range (a burst of small records) does not leave the other slots idle at the end, and
#: few, as a task costs 0.1-0.15 s of its slot's time besides its range (2 rather than 4:
#: analyze local[2] of a 232 MB capture 0.3 s faster, benchmarks/analyze.py).
TASKS_PER_SLOT = 2
#: Smallest automatic range: below this a task's fixed cost outweighs its work.
MIN_RANGE_BYTES = 4 << 20
#: Frames per partition of the decoded ``requests`` (about two frames a row). The two
#: writes and the summaries run one task per partition of it in several jobs, and a task
#: costs about 0.05 s to schedule however few its rows: a 232 MB load capture makes 2,400
#: rows, which one task writes in milliseconds; a partition per range (8 on local[2])
#: made the work after the decode 3.0 s instead of 1.9 s.
FRAMES_PER_PARTITION = 400_000
PERCENTILES = (50.0, 90.0, 99.0, 99.9, 100.0)     # in percent


@dataclass(frozen=True, slots=True)
class CaptureSource:
    """One capture as its tasks read it: where it is, the broker ports its frames are
    decoded on, and the pcapng interfaces read (a leg of a kctl inspect capture, as
    ``kctl decode --leg`` chooses it; ``None``: every packet). Picklable: tasks get it."""

    file: CaptureFile
    broker_ports: tuple[int, ...]
    interfaces: tuple[int, ...] | None = None

    @property
    def name(self) -> str:
        return self.file.name


def sources(paths: Iterable[str], broker_ports: Iterable[int],
            interfaces: Iterable[int] | None = None) -> list[CaptureSource]:
    """The same ports (and interfaces) for every capture (paths or URIs, checked here)."""
    ports = tuple(sorted(set(broker_ports)))
    ifaces = None if interfaces is None else tuple(sorted(set(interfaces)))
    return [CaptureSource(locate(str(p)), ports, ifaces) for p in paths]


@dataclass(frozen=True, slots=True)
class RepairTask:
    """Connections of one capture to decode again from its first packet."""

    source: CaptureSource
    whole: CaptureRange
    connections: tuple[str, ...]


@dataclass
class AnalyzeResult:
    out: str
    tasks: int
    requests: int
    partitions: int
    repaired: list[str] = field(default_factory=list)     # "file: connection", decoded again
    damaged: list[str] = field(default_factory=list)      # captures whose structure breaks
    notices: dict[str, int] = field(default_factory=dict)  # by kind, as decode --summary
    latency: list[dict[str, Any]] = field(default_factory=list)
    throughput: list[dict[str, Any]] = field(default_factory=list)
    clients: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)            # {error, count}
    errors_by_api: list[dict[str, Any]] = field(default_factory=list)     # {api_name, error, count}

    def to_dict(self) -> dict[str, Any]:
        return {"out": self.out, "tasks": self.tasks, "requests": self.requests,
                "partitions": self.partitions, "repaired_connections": self.repaired,
                "damaged": self.damaged, "notices": self.notices, "latency": self.latency,
                "throughput": self.throughput, "top_clients": self.clients,
                "errors": self.errors, "errors_by_api": self.errors_by_api}


# -- plan -----------------------------------------------------------------------------------------

def plan_ranges(files: Sequence[CaptureFile], *, range_bytes: int,
                lookback_bytes: int = DEFAULT_LOOKBACK_BYTES) -> list[CaptureIndex]:
    out = []
    for f in files:
        try:
            with open_at(f.location) as stream:
                out.append(index_capture(stream, file=f.name, range_bytes=range_bytes,
                                         lookback_bytes=lookback_bytes))
        except DecodeError as e:
            raise ConfigError(f"{f.name}: not a pcap or pcapng capture ({e})") from None
    return out


def auto_range_bytes(files: Sequence[CaptureFile], slots: int) -> int:
    """About ``TASKS_PER_SLOT`` ranges per slot; one slot takes one range: the extra tasks
    only keep several slots busy to the end, and on one slot each would only add its cost
    (analyze local[1] of a 232 MB capture 11.46 s -> 11.00 s, medians of 3)."""
    total = sum(f.size for f in files)
    tasks = slots * TASKS_PER_SLOT if slots > 1 else 1
    return max(MIN_RANGE_BYTES, math.ceil(total / tasks))


# -- tasks ----------------------------------------------------------------------------------------

def _decode_task(ranges: tuple[CaptureRange, ...], by_name: dict[str, CaptureSource]):
    def run(batches: Iterator[Any]) -> Iterator[Any]:
        stage, _ = rows_.arrow_schemas()
        for b in batches:
            for i in b.column(0).to_pylist():
                rng = ranges[i]
                src = by_name[rng.file]
                reader = RangeDecoder(rng, src.broker_ports, interfaces=src.interfaces)
                with open_at(src.file.location, rng.window.offset) as stream:
                    yield from rows_.arrow_batches(rows_.range_rows(reader, stream), stage)
    return run


def _repair_task(tasks: tuple[RepairTask, ...]):
    def run(batches: Iterator[Any]) -> Iterator[Any]:
        stage, _ = rows_.arrow_schemas()
        for b in batches:
            for i in b.column(0).to_pylist():
                t = tasks[i]
                reader = RangeDecoder(t.whole, t.source.broker_ports, connections=t.connections,
                                      interfaces=t.source.interfaces)
                with open_at(t.source.file.location, t.whole.window.offset) as stream:
                    rows = (r for r in rows_.range_rows(reader, stream)
                            if r["kind"] in ("pair", "notice"))
                    yield from rows_.arrow_batches(rows, stage)
    return run


def _join_task():
    """Halves sorted by (file, connection, correlation id, capture order) -> pair rows. Per
    key, as ``CaptureDecoder`` keeps one outstanding request per correlation id: a request
    waits (replacing, unanswered, an older one), a response takes the waiting request or
    stays alone."""
    def run(batches: Iterator[Any]) -> Iterator[Any]:
        stage, _ = rows_.arrow_schemas()

        def paired() -> Iterator[dict[str, Any]]:
            key: tuple | None = None
            waiting: dict[str, Any] | None = None
            for b in batches:
                for row in b.to_pylist():
                    k = (row["file"], row["connection"], row["correlation_id"])
                    if k != key:
                        if waiting is not None:
                            yield waiting
                        key, waiting = k, None
                    if row["kind"] == "request":
                        if waiting is not None:
                            yield waiting
                        waiting = row
                    elif waiting is not None and row["correlation_id"] is not None:
                        yield rows_.merge_halves(waiting, row)
                        waiting = None
                    else:
                        yield row
            if waiting is not None:
                yield waiting
        yield from rows_.arrow_batches(paired(), stage)
    return run


def _ids(spark: Any, n: int) -> Any:
    """A DataFrame of ids 0..n-1, one per partition: one task each."""
    return spark.range(0, n, 1, n)


# -- the pipeline ---------------------------------------------------------------------------------

def analyze(captures: Sequence[CaptureSource], out: str, *, spark: Any,
            range_bytes: int | None = None, lookback_bytes: int = DEFAULT_LOOKBACK_BYTES,
            bucket_s: float = 1.0, top: int = 10, write_mode: str = "overwrite") -> AnalyzeResult:
    """Decodes the captures into ``out``/requests and ``out``/partitions; returns the summaries.
    ``write_mode``: Spark's save mode for the tables (``errorifexists``: never replace them)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    from kctl.spark.session import available_slots, run_job

    if bucket_s <= 0:
        raise ConfigError(f"--bucket must be positive, not {bucket_s}")
    files = [c.file for c in captures]
    if len({f.name for f in files}) != len(files):
        raise ConfigError("a capture is given twice")
    slots = available_slots(spark)
    if range_bytes is None:
        range_bytes = auto_range_bytes(files, slots)
    indexes = plan_ranges(files, range_bytes=range_bytes, lookback_bytes=lookback_bytes)
    ranges = tuple(r for idx in indexes for r in idx.ranges)
    by_name = {c.name: c for c in captures}
    stage_arrow, _ = rows_.arrow_schemas()
    stage_schema = from_arrow_schema(stage_arrow)

    stage = (_ids(spark, len(ranges)).mapInArrow(_decode_task(ranges, by_name), stage_schema)
             .persist(StorageLevel.MEMORY_AND_DISK))
    try:
        side = run_job(spark, lambda: stage.where("kind IN ('coverage', 'topic', 'notice')")
                       .select("kind", "range_index", "file", "connection", "coverage", "topic",
                               "notice")
                       .collect(), description="kctl analyze: decode")
        coverages = [rows_.coverage_from(r["file"], r["connection"], r["range_index"],
                                         r["coverage"].asDict(recursive=True))
                     for r in side if r["kind"] == "coverage"]
        topics: dict[str, tuple[str, int]] = {}
        for r in side:
            if r["kind"] == "topic":
                key = f"{r['file']}|{r['topic']['topic_id']}"
                if key not in topics or r["topic"]["packet"] < topics[key][1]:
                    topics[key] = (r["topic"]["name"], r["topic"]["packet"])
        verdict = check_coverage(coverages)
        frames = sum(c.owned for c in coverages)
        repaired = sorted(verdict.repair)
        table = _pairs(spark, stage, stage_schema, repaired, indexes, by_name, slots=slots)
        table = _name_topics(table, topics)
        table = _give_marks_back(table, verdict.resynced)
        # The repairs' notices ride with the rows (one pass over the repaired connections).
        cached = table.select(
            "kind", *[F.col(c) for c in rows_.REQUEST_COLUMNS[:-1]],
            F.transform("partitions", lambda p: F.struct(
                *[p[n].alias(n) for n in rows_.PARTITION_FIELDS])).alias("partitions"), "notice"
        ).coalesce(max(1, math.ceil(frames / FRAMES_PER_PARTITION))
                   ).persist(StorageLevel.MEMORY_AND_DISK)
        requests = cached.where("kind <> 'notice'").drop("kind", "notice")
        repair_notices = cached.where("kind = 'notice'").select("file", "notice.kind")
        partitions = (requests.select("ts_ns", "file", "connection", "client", "client_id",
                                      "api_name", "correlation_id", F.explode("partitions").alias("p"))
                      .select("ts_ns", "file", "connection", "client", "client_id", "api_name",
                              "correlation_id", "p.*"))
        # Both tables and the summaries are made at once from the cached requests: each
        # job mostly waits on Spark's scheduling.
        result = run_job(spark, lambda: _write_and_summarise(
            spark, requests, partitions, repair_notices, out, bucket_s=bucket_s, top=top,
            write_mode=write_mode),
            description="kctl analyze: write and summarise")
        cached.unpersist()
    finally:
        stage.unpersist()
    result.out, result.tasks = out, len(ranges)
    result.repaired = [f"{f}: {c}" for f, c in repaired]
    result.damaged = [f"{idx.file}: {idx.damage}" for idx in indexes if idx.damage]
    result.notices = _notices(indexes, side, verdict.notices, result.notices)
    return result


def _notices(indexes: list[CaptureIndex], side: list[Any], passing: Iterable[tuple[str, str]],
             later: dict[str, int]) -> dict[str, int]:
    """The notices ``kctl decode --summary`` counts, each once: the file's end cut inside a
    record or its structure broken (the index pass), malformed packets (the reader whose
    range holds the packet), the streams that passed the check (derived by it), and
    ``later``: the repaired connections' (their repair's reader) and the decompression
    budget's (once per file, as each file's decoder says it once)."""
    counts: Counter[str] = Counter(later)
    for idx in indexes:
        if idx.damage:
            counts["error"] += 1
        elif idx.truncated:
            counts["truncated"] += 1
    counts.update(r["notice"]["kind"] for r in side if r["kind"] == "notice")
    counts.update(kind for _, kind in passing)
    return dict(sorted(counts.items()))


def _pairs(spark: Any, stage: Any, stage_schema: Any, repaired: list[tuple[str, str]],
           indexes: list[CaptureIndex], by_name: dict[str, CaptureSource], *, slots: int) -> Any:
    """Every pair row: the tasks' own pairs, the halves joined, the repaired connections."""
    from pyspark.sql import functions as F

    rows = stage.where("kind IN ('pair', 'request', 'response')")
    if repaired:
        gone = [f"{f}\u0000{c}" for f, c in repaired]
        rows = rows.where(~F.concat_ws("\u0000", "file", "connection").isin(gone))
    pairs = rows.where("kind = 'pair'")
    # The join of the halves, sort-merge style: both kinds shuffled by (file, connection,
    # correlation id), each key's halves in capture order, merged in one pass. Halves are
    # only the frames whose pair a cut separated (a few per range), so one shuffle
    # partition per task slot: more would only be more Python tasks to start.
    key = ["file", "connection", "correlation_id"]
    halves = (rows.where("kind IN ('request', 'response')")
              .withColumn("_at", F.coalesce("req_packet", "resp_packet"))
              .withColumn("_seq", F.coalesce("req_seq", "resp_seq"))
              .repartition(slots, *key).sortWithinPartitions(*key, "_at", "_seq")
              .drop("_at", "_seq"))
    table = pairs.unionByName(halves.mapInArrow(_join_task(), stage_schema))
    if repaired:
        by_file: dict[str, list[str]] = {}
        for f, c in repaired:
            by_file.setdefault(f, []).append(c)
        tasks = []
        for idx in indexes:
            if idx.file in by_file:
                first_range = idx.ranges[0]
                whole = CaptureRange(idx.file, 0, first_range.window, first_range.window, None)
                tasks += [RepairTask(by_name[idx.file], whole, (c,))
                          for c in by_file[idx.file]]
        redone = _ids(spark, len(tasks)).mapInArrow(_repair_task(tuple(tasks)), stage_schema)
        table = table.unionByName(redone)
    return table


def _name_topics(table: Any, topics: dict[str, tuple[str, int]]) -> Any:
    """Record sets that named their topic by id take the name the file's first Metadata
    answer about that id gave, when it came before them (as ``CaptureDecoder`` learns it)."""
    if not topics:
        return table
    from pyspark.sql import functions as F
    names = F.create_map(*[x for k, (name, packet) in topics.items()
                           for x in (F.lit(k), F.struct(F.lit(name).alias("name"),
                                                        F.lit(packet).alias("packet")))])

    def named(p: Any) -> Any:
        known = F.element_at(names, F.concat(F.col("file"), F.lit("|"), p["topic_id"]))
        packet = F.when(p["direction"] == "produce", F.col("req_packet")).otherwise(F.col("resp_packet"))
        topic = F.when(p["topic_id"].isNotNull() & known.isNotNull() & (known["packet"] < packet),
                       known["name"]).otherwise(p["topic"])
        return F.struct(*[(topic if n == "topic" else p[n]).alias(n)
                          for n in rows_.PARTITION_FIELDS + ("topic_id",)])
    return table.withColumn("partitions", F.transform("partitions", named))


def _give_marks_back(table: Any, resynced: frozenset[tuple[str, str, str, int]]) -> Any:
    """A stream's first frame after the capture began inside it is 'resynced' in decode."""
    if not resynced:
        return table
    from pyspark.sql import functions as F
    keys = [f"{f}\u0000{c}\u0000{d}\u0000{s}" for f, c, d, s in resynced]

    def key(direction: str, col: str) -> Any:
        return F.concat_ws("\u0000", "file", "connection", F.lit(direction), F.col(col).cast("string"))
    hit = key("request", "req_unmarked_seq").isin(keys) | key("response", "resp_unmarked_seq").isin(keys)
    return table.withColumn("marks", F.when(hit, F.array_sort(F.array_union(
        "marks", F.array(F.lit("resynced"))))).otherwise(F.col("marks")))


def _concurrently(*actions: Any) -> list[Any]:
    """Runs Spark actions in threads that keep the caller's job group; their results."""
    from pyspark import InheritableThread
    box: dict[int, Any] = {}

    def run(i: int, action: Any) -> None:
        try:
            box[i] = (True, action())
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            box[i] = (False, e)
    threads = [InheritableThread(target=run, args=(i, a), daemon=True) for i, a in enumerate(actions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for ok, value in (box[i] for i in range(len(actions))):
        if not ok:
            raise value
    return [box[i][1] for i in range(len(actions))]


def percentile_columns(rank: str = "rn", count: str = "n", value: str = "latency_ms") -> str:
    """The SQL aggregates ``p0 .. p4`` of ``PERCENTILES``: nearest rank as Java's HdrHistogram
    (and kctl decode --summary) defines it, the ``value`` of rank max(1, ceil(p' * n / 100))
    in ascending order of the ``count`` values (``rank``: their row_number), p' the
    percentile one ulp lower (kctl/percentiles.py: the same doubles in the same order, the
    nudged percentile a double literal); no interpolation. The driver then turns each
    rank's latency into decode's figure (``bucket_latency_ms``)."""
    return ", ".join(f"max(CASE WHEN {value} IS NOT NULL AND "
                     f"{rank} = greatest(1, ceil({requested_percentile(p)!r}D * {count} / 100D)) "
                     f"THEN {value} END) AS p{i}" for i, p in enumerate(PERCENTILES))


def _write_and_summarise(spark: Any, requests: Any, partitions: Any, repair_notices: Any,
                         out: str, *, bucket_s: float, top: int, write_mode: str) -> AnalyzeResult:
    requests.createOrReplaceTempView("requests")
    partitions.createOrReplaceTempView("partitions")
    # One window sort per API (rows without a latency ranked last) keeps the percentiles
    # distributed (no list of every latency in one place) and gives the counts in the same pass.
    pct = percentile_columns()

    def sql(q: str) -> Any:
        return lambda: [r.asDict(recursive=True) for r in spark.sql(q).collect()]

    bucket_ns = int(bucket_s * 1e9)
    # All at once: each job mostly waits on Spark's scheduling, so together they overlap.
    # The requests are cached: a task that needs a partition another job's task is making
    # waits for it (the block manager's write lock), so the rows are made once.
    _, _, lat, throughput, clients, errors, notices = _concurrently(
        lambda: requests.write.mode(write_mode).parquet(os.path.join(out, "requests")),
        lambda: partitions.write.mode(write_mode).parquet(os.path.join(out, "partitions")),
        sql(f"""
        WITH ranked AS (
            SELECT api_name, request_bytes, response_bytes, latency_ms,
                   row_number() OVER (PARTITION BY api_name ORDER BY latency_ms NULLS LAST) AS rn,
                   count(latency_ms) OVER (PARTITION BY api_name) AS n
            FROM requests)
        SELECT api_name, count(*) AS rows, count(request_bytes) AS requests,
               count(response_bytes) AS responses,
               coalesce(sum(request_bytes), 0) AS request_bytes,
               coalesce(sum(response_bytes), 0) AS response_bytes,
               count(latency_ms) AS latency_count, avg(latency_ms) AS latency_mean, {pct}
        FROM ranked GROUP BY api_name ORDER BY api_name"""),
        sql(f"""
        SELECT topic, direction, CAST(floor(ts_ns / {bucket_ns}) * {bucket_ns} AS BIGINT) AS bucket_ns,
               count(*) AS rows, sum(records) AS records, sum(bytes) AS bytes,
               sum(records) / {bucket_s} AS records_per_s, sum(bytes) / {bucket_s} / 1048576 AS mb_per_s
        FROM partitions GROUP BY topic, direction, bucket_ns ORDER BY topic, direction, bucket_ns"""),
        sql(f"""
        SELECT client_id, count(DISTINCT connection) AS connections, count(*) AS requests,
               coalesce(sum(request_bytes), 0) + coalesce(sum(response_bytes), 0) AS bytes,
               coalesce(sum(request_bytes), 0) AS request_bytes,
               coalesce(sum(response_bytes), 0) AS response_bytes
        FROM requests GROUP BY client_id ORDER BY bytes DESC, client_id LIMIT {int(top)}"""),
        sql("""
        SELECT api_name, error, count(*) AS count
        FROM requests LATERAL VIEW explode(errors) e AS error
        GROUP BY api_name, error ORDER BY count DESC, api_name, error"""),
        lambda: _later_notices(requests, repair_notices))
    total_rows = 0
    for r in lat:
        total_rows += r.pop("rows")
        p = [r.pop(f"p{i}") for i in range(len(PERCENTILES))]
        if r["latency_count"]:
            # Each rank's exact latency as decode --summary's histogram gives it (one rule,
            # kctl/percentiles.py): its µs bucket's highest value, capped at the largest
            # latency (p100, exact; ns back from the ms double exactly).
            max_ns = round(p[-1] * 1e6)
            p = [bucket_latency_ms(round(v * 1e6), max_ns) for v in p]
        mean = r.pop("latency_mean")
        r["latency_ms"] = ({f"p{q:g}": v for q, v in zip(PERCENTILES, p)} | {"mean": mean}
                           if r["latency_count"] else None)
    part_rows = sum(r.pop("rows") for r in throughput)
    return AnalyzeResult("", 0, total_rows, part_rows, latency=lat, throughput=throughput,
                         clients=clients, errors=errors_by_name(errors), errors_by_api=errors,
                         notices=notices)


def errors_by_name(per_api: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """``{error, count}`` rows, whatever the API, from ``{api_name, error, count}`` rows; most
    seen first."""
    totals: Counter[str] = Counter()
    for r in per_api:
        totals[r["error"]] += r["count"]
    return [{"error": e, "count": n} for e, n in sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))]


def _later_notices(requests: Any, repair_notices: Any) -> dict[str, int]:
    """Notices by kind known once the rows are made: the repairs' and, once per file whose
    records it stopped, the decompression budget's."""
    from pyspark.sql import functions as F
    budget = (requests.where(F.array_contains("errors", "RECORDS_OVER_BUDGET"))
              .select(F.lit("budget").alias("kind"), "file").distinct())
    return {r["kind"]: r["count"] for r in repair_notices.select("kind", "file")
            .unionByName(budget).groupBy("kind").count().collect()}

