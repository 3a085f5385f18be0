"""``kctl produce``'s option checks: every bad input is one line naming the option, exit 2,
before anything starts (the broker given is 127.0.0.1:1, where nothing listens: a check
that let the run start would end in 'cannot connect' instead of its own line)."""

from __future__ import annotations

import os
import time

import pytest

from kctl.load.produce import ProduceOptions, max_local_workers, prepare
from tests.test_cli_habits import one_error_line, run_main

NOWHERE = ("produce", "-b", "127.0.0.1:1", "-t", "opts", "--quiet")


@pytest.mark.parametrize("args,line", [
    # 1: --clock-server's port
    (("--clock-server", "99999"), "--clock-server must be [HOST:]PORT with PORT 0..65535 "
                                  "(e.g. 7079 or 0.0.0.0:7079; 0: a free port, printed), not '99999'"),
    (("--clock-server", "abc"), "--clock-server must be [HOST:]PORT with PORT 0..65535 "
                                "(e.g. 7079 or 0.0.0.0:7079; 0: a free port, printed), not 'abc'"),
    (("--clock-server", "127.0.0.1:65536"), "--clock-server must be [HOST:]PORT with PORT 0..65535 "
                                            "(e.g. 7079 or 0.0.0.0:7079; 0: a free port, printed), "
                                            "not '127.0.0.1:65536'"),
    # 2: an output no file can be created at
    (("--json-out", "/proc/x.json"), "--json-out /proc/x.json: cannot be written"),
    (("--hdr-out", "/proc/x.hlog"), "--hdr-out /proc/x.hlog: cannot be written"),
    # 3: a rate finer than the schedule's nanosecond
    (("--rate", "99999999999999999999"), "--rate must be at most 1G records/s (one record a nanosecond, "
                                         "the schedule's resolution), not 1e+20 records/s"),
    (("--rate-bytes", "999999999999999", "--record-size", "10"), "--rate-bytes must be at most 1G records/s"),
    # 4: more local workers than the bound
    (("--workers", "1000"), f"--workers must be at most {max_local_workers()} (4 per core here)"),
    # 6: empty or zero
    (("-b", ""), "--bootstrap-server is empty: give host:port, or leave it out to start the embedded broker"),
    (("--duration", ""), "--duration must be a duration such as 500ms, 5s, 1m30s, 2h or a number of "
                         "seconds, not ''"),
    (("--duration", "0"), "--duration must be at least 1ms, not '0'"),
    # 7: 0 is refused for the three rate options alike
    (("--rate", "0"), "--rate 0 would never send; use --rate max (or leave it out) for as fast as possible"),
    (("--rate", "0k"), "--rate 0k would never send"),
    (("--rate-bytes", "0"), "--rate-bytes 0 would never send; leave it out for as fast as possible"),
    (("--throughput", "0"), "--throughput 0 would never send"),
    # 8: both set the value size
    (("--payload-file", __file__, "--record-size", "100"), "give --payload-file or --record-size, not both"),
    # 9: a warm-up in which every record is scheduled
    (("--num-records", "10", "--rate", "5", "--warmup", "2s"), "--warmup 2s covers the whole run"),
    # 10: Spark's options without --spark
    (("--tasks", "4"), "--tasks goes with --spark (add --spark to run the workers as Spark tasks)"),
    (("--master", "local[1]"), "--master goes with --spark (add --spark to run the workers as Spark tasks)"),
])
def test_bad_option_is_one_line_before_anything_starts(capsys, monkeypatch, args, line):
    argv = list(NOWHERE)
    if args[0] == "-b":
        argv[1:3] = args[:2]
        args = args[2:]
    code, _, err = run_main(capsys, monkeypatch, *argv, *args)
    got = one_error_line(code, err)
    assert got.startswith(f"kctl: error: {line}"), got


def test_a_refused_output_leaves_no_file(capsys, monkeypatch, tmp_path):
    out = tmp_path / "s.json"
    code, _, err = run_main(capsys, monkeypatch, *NOWHERE, "--json-out", str(out), "--rate", "0")
    one_error_line(code, err)
    code, _, err = run_main(capsys, monkeypatch, *NOWHERE, "--json-out", str(out), "--duration", "0")
    assert "--duration" in one_error_line(code, err) and not out.exists()


def test_inspect_refuses_a_zero_duration(capsys, monkeypatch):
    code, _, err = run_main(capsys, monkeypatch, "inspect", "--upstream", "127.0.0.1:1", "--duration", "0")
    assert one_error_line(code, err) == ("kctl: error: --duration must be at least 1ms, not '0' "
                                         "(leave it out to run until Ctrl-C)")


