"""``kctl replay``: a dataset (Parquet, JSON, CSV) produced to a topic from Spark executors.

How this works
--------------
The driver reads the dataset with Spark and maps its columns to records:

- key: ``--key-col`` (binary as is, any other scalar as UTF-8 text; a struct, map or
  array column is refused, as for a raw value), or no key;
- value: ``--value-col`` or, without it, the whole row. ``--value-format json``
  writes struct/map/array values (and the whole row) as JSON text, null fields
  included (``"x": null``), and takes a string column to hold JSON already;
  ``raw`` writes the column's bytes (binary as is, anything else as UTF-8 text).
  A null cell of ``--value-col`` is a null value (value length -1: a tombstone,
  which deletes the key on a compacted topic), never empty bytes; a null cell
  of ``--key-col`` is a null key. Replay sends no headers but kctl's identity.

The records are dealt to ``tasks`` partitions by row number (row i to task
i % tasks: shares differ by at most one row; the order across tasks is not kept),
that run as one barrier stage, like
``produce --spark`` (kctl/spark/load.py): each task lays its partition's
records out as the worker's payload and key pool, in order, and runs the same
``Worker`` loop once through them at its share of ``--rate`` (0: as fast as it
can), with the identity headers, so ``--verify`` checks every record. Reports
are merged by ``RunStats`` exactly as a local ``kctl produce`` run.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import Any

from kctl.errors import ConfigError
from kctl.load.payload import KeySpec, PayloadPool
from kctl.load.run import LoadResult, LoadSpec
from kctl.load.worker import WorkerSpec
from kctl.spark.load import START_DELAY_S, SparkLoadRun, run_reports_job, run_worker_task
from kctl.spark.session import check_barrier_slots, job_error_message, spark_session

FORMATS = ("parquet", "json", "csv")
#: ``to_json``'s options: a null field is written (``"x": null``), as the row has it;
#: Spark's default leaves it out, and a consumer could not tell it from a missing column.
_JSON = {"ignoreNullFields": "false"}


def read_dataset(spark: Any, path: str, fmt: str | None = None) -> Any:
    if fmt is None:
        probe = path.rstrip("/")
        ext = os.path.splitext(probe)[1].lstrip(".").lower()
        if ext in ("jsonl", "ndjson"):
            ext = "json"
        if ext not in FORMATS and os.path.isdir(probe):
            names = [n for n in os.listdir(probe) if not n.startswith((".", "_"))]
            exts = {os.path.splitext(n.replace(".snappy", ""))[1].lstrip(".") for n in names}
            ext = next((e for e in FORMATS if e in exts), ext)
        fmt = ext
    if fmt not in FORMATS:
        raise ConfigError(f"cannot tell the format of {path!r}: give --format parquet, json or csv")
    if not os.path.exists(path) and "://" not in path:
        raise ConfigError(f"no such dataset: {path}")
    reader = spark.read.format(fmt)
    if fmt == "csv":
        reader = reader.option("header", "true").option("inferSchema", "true")
    return reader.load(path)


def load_records(spark: Any, dataset: str, fmt: str | None, *, key_col: str | None,
                 value_col: str | None, value_format: str) -> tuple[Any, int]:
    """The dataset's records (``records_frame``, cached) and their count. A dataset Spark
    cannot read (a URI scheme without its file system on the classpath, such as ``s3a://``
    without the hadoop-aws jars, a file that is not in the format, a path not found) is
    one line, as ``kctl analyze`` says a capture it cannot open."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException
    try:
        records = records_frame(read_dataset(spark, dataset, fmt), key_col=key_col,
                                value_col=value_col, value_format=value_format).cache()
        return records, records.count()
    except (Py4JError, PySparkException) as e:
        raise ConfigError(f"{dataset}: cannot read: {job_error_message(e)}") from None


