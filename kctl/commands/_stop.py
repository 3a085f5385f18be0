"""How a command is stopped from outside: SIGTERM is taken as Ctrl-C (not a command: the
leading underscore keeps cli.py from registering it).

``kill``, ``timeout(1)``, a service manager or a CI runner's cancel send SIGTERM; a terminal
sends SIGINT (Ctrl-C). Both end a command the same way: ``KeyboardInterrupt`` in the main
thread, which every long-running command already turns into an orderly stop (workers end
their schedule and report, Spark job groups are cancelled, the proxy and the broker close,
the summary is written) and cli.py into exit status 130 and ``kctl: interrupted``. Left at
its default, SIGTERM killed the parent alone: no summary, and the worker processes (spawned,
daemonic) went on loading the broker to the end of their schedule.

cli.py installs this around every command it runs; a command that must also stop on SIGINT
when it was started with SIGINT ignored (a background job of a non-interactive shell:
``kctl broker &``) asks for ``sigint=True``.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

# The exit status of a command Ctrl-C or SIGTERM cut short (128 + SIGINT; cli.py prints
# 'kctl: interrupted' for it): a command that writes a summary first exits with it after it.
from kctl.cli import EXIT_INTERRUPTED


def _sigterm_as_ctrl_c(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@contextmanager
def sigterm_as_ctrl_c(*, sigint: bool = False) -> Iterator[None]:
    """Within: SIGTERM raises ``KeyboardInterrupt`` as Ctrl-C does; with ``sigint``, SIGINT
    does too even if this process was started with it ignored. The previous handlers are
    put back on the way out (a library caller's own handlers survive). Outside the main
    thread (where Python cannot set handlers) it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous_term = signal.signal(signal.SIGTERM, _sigterm_as_ctrl_c)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler) if sigint else None
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous_term)
        if previous_int is not None:
            signal.signal(signal.SIGINT, previous_int)
