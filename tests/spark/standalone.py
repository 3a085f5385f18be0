"""A Spark standalone cluster on 127.0.0.1 for the tests, started from the pyspark package
itself: one Master and two Workers of one core each (``bin/spark-class``), on ports the
JVMs pick (``--port 0``; the master's URL is read from its log), work and log files under
a temporary directory, the REST submission server off (it would take the fixed port 6066).

Executors are separate JVMs with their own Python workers (the venv's interpreter, from
the driver's PYSPARK_PYTHON), so what runs on them relies on nothing in the driver
process. ``stop()`` ends every process it started, by PID (each is a process group leader:
a worker's executors and their Python workers go with it).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

START_TIMEOUT_S = 90
_URL = re.compile(r"Starting Spark master at (spark://127\.0\.0\.1:\d+)")
_REGISTERED = "Successfully registered with master"


class StandaloneCluster:
    def __init__(self, root: Path, *, workers: int = 2, cores: int = 1, memory: str = "1g") -> None:
        import pyspark
        self.home = Path(pyspark.__file__).parent
        self.root = root
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.url = ""
        self.procs: list[subprocess.Popen] = []

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        # The daemons only schedule: small heaps and the C1 JIT keep them cheap on a
        # small machine; logs and pid files stay under root.
        env.update(SPARK_HOME=str(self.home), SPARK_LOCAL_IP="127.0.0.1",
                   SPARK_DAEMON_MEMORY="256m", SPARK_LOG_DIR=str(self.root / "logs"),
                   SPARK_PID_DIR=str(self.root), SPARK_WORKER_DIR=str(self.root / "work"),
                   SPARK_DAEMON_JAVA_OPTS="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
                   SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false")
        return env

    def _spawn(self, name: str, args: list[str]) -> tuple[subprocess.Popen, Path]:
        log = self.root / f"{name}.log"
        with open(log, "wb") as out:
            p = subprocess.Popen([str(self.home / "bin" / "spark-class"), *args], stdout=out,
                                 stderr=subprocess.STDOUT, env=self._env(), start_new_session=True)
        self.procs.append(p)
        return p, log

    def _wait_for(self, p: subprocess.Popen, log: Path, pattern: re.Pattern | str) -> str:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            text = log.read_text(errors="replace")
            m = pattern.search(text) if isinstance(pattern, re.Pattern) else (pattern in text and pattern)
            if m:
                return m.group(1) if isinstance(m, re.Match) else m
            if p.poll() is not None:
                raise RuntimeError(f"{log.name}: exited with {p.returncode}: {text[-2000:]}")
            time.sleep(0.2)
        raise RuntimeError(f"{log.name}: not started after {START_TIMEOUT_S} s: "
                           f"{log.read_text(errors='replace')[-2000:]}")

    def start(self) -> StandaloneCluster:
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            master, log = self._spawn("master", ["org.apache.spark.deploy.master.Master", "--host",
                                                 "127.0.0.1", "--port", "0", "--webui-port", "0"])
            self.url = self._wait_for(master, log, _URL)
            started = [self._spawn(f"worker{i}", [
                "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--port", "0",
                "--webui-port", "0", "--cores", str(self.cores), "--memory", self.memory,
                "--work-dir", str(self.root / f"work{i}"), self.url]) for i in range(self.workers)]
            for p, log in started:
                self._wait_for(p, log, _REGISTERED)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Ends every process started here (and its process group), by PID."""
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for p in reversed(self.procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(timeout=10)
        self.procs.clear()
