"""``kctl analyze``: captures decoded by Spark tasks that each read a range of packets must
agree with ``kctl decode`` on the same files, frame for frame, however small the ranges."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from kctl.cli import app
from tests.inspect import capture_builder as cb

pytestmark = pytest.mark.spark


def _decode_summary(paths, ports) -> dict:
    args = ["decode", *paths, "--summary", "--json"]
    for p in ports:
        args += ["--port", str(p)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def _per_api(rows) -> dict[str, dict[str, int]]:
    """analyze's errors_by_api rows as decode --summary's {API: {NAME: count}}."""
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        assert r["error"] not in out.get(r["api_name"], {}), r      # one row per (API, error)
        out.setdefault(r["api_name"], {})[r["error"]] = r["count"]
    return out


def _table(spark, path) -> list[tuple]:
    rows = spark.read.parquet(path).collect()
    return sorted((tuple(json.dumps(v, sort_keys=True, default=str) for v in r.asDict(recursive=True).values())
                   for r in rows))


def test_many_small_ranges_match_decode_summary(spark, captures, tmp_path):
    """Ranges of 32 KiB: frames cut by ranges, requests and responses in different tasks;
    every count, byte, latency percentile, error and record set equals decode's."""
    from kctl.spark.analyze import analyze, sources
    from tests.spark.test_capture_ranges import longest_wait_bytes
    paths, ports = captures
    expected = _decode_summary(paths, ports)
    # Most readers start mid-stream here. A reader can frame a response only if its lookback
    # reaches back to the request: a read-back Fetch response (about 300 KB) puts its
    # broker-leg copy between the two. With a lookback past the longest such wait no connection needs a repair
    # (tests/spark/test_capture_ranges.py shows a shorter one does).
    lookback = max(512 << 10, max(longest_wait_bytes(p, port) for p, port in zip(paths, ports))
                   + (64 << 10))
    got = analyze(sources(paths, ports), str(tmp_path / "out"), spark=spark, range_bytes=32 << 10,
                  lookback_bytes=lookback)
    assert got.tasks > 10 and not got.repaired, (lookback, got.repaired)
    by_api = {r["api_name"]: r for r in got.latency}
    assert set(by_api) == set(expected["apis"])
    for name, e in expected["apis"].items():
        g = by_api[name]
        for k in ("requests", "responses", "request_bytes", "response_bytes", "latency_count"):
            assert g[k] == e[k], (name, k)
        if e["latency_count"]:
            # One rule (kctl/percentiles.py): the same figures, not figures within 0.1%
            # (before: decode's p99 31.215 ms beside analyze's 31.208 for Produce).
            for p in ("p50", "p90", "p99", "p99.9", "p100"):
                assert g["latency_ms"][p] == e["latency_ms"][p], (name, p, g["latency_ms"], e["latency_ms"])
            assert g["latency_ms"]["p100"] == e["latency_ms"]["max"], name
            assert math.isclose(g["latency_ms"]["mean"], e["latency_ms"]["mean"], rel_tol=1e-12), name
    assert sum(g["requests"] + g["responses"] for g in got.latency) == expected["frames"]
    assert {r["error"]: r["count"] for r in got.errors} == expected["errors"]
    assert _per_api(got.errors_by_api) == expected["errors_by_api"]
    assert expected["errors_by_api"]["Metadata"]["UNKNOWN_TOPIC_OR_PARTITION"] >= 1
    assert "Produce" in by_api and "Fetch" in by_api
    parts = spark.read.parquet(str(tmp_path / "out" / "partitions"))
    for direction, key in (("produce", "produced"), ("fetch", "fetched")):
        rows = (parts.where(f"direction = '{direction}'").groupBy("topic", "partition")
                .agg({"records": "sum", "bytes": "sum", "batches": "sum"}).collect())
        mine = {(r["topic"], r["partition"]): (r["sum(records)"], r["sum(bytes)"], r["sum(batches)"])
                for r in rows}
        theirs = {(p["topic"], p["partition"]): (p["records"], p["bytes"], p["batches"])
                  for p in expected[key]}
        assert mine == theirs, direction
    produced = sum(r["records"] for r in got.throughput
                   if r["direction"] == "produce" and r["topic"] == "cap-a")
    assert produced == sum(p["records"] for p in expected["produced"] if p["topic"] == "cap-a") >= 4000
    assert got.clients and got.clients[0]["bytes"] >= got.clients[-1]["bytes"]
    assert spark.read.parquet(str(tmp_path / "out" / "requests")).count() == got.requests


