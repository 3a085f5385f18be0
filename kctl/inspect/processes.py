"""Processor processes: ``kctl inspect --processors N`` with N > 1.

How this works
--------------
The parent keeps the listeners and an acceptor thread; each processor is a spawned
process running one ``Processor`` loop. Per processor the parent holds:

- a Unix ``SOCK_SEQPACKET`` pair: the acceptor sends each accepted connection's file
  descriptor with ``socket.send_fds`` and its ``Handoff`` (id, addresses) in the same
  message; the processor owns the connection from then until it closes;
- a control pipe (``multiprocessing.Pipe``): parent to processor ``SetPlan``,
  ``ReportNow``, ``Stop``; processor to parent ``Ready``, ``StatsReport``s (every
  ``report_interval_s``, on request and at the end), ``Closed`` for each connection it
  no longer owns, ``Notice``s and, with ``--show frames``, ``FrameEvent``s;
- an ask pipe: when a response names a broker the processor has no listener for, it
  asks the parent for that listener's port and waits for the answer (once per broker).

Why the acceptor passes sockets (rather than SO_REUSEPORT listeners in each processor):
the kernel's SO_REUSEPORT spreads connections by a hash of their addresses, so two
load connections land on one processor half the time, while the acceptor can give each
connection to the processor with the fewest; connection ids stay in accept order over
the whole proxy (fault seeds do not depend on the processor); and listeners made while
running (a broker that a response names) need no agreement between processes.

Everything crossing a process boundary is a frozen dataclass or a plain value. A
processor that dies is noticed at once (its process sentinel is in the acceptor's
selector): it gets no more connections, the ones it owned are reported lost
(``ProcessorLost``), its last report stays in the merged statistics, and its part of
the capture is merged up to its last whole block.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import selectors
import signal
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection as Pipe
from pathlib import Path
from typing import Any, Final

from kctl.config import SecurityConfig
from kctl.errors import KctlError
from kctl.inspect.acceptor import Listener, Listeners
from kctl.inspect.capture_writer import CaptureWriter
from kctl.inspect.faults import FaultPlan, FaultSwitch, SharedBudget
from kctl.inspect.processor import (
    Address, FrameEvent, Handoff, Processor, ProcessorHooks, ProcessorTls, fmt)
from kctl.inspect.proxy_stats import ConnectionSnapshot, ProcessorLost, ProxyStats, StatsReport
from kctl.inspect.rewrite import ResponseRewriter

_START_TIMEOUT_S: Final = 60.0
_STOP_TIMEOUT_S: Final = 15.0
_ASK_TIMEOUT_S: Final = 10.0
_HANDOFF_BYTES: Final = 4096


@dataclass(frozen=True, slots=True)
class ListenerTls:
    """How to terminate TLS from clients: a PEM certificate chain (and key, and the key's
    password when it is encrypted)."""

    certificate_location: str
    key_location: str | None = None
    key_password: str | None = field(default=None, repr=False)

    def context(self) -> ssl.SSLContext:
        from kctl.engine.tls import listener_context
        return listener_context(self.certificate_location, self.key_location, self.key_password)


@dataclass(frozen=True, slots=True)
class ProcessorSpec:
    """What a processor process is started with."""

    index: int
    plan: FaultPlan
    advertised_host: str
    virtual: tuple[tuple[int, int], ...]            # (node id, listener port); empty: plain mode
    listeners: tuple[tuple[Address, int], ...]      # upstream -> listener port known at start
    capture_part: str | None
    listen_tls: ListenerTls | None
    upstream_security: SecurityConfig | None
    show_frames: bool
    show_secrets: bool
    report_interval_s: float


# -- messages -----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SetPlan:
    plan: FaultPlan


@dataclass(frozen=True, slots=True)
class ReportNow:
    seq: int


@dataclass(frozen=True, slots=True)
class Stop:
    pass


@dataclass(frozen=True, slots=True)
class Ready:
    processor: int
    pid: int


@dataclass(frozen=True, slots=True)
class Report:
    seq: int                    # the ReportNow it answers (0: a periodic one)
    final: bool
    stats: StatsReport


@dataclass(frozen=True, slots=True)
class Closed:
    conn_id: int
    reason: str


@dataclass(frozen=True, slots=True)
class Notice:
    kind: str
    text: str


# -- the processor process ----------------------------------------------------------------------

def run_processor(spec: ProcessorSpec, handoffs: socket.socket, control: Pipe, ask: Pipe,
                  budgets: tuple[SharedBudget, SharedBudget]) -> None:
    """The main function of a processor process."""
    # The parent decides when to stop (Stop, or this process's pipes closing when it dies):
    # Ctrl-C, and a SIGTERM sent to the whole group (systemd, kill -TERM -PGID), reach the
    # processors too and must not end them before their final report.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    from kctl.engine.clock import SystemClock
    clock = SystemClock()
    known = dict(spec.listeners)

    def listener_port(host: str, port: int) -> int:
        got = known.get((host, port))
        if got is None:
            ask.send((host, port))
            if not ask.poll(_ASK_TIMEOUT_S):
                raise KctlError(f"the proxy did not say which listener forwards to {host}:{port}")
            got = known[(host, port)] = ask.recv()
        return got

    error_budget, lose_budget = budgets
    faults = FaultSwitch(spec.plan, budgets=lambda plan: (error_budget, lose_budget))
    rewriter = ResponseRewriter(spec.advertised_host, listener_port, list(spec.virtual) or None)
    stats = ProxyStats(spec.index)
    capture = CaptureWriter(spec.capture_part) if spec.capture_part else None
    tls = ProcessorTls(spec.listen_tls.context() if spec.listen_tls else None,
                       _upstream_context(spec.upstream_security))
    send_lock = threading.Lock()

    def send(msg: object) -> None:
        with send_lock:
            control.send(msg)

    hooks = ProcessorHooks(closed=lambda conn_id, reason: send(Closed(conn_id, reason)),
                           notice=lambda kind, text: send(Notice(kind, text)))
    processor = Processor(spec.index, clock=clock, faults=faults, rewriter=rewriter, stats=stats,
                          capture=capture, on_frame=send if spec.show_frames else None, tls=tls,
                          hooks=hooks, show_secrets=spec.show_secrets)
    stopping = False

    def on_handoff() -> None:
        nonlocal stopping
        while True:
            try:
                msg, fds, _flags, _addr = socket.recv_fds(handoffs, _HANDOFF_BYTES, 1)
            except (BlockingIOError, InterruptedError):
                return
            if not msg:
                stopping = True          # the parent is gone
                return
            handoff: Handoff = pickle.loads(msg)
            if not fds:
                send(Closed(handoff.conn_id, "no socket came with the hand-off"))
                continue
            processor.adopt(socket.socket(fileno=fds[0]), handoff)

    def on_control() -> None:
        nonlocal stopping
        while control.poll():
            try:
                msg = control.recv()
            except (EOFError, OSError):
                stopping = True
                return
            if isinstance(msg, SetPlan):
                faults.set_plan(msg.plan)
            elif isinstance(msg, ReportNow):
                send(Report(msg.seq, False, stats.report(clock.now_ns())))
            elif isinstance(msg, Stop):
                stopping = True
                return

    handoffs.setblocking(False)
    processor.watch(handoffs, on_handoff)
    processor.watch(control, on_control)
    send(Ready(spec.index, os.getpid()))
    interval_ns = int(spec.report_interval_s * 1e9)
    next_report = clock.now_ns() + interval_ns
    try:
        while not stopping:
            processor.run_once(min(interval_ns, 200_000_000))
            now = clock.now_ns()
            if now >= next_report:
                send(Report(0, False, stats.report(now)))
                next_report = now + interval_ns
    finally:
        processor.close()
        if capture is not None:
            capture.close()
        try:
            send(Report(0, True, stats.report(clock.now_ns())))
        except OSError:
            pass


def _upstream_context(security: SecurityConfig | None) -> ssl.SSLContext | None:
    if security is None or not security.uses_tls:
        return None
    from kctl.engine.tls import context_for
    return context_for(security)


# -- the parent ---------------------------------------------------------------------------------

class _Handle:
    """The parent's view of one processor process."""

    __slots__ = ("index", "process", "handoffs", "control", "ask", "owned", "report", "report_seq",
                 "alive", "ready", "lock")

    def __init__(self, index: int, process: Any, handoffs: socket.socket, control: Pipe, ask: Pipe) -> None:
        self.index = index
        self.process = process
        self.handoffs = handoffs
        self.control = control
        self.ask = ask
        self.owned: dict[int, Handoff] = {}
        self.report: StatsReport | None = None
        self.report_seq = 0
        self.alive = True
        self.ready = False
        self.lock = threading.Lock()        # control.send from the caller's and the acceptor's threads

    def send(self, msg: object) -> bool:
        with self.lock:
            try:
                self.control.send(msg)
                return True
            except OSError:
                return False


