"""``kctl replay``: a generated Parquet file produced from Spark tasks, verified clean."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kctl.cli import app
from kctl.engine import admin
from kctl.engine.blocking_client import BlockingClient

pytestmark = pytest.mark.spark


def _b(i: int) -> str | None:
    return None if i % 5 == 0 else f"x{i}"


def test_replay_parquet_with_verify(spark, broker, tmp_path):
    """Every row arrives as it is, null fields included (``"b": null``: Spark's to_json
    left them out); the summary names --tasks as what set the task count and the column
    the keys come from."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    n = 2000
    path = tmp_path / "events.parquet"
    pq.write_table(pa.table({"id": list(range(n)), "user": [f"u{i % 7}" for i in range(n)],
                             "payload": [{"a": i, "b": _b(i)} for i in range(n)]}), path)
    summary = tmp_path / "summary.json"
    res = CliRunner().invoke(app, ["replay", str(path), "-t", "replayed", "-b", broker.bootstrap,
                                   "--key-col", "user", "--value-col", "payload", "--rate", "4000",
                                   "--tasks", "2", "--partitions", "3", "--verify",
                                   "--json-out", str(summary), "--quiet"])
    assert res.exit_code == 0, res.output
    assert "verify: 2000 acknowledged, 2000 found, 0 lost, 0 duplicated, 0 reordered" in res.output
    assert "spark: 2 tasks on 1 host; start skew " in res.output
    s = json.loads(summary.read_text())
    assert s["counts"]["acked"] == n and s["verify"]["ok"]
    assert s["spark"]["tasks"] == 2 and len(s["spark"]["per_task"]) == 2
    assert s["run"]["workers_reason"] == s["config"]["workers_reason"] == "--tasks"
    assert s["config"]["keys"] == "column:user" and s["config"]["key_col"] == "user"
    got = []
    with BlockingClient(broker.bootstrap) as c:
        for p in range(3):
            for b in admin.read_partition(c, "replayed", p):
                got += [(r.key, json.loads(r.value)) for r in b.records]
    assert sorted(got, key=lambda kv: kv[1]["a"]) == [
        (f"u{i % 7}".encode(), {"a": i, "b": _b(i)}) for i in range(n)]


