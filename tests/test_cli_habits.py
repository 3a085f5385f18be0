"""Issue 16: kctl as a Kafka engineer who knows kafka-producer-perf-test, kcat and tshark
uses it. One test (or a few) per item; in-process through ``kctl.cli.main`` where no
process boundary is under test, real subprocesses and real pipes where one is."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kctl import cli
from kctl.bench.results import CellResult, RepResult
from kctl.config import ProducerConfig
from kctl.errors import ConfigError
from kctl.quantities import parse_byte_rate, parse_duration, parse_rate
from tests.bench.test_report import SUMMARY, foreign_hlog
from tests.inspect.test_session import basic

REPO = Path(__file__).resolve().parents[1]
PERF_TEST_LINE = re.compile(
    r"(\d+)( steady state)? records sent, \d+\.\d{6} records/sec \(\d+\.\d\d MB/sec\), "
    r"\d+\.\d\d ms avg latency, \d+\.\d\d ms max latency, \d+ ms 50th, \d+ ms 95th, "
    r"\d+ ms 99th, \d+ ms 99\.9th\.")


def run_main(capsys, monkeypatch, *args: str) -> tuple[int, str, str]:
    """``kctl ARGS`` in this process: (exit status, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["kctl", *args])
    code = 0
    try:
        cli.main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    out, err = capsys.readouterr()
    return code, out, err


def kctl(*args: str, stdin=None, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kctl", *args], capture_output=True, text=True,
                          stdin=stdin, timeout=timeout, cwd=REPO)


def one_error_line(code: int, err: str, status: int = 2) -> str:
    assert code == status, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kctl: error: ") and "Traceback" not in err, err
    return lines[0]


# -- 1: perf-test spellings; every usage error is one line, exit 2 ----------------------------

@pytest.mark.parametrize("command", list(cli.COMMANDS))
def test_every_command_reports_usage_errors_on_one_line(capsys, monkeypatch, command):
    code, _, err = run_main(capsys, monkeypatch, command, "--no-such-option")
    line = one_error_line(code, err)
    assert line.startswith(f"kctl: error: {command}: no such option: --no-such-option")


@pytest.mark.parametrize("args,line", [
    (("produce", "--topic"), "kctl: error: produce: option '--topic' requires an argument "
                             "(see 'kctl produce --help')"),
    (("produce", "--throughput", "0"), "kctl: error: --throughput 0 would never send (perf-test blocks "
                                       "forever); use -1 for as fast as possible"),
    (("produce", "--throughput", "5", "--rate", "5"), "kctl: error: give --rate or --throughput "
                                                      "(perf-test's spelling), not both"),
    (("produce", "--payload-monotonic"), "kctl: error: --payload-monotonic numbers the records: give "
                                         "--num-records (as kafka-producer-perf-test requires)"),
    (("produce", "--num-records", "10", "--warmup-records", "10"),
     "kctl: error: --warmup-records must be fewer than --num-records (as in perf-test)"),
    (("prodce",), "kctl: error: no such command: prodce (did you mean 'produce'? commands: produce, "
                  "consume, bench, report, metadata, inspect, decode, analyze, replay, broker)"),
    (("--nope",), "kctl: error: no such option: --nope (see 'kctl --help')"),
])
def test_usage_errors_are_exact_lines(capsys, monkeypatch, args, line):
    code, _, err = run_main(capsys, monkeypatch, *args)
    assert one_error_line(code, err) == line


def test_producer_props_take_several_values_as_in_perf_test():
    from kctl.commands.produce import expand_args
    assert expand_args(["--producer-props", "acks=1", "linger.ms=2", "--num-records", "5",
                        "--command-property", "batch.size=1"]) == [
        "--producer-props", "acks=1", "--producer-props", "linger.ms=2", "--num-records", "5",
        "--command-property", "batch.size=1"]