class ProcessorPool:
    """N processor processes behind one acceptor thread; see the module docstring."""

    def __init__(self, n: int, listeners: Listeners, *, plan: FaultPlan, advertised_host: str,
                 virtual: list[tuple[int, int]] | None, capture_dir: Path | None,
                 listen_tls: ListenerTls | None, upstream_security: SecurityConfig | None,
                 on_frame: Callable[[FrameEvent], object] | None, show_secrets: bool,
                 on_notice: Callable[[str, str], None], on_lost: Callable[[ProcessorLost], None],
                 report_interval_s: float = 0.5) -> None:
        self.n = n
        self.listeners = listeners
        self.on_frame = on_frame
        self.on_notice = on_notice
        self.on_lost = on_lost
        self.capture_dir = capture_dir
        self.lost: list[ProcessorLost] = []
        self.frame_errors = 0
        self._ctx = mp.get_context("spawn")
        self._budgets = (SharedBudget.create(self._ctx, plan.error.limit if plan.error else None),
                         SharedBudget.create(self._ctx, plan.lose_limit))
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, ("wake", None))
        self._handles: list[_Handle] = []
        self._cond = threading.Condition()
        self._seq = 0
        self._stopping = False      # no more connections; a processor exiting now is not lost
        self._closing = False       # the acceptor thread ends
        self._rotation = 0
        self._thread: threading.Thread | None = None
        self.loop_error: BaseException | None = None
        for lst in listeners.all:
            self._sel.register(lst.sock, selectors.EVENT_READ, ("listen", lst))
        listeners.on_new_listener = self._new_listener
        known = tuple(listeners.known().items())
        for i in range(n):
            a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            parent_control, child_control = self._ctx.Pipe(duplex=True)
            parent_ask, child_ask = self._ctx.Pipe(duplex=True)
            spec = ProcessorSpec(
                index=i, plan=plan, advertised_host=advertised_host, virtual=tuple(virtual or ()),
                listeners=known,
                capture_part=str(capture_dir / f"processor-{i}.pcapng") if capture_dir else None,
                listen_tls=listen_tls, upstream_security=upstream_security,
                show_frames=on_frame is not None, show_secrets=show_secrets,
                report_interval_s=report_interval_s)
            proc = self._ctx.Process(target=run_processor, name=f"kctl-inspect-processor-{i}",
                                     args=(spec, b, child_control, child_ask, self._budgets),
                                     daemon=True)
            proc.start()
            b.close()
            child_control.close()
            child_ask.close()
            a.settimeout(1.0)
            h = _Handle(i, proc, a, parent_control, parent_ask)
            self._handles.append(h)
            self._sel.register(parent_control, selectors.EVENT_READ, ("control", h))
            self._sel.register(parent_ask, selectors.EVENT_READ, ("ask", h))
            self._sel.register(proc.sentinel, selectors.EVENT_READ, ("sentinel", h))

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="kctl-inspect-acceptor", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + _START_TIMEOUT_S
        with self._cond:
            while not all(h.ready or not h.alive for h in self._handles):
                left = deadline - time.monotonic()
                if left <= 0 or self.loop_error is not None:
                    break
                self._cond.wait(min(left, 0.2))
        if not any(h.ready for h in self._handles):
            self.stop()
            raise KctlError("no kctl inspect processor process started"
                            + (f": {self.loop_error}" if self.loop_error else ""))

    def stop(self) -> None:
        self._stopping = True
        for lst in self.listeners.all:
            self._unregister(lst.sock)
        for h in self._handles:
            if h.alive:
                h.send(Stop())
        # The acceptor thread keeps reading what the processors say until they are gone.
        deadline = time.monotonic() + _STOP_TIMEOUT_S
        for h in self._handles:
            h.process.join(max(0.1, deadline - time.monotonic()))
            if h.process.is_alive():
                h.process.kill()          # SIGTERM is ignored by a processor (run_processor)
                h.process.join(2)
        self._closing = True
        self._wake()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        for h in self._handles:
            self._drain(h)             # the final reports
            for c in (h.control, h.ask, h.handoffs):
                try:
                    c.close()
                except OSError:
                    pass
        self._sel.close()
        self._wake_r.close()
        self._wake_w.close()

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    # -- control from the owner -----------------------------------------------------------------
    def set_plan(self, plan: FaultPlan) -> None:
        error_budget, lose_budget = self._budgets
        error_budget.reset(plan.error.limit if plan.error else None)
        lose_budget.reset(plan.lose_limit)
        for h in self._handles:
            if h.alive:
                h.send(SetPlan(plan))

    def reports(self, timeout_s: float = 2.0) -> list[StatsReport]:
        """Every processor's report, fresh from the live ones (waits up to ``timeout_s``)."""
        with self._cond:
            self._seq += 1
            seq = self._seq
        asked = [h for h in self._handles if h.alive and h.send(ReportNow(seq))]
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while any(h.alive and h.report_seq < seq for h in asked):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return [h.report for h in self._handles if h.report is not None]

    # -- the acceptor thread --------------------------------------------------------------------
    def _new_listener(self, lst: Listener) -> None:
        # Called in the acceptor thread (an ask) or before it starts.
        self._sel.register(lst.sock, selectors.EVENT_READ, ("listen", lst))

    def _run(self) -> None:
        try:
            while not self._closing:
                for key, _ in self._sel.select(0.5):
                    kind, obj = key.data
                    if kind == "listen":
                        self._accept(obj)
                    elif kind == "control":
                        self._drain(obj)
                    elif kind == "ask":
                        self._answer(obj)
                    elif kind == "sentinel":
                        self._died(obj)
                    else:
                        try:
                            while self._wake_r.recv(4096):
                                pass
                        except (BlockingIOError, InterruptedError):
                            pass
        except BaseException as e:   # surfaced to the owner through loop_error
            self.loop_error = e
            with self._cond:
                self._cond.notify_all()
            raise

    def _pick(self, busy: set[int]) -> _Handle | None:
        live = [h for h in self._handles if h.alive and h.index not in busy]
        if not live:
            return None
        self._rotation += 1
        # The fewest connections; ties go round so equal processors take turns.
        return min(live, key=lambda h: (len(h.owned), (h.index - self._rotation) % self.n))

    def _accept(self, lst: Listener) -> None:
        while True:
            got = self.listeners.accept(lst)
            if got is None:
                return
            sock, handoff = got
            if self._stopping:
                sock.close()
                continue
            msg = pickle.dumps(handoff)
            busy: set[int] = set()
            while True:
                h = self._pick(busy)
                if h is None:
                    from kctl.engine.connection import reset
                    reset(sock)
                    break
                try:
                    socket.send_fds(h.handoffs, [msg], [sock.fileno()])
                except (BlockingIOError, TimeoutError):
                    busy.add(h.index)          # its hand-off queue is full: another one takes it
                    continue
                except OSError:
                    self._died(h)
                    continue
                h.owned[handoff.conn_id] = handoff
                sock.close()
                break

    def _answer(self, h: _Handle) -> None:
        try:
            while h.ask.poll():
                host, port = h.ask.recv()
                h.ask.send(self.listeners.port_for(host, port))
        except (EOFError, OSError):
            self._unregister(h.ask)

    def _drain(self, h: _Handle) -> None:
        try:
            while h.control.poll():
                self._on_message(h, h.control.recv())
        except (EOFError, OSError):
            self._unregister(h.control)

    def _on_message(self, h: _Handle, msg: object) -> None:
        if isinstance(msg, Report):
            with self._cond:
                h.report = msg.stats
                if msg.seq:
                    h.report_seq = max(h.report_seq, msg.seq)
                self._cond.notify_all()
        elif isinstance(msg, Closed):
            h.owned.pop(msg.conn_id, None)
        elif isinstance(msg, FrameEvent):
            if self.on_frame is not None:
                try:
                    self.on_frame(msg)
                except Exception:
                    self.frame_errors += 1
        elif isinstance(msg, Notice):
            self.on_notice(msg.kind, msg.text)
        elif isinstance(msg, Ready):
            with self._cond:
                h.ready = True
                self._cond.notify_all()

    def _unregister(self, obj: Any) -> None:
        try:
            self._sel.unregister(obj)
        except (KeyError, ValueError):
            pass

    def _died(self, h: _Handle) -> None:
        if not h.alive:
            return
        h.process.join(0.5)
        self._drain(h)                  # what it said before dying still counts
        h.alive = False
        for obj in (h.process.sentinel, h.control, h.ask):
            self._unregister(obj)
        try:
            # Sockets handed over but never taken are closed with it: their clients see
            # the end of their connection instead of waiting on it.
            h.handoffs.close()
        except OSError:
            pass
        with self._cond:
            self._cond.notify_all()
        if self._stopping:
            return
        conns = tuple(ConnectionSnapshot(c.conn_id, fmt(c.client), fmt(c.upstream), fmt(c.listener),
                                         0, 0, 0, h.index, "lost")
                      for c in sorted(h.owned.values(), key=lambda c: c.conn_id))
        lost = ProcessorLost(h.index, h.process.pid, h.process.exitcode, conns)
        h.owned.clear()
        self.lost.append(lost)
        self.on_lost(lost)

    # -- state for the owner --------------------------------------------------------------------
    @property
    def alive(self) -> int:
        return sum(h.alive for h in self._handles)

    def pids(self) -> list[int | None]:
        return [h.process.pid for h in self._handles]

    def owners(self) -> dict[int, int]:
        """connection id -> processor index, for the connections open now."""
        return {cid: h.index for h in self._handles for cid in h.owned}

    def capture_parts(self) -> list[Path]:
        if self.capture_dir is None:
            return []
        return [self.capture_dir / f"processor-{h.index}.pcapng" for h in self._handles
                if (self.capture_dir / f"processor-{h.index}.pcapng").exists()]
