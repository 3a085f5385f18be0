"""The CLI as a user runs it: ``python -m kctl``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import kctl

REPO = Path(__file__).resolve().parents[1]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kctl", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=30)


def test_version():
    r = run("--version")
    assert r.returncode == 0
    assert r.stdout.strip() == f"kctl {kctl.__version__}"


def test_help_lists_the_commands():
    r = run("--help")
    assert r.returncode == 0
    commands = sorted(p.stem for p in (REPO / "kctl" / "commands").glob("[!_]*.py"))
    assert "broker" in commands
    for name in commands:
        assert name in r.stdout, name


def test_broker_help_mentions_port():
    r = run("broker", "--help")
    assert r.returncode == 0 and "--port" in r.stdout