@pytest.mark.broker
def test_perf_test_command_line_runs_and_ends_with_perf_tests_line(broker, tmp_path):
    """A kafka-producer-perf-test command line, flag for flag (plus -b), and the items it
    touches: --producer-props with several values, --producer.config, KIP-1147's names,
    --warmup-records, --payload-monotonic, the closing line and the clock line (item 2),
    --interval 250ms (item 4), a librdkafka alias (item 10)."""
    props = tmp_path / "producer.properties"
    props.write_text("compression.type=lz4\n")
    cmd_cfg = tmp_path / "command.properties"
    cmd_cfg.write_text("batch.size=32768\n")
    out = tmp_path / "s.json"
    r = kctl("produce", "-b", broker.bootstrap, "--topic", "perf-habits", "--num-records", "3000",
             "--throughput", "-1", "--producer-props", "acks=1", "linger.ms=2",
             "--producer.config", str(props), "--command-config", str(cmd_cfg),
             "--command-property", "client.id=habits", "-X", "queue.buffering.max.kbytes=65536",
             "--warmup-records", "100", "--payload-monotonic", "--workers", "1",
             "--interval", "250ms", "--json-out", str(out))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    m = PERF_TEST_LINE.fullmatch(lines[-1])
    assert m and m.group(2) == " steady state", lines[-1]
    assert lines[-2] == ("latency clock: send: no schedule (as fast as possible), so latency runs "
                         "from when each record was handed to the producer")
    s = json.loads(out.read_text())
    producer = s["config"]["producer"]
    assert (producer["acks"], producer["linger.ms"], producer["compression.type"],
            producer["batch.size"], producer["client.id"]) == ("1", "2", "lz4", "32768", "habits")
    assert producer["buffer.memory"] == str(65536 * 1024)      # librdkafka's KiB, as bytes
    assert s["config"]["warmup_records"] == 100 and s["run"]["max_throughput"]
    from kctl.engine import admin
    from kctl.engine.blocking_client import BlockingClient
    with BlockingClient(broker.bootstrap) as c:
        values = {r.value for p in range(6) for b in admin.read_partition(c, "perf-habits", p)
                  for r in b.records}
    assert values == {str(i).encode() for i in range(3000)}


# -- 3: the Java client's checks, before anything is created -----------------------------------

@pytest.mark.broker
def test_too_large_record_and_bad_topic_are_refused_before_anything_is_created(
        broker, capsys, monkeypatch):
    from kctl.engine import admin
    from kctl.engine.blocking_client import BlockingClient
    code, _, err = run_main(capsys, monkeypatch, "produce", "-b", broker.bootstrap, "-t", "too-large",
                            "--record-size", "2000000", "--num-records", "1")
    assert one_error_line(code, err) == (
        "kctl: error: RecordTooLargeException: a record of --record-size 2000000 is 2000117 bytes when "
        "serialized, larger than 1048576, the value of max.request.size (raise -X max.request.size, "
        "and the topic's max.message.bytes, or send smaller records)")
    code, _, err = run_main(capsys, monkeypatch, "produce", "-b", broker.bootstrap, "-t", "big-buffer",
                            "--record-size", "2000000", "--num-records", "1",
                            "-X", "max.request.size=4000000", "-X", "buffer.memory=1500000",
                            "-X", "batch.size=16384")
    assert "larger than the total memory buffer of 1500000 bytes configured with buffer.memory" in \
        one_error_line(code, err)
    code, _, err = run_main(capsys, monkeypatch, "produce", "-b", broker.bootstrap,
                            "-t", "bad topic/name!", "--num-records", "1")
    assert one_error_line(code, err) == (
        "kctl: error: --topic 'bad topic/name!': illegal character(s) ' /!'; a topic name may hold "
        "only ASCII letters, digits, '.', '_' and '-'")
    with BlockingClient(broker.bootstrap) as c:
        topics = admin.fetch_metadata(c, None).topics
    assert not {"too-large", "big-buffer", "bad topic/name!"} & set(topics)


@pytest.mark.parametrize("name,message", [
    (".", "a topic name cannot be '.' or '..'"),
    ("..", "a topic name cannot be '.' or '..'"),
    ("x" * 250, "topic name is 250 characters long; Kafka allows at most 249"),
])
def test_topic_names_follow_kafkas_rules(capsys, monkeypatch, name, message):
    code, _, err = run_main(capsys, monkeypatch, "produce", "-t", name)
    assert message in one_error_line(code, err)


def test_bench_cell_topics_are_checked(capsys, monkeypatch):
    code, _, err = run_main(capsys, monkeypatch, "bench", "-t", "x" * 245, "--matrix", "acks=1,all")
    assert one_error_line(code, err) == ("kctl: error: topic of cell acks=1: topic name is 252 characters "
                                         "long; Kafka allows at most 249")