def records_frame(df: Any, *, key_col: str | None, value_col: str | None, value_format: str) -> Any:
    """The dataset as two binary columns ``k`` and ``v``."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T
    if value_format not in ("json", "raw"):
        raise ConfigError(f"--value-format must be json or raw, not {value_format!r}")
    for c in (key_col, value_col):
        if c is not None and c not in df.columns:
            raise ConfigError(f"no column {c!r} in the dataset (columns: {', '.join(df.columns)})")

    def as_bytes(col: Any, dtype: Any) -> Any:
        return col if isinstance(dtype, T.BinaryType) else F.encode(col.cast("string"), "UTF-8")

    if value_col is None:
        if value_format == "raw":
            raise ConfigError("--value-format raw needs --value-col (a whole row has no raw form)")
        value = F.encode(F.to_json(F.struct(*[F.col(c) for c in df.columns]), _JSON), "UTF-8")
    else:
        dtype = df.schema[value_col].dataType
        complex_type = isinstance(dtype, (T.StructType, T.MapType, T.ArrayType))
        if value_format == "json" and complex_type:
            value = F.encode(F.to_json(F.col(value_col), _JSON), "UTF-8")
        elif complex_type:
            raise ConfigError(f"--value-format raw: column {value_col!r} is {dtype.simpleString()}, "
                              "not bytes or text (use --value-format json)")
        else:
            value = as_bytes(F.col(value_col), dtype)
    if key_col is None:
        key = F.lit(None).cast("binary")
    else:
        dtype = df.schema[key_col].dataType
        if isinstance(dtype, (T.StructType, T.MapType, T.ArrayType)):
            # A key is the column's bytes, as a raw value is: Spark's string form of a
            # struct ("{1}") is no encoding a consumer could read back.
            raise ConfigError(f"--key-col: column {key_col!r} is {dtype.simpleString()}, not bytes or "
                              "text (a key is a binary column's bytes or a scalar's UTF-8 text)")
        key = as_bytes(F.col(key_col), dtype)
    return df.select(key.alias("k"), value.alias("v"))


def task_rows(records: Any, tasks: int) -> Any:
    """``records``' ``(k, v)`` rows dealt to ``tasks`` partitions by row number (row i to
    partition i % tasks), so the partitions differ by at most one row and none is empty
    while there are as many rows as tasks (``repartition`` may leave a partition empty:
    two rows in one input partition went both to the same one of two)."""
    return (records.rdd.zipWithIndex()
            .map(lambda ri: (ri[1] % tasks, (ri[0][0], ri[0][1])))
            .partitionBy(tasks, lambda task: task)
            .values())


def _replay_partition(specs: list[WorkerSpec], keyed: bool, listener: tuple[str, int] | None,
                      start_delay_s: float) -> Callable[[int, Iterable[Any]], Iterator[Any]]:
    def run(index: int, rows: Iterable[Any]) -> Iterator[Any]:
        keys: list[bytes | None] = []
        values: list[bytes | None] = []
        for k, v in rows:
            keys.append(bytes(k) if k is not None else None)
            values.append(bytes(v) if v is not None else None)   # None: a null value
        # The task sends its partition's rows and nothing else: the share ``specs`` gave it
        # is replaced by the row count, 0 for an empty partition (the task still joins the
        # barrier and reports, as a task with 0 rows).
        spec = replace(specs[index], num_records=len(values))
        if values:
            sizes = {-1 if v is None else len(v) for v in values}
            size = sizes.pop() if len(sizes) == 1 and -1 not in sizes else None
            spec = replace(spec, payload=PayloadPool(tuple(values), size),
                           keys=KeySpec("file", keys=tuple(keys)) if keyed else KeySpec("none"))
        yield from run_worker_task(spec, listener, start_delay_s)
    return run


class ReplayRun(SparkLoadRun):
    """``SparkLoadRun`` whose tasks take their records from the dataset."""

    def __init__(self, spec: LoadSpec, records: Any, *, keyed: bool, **kwargs: Any) -> None:
        super().__init__(spec, **kwargs)
        self.records = records
        self.keyed = keyed

    def run(self) -> LoadResult:
        spark = spark_session(self.master)
        check_barrier_slots(spark, self.spec.workers)
        specs = self.worker_specs()
        n = len(specs)

        def job(listener: tuple[str, int] | None) -> list:
            rdd = task_rows(self.records, n).barrier()
            fn = _replay_partition(specs, self.keyed, listener, self.start_delay_s)
            self.reports = rdd.mapPartitionsWithIndex(fn).collect()
            return self.reports

        return run_reports_job(spark, self.spec, job, config_for_summary=self.config_for_summary,
                               hdr_out=self.hdr_out, on_round=self.on_round, live=self.live,
                               owner=self, description=f"kctl replay ({n} tasks)")


def replay_run_factory(records: Any, *, keyed: bool, master: str | None,
                       start_delay_s: float = START_DELAY_S) -> Callable[..., ReplayRun]:
    def make(spec: LoadSpec, **kwargs: Any) -> ReplayRun:
        return ReplayRun(spec, records, keyed=keyed, master=master, start_delay_s=start_delay_s,
                         **kwargs)
    return make