def test_a_null_value_is_a_tombstone_and_a_null_key_stays_null(spark, broker, tmp_path):
    """A null --value-col cell goes out as a null value (value length -1, Kafka's
    tombstone: a compacted topic deletes the key), not as empty bytes (before: b""),
    while an empty string stays empty bytes; a null --key-col cell is a null key.
    Read back by kafka-python, an independent client."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from kafka import KafkaConsumer, TopicPartition
    n = 300

    def value(i: int) -> str | None:
        return None if i % 3 == 0 else ("" if i % 3 == 1 else f"v{i}")

    def key(i: int) -> str | None:
        return None if i % 7 == 0 else f"k{i}"

    path = tmp_path / "tombstones.parquet"
    pq.write_table(pa.table({"k": [key(i) for i in range(n)], "v": [value(i) for i in range(n)]}), path)
    res = CliRunner().invoke(app, ["replay", str(path), "-t", "tombstones", "-b", broker.bootstrap,
                                   "--key-col", "k", "--value-col", "v", "--value-format", "raw",
                                   "--tasks", "2", "--partitions", "2", "--verify", "--quiet"])
    assert res.exit_code == 0, res.output
    assert f"verify: {n} acknowledged, {n} found, 0 lost" in res.output
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                      enable_auto_commit=False, consumer_timeout_ms=5000, fetch_max_wait_ms=100)
    c.assign([TopicPartition("tombstones", p) for p in range(2)])
    got = []
    for m in c:
        got.append((m.key, m.value))
        if len(got) == n:
            break
    c.close()
    want = [(None if key(i) is None else key(i).encode(), None if value(i) is None else value(i).encode())
            for i in range(n)]
    srt = lambda kv: (repr(kv[0]), repr(kv[1]))  # noqa: E731
    assert sorted(got, key=srt) == sorted(want, key=srt)
    assert sum(v is None for _, v in got) == n // 3 and sum(v == b"" for _, v in got) == n // 3


def test_a_whole_row_is_written_with_its_null_columns(spark):
    """Without --value-col the value is the whole row as JSON, a null column as
    ``"x": null`` (Spark's to_json leaves null fields out by default); the key column's
    null stays a null key."""
    from kctl.spark.replay import records_frame
    df = spark.createDataFrame([("k1", 1, "a"), ("k2", None, None), (None, 3, "c")],
                               "k string, x int, y string")
    rows = records_frame(df, key_col="k", value_col=None, value_format="json").collect()
    got = [(r["k"] and bytes(r["k"]), json.loads(bytes(r["v"]))) for r in rows]
    assert got == [(b"k1", {"k": "k1", "x": 1, "y": "a"}),
                   (b"k2", {"k": "k2", "x": None, "y": None}),
                   (None, {"k": None, "x": 3, "y": "c"})]


@pytest.mark.parametrize("column", ["m", "l", "d"])
def test_a_struct_map_or_array_key_column_is_refused(spark, column):
    """A key is a column's bytes (binary, or a scalar's UTF-8 text), as a raw value is: a
    struct, map or array --key-col is refused in one line naming its type, as a raw
    --value-col of one is (before: Spark's string form, ``{1}``, was the key)."""
    from kctl.errors import ConfigError
    from kctl.spark.replay import records_frame
    df = spark.createDataFrame([(1, {"x": 1}, [1, 2], {"a": 1})],
                               "id int, m struct<x:bigint>, l array<bigint>, d map<string,int>")
    types = {"m": "struct<x:bigint>", "l": "array<bigint>", "d": "map<string,int>"}
    with pytest.raises(ConfigError, match=rf"^--key-col: column '{column}' is {types[column]}, not bytes or text"):
        records_frame(df, key_col=column, value_col="id", value_format="raw")


def test_sigterm_stops_the_replay_as_ctrl_c_does(broker, tmp_path):
    """SIGTERM to kctl's whole process group mid-replay (a fresh ``kctl replay`` process with
    its own Spark driver; ``kill -TERM -PGID`` as systemd's ``KillMode=control-group`` sends
    it: the driver JVM, in a session of its own, does not get it) stops the tasks as Ctrl-C
    does: each makes its final report (linger.ms=400 keeps records in flight), the summary is
    written, says ``interrupted`` and balances (scheduled = acked + failed + abandoned:
    before, the job was cancelled and the records in flight at the task's last interval
    report had no verdict), exit 130, no traceback, and neither Spark's JVM nor its Python
    workers outlive kctl (before, SIGTERM killed the Python driver alone; then the group's
    SIGTERM reached the JVM, which stopped the SparkContext under the run)."""
    from tests.spark.conftest import _need_spark
    from kctl.stats.summary import RunSummary
    from tests.stop_signal import KctlProcess, group_gone, session_gone

    _need_spark()
    path = tmp_path / "rows.json"
    path.write_text("".join(json.dumps({"id": i}) + "\n" for i in range(30_000)))
    js = tmp_path / "s.json"
    run = KctlProcess("replay", str(path), "-t", "replay-sigterm", "-b", broker.bootstrap, "--rate", "1000",
                      "--tasks", "1", "--master", "local[1]", "--interval", "0.5", "-X", "linger.ms=400",
                      "--json-out", str(js))
    try:
        run.wait_for(lambda line: line.strip() != "", timeout_s=120)    # an interval line
        status = run.stop(to_group=True)
    finally:
        run.kill_group()
    assert status == 130, run.stderr
    assert "interrupted: the Spark tasks were stopped" in run.stderr and "Traceback" not in run.stderr
    assert "no verdict" not in run.stderr and "jdk.incubator.vector" not in run.stderr
    s = RunSummary.from_json(json.loads(js.read_text()))
    assert s.run.interrupted and 0 < s.counts.acked < 30_000 and s.unaccounted == 0
    assert group_gone(run.pgid, 30) and session_gone(run.sessions, 30), "a Spark process outlived kctl replay"


def test_every_task_sends_its_rows_and_nothing_else(spark, broker, tmp_path):
    """Two rows, --tasks 4 (more tasks than rows): 2 tasks, one row each, and the topic
    holds the two rows and nothing else. Before, ``repartition`` dealt both rows to one
    task and the other, without rows, ran its generic share: a made-up record (null key,
    empty value; "replaying 2 rows ... 3 records sent")."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    path = tmp_path / "two_row.parquet"
    pq.write_table(pa.table({"k": ["a", "b"], "v": ["va", "vb"]}), path)
    js = tmp_path / "s.json"
    res = CliRunner().invoke(app, ["replay", str(path), "-t", "two-rows", "-b", broker.bootstrap,
                                   "--key-col", "k", "--value-col", "v", "--value-format", "raw",
                                   "--tasks", "4", "--partitions", "1", "--verify",
                                   "--json-out", str(js), "--quiet"])
    assert res.exit_code == 0, res.output
    assert "verify: 2 acknowledged, 2 found, 0 lost" in res.output
    s = json.loads(js.read_text())
    assert s["counts"]["acked"] == 2 and s["spark"]["tasks"] == 2
    with BlockingClient(broker.bootstrap) as c:
        got = [(r.key, r.value) for b in admin.read_partition(c, "two-rows", 0) for r in b.records]
    assert sorted(got) == [(b"a", b"va"), (b"b", b"vb")]


def test_rows_are_dealt_to_tasks_by_row_number(spark):
    """Row i goes to task i % n: shares differ by at most one row, none is empty while
    there are as many rows as tasks (one input partition of 5 rows over 4 tasks)."""
    from kctl.spark.replay import task_rows
    df = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(5)], "k string, v string").coalesce(1)
    parts = task_rows(df, 4).glom().collect()
    assert [sorted(k for k, _ in p) for p in parts] == [["k0", "k4"], ["k1"], ["k2"], ["k3"]]


def test_a_uri_spark_cannot_open_is_one_line(spark, capsys):
    """``s3a://`` without the hadoop-aws jars on Spark's classpath: one line naming the
    missing file system, exit 2 (before: ~200 lines of Python and Java stack trace, exit 1)."""
    from kctl.cli import main
    with pytest.raises(SystemExit) as e:
        main(["replay", "s3a://no-bucket/x.parquet", "-t", "t", "-b", "127.0.0.1:1"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("kctl: error: s3a://no-bucket/x.parquet: cannot read: ClassNotFoundException: "
                          "Class org.apache.hadoop.fs.s3a.S3AFileSystem not found"), err


def test_a_file_not_in_its_format_is_one_line(tmp_path):
    """A ``.parquet`` file that is not Parquet, in a fresh ``kctl replay`` process: its
    whole stderr is one line, exit 2 (before: the Python traceback, Py4J's Java one and
    the local executor's logged stack trace, exit 1)."""
    import subprocess
    import sys
    from tests.spark.conftest import _need_spark
    _need_spark()
    path = tmp_path / "bogus.parquet"
    path.write_text("not parquet\n")
    res = subprocess.run([sys.executable, "-m", "kctl", "replay", str(path), "-t", "t", "-b", "127.0.0.1:1",
                          "--master", "local[1]"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert res.stderr.startswith(f"kctl: error: {path}: cannot read: RuntimeException: file:{path} "
                                 "is not a Parquet file."), res.stderr