# -- 4: one duration parser, one rate parser ---------------------------------------------------

@pytest.mark.parametrize("text,seconds", [("500ms", 0.5), ("5s", 5.0), ("1m30s", 90.0), ("2h", 7200.0),
                                          ("90", 90.0), ("0.25", 0.25), ("1h2m3s", 3723.0)])
def test_durations(text, seconds):
    assert parse_duration(text, "--duration") == seconds


def test_rates():
    assert [parse_rate(t, "--rate") for t in ("5000", "5k", "1.5M/s", "max", "0")] == \
        [5000.0, 5000.0, 1.5e6, 0.0, 0.0]
    assert parse_byte_rate("10MiB", "--rate-bytes") == 10 * 2**20
    assert parse_byte_rate("10MB", "--rate-bytes") == 10**7
    with pytest.raises(ConfigError, match="--rate must be records/s such as 5000, 5k or 1.5M, or max"):
        parse_rate("fast", "--rate")


@pytest.mark.parametrize("args,line", [
    (("produce", "--duration", "1m30x"),
     "kctl: error: --duration must be a duration such as 500ms, 5s, 1m30s, 2h or a number of seconds, "
     "not '1m30x'"),
    (("produce", "--interval", "soon"),
     "kctl: error: --interval must be a duration such as 500ms, 5s, 1m30s, 2h or a number of seconds, "
     "not 'soon'"),
    (("bench", "--warmup", "2x"),
     "kctl: error: --warmup must be a duration such as 500ms, 5s, 1m30s, 2h or a number of seconds, "
     "not '2x'"),
    (("bench", "--rate", "lots"),
     "kctl: error: --rate must be records/s such as 5000, 5k or 1.5M, or max (as fast as possible), "
     "not 'lots'"),
    (("inspect", "--upstream", "127.0.0.1:1", "--duration", "5 s x"),
     "kctl: error: --duration must be a duration such as 500ms, 5s, 1m30s, 2h or a number of seconds, "
     "not '5 s x'"),
])
def test_every_command_reads_durations_and_rates_alike(capsys, monkeypatch, args, line):
    code, _, err = run_main(capsys, monkeypatch, *args)
    assert one_error_line(code, err) == line


def test_inspect_takes_a_duration_with_a_unit():
    from kctl.broker import free_port
    r = kctl("inspect", "--listen", f"127.0.0.1:{free_port()}", "--upstream", "127.0.0.1:1",
             "--duration", "300ms", timeout=30)
    assert r.returncode == 0, r.stderr


# -- 5 and 9: output that survives pipes; stdin --------------------------------------------------

def test_piped_decode_summary_is_never_cut_and_reads_stdin(tmp_path):
    capture = basic(tmp_path)
    with open(capture, "rb") as f:             # a real pipe from cat, as from tcpdump -w -
        cat = subprocess.Popen(["cat"], stdin=f, stdout=subprocess.PIPE)
        r = kctl("decode", "--summary", "-", stdin=cat.stdout)
        cat.wait()
    assert r.returncode == 0, r.stderr
    assert "…" not in r.stdout and "orders" in r.stdout
    assert "NOT_LEADER_OR_FOLLOWER" in r.stdout
    r = kctl("decode", "--json", "-", stdin=open(capture, "rb"))
    assert [json.loads(x)["api_name"] for x in r.stdout.splitlines()] == [
        "Produce", "Produce", "Metadata", "Metadata"]


@pytest.mark.broker
def test_payload_file_from_stdin(broker, tmp_path):
    out = tmp_path / "s.json"
    p = subprocess.Popen(["printf", "alpha\\nbravo\\n"], stdout=subprocess.PIPE)
    r = kctl("produce", "-b", broker.bootstrap, "-t", "stdin-payloads", "--payload-file", "-",
             "--num-records", "10", "--workers", "1", "--json-out", str(out), stdin=p.stdout)
    p.wait()
    assert r.returncode == 0, r.stderr
    from kctl.engine import admin
    from kctl.engine.blocking_client import BlockingClient
    with BlockingClient(broker.bootstrap) as c:
        values = {r.value for q in range(6) for b in admin.read_partition(c, "stdin-payloads", q)
                  for r in b.records}
    assert values == {b"alpha", b"bravo"}