def test_tiny_ranges_over_reordered_and_retransmitted_segments(spark, tmp_path, monkeypatch):
    """Synthetic captures with reordering and retransmissions across cuts and a connection
    the capture begins inside: ranges of 300 bytes give the rows one task gives, row for row,
    and as many frames as decode; a lookback too short is repaired to the same rows. The
    requests are written in one Parquet part per FRAMES_PER_PARTITION frames (one here)."""
    from kctl.inspect.session import DecodedFrame, decode_files
    from kctl.spark import analyze as analyze_module
    from kctl.spark.analyze import analyze, sources
    from tests.inspect.test_ranges import load_capture
    paths = [str(load_capture(tmp_path, seed, swap=0.15, dup=0.1, cut_first=6 if seed else 0))
             for seed in range(2)]
    frames = sum(1 for f in decode_files(paths, {9092}) if isinstance(f, DecodedFrame))
    one = analyze(sources(paths, [9092]), str(tmp_path / "one"), spark=spark, range_bytes=1 << 30)
    monkeypatch.setattr(analyze_module, "FRAMES_PER_PARTITION", 40)
    many = analyze(sources(paths, [9092]), str(tmp_path / "many"), spark=spark, range_bytes=300,
                   lookback_bytes=16000)
    short = analyze(sources(paths, [9092]), str(tmp_path / "short"), spark=spark, range_bytes=300,
                    lookback_bytes=200)
    assert one.tasks == 2 and many.tasks > 60 and not many.repaired and short.repaired
    for res in (one, many, short):
        assert sum(g["requests"] + g["responses"] for g in res.latency) == frames
    want = _table(spark, str(tmp_path / "one" / "requests"))
    assert _table(spark, str(tmp_path / "many" / "requests")) == want
    assert _table(spark, str(tmp_path / "short" / "requests")) == want
    parts = {d: len(list((tmp_path / d / "requests").glob("part-*.parquet"))) for d in ("one", "many")}
    assert parts["one"] == 1 and 1 < parts["many"] <= math.ceil(frames / 40), parts


