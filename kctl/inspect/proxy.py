"""The inspector proxy: a transparent Kafka proxy that decodes, measures, rewrites and breaks traffic.

How this works
--------------
The structure is Kafka's SocketServer (docs/DESIGN.md, "The inspector proxy"):

- the *acceptor* (``acceptor.Listeners``) has a listener per upstream broker (one
  more for each further broker a response names) and numbers each connection it
  accepts, in accept order over the whole proxy;
- it hands each connection to one of N *processors* (``processor.Processor``); a
  processor owns its connections from accept to close, forwards requests and
  responses, rewrites broker addresses (``rewrite.ResponseRewriter``), applies faults
  (``faults``), keeps statistics (``proxy_stats``) and writes its capture
  (``capture_writer``); see processor.py for the hot path and per-connection order.

``processors=1`` (by default) runs the acceptor and the one processor in a single event
loop in a background thread: plenty for tests and a handful of clients, and observers
(``on_frame``) run in that thread. ``processes=True`` (the default when ``processors``
> 1, and what ``kctl inspect`` always uses) runs N processor processes
(``processes.ProcessorPool``): the parent's acceptor thread passes each accepted
socket to the processor with the fewest connections; processors send statistics
reports (merged here into one ``StatsSnapshot``) and write their own capture parts,
merged into one pcapng when the proxy stops. A processor that dies is reported
(``lost``, ``on_lost``), never silently: its connections are named. Even one processor
is better in its own process under a live view: rendering a Rich table holds the GIL
for milliseconds, which a processor thread beside it would add to every response
waiting at that moment.

TLS: with a listener context the proxy terminates TLS from clients, with an upstream
context it speaks TLS to the brokers (host names checked against the upstream
address as given or as the cluster advertises it), so it still sees Kafka frames to
decode, rewrite and break. Processor processes are given the recipes
(``ListenerTls``, the upstream ``SecurityConfig``) and build their own contexts. The
capture holds what the proxy forwards, in clear: TLS is gone from it, SASL
credentials are not.

Secrets: ``on_frame`` events redact SaslAuthenticate ``auth_bytes`` from their bodies
(as ``kctl decode`` shows them) unless ``show_secrets``.

Faults are per connection and reproducible: connection ``n`` (in accept order) draws
from a ``random.Random`` seeded with ``(seed, n)``, whichever processor owns it.
``set_faults()`` swaps the plan while running; each connection picks it up at its
next request or response.
"""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from kctl.config import SecurityConfig
from kctl.engine.clock import Clock, SystemClock
from kctl.errors import ConfigError, KctlError
from kctl.inspect.acceptor import Listener, ListenerInfo, Listeners
from kctl.inspect.capture_writer import CaptureWriter, MergeResult, merge_captures
from kctl.inspect.faults import FaultPlan, FaultSwitch
from kctl.inspect.legs import Leg
from kctl.inspect.processes import ListenerTls, ProcessorPool
from kctl.inspect.processor import (
    Address, FrameEvent, Processor, ProcessorHooks, ProcessorTls, api_name, fmt)
from kctl.inspect.proxy_stats import ProcessorLost, ProxyStats, StatsSnapshot, merge_reports
from kctl.inspect.rewrite import ResponseRewriter

__all__ = ["Address", "FrameEvent", "InspectorProxy", "ListenerInfo", "ListenerTls", "api_name",
           "default_processors", "parse_hostport"]


def parse_hostport(text: str, *, what: str = "address") -> Address:
    host, sep, port = text.strip().rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"{what} {text!r}: expected HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


def default_processors() -> int:
    """``--processors`` when not given: one per core."""
    return max(1, os.cpu_count() or 1)