def test_stdout_console_is_unbounded_on_a_pipe():
    from kctl.ui.console import PIPE_WIDTH
    code = "from kctl.ui.console import stdout_console; print(stdout_console().width)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert int(r.stdout) == PIPE_WIDTH


# -- 6: kctl report ------------------------------------------------------------------------------

def test_report_labels_na_figures_and_gate(tmp_path, capsys, monkeypatch):
    foreign_hlog(tmp_path / "s.hlog")
    (tmp_path / "s.json").write_text(json.dumps(SUMMARY))
    monkeypatch.setenv("COLUMNS", "300")
    code, out, err = run_main(capsys, monkeypatch, "report", str(tmp_path / "s.json"),
                              str(tmp_path / "s.hlog"), "--hlog-unit", "ns")
    assert code == 0, err
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.startswith("│ s.")}
    assert set(rows) == {"s.json", "s.hlog"}
    hlog_cells = [c.strip() for c in rows["s.hlog"].split("│")[2:-1]]
    assert hlog_cells[1] == "n/a" and "*" not in rows["s.hlog"].split("│")[2]   # MB/s n/a
    assert rows["s.json"].split("│")[2].strip() == "5,000*"                       # one best
    # A gate with no cell in common checks nothing, and fails.
    foreign_hlog(tmp_path / "renamed.hlog")
    code, out, _ = run_main(capsys, monkeypatch, "report", str(tmp_path / "s.json"),
                            "--baseline", str(tmp_path / "renamed.hlog"))
    assert code == 1
    assert out.strip().splitlines()[-1].startswith(
        "gate: FAILED: nothing checked: no cell and bounded metric in common with the baseline")


def test_gate_names_cells_as_the_table_does():
    from kctl.bench.gate import check, parse_bounds
    cells = [CellResult("acks-1", "acks=1", {"acks": "1"}, [RepResult(1, {"records_per_s": 100.0})])]
    base = [CellResult("acks-1", "acks=1", {"acks": "1"}, [RepResult(1, {"records_per_s": 200.0})]),
            CellResult("acks-all", "acks=all", {"acks": "all"}, [RepResult(1, {"records_per_s": 1.0})])]
    result = check(cells, base, parse_bounds("records_per_s=10%"))
    assert [c.cell for c in result.checks] == ["acks=1"] and result.missing_now == ("acks=all",)
    assert not result.ok


# -- 7: help ----------------------------------------------------------------------------------

def test_help_keeps_brackets_and_names_values(capsys, monkeypatch):
    code, out, _ = run_main(capsys, monkeypatch, "bench", "--help")
    assert code == 0
    assert "[workload], [properties], [matrix]" in out
    assert "--duration DURATION" in out and "-X NAME=VALUE" in out
    assert not re.search(r"<(list|bool|int|str|path|float)", out)
    code, out, _ = run_main(capsys, monkeypatch, "produce", "--help")
    assert "kctl[spark]" in out and "--num-records NUM-RECORDS" in out and "<bool>" not in out
    assert "--producer-props, --command-property NAME=VALUE..." in " ".join(out.split())


def test_decode_version_is_api_version_now(capsys, monkeypatch):
    code, _, err = run_main(capsys, monkeypatch, "decode", "--hex", "--version", "3")
    assert one_error_line(code, err) == (
        "kctl: error: decode --version N is now --api-version N (the API version of the response's "
        "request, with --hex); 'kctl --version' prints kctl's version")


def test_the_command_list_matches_the_commands():
    commands = sorted(p.stem for p in (REPO / "kctl" / "commands").glob("[!_]*.py"))
    assert sorted(cli.COMMANDS) == commands
    for name, text in cli.COMMANDS.items():
        _, command = cli.load_command(name)
        assert command.help.strip().splitlines()[0] == text, name


# -- 8: start-up loads only what the command needs ------------------------------------------------