def test_duration_ending_before_num_records_is_warned_up_front():
    plan = prepare(ProduceOptions(bootstrap="127.0.0.1:1", num_records=10, rate=5.0, duration="1s"))
    assert ("--duration 1s ends the run before --num-records 10 is sent: at 5 records/s about 5 records "
            "fit in it") in plan.warnings
    plan = prepare(ProduceOptions(bootstrap="127.0.0.1:1", num_records=10, rate=5.0, duration="3s"))
    assert not any("ends the run" in w for w in plan.warnings)


def test_workers_bound_is_for_local_processes_only():
    many = max_local_workers() + 1
    plan = prepare(ProduceOptions(bootstrap="127.0.0.1:1", workers=many, workers_reason="--tasks",
                                  spark=True, num_records=many))
    assert plan.spec_args["workers"] == many
    assert max_local_workers() == 4 * (os.cpu_count() or 1)


def test_summary_is_printed_when_json_out_fails_after_the_run(broker, capsys, monkeypatch, tmp_path):
    import errno
    from pathlib import Path

    out = tmp_path / "s.json"
    real = Path.write_text

    def full_disk(self, *a, **k):
        if self == out:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "write_text", full_disk)
    code, stdout, err = run_main(capsys, monkeypatch, "produce", "-b", broker.bootstrap, "-t", "opts-json",
                                 "--quiet", "--num-records", "20", "--workers", "1", "--json-out", str(out))
    assert code == 2, err
    assert stdout.strip().splitlines()[-1].startswith("20 records sent")
    assert err.strip().splitlines()[-1] == f"kctl: error: --json-out {out}: cannot be written (No space left on device)"
    assert "Traceback" not in err


def test_warmup_that_takes_every_record_is_warned_after_the_run(broker, capsys, monkeypatch):
    code, stdout, err = run_main(capsys, monkeypatch, "produce", "-b", broker.bootstrap, "-t", "opts-warm",
                                 "--quiet", "--num-records", "10", "--workers", "1", "--warmup", "5s")
    assert code == 0, err
    assert stdout.strip().splitlines()[-1].startswith("0 steady state records sent")
    assert "the warm-up (--warmup 5s) covered the whole run" in err


def _round(intended_p50_ms: float, send_p50_ms: float):
    from types import SimpleNamespace
    fig = lambda p50: SimpleNamespace(p50_ms=p50, count=100)   # noqa: E731
    return SimpleNamespace(interval_latency={"intended": fig(intended_p50_ms), "send": fig(send_p50_ms)})


def test_schedule_lag_warns_once_when_far_behind_and_growing():
    from kctl.load.produce import ScheduleLag
    lag = ScheduleLag(1e6)
    assert lag.step(_round(5, 4)) is None                  # on time
    assert lag.step(_round(3000, 2500)) is None            # 0.5 s behind: under the threshold
    assert lag.step(_round(1210, 10)) is None              # 1.2 s, growing once
    assert lag.step(_round(1110, 10)) is None              # caught up a little: counts again
    assert lag.step(_round(1510, 10)) is None
    assert lag.step(_round(2010, 10)) is None
    line = lag.step(_round(2610, 10))                      # 2.6 s, growing three rounds in a row
    assert line is not None and line.startswith("the run is 2.6s behind its schedule of 1e+06 records/s")
    assert "bound it with --num-records or a lower --rate" in line
    assert lag.step(_round(9000, 10)) is None              # once


def test_schedule_lag_is_quiet_when_catching_up_or_unpaced():
    from kctl.load.produce import ScheduleLag
    lag = ScheduleLag(1000)
    assert [lag.step(_round(ms, 5)) for ms in (4000, 3000, 2000, 1500)] == [None] * 4
    assert ScheduleLag(0).step(_round(9000, 5)) is None    # as fast as possible: no schedule


def test_sigterm_to_the_group_while_workers_start_stops_promptly(broker):
    """A SIGTERM to the whole group while the workers are still being spawned: a worker
    killed before it read its spec left the parent writing into its pipe for ever (the
    audit's --workers 1000: SIGTERM ignored). The workers are born with the stop signals
    blocked and take them once their handler is set (load/stop.py)."""
    import signal
    import subprocess

    from tests.stop_signal import KctlProcess, descendants, group_gone

    run = KctlProcess("produce", "-b", broker.bootstrap, "-t", "opts-term", "--rate", "500",
                      "--duration", "30s", "--workers", str(max_local_workers()))
    try:
        run.wait_for(lambda line: line.startswith("producing to"), stream="err", timeout_s=60)
        deadline = time.monotonic() + 30
        while len(descendants(run.proc.pid)) < 3 and time.monotonic() < deadline:   # tracker + 2 workers
            time.sleep(0.01)
        t0 = time.monotonic()
        try:
            status = run.stop(signal.SIGTERM, timeout_s=25, to_group=True)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"kctl still running 25 s after SIGTERM:\n{run.stderr}") from None
        assert status == 130, run.stderr
        assert time.monotonic() - t0 < 25
        assert "Traceback" not in run.stderr, run.stderr
        assert group_gone(run.pgid)
    finally:
        run.kill_group()
