"""Audit M: every bad input of consume, decode, report, bench, inspect, analyze and replay
gets one line naming the option, exit 2, before any side effect or costly start (Spark).
In-process through ``kctl.cli.main``; Spark is made to fail loudly if a case reaches it."""

from __future__ import annotations

import pytest

from tests.test_cli_habits import run_main


@pytest.fixture
def no_spark(monkeypatch):
    import kctl.spark.session as session

    def refuse(*_a, **_k):
        raise AssertionError("Spark started before the options were checked")
    monkeypatch.setattr(session, "spark_session", refuse)


@pytest.fixture
def dataset(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text('{"a": 1}\n')
    return str(path)


@pytest.mark.parametrize("args, line", [
    (["--master", "bogus://x"], "kctl: error: --master 'bogus://x': not a Spark master URL; expected local, "
                                "local[N], local[*], local-cluster[N,C,M], spark://host:port, yarn or k8s://..."),
    (["--master", "local[0]"], "kctl: error: --master 'local[0]': a local master needs at least 1 thread"),
    (["--master", "spark://host"], "kctl: error: --master 'spark://host': not a Spark master URL"),
    (["--top", "-1"], "kctl: error: --top must be at least 1, not -1"),
])
def test_analyze_checks_options_before_spark(capsys, monkeypatch, no_spark, tmp_path, args, line):
    capture = tmp_path / "c.pcap"
    capture.write_bytes(b"")
    code, out, err = run_main(capsys, monkeypatch, "analyze", str(capture), "--out", str(tmp_path / "o"), *args)
    assert code == 2
    assert err.startswith(line) and err.count("\n") == 1, err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("args, line", [
    (["--format", "bogus"], "kctl: error: --format 'bogus': expected parquet, json, csv"),
    (["--tasks", "0"], "kctl: error: --tasks must be at least 1, not 0"),
    (["-X", "foo=1"], "kctl: error: -X: unknown producer property 'foo'"),
    (["--master", "bogus://x"], "kctl: error: --master 'bogus://x': not a Spark master URL"),
    (["--value-format", "raw"], "kctl: error: --value-format raw needs --value-col"),
])
def test_replay_checks_options_before_spark(capsys, monkeypatch, no_spark, dataset, args, line):
    code, out, err = run_main(capsys, monkeypatch, "replay", dataset, "-t", "t", *args)
    assert code == 2
    assert err.startswith(line) and err.count("\n") == 1, err


def test_spark_master_forms_spark_takes_pass():
    from kctl.spark.session import check_master
    for master in (None, "local", "local[2]", "local[*]", "local[2,3]", "local-cluster[1,1,512]",
                   "spark://127.0.0.1:7077", "spark://a:7077,b:7077", "yarn", "k8s://https://k:443"):
        check_master(master)


@pytest.mark.parametrize("args, line", [
    (["--record-size", "500"], "kctl: error: --record-size and --partitions shape what --backlog writes: "
                               "give --backlog or drop them"),
    (["--partitions", "3"], "kctl: error: --record-size and --partitions shape what --backlog writes"),
    (["--backlog", "10", "--partitions", "0"], "kctl: error: --partitions must be at least 1, not 0"),
    (["--clock-peer", "bogus"], "kctl: error: --clock-peer 'bogus': expected host:port of 'kctl produce "
                                "--clock-server' (e.g. 10.0.0.5:7070)"),
])
def test_consume_refuses_options_it_would_ignore_or_fail_on_late(capsys, monkeypatch, args, line):
    # -b names a port nothing listens on: a case that got past the checks would fail differently.
    code, out, err = run_main(capsys, monkeypatch, "consume", "-b", "127.0.0.1:1", "-t", "t", *args)
    assert code == 2
    assert err.startswith(line) and err.count("\n") == 1, err


def test_consume_start_line_says_where_a_group_starts():
    from kctl.load.consume import ConsumeOptions, _describe_start, prepare
    plan = prepare(ConsumeOptions(bootstrap="127.0.0.1:9092", topic="t", consumers=1, group="perf", start="end"))
    assert _describe_start(plan.start, plan.config) == \
        "the group's committed offsets (partitions without one: the end)"


@pytest.mark.parametrize("args, line", [
    (["--hex", "--api", "Produce", "--api-version", "999"],
     "kctl: error: --api-version 999: Produce has versions "),
    (["--hex", "--api", "Produce", "--api-version", "-1"], "kctl: error: --api-version -1: Produce has versions "),
    (["--hex", "--api-version", "3"], "kctl: error: --api-version goes with --api"),
    (["--hex", "--size-prefix", "--no-size-prefix"], "kctl: error: give --size-prefix or --no-size-prefix, not both"),
    (["c.pcap", "--hex"], "kctl: error: --hex decodes one frame read as hex from stdin: give no capture files"),
    (["c.pcap", "--records", "-f", "%Z %t"], "kctl: error: --format '%Z %t': unknown formatter %Z (formatters: "),
    (["c.pcap", "--records", "-f", "%t %"], "kctl: error: --format '%t %': a lone % at the end"),
    (["c.pcap", "-f", "%t"], "kctl: error: --format/-f formats the records --records prints: add --records"),
    (["--summary", "missing.pcap"], "kctl: error: missing.pcap: cannot read: No such file or directory"),
])
def test_decode_refuses_what_it_would_ignore(capsys, monkeypatch, tmp_path, args, line):
    import io
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.pcap").write_bytes(b"")
    monkeypatch.setattr("sys.stdin", io.StringIO("00000000"))
    code, out, err = run_main(capsys, monkeypatch, "decode", *args)
    assert code == 2
    assert err.startswith(line) and err.count("\n") == 1, err
    assert out == ""        # --summary of a file it could not read: no empty table


def test_decode_stdin_is_named_stdin():
    import subprocess
    import sys
    run = subprocess.run([sys.executable, "-m", "kctl", "decode", "-"], input=b"hello\n",
                         capture_output=True, timeout=60)
    assert run.returncode == 2
    assert run.stderr.decode().startswith("kctl: error: stdin, file offset 0: not a pcap or pcapng file")
