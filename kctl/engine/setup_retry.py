"""Set-up requests asked again over a new connection when the connection breaks.

The Java producer blocks in ``send``/``partitionsFor`` for up to ``max.block.ms`` while
its network client reconnects and its metadata is refreshed; the admin client retries
a call until ``default.api.timeout.ms``; a consumer reconnects and fetches again. kctl's
set-up before a run (ApiVersions, Metadata, CreateTopics, ListOffsets) and its
``--verify`` read go over a ``BlockingClient`` (one connection, no reconnect of its
own); ``call`` gives them the same patience: it runs one *step* over the client, and
when the connection breaks (``BrokerUnavailableError``: reset, closed mid-answer, no
answer in time) it closes it, waits ``retry.backoff.ms`` (exponential with jitter up to
``retry.backoff.max.ms``, as Java's ``ExponentialBackoff``), connects again and runs
the step again from its start, until ``timeout_ms`` has passed; then it fails with the
last reason, the number of attempts and the bound by its Kafka name.

A step must be safe to run again, never a non-idempotent request repeated blindly:
each step reads the cluster afresh first (``ensure_topic`` asks Metadata before it
creates a topic, and CreateTopics answered TOPIC_ALREADY_EXISTS is success: the topic
an earlier attempt created before its answer was lost is there).

A step that raises a ``RetriableError`` (its answer may change if asked again: end
offsets while a leader moves, ``admin.log_end_offsets``) is run again too, after the
same backoff and over the same connection while it holds; a step asks the cluster
afresh each time (Metadata first), as the Java consumer's ``endOffsets`` refreshes its
metadata between rounds. When the bound runs out on such an error, ``call`` raises
``RetriesExhaustedError`` with that last error (``last``: a caller can still use what
it did answer). This is the one place the patience of a set-up step is chosen: the
steps themselves ask once.

A broker that cannot be reached at all on the first attempt (connection refused, no
route: ``BrokerUnreachableError``) fails at once: a wrong address is reported in a
second, not after ``max.block.ms``; once a connection was made, a refused reconnect is
retried like a broken connection (the broker may be restarting). Other errors (a
broker's error code the step does not call retriable, TLS, a protocol error) are not
retried here. Time is passed in (``now_ns``, ``sleep_ns``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

from kctl.engine.backoff import ExponentialBackoff, Random
from kctl.engine.blocking_client import BlockingClient
from kctl.errors import BrokerUnavailableError, BrokerUnreachableError, RetriableError, RetriesExhaustedError

__all__ = ["SetupRetry", "call"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SetupRetry:
    """How long set-up may keep asking, and how it backs off between attempts.
    ``timeout_name``: the property ``timeout_ms`` came from, named in the final error."""

    timeout_ms: int = 60_000
    timeout_name: str = "max.block.ms"
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1000

    @classmethod
    def of_producer(cls, config) -> SetupRetry:
        """The producer's ``max.block.ms`` and ``retry.backoff.ms``/``retry.backoff.max.ms``."""
        return cls(config.max_block_ms, "max.block.ms",
                   config.effective_retry_backoff_ms, config.retry_backoff_max_ms)

    def after_stop(self, grace_s: float) -> SetupRetry:
        """This patience bounded by a stop's grace (named so in the final error): after
        Ctrl-C, a step that cannot reach the cluster must not hold the exit for its whole
        timeout."""
        grace_ms = int(grace_s * 1000)
        if grace_ms >= self.timeout_ms:
            return self
        return replace(self, timeout_ms=grace_ms, timeout_name="the stop grace")


def call(client: BlockingClient, step: Callable[[BlockingClient], T], retry: SetupRetry, *, what: str,
         now_ns: Callable[[], int] = time.monotonic_ns,
         sleep_ns: Callable[[int], None] = lambda ns: time.sleep(ns / 1e9),
         random: Random | None = None) -> T:
    """``step(client)``, run again (over a new connection when the connection broke) while
    it fails in a way that may pass, for at most ``retry.timeout_ms``. ``what`` names the
    step in the final error."""
    deadline = now_ns() + retry.timeout_ms * 1_000_000
    backoff = ExponentialBackoff(retry.retry_backoff_ms, 2, retry.retry_backoff_max_ms, 0.2, random)
    attempts = 0
    reached = client.connected
    while True:
        try:
            if not client.connected:
                client.connect()
            reached = True
            return step(client)
        except BrokerUnavailableError as e:
            client.close()
            if not reached and isinstance(e, BrokerUnreachableError):
                raise
            attempts += 1
            wait = backoff.backoff_ns(attempts - 1)
            if now_ns() + wait >= deadline:
                raise BrokerUnavailableError(
                    f"{what}: {e} (asked {attempts} time(s), over a new connection each time, "
                    f"for {retry.timeout_name}={retry.timeout_ms} ms)") from None
        except RetriableError as e:
            attempts += 1
            wait = backoff.backoff_ns(attempts - 1)
            if now_ns() + wait >= deadline:
                raise RetriesExhaustedError(what, e, attempts,
                                            f"{retry.timeout_name}={retry.timeout_ms} ms") from None
        sleep_ns(wait)
