"""Every command's output paths are checked before any work (commands/_output.py): a
path that cannot be written is one line naming the option, exit 2, no traceback, and
no broker contacted (the bootstrap given is a closed port)."""

from __future__ import annotations

import os

import pytest

from kctl.cli import main

NO_BROKER = "127.0.0.1:1"


def _refused(capsys, argv: list[str], option: str, why: str) -> None:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"kctl: error: {option} ") and why in lines[0], lines[0]


def _file_cases(tmp_path):
    missing = str(tmp_path / "no-such-dir" / "x.out")
    return [("missing directory", missing, "does not exist"), ("a directory", str(tmp_path), "is a directory")]


@pytest.mark.parametrize("command,option", [
    ("produce", "--hdr-out"), ("produce", "--json-out"),
    ("consume", "--hdr-out"), ("consume", "--json-out"),
])
def test_load_commands_refuse_an_unwritable_output_before_the_run(tmp_path, capsys, command, option):
    for _, path, why in _file_cases(tmp_path):
        _refused(capsys, [command, "-b", NO_BROKER, "-t", "t", "--duration", "1s", option, path], option, why)


def test_replay_refuses_an_unwritable_output_before_spark(tmp_path, capsys):
    data = tmp_path / "rows.json"
    data.write_text('{"a": 1}\n')
    for _, path, why in _file_cases(tmp_path):
        _refused(capsys, ["replay", str(data), "-t", "t", "-b", NO_BROKER, "--json-out", path], "--json-out", why)


@pytest.mark.parametrize("option", ["--capture", "--json-out"])
def test_inspect_refuses_an_unwritable_output_before_listening(tmp_path, capsys, option):
    for _, path, why in _file_cases(tmp_path):
        _refused(capsys, ["inspect", "--upstream", NO_BROKER, "--listen", "127.0.0.1:0", option, path],
                 option, why)


def test_bench_and_report_refuse_an_out_that_is_a_file_or_unwritable(tmp_path, capsys):
    a_file = tmp_path / "f"
    a_file.write_text("x")
    _refused(capsys, ["bench", "-b", NO_BROKER, "--out", str(a_file)], "--out", "not a directory")
    _refused(capsys, ["bench", "-b", NO_BROKER, "--out", str(a_file / "sub")], "--out", "not a directory")
    _refused(capsys, ["bench", "-b", NO_BROKER, "--baseline", str(a_file), "--junit-xml",
                      str(tmp_path / "nope" / "j.xml")], "--junit-xml", "does not exist")
    _refused(capsys, ["report", str(a_file), "--out", str(a_file)], "--out", "not a directory")
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        _refused(capsys, ["report", str(a_file), "--out", str(ro / "charts")], "--out", "not writable")


def test_analyze_refuses_a_local_out_that_is_a_file(tmp_path, capsys):
    a_file = tmp_path / "f"
    a_file.write_text("x")
    _refused(capsys, ["analyze", str(a_file), "--out", str(a_file)], "--out", "not a directory")
