"""Stopping a kctl command from outside, as ``kill``, ``timeout(1)`` or a service manager do,
for the end-to-end SIGTERM tests of every command kind (produce, consume, produce --consume,
bench, replay, inspect; the broker's is in tests/test_broker.py).

``KctlProcess`` runs ``python -m kctl ...`` in a session of its own (so its process group
holds kctl and every process it spawns, and nothing else, but for those that make a group
of their own: ``session_gone`` sees them too), reads its stdout and stderr in
threads so the test can wait for a line showing the run is under way, then signals the
kctl process alone (as ``kill PID`` does). ``group_gone`` says whether every process of the
group has ended: worker processes, proxy processors. Spark's driver JVM runs in a session
of its own (kctl/spark/session.py), with pyspark's daemon and Python workers:
``KctlProcess.sessions`` (kctl's and those of every process it started, noted before each
signal) names them for ``session_gone``. Every wait is bounded.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable


class KctlProcess:
    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "kctl", *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True,
                                     env={**os.environ, "COLUMNS": "200"})
        self.pgid = self.proc.pid
        #: kctl's session and those of its descendants seen so far (``note_sessions``).
        self.sessions: set[int] = {self.proc.pid}
        self.out: list[str] = []
        self.err: list[str] = []
        self._readers = [threading.Thread(target=self._read, args=(stream, lines), daemon=True)
                         for stream, lines in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for t in self._readers:
            t.start()

    @staticmethod
    def _read(stream, lines: list[str]) -> None:
        for line in stream:
            lines.append(line)

    def wait_for(self, predicate: Callable[[str], bool], *, stream: str = "out", timeout_s: float = 60.0) -> None:
        """Until a line of ``stream`` (out|err) satisfies ``predicate``; fails on a timeout or
        when kctl ends first."""
        lines = self.out if stream == "out" else self.err
        deadline = time.monotonic() + timeout_s
        while not any(predicate(x) for x in list(lines)):
            assert self.proc.poll() is None, f"kctl ended first ({self.proc.returncode}):\n{self.stderr}"
            assert time.monotonic() < deadline, f"no such line on std{stream} in {timeout_s:g} s:\n{self.stderr}"
            time.sleep(0.05)

    def stop(self, signum: int = signal.SIGTERM, timeout_s: float = 60.0, *, to_group: bool = False) -> int:
        """Sends ``signum`` to kctl alone (``to_group``: to every process of its group, as a
        terminal's Ctrl-C does) and waits for it to end; its exit status."""
        self.note_sessions()
        if to_group:
            os.killpg(self.pgid, signum)
        else:
            self.proc.send_signal(signum)
        try:
            self.proc.wait(timeout_s)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.pgid, signal.SIGKILL)
                self.proc.wait(10)
        for t in self._readers:
            t.join(10)
        return self.proc.returncode

    def note_sessions(self) -> set[int]:
        """Adds the sessions of kctl's descendants now alive (Spark's driver JVM has one of
        its own) to ``sessions``; the descendants' pids."""
        found = descendants(self.proc.pid)
        self.sessions |= {sid for sid in map(_session_of, found) if sid is not None}
        return found

    def kill_group(self) -> None:
        """Cleanup after a failed test: nothing of this run outlives it."""
        if self.proc.poll() is None:
            self.note_sessions()
        try:
            os.killpg(self.pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for pid in _alive_in(self.sessions):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(10)

    @property
    def stdout(self) -> str:
        return "".join(self.out)

    @property
    def stderr(self) -> str:
        return "".join(self.err)


def group_gone(pgid: int, timeout_s: float = 10.0) -> bool:
    """Whether every process of group ``pgid`` has ended within ``timeout_s`` (orphans are
    reaped by init, so a finished group is soon empty)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def session_gone(sids: int | set[int], timeout_s: float = 10.0) -> bool:
    """Whether every process of session ``sids`` (one or several) has ended within
    ``timeout_s``: also those in a process group of their own, such as pyspark's daemon and
    its Python workers, which ``group_gone`` does not see. kctl's session (``KctlProcess``
    starts one) and Spark's driver JVM's: ``KctlProcess.sessions``."""
    deadline = time.monotonic() + timeout_s
    while _alive_in({sids} if isinstance(sids, int) else sids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _stats() -> dict[int, list[str]]:
    """Every live (not zombie) process: its command name, then its /proc stat fields after
    the name (state, ppid, pgrp, session, ...)."""
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z":
            out[int(pid)] = [stat[stat.index("(") + 1:stat.rindex(")")], *fields]
    return out


def _alive_in(sids: set[int]) -> list[int]:
    return [pid for pid, f in _stats().items() if int(f[4]) in sids]


def _session_of(pid: int) -> int | None:
    f = _stats().get(pid)
    return None if f is None else int(f[4])


def descendants(pid: int) -> set[int]:
    """The live processes ``pid`` started, and theirs."""
    children: dict[int, list[int]] = {}
    for child, f in _stats().items():
        children.setdefault(int(f[2]), []).append(child)
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def command_of(pid: int) -> str | None:
    """The command name of a live process (``java``), None when it has ended."""
    f = _stats().get(pid)
    return None if f is None else f[0]
