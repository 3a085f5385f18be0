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
"""

from __future__ import annotations

import signal
from types import FrameType
from typing import Any

__all__ = ["WorkerStop", "install_worker_stop"]


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
    """Called first in a worker process's entry point: SIGINT ignored, SIGTERM a stop."""
    stop = WorkerStop(event)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, stop.on_sigterm)
    return stop
