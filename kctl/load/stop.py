"""A worker process's stop: the parent's shared event, or a signal to the worker itself.

How this works: a terminal's Ctrl-C reaches every process of its group, and so does a
SIGTERM sent to the whole group (systemd's default ``KillMode=control-group``,
``kill -TERM -PGID``). The parent takes either as Ctrl-C (commands/_stop.py) and sets the
shared stop event; a worker must not die of it first, or its in-flight records and its
final report (the records it still holds, counted) are lost and the summary no longer adds
up. So a worker ignores SIGINT, as before, and takes SIGTERM as its own stop: it ends its
schedule exactly as when the event is set, gives in-flight records the stop grace and
sends its final report. SIGTERM to a worker alone (an operator's ``kill``) therefore still
ends it, in order; the parent's last resort, past the stop and its grace, is SIGKILL.

The parent's own stops (``later_stops_hurry``): the first Ctrl-C or SIGTERM is the
``KeyboardInterrupt`` every caller turns into an orderly stop; a second one must not throw
that stop away halfway (the summary and --json-out unwritten), so from then on a stop only
sets ``PARENT_STOPS.again``: the waits of the stop (the workers' grace, the reports, a
--verify after it) end early and the summary is still written with what is known.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

__all__ = ["PARENT_STOPS", "STOP_GRACE_S", "ParentStops", "WorkerStop", "install_worker_stop",
           "later_stops_hurry", "stops_held"]

#: How long a stop (Ctrl-C, SIGTERM) gives what is still under way: records in flight,
#: a transaction's end, --verify's and consume's last requests to the cluster.
STOP_GRACE_S = 5.0


class WorkerStop:
    """``is_set()`` as the parent's event has it: the event, or SIGTERM received here. The
    handler only sets a flag, so it is safe whatever the worker was doing."""

    def __init__(self, event: Any) -> None:
        self.event = event              # multiprocessing Event, set by the parent
        self.signalled = False

    def is_set(self) -> bool:
        return self.signalled or self.event.is_set()

    def on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self.signalled = True


def install_worker_stop(event: Any) -> WorkerStop:
    """Called first in a worker process's entry point: SIGINT ignored, SIGTERM a stop.
    A worker is born with both blocked (``stops_held(children=True)``): they are unblocked
    here, so a SIGTERM that came during its start-up is taken now, as a stop."""
    stop = WorkerStop(event)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, stop.on_sigterm)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
    return stop


_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


@contextmanager
def stops_held(*, children: bool = False) -> Iterator[None]:
    """In the parent, around a step a stop must not cut in the middle: Ctrl-C and SIGTERM
    (where a handler makes it an exception: kctl's commands) are held, then delivered to
    their handler at the end of the block. Used while a worker process is spawned (a stop
    while its pickled spec was being written left the child a truncated pickle: a
    traceback on stderr) and while Spark's JVM starts (spark/session.py). Main thread
    only (where handlers are set).

    ``children=True`` (worker processes that call ``install_worker_stop`` first) also
    blocks both signals in this thread, so the processes started in the block inherit
    them blocked: a SIGTERM to the whole group while a worker is still starting (before
    its handler is set) would otherwise kill it before it read its spec, and the parent,
    writing that spec into a pipe it still holds open, would wait on it for ever."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous: dict[int, Any] = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(signum)
        if callable(handler):               # not SIG_IGN / SIG_DFL: left as they are
            previous[signum] = signal.signal(signum, lambda n, _frame: held.append(n))
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS) if children else None
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if mask is not None:        # one pending here goes to the handler just put back
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for signum in dict.fromkeys(held):
            signal.raise_signal(signum)     # now, to the handler it was held from


class ParentStops:
    """The stops (Ctrl-C, SIGTERM) the parent received under ``later_stops_hurry``: the first
    raises ``KeyboardInterrupt``, every later one sets ``again`` (and raises nothing)."""

    def __init__(self) -> None:
        self.count = 0
        self.again = threading.Event()

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        if self.count == 1:
            raise KeyboardInterrupt
        self.again.set()

    def reset(self) -> None:
        self.count = 0
        self.again.clear()


#: The process's parent stops (signals are per process, so there is one).
PARENT_STOPS = ParentStops()


@contextmanager
def later_stops_hurry() -> Iterator[ParentStops]:
    """Around a run and the writing of its summary, in the parent: SIGINT and SIGTERM raise
    ``KeyboardInterrupt`` the first time, as before; later ones set ``PARENT_STOPS.again``,
    which the stop's waits look at (LoadRun: the workers stop waiting for verdicts; a
    --verify after the stop is skipped), so a second Ctrl-C shortens the stop instead of
    losing the summary. A signal ignored stays ignored; the previous handlers are put back
    at the end. Main thread only
    (elsewhere it changes nothing)."""
    stops = PARENT_STOPS
    if threading.current_thread() is not threading.main_thread():
        yield stops
        return
    stops.reset()
    # A signal ignored (SIGINT in a background job of a non-interactive shell) stays ignored.
    previous = {signum: signal.signal(signum, stops.on_signal) for signum in (signal.SIGINT, signal.SIGTERM)
                if callable(signal.getsignal(signum))}
    try:
        yield stops
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
