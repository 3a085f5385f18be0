"""Stopping a kctl command from outside, as ``kill``, ``timeout(1)`` or a service manager do,
for the end-to-end SIGTERM tests of every command kind (produce, consume, produce --consume,
bench, replay, inspect; the broker's is in tests/test_broker.py).

``KctlProcess`` runs ``python -m kctl ...`` in a session of its own (so its process group
holds kctl and every process it spawns, and nothing else, but for those that make a group
of their own: ``session_gone`` sees them too), reads its stdout and stderr in
threads so the test can wait for a line showing the run is under way, then signals the
kctl process alone (as ``kill PID`` does). ``group_gone`` says whether every process of the
group has ended: worker processes, Spark's JVM and its Python workers, proxy processors.
Every wait is bounded.
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

    def kill_group(self) -> None:
        """Cleanup after a failed test: nothing of this run outlives it."""
        try:
            os.killpg(self.pgid, signal.SIGKILL)
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


def session_gone(sid: int, timeout_s: float = 10.0) -> bool:
    """Whether every process of session ``sid`` has ended within ``timeout_s``: also those in
    a process group of their own, such as pyspark's daemon and its Python workers, which
    ``group_gone`` does not see (the session is kctl's: ``KctlProcess`` starts one)."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if fields[0] != "Z" and int(fields[3]) == sid:
                alive.append(pid)
        if not alive:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