class InspectorProxy:
    """A transparent Kafka proxy; see the module docstring.

    ``upstreams``: broker addresses (bootstrap servers) to front. One listener is
    made per upstream at start, and one more for each further broker that a
    response names. ``virtual_brokers`` > 1 presents the single upstream as that
    many brokers (node ids 1..N, one listener each). ``on_frame`` is called for
    every request and response (keep it quick): in the proxy's thread with one
    processor, in the parent's acceptor thread with several.

    TLS: ``listen_tls`` (a certificate recipe) or ``listen_ssl_context`` (a server
    context, one processor only) terminates TLS from clients; ``upstream_security``
    (security.protocol SSL and ssl.* settings) or ``upstream_ssl_context`` (one
    processor only) speaks TLS to the brokers."""

    def __init__(self, upstreams: Iterable[Address | str], listen_host: str = "127.0.0.1",
                 listen_port: int = 0, *, faults: FaultPlan | None = None,
                 capture: str | Path | None = None, virtual_brokers: int = 1,
                 on_frame: Callable[[FrameEvent], object] | None = None,
                 advertised_host: str | None = None,
                 listen_ssl_context: ssl.SSLContext | None = None,
                 upstream_ssl_context: ssl.SSLContext | None = None,
                 listen_tls: ListenerTls | None = None,
                 upstream_security: SecurityConfig | None = None,
                 show_secrets: bool = False, processors: int = 1, processes: bool | None = None,
                 on_lost: Callable[[ProcessorLost], object] | None = None,
                 clock: Clock | None = None) -> None:
        ups = [parse_hostport(u, what="upstream") if isinstance(u, str) else (u[0], int(u[1]))
               for u in upstreams]
        if not ups:
            raise ConfigError("the proxy needs at least one upstream broker")
        if virtual_brokers < 1:
            raise ConfigError(f"virtual brokers must be at least 1, not {virtual_brokers}")
        if virtual_brokers > 1 and len(ups) > 1:
            raise ConfigError("virtual brokers present one upstream broker as several: "
                              "give exactly one upstream")
        if processors < 1:
            raise ConfigError(f"--processors must be at least 1, not {processors}")
        use_processes = processors > 1 if processes is None else processes
        if processors > 1 and not use_processes:
            raise ConfigError("several processors run in processes (processes=True)")
        if use_processes and (listen_ssl_context is not None or upstream_ssl_context is not None):
            raise ConfigError("TLS contexts cannot be handed to processor processes: give "
                              "listen_tls / upstream_security instead")
        self.upstreams = ups
        self.listen_host = listen_host
        self.listen_port = listen_port
        self.advertised_host = advertised_host or (
            "127.0.0.1" if listen_host in ("0.0.0.0", "", "::") else listen_host)
        self.virtual_brokers = virtual_brokers
        self.on_frame = on_frame
        self.on_lost = on_lost
        self.processors = processors
        self.use_processes = use_processes
        self.listen_tls = listen_tls
        self.upstream_security = upstream_security
        self.listen_ssl_context = listen_ssl_context
        self.upstream_ssl_context = upstream_ssl_context
        self.show_secrets = show_secrets
        self.clock = clock or SystemClock()
        self.last_upstream_tls_error: str | None = None
        self.capture_path = Path(capture) if capture is not None else None
        self.capture_result: MergeResult | None = None
        self._plan = faults or FaultPlan()
        self._listeners = Listeners(listen_host, listen_port)
        self._virtual: list[tuple[int, int]] | None = None
        # one processor, in a thread
        self._faults: FaultSwitch | None = None
        self._stats: ProxyStats | None = None
        self._processor: Processor | None = None
        self._capture: CaptureWriter | None = None
        self._thread: threading.Thread | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        # several processors, in processes
        self._pool: ProcessorPool | None = None
        self._parts_dir: Path | None = None
        self._stopping = False
        self._started = False
        self.loop_error: BaseException | None = None

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> InspectorProxy:
        if self._started:
            return self
        self._started = True
        try:
            if self.virtual_brokers > 1:
                self._virtual = []
                for i in range(self.virtual_brokers):
                    lst = self._listeners.add(self.upstreams[0], i + 1)
                    self._virtual.append((i + 1, lst.address[1]))
            else:
                for up in self.upstreams:
                    self._listeners.port_for(*up)
            if not self.use_processes:
                self._start_thread()
            else:
                self._start_pool()
        except BaseException:
            self._shutdown()
            raise
        return self

    def _start_thread(self) -> None:
        listen_ctx = self.listen_ssl_context or (self.listen_tls.context() if self.listen_tls else None)
        up_ctx = self.upstream_ssl_context
        if up_ctx is None and self.upstream_security is not None and self.upstream_security.uses_tls:
            from kctl.engine.tls import context_for
            up_ctx = context_for(self.upstream_security)
        if self.capture_path is not None:
            self._capture = CaptureWriter(self.capture_path)
        self._faults = FaultSwitch(self._plan)
        self._stats = ProxyStats(0)
        proc = self._processor = Processor(
            0, clock=self.clock, faults=self._faults,
            rewriter=ResponseRewriter(self.advertised_host, self._listeners.port_for, self._virtual),
            stats=self._stats, capture=self._capture, on_frame=self.on_frame,
            tls=ProcessorTls(listen_ctx, up_ctx), hooks=ProcessorHooks(notice=self._notice),
            show_secrets=self.show_secrets)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        proc.watch(self._wake_r, self._drain_wake)
        for lst in self._listeners.all:
            self._watch_listener(lst)
        self._listeners.on_new_listener = self._watch_listener
        self._thread = threading.Thread(target=self._run, name="kctl-inspect-proxy", daemon=True)
        self._thread.start()

    def _watch_listener(self, lst: Listener) -> None:
        # Before the thread starts, or in it (a response named a new broker).
        proc = self._processor
        assert proc is not None

        def accept() -> None:
            while (got := self._listeners.accept(lst)) is not None:
                proc.adopt(*got)

        proc.watch(lst.sock, accept)

    def _drain_wake(self) -> None:
        assert self._wake_r is not None
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    def _run(self) -> None:
        proc = self._processor
        assert proc is not None
        try:
            while not self._stopping:
                proc.run_once(200_000_000)
        except BaseException as e:   # surfaced to the owner through loop_error
            self.loop_error = e
            raise

    def _start_pool(self) -> None:
        if self.capture_path is not None:
            self._parts_dir = Path(tempfile.mkdtemp(prefix=f".{self.capture_path.name}.",
                                                    suffix=".parts", dir=self.capture_path.parent))
        self._pool = ProcessorPool(
            self.processors, self._listeners, plan=self._plan, advertised_host=self.advertised_host,
            virtual=self._virtual, capture_dir=self._parts_dir, listen_tls=self.listen_tls,
            upstream_security=self.upstream_security, on_frame=self.on_frame,
            show_secrets=self.show_secrets, on_notice=self._notice, on_lost=self._lost)
        self._pool.start()

    def _notice(self, kind: str, text: str) -> None:
        if kind == "upstream_tls":
            self.last_upstream_tls_error = text

    def _lost(self, lost: ProcessorLost) -> None:
        if self.on_lost is not None:
            self.on_lost(lost)

    def stop(self) -> None:
        """Closes every connection and listener, and the capture file; idempotent."""
        self._stopping = True
        thread = self._thread
        if thread is not None and self._wake_w is not None:
            try:
                self._wake_w.send(b"x")
            except OSError:
                pass
            thread.join(timeout=10)
        self._thread = None
        self._shutdown()

    def _shutdown(self) -> None:
        if self._processor is not None:
            self._processor.close()
            self._processor = None
        for s in (self._wake_r, self._wake_w):
            if s is not None:
                s.close()
        self._wake_r = self._wake_w = None
        pool = self._pool
        if pool is not None:
            pool.stop()
        self._listeners.close()
        ports = self._broker_ports()
        if self._capture is not None:
            for leg, p in ports.items():
                self._capture.add_broker_ports(leg, p)
            self._capture.close()
            self._capture = None
        if self._parts_dir is not None and self.capture_path is not None:
            parts = sorted(self._parts_dir.glob("processor-*.pcapng"))
            self.capture_result = merge_captures(parts, self.capture_path, ports)
            shutil.rmtree(self._parts_dir, ignore_errors=True)
            self._parts_dir = None

    def _broker_ports(self) -> dict[Leg, set[int]]:
        lsts = self._listeners.all
        return {Leg.CLIENT: {lst.address[1] for lst in lsts},
                Leg.UPSTREAM: {lst.upstream[1] for lst in lsts}}

    def __enter__(self) -> InspectorProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- listeners ------------------------------------------------------------------------------
    @property
    def listeners(self) -> list[Address]:
        """Every listener's (host, port), first the ones made at start."""
        return [(self.advertised_host, lst.address[1]) for lst in self._listeners.all]

    @property
    def listener_info(self) -> list[ListenerInfo]:
        return [ListenerInfo((self.advertised_host, lst.address[1]), lst.upstream, lst.node_id)
                for lst in self._listeners.all]

    @property
    def bootstrap(self) -> str:
        """The first listener as "host:port", to give clients as bootstrap.servers."""
        lsts = self.listeners
        if not lsts:
            raise KctlError("the proxy is not started")
        return fmt(lsts[0])

    # -- faults and stats -----------------------------------------------------------------------
    @property
    def faults(self) -> FaultPlan:
        return self._plan

    def set_faults(self, plan: FaultPlan | None) -> None:
        """Replaces the fault plan; connections switch at their next request or response.
        A batch lost under the old plan is still acknowledged under the new one."""
        self._plan = plan or FaultPlan()
        if self._faults is not None:
            self._faults.set_plan(self._plan)
        if self._pool is not None:
            self._pool.set_plan(self._plan)

    @property
    def lost(self) -> tuple[ProcessorLost, ...]:
        """Processors that died while the proxy ran (with several processors)."""
        return tuple(self._pool.lost) if self._pool is not None else ()

    @property
    def frame_errors(self) -> int:
        """Exceptions ``on_frame`` raised (the traffic went on)."""
        if self._pool is not None:
            return self._pool.frame_errors
        return self._processor.frame_errors if self._processor is not None else 0

    @property
    def alive_processors(self) -> int:
        """Processors still running (with one processor: 1 while started)."""
        if self._pool is not None:
            return self._pool.alive
        return 1 if self._thread is not None else 0

    def processor_pids(self) -> list[int | None]:
        """The processor processes' pids (empty with one processor: it is a thread)."""
        return self._pool.pids() if self._pool is not None else []

    def connection_owners(self) -> dict[int, int]:
        """connection id -> processor index, for the connections open now."""
        if self._pool is not None:
            return self._pool.owners()
        return {c.id: 0 for c in self.snapshot().connections}

    def snapshot(self) -> StatsSnapshot:
        now = time.monotonic_ns()
        if self._pool is not None:
            return merge_reports(self._pool.reports(), now, processors=self.processors,
                                 lost=tuple(self._pool.lost))
        if self._stats is None:
            raise KctlError("the proxy is not started")
        proc = self._processor
        if proc is None:
            return self._stats.snapshot(now)
        with proc.turn:                     # whole turns: what the client has is counted
            return self._stats.snapshot(now)
