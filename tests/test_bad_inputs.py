"""Audit M: every bad input of consume, decode, report, bench, inspect, analyze and replay
gets one line naming the option, exit 2, before any side effect or costly start (Spark).
In-process through ``kctl.cli.main``; Spark is made to fail loudly if a case reaches it."""

from __future__ import annotations

import pytest

from tests.test_cli_habits import run_main


@pytest.fixture
def no_spark(monkeypatch):
    import kctl.spark.replay as replay    # imported first: its module-level import of
    import kctl.spark.session as session  # spark_session must bind the real one, not the stub

    def refuse(*_a, **_k):
        raise AssertionError("Spark started before the options were checked")
    monkeypatch.setattr(session, "spark_session", refuse)
    monkeypatch.setattr(replay, "spark_session", refuse)


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
    (["c.pcap", "--records", "--summary"], "kctl: error: give --records (each record) or --summary (the totals), not both"),
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


def test_report_checks_max_regression_without_baseline(capsys, monkeypatch, tmp_path):
    import json
    from tests.bench.test_report import SUMMARY
    run = tmp_path / "run.json"
    run.write_text(json.dumps(SUMMARY))
    code, out, err = run_main(capsys, monkeypatch, "report", str(run), "--max-regression", "bogus=1%")
    assert code == 2 and err.startswith("kctl: error: --max-regression: unknown metric 'bogus'"), err
    code, out, err = run_main(capsys, monkeypatch, "report", str(run), "--max-regression", "p99_ms=1%")
    assert code == 2 and err == "kctl: error: --max-regression bounds the regression gate: give --baseline too\n"
    assert out == ""


def test_report_names_a_capture_and_a_cut_short_log(capsys, monkeypatch, tmp_path):
    from tests.bench.test_report import foreign_hlog
    capture = tmp_path / "out.pcapng"
    capture.write_bytes(b"\x0a\x0d\x0d\x0a" + bytes(60))
    code, out, err = run_main(capsys, monkeypatch, "report", str(capture))
    assert code == 2
    assert err == (f"kctl: error: {capture}: not a kctl summary, .hlog or bench directory: looks like "
                   "a pcapng capture (kctl decode reads those)\n")
    log = tmp_path / "run.hlog"
    foreign_hlog(log)
    text = log.read_text()
    log.write_text(text[:len(text) - 200])          # the last interval cut short, as a killed writer leaves it
    last = len(text[:len(text) - 200].splitlines())
    code, out, err = run_main(capsys, monkeypatch, "report", str(log), "--hlog-unit", "ns")
    assert code == 0, err
    assert err.replace("\n", " ").startswith(
        f"warning: {log}: the log is cut short at line {last} (its last interval cannot be read); "
        "reporting the 2 whole interval(s) before it"), err
    assert "run" in out
    lines = text.splitlines()
    lines[-2] = lines[-2][:len(lines[-2]) // 2]      # a damaged interval in the middle: refused
    log.write_text("\n".join(lines) + "\n")
    code, out, err = run_main(capsys, monkeypatch, "report", str(log))
    assert code == 2 and err.startswith(f"kctl: error: {log}: a damaged HdrHistogram interval log: "
                                        f"line {len(lines) - 1} cannot be read"), err


def test_bench_names_a_directory_given_as_its_workload(capsys, monkeypatch, tmp_path):
    code, out, err = run_main(capsys, monkeypatch, "bench", str(tmp_path))
    assert code == 2
    assert err == (f"kctl: error: workload file {tmp_path}: a directory; bench reads a TOML workload "
                   "file (e.g. examples/bench.toml)\n")


@pytest.mark.parametrize("args, line", [
    (["--inject-error", ""], "kctl: error: --inject-error '': expected NAME[@API,...][:RATE]"),
    (["--inject-error", "NOT_LEADER_OR_FOLLOWER:2"],
     "kctl: error: --inject-error 'NOT_LEADER_OR_FOLLOWER:2': the rate 2.0 is outside 0..1"),
    (["--inject-error", "BOGUS"], "kctl: error: --inject-error 'BOGUS': unknown Kafka error name 'BOGUS'"),
    (["--reject-records", "NOT_LEADER_OR_FOLLOWER:0.1:-1"],
     "kctl: error: --reject-records 'NOT_LEADER_OR_FOLLOWER:0.1:-1': the limit -1 is negative"),
    (["--reject-records", ""], "kctl: error: --reject-records '': expected NAME[:RATE[:LIMIT]]"),
    (["--lose-records", ""], "kctl: error: --lose-records '': expected RATE[:LIMIT]"),
    (["--lose-records", "2"], "kctl: error: --lose-records '2': the rate 2.0 is outside 0..1"),
])
def test_inspect_fault_options_name_themselves(capsys, monkeypatch, args, line):
    code, out, err = run_main(capsys, monkeypatch, "inspect", "--upstream", "127.0.0.1:1",
                              "--listen", "127.0.0.1:0", "--duration", "1s", *args)
    assert code == 2
    assert err.startswith(line) and err.count("\n") == 1, err


def test_consumer_config_errors_say_consumer(capsys, monkeypatch, tmp_path):
    code, out, err = run_main(capsys, monkeypatch, "consume", "-b", "127.0.0.1:1", "-t", "t",
                              "--consumer-config", str(tmp_path / "missing.properties"))
    assert code == 2
    assert err.startswith("kctl: error: cannot read consumer properties file"), err


def test_analyze_refuses_to_replace_earlier_tables_without_overwrite(capsys, monkeypatch, no_spark, tmp_path):
    capture = tmp_path / "c.pcap"
    capture.write_bytes(b"")
    (tmp_path / "o" / "requests").mkdir(parents=True)
    code, out, err = run_main(capsys, monkeypatch, "analyze", str(capture), "--out", str(tmp_path / "o"))
    assert code == 2
    assert err == (f"kctl: error: --out {tmp_path / 'o'}: already holds requests/ (an earlier analyze?): "
                   "give --overwrite to replace them, or another --out\n")


def test_an_empty_pem_file_is_named(capsys, monkeypatch, tmp_path):
    import ssl

    from kctl.engine.tls import _load_cas
    from kctl.errors import ConfigError
    empty = tmp_path / "empty.pem"
    empty.write_bytes(b"")
    code, out, err = run_main(capsys, monkeypatch, "inspect", "--upstream", "127.0.0.1:1", "--listen",
                              "127.0.0.1:0", "--duration", "1s", "--listen-tls-cert", str(empty))
    assert code == 2
    assert err == (f"kctl: error: cannot load the listener certificate '{empty}': '{empty}' holds no PEM "
                   "block (it is empty)\n")
    with pytest.raises(ConfigError, match=r"holds no PEM block \(it is empty\)"):
        _load_cas(ssl.create_default_context(), str(empty))