def test_default_port_is_auto_and_no_kafka_lists_the_ports_seen(spark, tmp_path):
    from tests.inspect.kafka_frames import metadata_request, metadata_response
    c = cb.Conversation(bport=19092)
    c.send(metadata_request(1))
    c.reply(metadata_response(1))
    c.close()
    kafka = tmp_path / "odd-port.pcap"
    kafka.write_bytes(cb.capture(c.segs))
    res = CliRunner().invoke(app, ["analyze", str(kafka), "--out", str(tmp_path / "a"), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["requests"] == 1
    # Again into the same --out: replaced only when asked (without --overwrite: refused, tests/test_bad_inputs.py).
    res = CliRunner().invoke(app, ["analyze", str(kafka), "--out", str(tmp_path / "a"), "--json", "--overwrite"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["requests"] == 1
    web = cb.Conversation(bport=8080)
    web.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    web.reply(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
    web.close()
    other = tmp_path / "http.pcap"
    other.write_bytes(cb.capture(web.segs))
    res = CliRunner().invoke(app, ["analyze", str(other), "--out", str(tmp_path / "b")])
    assert res.exit_code == 1
    assert "no Kafka traffic found" in res.stderr and "8080 (" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_topics_named_by_id_take_the_name_an_earlier_metadata_answer_gave(spark, tmp_path):
    """Produce v13 names topics by id. The Metadata answer that maps the id to a name came
    long before most ranges' windows; the rows still name the topic as decode does (and a
    request before that answer keeps the id)."""
    import uuid

    from kctl.protocol.frames import frame
    from kctl.protocol.messages import encode_request, encode_response, request_class, response_class
    from kctl.protocol.records import Record, build_batch
    from tests.inspect.kafka_frames import metadata_request, produce_response
    from kctl.inspect.session import decode_files, DecodedFrame
    P, M = request_class(0), response_class(3)
    tid = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")

    def produce(corr: int) -> bytes:
        data = [P.PartitionProduceData(index=0, records=build_batch(
            [Record(i, 0, None, b"v" * 200) for i in range(5)]))]
        body = P(acks=-1, timeout_ms=1000, topic_data=[P.TopicProduceData(topic_id=tid, partition_data=data)])
        return frame(encode_request(0, 13, corr, "cli", body))

    c = cb.Conversation()
    c.send(produce(1), mss=500)
    c.reply(produce_response(1, version=13))
    c.send(metadata_request(2, ("orders",)))
    c.reply(frame(encode_response(3, 12, 2, M(topics=[M.MetadataResponseTopic(name="orders", topic_id=tid)]))))
    for corr in range(3, 30):
        c.send(produce(corr), mss=500)
        c.reply(produce_response(corr, version=13))
    c.close()
    path = tmp_path / "ids.pcapng"
    path.write_bytes(cb.capture(c.segs, fmt="pcapng"))
    want = sorted((rs.topic, rs.record_count) for f in decode_files([path], {9092})
                  if isinstance(f, DecodedFrame) for rs in f.record_sets)
    assert ("orders", 5) in want and (str(tid), 5) in want
    from kctl.spark.analyze import analyze, sources
    res = analyze(sources([str(path)], [9092]), str(tmp_path / "out"), spark=spark, range_bytes=400,
                  lookback_bytes=3000)
    assert res.tasks > 20 and not res.repaired
    got = sorted((r["topic"], r["records"]) for r in
                 spark.read.parquet(str(tmp_path / "out" / "partitions")).collect())
    assert got == want


def test_kctl_captures_are_read_one_leg_as_decode_reads_them(spark, captures, tmp_path):
    """kctl inspect writes both legs of the proxy; with no --port, analyze reads the client
    leg (the frames decode shows), and --leg both every frame of both legs, as decode does."""
    paths, _ = captures
    frames = {}
    for leg in ("client", "both"):
        dec = CliRunner().invoke(app, ["decode", *paths, "--leg", leg, "--summary", "--json"])
        assert dec.exit_code == 0, dec.output
        args = ["analyze", *paths, "--out", str(tmp_path / leg), "--split-mb", "1", "--json"]
        res = CliRunner().invoke(app, args + ([] if leg == "client" else ["--leg", leg]))
        assert res.exit_code == 0, res.output
        got = json.loads(res.stdout)
        frames[leg] = json.loads(dec.stdout)["frames"]
        assert sum(r["requests"] + r["responses"] for r in got["latency"]) == frames[leg]
        assert _per_api(got["errors_by_api"]) == json.loads(dec.stdout)["errors_by_api"], leg
    assert frames["both"] == 2 * frames["client"] > 0
    res = CliRunner().invoke(app, ["analyze", *paths, "--out", str(tmp_path / "x"), "--leg", "left"])
    assert res.exit_code != 0 and "--leg 'left'" in str(res.exception or res.output)


def test_a_run_of_its_own_ends_its_local_jvm_and_leaves_no_scratch(tmp_path):
    """``kctl analyze`` in a process of its own on local[1] (as a user runs it): its driver
    JVM keeps its scratch in one directory that is gone when the process ends, with the
    JVM, and the end prints nothing (the JVM is killed after its SparkContext stops)."""
    import os
    import subprocess
    import sys

    from tests.inspect.test_ranges import load_capture
    path = str(load_capture(tmp_path, 0))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    # No class archive: a run that dumps one ends the slow way, for the dump.
    env = os.environ | {"TMPDIR": str(tmp), "KCTL_SPARK_CDS": "0"}
    res = subprocess.run([sys.executable, "-m", "kctl", "analyze", path, "--out", str(tmp_path / "out"),
                          "--master", "local[1]", "--json"], env=env, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["requests"] > 0
    assert "Traceback" not in res.stderr and "Exception" not in res.stderr, res.stderr
    assert not [p.name for p in tmp.iterdir() if p.name.startswith(("kctl-spark-", "spark-", "blockmgr-"))]


def test_the_exit_drops_only_py4j_send_failures(caplog):
    """At the quick end (session._end_now) py4j's log line for a command the killed JVM
    dropped is not printed; other errors still are."""
    import logging

    from kctl.spark.session import _not_py4j_send_failure
    root = logging.getLogger()
    root.addFilter(_not_py4j_send_failure)
    try:
        with caplog.at_level(logging.ERROR):
            logging.error("Exception while sending command.")
            logging.error("a real error")
    finally:
        root.removeFilter(_not_py4j_send_failure)
    assert [r.getMessage() for r in caplog.records] == ["a real error"]


def test_exit_now_leaves_sessions_it_does_not_end_alone():
    """``exit_now`` ends only a process whose session it ends at exit (a run of its own);
    in-process callers (tests, notebooks: a session active already) carry on."""
    from kctl.spark.session import exit_now
    exit_now(None)
    exit_now(object())


def test_automatic_ranges_two_per_slot_and_one_on_a_single_slot():
    """Several slots: about TASKS_PER_SLOT ranges each, so a slow range does not leave the
    others idle at the end; one slot: one range (more would only add their cost); never
    below MIN_RANGE_BYTES."""
    from kctl.spark.analyze import MIN_RANGE_BYTES, TASKS_PER_SLOT, auto_range_bytes
    from kctl.spark.storage import CaptureFile
    files = [CaptureFile("a", "a", 200 << 20), CaptureFile("b", "b", 40 << 20)]
    assert auto_range_bytes(files, 1) == 240 << 20
    assert auto_range_bytes(files, 2) == (240 << 20) // (2 * TASKS_PER_SLOT)
    assert auto_range_bytes(files, 8) == (240 << 20) // (8 * TASKS_PER_SLOT)
    assert auto_range_bytes([CaptureFile("c", "c", 1000)], 4) == MIN_RANGE_BYTES


def _damaged_captures(tmp_path) -> list[str]:
    """Captures with the damage decode reports: a record set that does not decode (CRC),
    answered CORRUPT_MESSAGE, and a Produce answered UNKNOWN_TOPIC_OR_PARTITION (as every
    Metadata answer here is), packets cut by the snap length, a lost segment, a malformed packet, a connection the
    capture begins inside, a frame the capture ends inside, a file cut inside a record."""
    import random

    from tests.inspect.kafka_frames import produce_request, produce_response
    from tests.inspect.test_ranges import _traffic
    rng = random.Random(7)
    convs = []
    for k in range(3):
        c = cb.Conversation(cport=50000 + k, ts_ns=10**18 + k * 333)
        _traffic(c, 10, rng, mss=400)
        if k == 0:
            bad = bytearray(produce_request(90, "orders", {0: 4}, pad=300))
            bad[-12] ^= 0xFF                    # inside the last record: the batch's CRC fails
            c.send(bytes(bad), mss=400)
            c.reply(produce_response(90, "orders", (0,), error_code=2), mss=400)
            c.send(produce_request(91, "gone", {0: 2}), mss=400)
            c.reply(produce_response(91, "gone", (0,), error_code=3), mss=400)
            _traffic(c, 4, rng, mss=400, first_corr=100)
            c.close()
        if k == 2:                              # ends inside a frame
            c.send(produce_request(200, "orders", {0: 6}, pad=300), mss=400)
            c.segs.pop()
        convs.append(c.segs)
    convs[1] = convs[1][5:]                     # the capture begins inside this connection
    del convs[2][20]                            # a segment the capture lost
    segs = sorted((s for c in convs for s in c), key=lambda s: s.ts_ns)
    packets = [(s.ts_ns, cb.link(1, cb.ip(s))) for s in segs]
    orig = {}
    for i, s in enumerate(segs):                # snap length 120 on some of one connection's
        if 50001 in (s.sport, s.dport) and len(packets[i][1]) > 120 and i % 4 == 0:
            orig[i] = len(packets[i][1])
            packets[i] = (packets[i][0], packets[i][1][:120])
    m = len(packets) // 2                       # a packet too short for its Ethernet header
    packets.insert(m, (packets[m][0], b"\x00" * 10))
    orig = {(i + 1 if i >= m else i): n for i, n in orig.items()}
    data = cb.pcap(packets, nano=True, orig_lens=orig)
    a = tmp_path / "damaged.pcap"
    a.write_bytes(data[:-7])                    # cut inside the last record
    # Damage every range reader agrees on (no repair): the capture begins inside a frame
    # and ends inside another.
    c = cb.Conversation(cport=51000)
    _traffic(c, 8, rng, mss=90)
    c.send(produce_request(300, "orders", {0: 6}, pad=300), mss=90)
    b = tmp_path / "cut-ends.pcap"
    b.write_bytes(cb.capture(c.segs[5:-1]))
    return [str(a), str(b)]


def test_damage_is_counted_as_decode_counts_it_however_the_ranges_cut(spark, tmp_path):
    """decode --summary's notices (gaps, frames cut off, bytes skipped, a malformed packet,
    a truncated file) and errors (a record set that does not decode) are analyze's, each
    counted once, whether one task reads a file or ranges of 1000 bytes share it: the
    damaged file's connections are repaired (a gap breaks the check), the other file's
    streams pass it and their damage is the range readers'.
    The bad record set is a partitions row that says so, and so does its requests row."""
    from kctl.spark.analyze import analyze, sources
    paths = _damaged_captures(tmp_path)
    want = _decode_summary(paths, [9092])
    assert want["errors"]["RECORDS_DECODE_ERROR"] == 1
    assert want["marks"]["request_cut"] == 1 and want["apis"]["Produce"]["latency_count"] == 23
    # The same error name under two APIs, and a record set's error under the request's API.
    assert want["errors_by_api"]["Produce"] == {"CORRUPT_MESSAGE": 1, "UNKNOWN_TOPIC_OR_PARTITION": 1,
                                                "RECORDS_DECODE_ERROR": 1}
    assert want["errors_by_api"]["Metadata"]["UNKNOWN_TOPIC_OR_PARTITION"] >= 1
    assert {"gap", "incomplete", "skipped", "malformed", "truncated"} <= set(want["notices"])
    clean = _decode_summary(paths[1:], [9092])["notices"]
    assert clean["skipped"] and clean["incomplete"]     # streams no reader breaks
    runs = {"one": dict(range_bytes=1 << 30), "many": dict(range_bytes=1000, lookback_bytes=16000)}
    for name, kw in runs.items():
        res = analyze(sources(paths, [9092]), str(tmp_path / name), spark=spark, **kw)
        assert res.notices == want["notices"], name
        assert {r["error"]: r["count"] for r in res.errors} == want["errors"], name
        assert _per_api(res.errors_by_api) == want["errors_by_api"], name
        assert sum(g["requests"] + g["responses"] for g in res.latency) == want["frames"], name
        # Pairs as decode pairs them: responses to cut requests (one cut while the stream was
        # resynchronising) decoded and timed from the packet that completed the request.
        assert {g["api_name"]: (g["requests"], g["responses"], g["latency_count"])
                for g in res.latency} == {a: (e["requests"], e["responses"], e["latency_count"])
                                          for a, e in want["apis"].items()}, name
        repaired = {r.split(": ")[0] for r in res.repaired}
        if name == "many":
            assert res.tasks > 20 and repaired == {paths[0]}, res.repaired
    bad = [r.asDict() for r in spark.read.parquet(str(tmp_path / "many" / "partitions"))
           .where("decode_error IS NOT NULL").collect()]
    assert [(r["topic"], r["partition"], r["batches"], r["records"]) for r in bad] == [("orders", 0, 0, 0)]
    assert bad[0]["decode_error"].startswith("bad records (") and "CRC" in bad[0]["decode_error"]
    row = (spark.read.parquet(str(tmp_path / "many" / "requests"))
           .where("array_contains(errors, 'RECORDS_DECODE_ERROR')").collect())
    assert len(row) == 1 and row[0]["decode_error"] == f"orders/0: {bad[0]['decode_error']}"


def test_the_summary_prints_the_notices_and_json_has_them(spark, tmp_path):
    paths = _damaged_captures(tmp_path)
    decoded = _decode_summary(paths, [9092])
    want = decoded["notices"]
    res = CliRunner().invoke(app, ["analyze", *paths, "--out", str(tmp_path / "a"), "--json",
                                   "--port", "9092"])
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    assert got["notices"] == want
    assert _per_api(got["errors_by_api"]) == decoded["errors_by_api"]
    assert {r["error"]: r["count"] for r in got["errors"]} == decoded["errors"]
    res = CliRunner().invoke(app, ["analyze", *paths, "--out", str(tmp_path / "b"), "--port", "9092"])
    assert res.exit_code == 0, res.output
    assert "Notices by kind" in res.stdout and "RECORDS_DECODE_ERROR" in res.stdout
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in res.stdout.splitlines()
             if line.startswith("│")]
    for kind, n in want.items():
        assert [kind, str(n)] in cells, kind
    assert "Errors per API" in res.stdout
    for api, errors in decoded["errors_by_api"].items():        # api_name, error, count
        for error, n in errors.items():
            assert [api, error, str(n)] in cells, (api, error)


def test_sql_nearest_rank_is_javas_hdrhistogram_rank(spark):
    """analyze's SQL percentiles pick the rank kctl.percentiles (Java's HdrHistogram) picks,
    where Python hdrh's round-half-up differs (p99 of 5999, p99.9 of 13994 and of 41000)."""
    from kctl.percentiles import count_at_percentile
    from kctl.spark.analyze import PERCENTILES, percentile_columns

    for n in (1, 101, 5999, 13994, 41000):
        spark.range(1, n + 1).createOrReplaceTempView("ranked_values")
        row = spark.sql(f"""SELECT {percentile_columns(rank="id", count="n", value="v")} FROM (
                             SELECT id, CAST(id AS DOUBLE) AS v, count(*) OVER () AS n FROM ranked_values)""").first()
        for i, p in enumerate(PERCENTILES):
            assert row[f"p{i}"] == count_at_percentile(p, n), (n, p)
    assert count_at_percentile(99.0, 5999) == 5940 and count_at_percentile(99.9, 41000) == 40959
