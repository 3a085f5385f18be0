"""Exponential backoff with jitter (the Java client's ``ExponentialBackoff``).

``backoff_ms(attempts)`` is ``initial_ms * multiplier ** attempts``, the exponent
capped where the term reaches ``max_ms``, times a random factor in
``[1 - jitter, 1 + jitter)``, and never above ``max_ms``. Kafka uses it with
multiplier 2 and jitter 0.2 for ``reconnect.backoff.ms`` /
``reconnect.backoff.max.ms``, ``retry.backoff.ms`` / ``retry.backoff.max.ms``
and ``socket.connection.setup.timeout.ms`` / ``...max.ms``.

The random source is injectable (a callable returning a float in [0, 1)) so
tests can pin the jitter; ``lambda: 0.5`` gives a factor of exactly 1.
"""

from __future__ import annotations

import math
import random as _random
from collections.abc import Callable

Random = Callable[[], float]

#: Java's CommonClientConfigs.RETRY_BACKOFF_EXP_BASE and RETRY_BACKOFF_JITTER: how
#: retry.backoff.ms grows towards retry.backoff.max.ms, and by how much it is spread.
RETRY_BACKOFF_EXP_BASE = 2
RETRY_BACKOFF_JITTER = 0.2


class ExponentialBackoff:
    __slots__ = ("initial_ms", "multiplier", "max_ms", "jitter", "_exp_max", "_random")

    def __init__(self, initial_ms: float, multiplier: int, max_ms: float, jitter: float,
                 random: Random | None = None) -> None:
        self.initial_ms = min(initial_ms, max_ms)
        self.multiplier = multiplier
        self.max_ms = max_ms
        self.jitter = jitter
        # The exponent at which the (pre-jitter) term reaches max_ms.
        self._exp_max = (math.log(max_ms / max(self.initial_ms, 1)) / math.log(multiplier)
                         if max_ms > self.initial_ms else 0.0)
        self._random = random or _random.random

    def backoff_ms(self, attempts: int) -> float:
        if self._exp_max == 0:
            return self.initial_ms
        term = self.initial_ms * self.multiplier ** min(attempts, self._exp_max)
        if self.jitter > 0:
            term *= 1 - self.jitter + 2 * self.jitter * self._random()
        return min(term, self.max_ms)

    def backoff_ns(self, attempts: int) -> int:
        return int(self.backoff_ms(attempts) * 1_000_000)
