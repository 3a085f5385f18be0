"""Clocks: the only place the engine reads time.

Engine logic takes ``now_ns`` (monotonic nanoseconds) as an argument; only the
worker loop asks a ``Clock``, so tests drive the engine with a ``FakeClock``
they advance by hand (the Java client's ``MockTime``).

``now_ns`` is monotonic and only good for intervals; ``wall_ms`` is the Unix
epoch in milliseconds, for record timestamps and log lines, and may jump.
"""

from __future__ import annotations

import time
from typing import Protocol

NS_PER_MS = 1_000_000


class Clock(Protocol):
    def now_ns(self) -> int:
        """Monotonic time in nanoseconds (arbitrary origin)."""
        ...

    def wall_ms(self) -> int:
        """Wall-clock time in milliseconds since the Unix epoch."""
        ...

    def wall_ns(self) -> int:
        """Wall-clock time in nanoseconds since the Unix epoch."""
        ...


class SystemClock:
    """The real clocks: ``time.monotonic_ns`` and ``time.time_ns``."""

    __slots__ = ()

    def now_ns(self) -> int:
        return time.monotonic_ns()

    def wall_ms(self) -> int:
        return time.time_ns() // NS_PER_MS

    def wall_ns(self) -> int:
        return time.time_ns()


class FakeClock:
    """A clock that moves only when told to; both readings move together."""

    __slots__ = ("_now_ns", "_wall_ns")

    def __init__(self, now_ns: int = 0, wall_ms: int = 1_700_000_000_000) -> None:
        self._now_ns = now_ns
        self._wall_ns = wall_ms * NS_PER_MS

    def now_ns(self) -> int:
        return self._now_ns

    def wall_ms(self) -> int:
        return self._wall_ns // NS_PER_MS

    def wall_ns(self) -> int:
        return self._wall_ns

    def advance(self, ns: int = 0, *, ms: int = 0) -> int:
        """Move both readings forward by ``ns`` + ``ms`` milliseconds; returns the new ``now_ns``."""
        step = ns + ms * NS_PER_MS
        if step < 0:
            raise ValueError(f"a clock cannot go back ({step} ns)")
        self._now_ns += step
        self._wall_ns += step
        return self._now_ns

    def advance_to(self, now_ns: int) -> int:
        """Move forward to ``now_ns`` (no-op if already past it); returns the new ``now_ns``."""
        if now_ns > self._now_ns:
            self.advance(now_ns - self._now_ns)
        return self._now_ns