def _modules_after(*args: str) -> set[str]:
    """The modules a fresh ``kctl ARGS`` has loaded when it is done."""
    code = ("import sys; from kctl import cli; sys.argv = ['kctl', *sys.argv[1:]]; cli.main(); "
            "print(' '.join(sorted(sys.modules)), file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    return set(r.stderr.split())


def test_version_and_help_load_no_command():
    for args in (("--version",), ("--help",)):
        mods = _modules_after(*args)
        assert not {m for m in mods if m.startswith(("kctl.commands", "typer", "rich", "click"))}, args
    mods = _modules_after("decode", "--help")
    assert {m for m in mods if m.startswith("kctl.commands.")} == {"kctl.commands.decode"}
    assert not {m for m in mods if m.startswith(("kctl.engine", "kctl.load", "kctl.bench"))}


# -- 10: librdkafka's names ----------------------------------------------------------------------

def test_librdkafka_aliases_mean_the_java_property():
    c = ProducerConfig.load(overrides=[
        "queue.buffering.max.ms=7", "compression.codec=zstd", "request.required.acks=1",
        "message.send.max.retries=3", "message.max.bytes=2000000", "queue.buffering.max.kbytes=1024",
        "socket.timeout.ms=20000", "message.timeout.ms=60000", "socket.send.buffer.bytes=0",
        "enable.idempotence=false"])
    assert (c.linger_ms, c.compression_type.value, c.acks, c.retries, c.max_request_size,
            c.buffer_memory, c.request_timeout_ms, c.delivery_timeout_ms, c.send_buffer_bytes) == (
        7, "zstd", 1, 3, 2000000, 1048576, 20000, 60000, -1)
    assert {"linger.ms", "buffer.memory"} <= c.explicit


def test_librdkafka_property_with_another_meaning_is_refused(capsys, monkeypatch):
    code, _, err = run_main(capsys, monkeypatch, "produce", "-X", "batch.num.messages=500")
    assert one_error_line(code, err) == (
        "kctl: error: -X: batch.num.messages is not supported: librdkafka's batch.num.messages caps the "
        "records in a batch; the Java producer has no record-count limit and bounds a batch in bytes "
        "with batch.size")


# -- 11: the small ones --------------------------------------------------------------------------

@pytest.mark.broker
def test_metadata_json_no_apis(broker):
    r = kctl("metadata", "-b", broker.bootstrap, "--json", "--no-apis")
    assert r.returncode == 0, r.stderr
    assert all("apis" not in b for b in json.loads(r.stdout)["brokers"])


def test_address_without_port_says_which_port():
    from kctl.engine.blocking_client import BlockingClient
    assert BlockingClient("127.0.0.1")._tried() == "127.0.0.1:9092 (no port given: 9092 assumed)"
    assert BlockingClient("127.0.0.1:19092")._tried() == "127.0.0.1:19092"


def test_workload_keys_have_no_max(tmp_path, capsys, monkeypatch):
    (tmp_path / "w.toml").write_text("[workload]\nmax = true\n")
    code, _, err = run_main(capsys, monkeypatch, "bench", str(tmp_path / "w.toml"))
    line = one_error_line(code, err)
    assert "unknown key(s) in [workload]: max" in line and ", max," not in line


def test_charts_name_the_clock_and_the_html_lists_settings(tmp_path):
    pytest.importorskip("matplotlib")
    pytest.importorskip("plotly")
    from kctl.bench.charts import _ticks_upto, _x_end, write_charts
    from kctl.bench.results import load_run
    (tmp_path / "s.json").write_text(json.dumps(SUMMARY))
    cells = load_run(tmp_path / "s.json")
    write_charts(cells, tmp_path / "out", workload={"rate": 5000, "duration": "2s"})
    page = (tmp_path / "out" / "report.html").read_text()
    assert "Workload and settings" in page and "acks=all" in page and "intended clock" in page
    assert "solid: first" in page
    assert _ticks_upto(_x_end(cells))[-1] == 99.99     # the summary's last percentile, not 99.9999


@pytest.mark.broker
def test_metadata_of_a_missing_topic_exits_1(broker):
    """It printed ERROR: UNKNOWN_TOPIC_OR_PARTITION and exited 0."""
    for extra in ((), ("--json",)):
        r = kctl("metadata", "-b", broker.bootstrap, "--no-apis", "-t", "no-such-topic-here", *extra)
        assert r.returncode == 1, r.stderr
        assert r.stderr.strip().splitlines() == [
            "kctl: error: metadata: topic no-such-topic-here (UNKNOWN_TOPIC_OR_PARTITION)"], r.stderr
