"""setup_retry.call: a set-up step over a BlockingClient asked again over a new connection
while the connection breaks, bounded by max.block.ms (the Java producer blocks for its
metadata that long; its admin client retries until default.api.timeout.ms). Stepped with
a fake clock; the client is a stand-in that records connects and closes. A step's
``RetriableError`` (end offsets while a leader moves) is asked again the same way, over
the same connection, and at the bound ``RetriesExhaustedError`` carries the last one."""

from __future__ import annotations

import pytest

from kctl.engine import setup_retry
from kctl.engine.setup_retry import SetupRetry
from kctl.errors import (BrokerError, BrokerUnavailableError, BrokerUnreachableError, RetriableError,
                         RetriesExhaustedError)

RETRY = SetupRetry(timeout_ms=1000, timeout_name="max.block.ms", retry_backoff_ms=100,
                   retry_backoff_max_ms=400)


class Clock:
    def __init__(self) -> None:
        self.ns = 0
        self.slept: list[int] = []

    def now(self) -> int:
        return self.ns

    def sleep(self, ns: int) -> None:
        self.slept.append(ns)
        self.ns += ns


class StandInClient:
    """``connected``/``connect``/``close`` as BlockingClient; ``refuse``: connects that fail."""

    def __init__(self, connected: bool = True, refuse: int = 0) -> None:
        self.connected = connected
        self.refuse = refuse
        self.connects = self.closes = 0

    def connect(self) -> None:
        self.connects += 1
        if self.refuse:
            self.refuse -= 1
            raise BrokerUnreachableError("cannot connect to broker 127.0.0.1:1: Connection refused")
        self.connected = True

    def close(self) -> None:
        self.closes += 1
        self.connected = False


def breaking(times: int, answer="ok"):
    calls = []

    def step(client):
        calls.append(client.connected)
        if len(calls) <= times:
            client.connected = False        # BlockingClient closes a connection that broke
            raise BrokerUnavailableError("broker 127.0.0.1:9 closed the connection")
        return answer
    return step, calls


def call(client, step, clock, retry=RETRY):
    return setup_retry.call(client, step, retry, what="setting up topic 't'", now_ns=clock.now,
                            sleep_ns=clock.sleep, random=lambda: 0.5)


def test_a_broken_connection_is_asked_again_over_a_new_one_with_exponential_backoff():
    clock, client = Clock(), StandInClient()
    step, calls = breaking(3)
    assert call(client, step, clock) == "ok"
    assert calls == [True, True, True, True]          # each attempt over an open connection
    assert client.connects == 3 and client.closes == 3
    assert clock.slept == [100_000_000, 200_000_000, 400_000_000]   # retry.backoff.ms doubling, capped


def test_gives_up_at_max_block_ms_and_says_so():
    clock, client = Clock(), StandInClient()
    step, calls = breaking(100)
    with pytest.raises(BrokerUnavailableError) as e:
        call(client, step, clock)
    assert clock.ns < 1_000_000_000 and len(calls) == 4
    msg = str(e.value)
    assert msg.startswith("setting up topic 't': broker 127.0.0.1:9 closed the connection")
    assert "asked 4 time(s)" in msg and "max.block.ms=1000 ms" in msg


def test_an_unreachable_broker_fails_at_once_but_a_refused_reconnect_is_retried():
    clock = Clock()
    never = StandInClient(connected=False, refuse=1)
    with pytest.raises(BrokerUnreachableError):
        call(never, breaking(0)[0], clock)
    assert clock.slept == []
    # Connected once: the broker may be restarting; a refused reconnect is waited out.
    client = StandInClient()
    step, calls = breaking(1)

    def broken_then_refused(c):
        if not calls:
            c.refuse = 2                    # the next two connects are refused
        return step(c)
    assert call(client, broken_then_refused, clock) == "ok"
    assert client.connects == 3 and len(calls) == 2


def test_a_broker_error_is_not_retried():
    clock, client = Clock(), StandInClient()
    calls = []

    def step(c):
        calls.append(1)
        raise BrokerError(29, "TOPIC_AUTHORIZATION_FAILED", False)
    with pytest.raises(BrokerError):
        call(client, step, clock)
    assert calls == [1] and clock.slept == [] and client.closes == 0


def test_an_error_that_may_pass_is_asked_again_over_the_same_connection():
    clock, client = Clock(), StandInClient()
    calls = []

    def step(c):
        calls.append(c.connected)
        if len(calls) <= 3:
            raise RetriableError("end offsets of 't' unknown (no leader: partition(s) 1)")
        return "ok"
    assert call(client, step, clock) == "ok"
    assert calls == [True] * 4 and client.connects == 0 and client.closes == 0
    assert clock.slept == [100_000_000, 200_000_000, 400_000_000]


def test_an_error_that_may_pass_gives_up_at_the_bound_with_the_last_error():
    clock, client = Clock(), StandInClient()
    errors = []

    def step(c):
        errors.append(RetriableError(f"no leader, attempt {len(errors) + 1}"))
        raise errors[-1]
    with pytest.raises(RetriesExhaustedError) as e:
        call(client, step, clock)
    assert clock.ns == 700_000_000 and len(errors) == 4          # never sleeps past the bound
    assert e.value.last is errors[-1] and e.value.attempts == 4 and e.value.bound == "max.block.ms=1000 ms"
    assert str(e.value) == "setting up topic 't': no leader, attempt 4 (asked 4 time(s) for max.block.ms=1000 ms)"


def test_after_a_stop_the_patience_is_the_stop_grace():
    """After Ctrl-C a set-up step (verify's ends, consume's final end offsets) has the stop
    grace, named so in its error, not the whole max.block.ms / default.api.timeout.ms."""
    from kctl.engine.setup_retry import SetupRetry

    r = SetupRetry(60_000, "default.api.timeout.ms", 100, 1000)
    assert r.after_stop(5.0) == SetupRetry(5_000, "the stop grace", 100, 1000)
    short = SetupRetry(2_000, "max.block.ms", 100, 1000)
    assert short.after_stop(5.0) is short
