"""Fault injection for the inspector proxy, sans-IO.

How this works
--------------
A ``FaultPlan`` says what to do to responses on their way back to a client:
delay them (a fixed time or a uniform range), put a ``throttle_time_ms`` into
Produce and Fetch responses, rewrite partition error codes in Produce (and
optionally Fetch) responses at a rate, cut the connection part-way through a
response at a rate, deliver responses in tiny TCP writes, or never answer at
all (blackhole). A plan is a frozen value; the proxy swaps plans atomically.

A ``FaultInjector`` applies a plan to one stream of responses (one client
connection). It makes every random choice from its own ``random.Random``,
seeded from the plan's seed and the stream's number, so a run with the same
seed and the same traffic makes the same choices; it never reads a clock or
touches a socket (conventions rule 1): ``on_response`` mutates the decoded body
and returns a ``FaultDecision`` that the proxy carries out.

The body rewriters (``inject_throttle``, ``rewrite_partition_errors``) work on
decoded messages; ``rewrite_response_frame`` is the bytes-in, bytes-out form
that decodes a response frame, rewrites it and re-encodes it at the same version.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from typing import Any, Final

from kctl.errors import ConfigError
from kctl.protocol import messages, schema
from kctl.protocol.error_codes import ERRORS_BY_NAME

PRODUCE: Final = schema.API_BY_NAME["Produce"].api_key
FETCH: Final = schema.API_BY_NAME["Fetch"].api_key
_NS_PER_MS: Final = 1_000_000


def _api_keys(names: frozenset[str] | tuple[str, ...] | None) -> frozenset[int] | None:
    """API names to keys; ``None`` or empty means every API."""
    if not names:
        return None
    keys = set()
    for n in names:
        info = schema.API_BY_NAME.get(n)
        if info is None:
            raise ConfigError(f"unknown Kafka API {n!r} (use names such as Produce, Fetch, Metadata)")
        keys.add(info.api_key)
    return frozenset(keys)


@dataclass(frozen=True, slots=True)
class ErrorRewrite:
    """Rewrite partition error codes to ``error`` (a Kafka error name) in the
    responses of ``apis`` (Produce and/or Fetch), each partition with probability
    ``rate``; at most ``limit`` responses are touched when ``limit`` is set."""

    error: str
    rate: float = 1.0
    apis: tuple[str, ...] = ("Produce",)
    limit: int | None = None

    def __post_init__(self) -> None:
        if self.error not in ERRORS_BY_NAME:
            raise ConfigError(f"unknown Kafka error name {self.error!r} (e.g. NOT_LEADER_OR_FOLLOWER)")
        if not 0.0 <= self.rate <= 1.0:
            raise ConfigError(f"error rate {self.rate} is outside 0..1")
        bad = [a for a in self.apis if a not in ("Produce", "Fetch")]
        if bad:
            raise ConfigError(f"error rewriting supports Produce and Fetch responses, not {bad}")

    @property
    def code(self) -> int:
        return ERRORS_BY_NAME[self.error].code

    @classmethod
    def parse(cls, text: str) -> ErrorRewrite:
        """``NAME[:RATE]`` as given to ``--inject-error`` (``NOT_LEADER_OR_FOLLOWER:0.01``)."""
        name, _, rate = text.partition(":")
        try:
            return cls(name.strip().upper(), float(rate) if rate else 1.0)
        except ValueError:
            raise ConfigError(f"--inject-error {text!r}: expected NAME[:RATE], e.g. "
                              "NOT_LEADER_OR_FOLLOWER:0.01") from None


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """What the proxy does to responses. The default plan does nothing.

    delay_ms        fixed delay, or (lo, hi) for a uniform delay per response
    delay_apis      API names the delay applies to (empty: every API)
    throttle_ms     ``throttle_time_ms`` put into responses of ``throttle_apis``
                    (the larger of the broker's and this is kept)
    error           partition error-code rewriting (``ErrorRewrite``)
    drop_rate       probability that a response is cut part-way and the
                    connection closed (client and upstream sides)
    drop_apis       API names whose responses may be dropped (empty: every API)
    tiny_segments   at most this many bytes per write to the client (0: off)
    blackhole       responses are never delivered (requests still go upstream)
    seed            seed of the random choices (None: a fresh one per run)
    """

    delay_ms: int | float | tuple[float, float] | None = None
    delay_apis: tuple[str, ...] = ()
    throttle_ms: int = 0
    throttle_apis: tuple[str, ...] = ("Produce", "Fetch")
    error: ErrorRewrite | None = None
    drop_rate: float = 0.0
    drop_apis: tuple[str, ...] = ()
    tiny_segments: int = 0
    blackhole: bool = False
    seed: int | None = None

    def __post_init__(self) -> None:
        d = self.delay_ms
        if isinstance(d, tuple):
            if len(d) != 2 or not 0 <= d[0] <= d[1]:
                raise ConfigError(f"delay range {d} must be (lo, hi) with 0 <= lo <= hi")
        elif d is not None and d < 0:
            raise ConfigError(f"delay {d} ms is negative")
        if self.throttle_ms < 0:
            raise ConfigError(f"throttle {self.throttle_ms} ms is negative")
        if not 0.0 <= self.drop_rate <= 1.0:
            raise ConfigError(f"drop rate {self.drop_rate} is outside 0..1")
        if self.tiny_segments < 0:
            raise ConfigError(f"tiny segment size {self.tiny_segments} is negative")
        for names in (self.delay_apis, self.throttle_apis, self.drop_apis):
            _api_keys(names)  # validates

    @property
    def active(self) -> bool:
        return bool(self.delay_ms or self.throttle_ms or self.error or self.drop_rate
                    or self.tiny_segments or self.blackhole)

    @staticmethod
    def parse_delay(text: str) -> int | tuple[int, int]:
        """``"50"`` -> 50; ``"10-100"`` -> (10, 100) (``--delay-ms``)."""
        try:
            lo, sep, hi = text.partition("-")
            return (int(lo), int(hi)) if sep else int(lo)
        except ValueError:
            raise ConfigError(f"--delay-ms {text!r}: expected MS or LO-HI, e.g. 50 or 10-100") from None


@dataclass(frozen=True, slots=True)
class FaultDecision:
    """What the proxy does with one response frame (already rewritten when ``frame`` is set).

    frame           the bytes to forward instead of the original (None: unchanged)
    delay_ns        hold the response this long before writing it
    drop_at         write this many bytes of the size-prefixed frame, then close
                    the connection (None: deliver it whole)
    segment_bytes   at most this many bytes per write (0: no limit)
    swallow         never deliver it (blackhole)
    throttle_ms     the throttle_time_ms injected (0: none)
    errors_injected partitions whose error code was rewritten
    """

    frame: bytes | None = None
    delay_ns: int = 0
    drop_at: int | None = None
    segment_bytes: int = 0
    swallow: bool = False
    throttle_ms: int = 0
    errors_injected: int = 0


NO_FAULT: Final = FaultDecision()


# -- body rewriters ----------------------------------------------------------------------------

def inject_throttle(body: Any, throttle_ms: int) -> bool:
    """Raises ``body.throttle_time_ms`` to at least ``throttle_ms``; True if it changed."""
    current = getattr(body, "throttle_time_ms", None)
    if current is None or current >= throttle_ms:
        return False
    body.throttle_time_ms = throttle_ms
    return True


def rewrite_partition_errors(body: Any, api_key: int, error_code: int, rate: float,
                             rng: random.Random) -> int:
    """Sets ``error_code`` on each partition of a Produce or Fetch response with
    probability ``rate``; returns how many partitions were rewritten.

    Produce partitions also get ``base_offset = -1`` (and no log append time), as a
    broker answers for a failed partition; Fetch partitions lose their records and
    get high watermark -1.
    """
    n = 0
    if api_key == PRODUCE:
        for topic in body.responses:
            for p in topic.partition_responses:
                if rate >= 1.0 or rng.random() < rate:
                    p.error_code = error_code
                    p.base_offset = -1
                    p.log_append_time_ms = -1
                    n += 1
    elif api_key == FETCH:
        for topic in body.responses:
            for p in topic.partitions:
                if rate >= 1.0 or rng.random() < rate:
                    p.error_code = error_code
                    p.high_watermark = -1
                    p.records = None
                    n += 1
    return n


def rewrite_response_frame(frame: bytes, api_key: int, api_version: int, *,
                           throttle_ms: int = 0, error_code: int | None = None,
                           error_rate: float = 1.0, rng: random.Random | None = None) -> bytes:
    """A response frame (no size prefix) with the throttle and/or partition errors
    injected, re-encoded at the same version; the input when nothing changed."""
    resp = messages.decode_response(frame, api_key, api_version)
    changed = inject_throttle(resp.body, throttle_ms) if throttle_ms else False
    if error_code is not None:
        changed |= rewrite_partition_errors(resp.body, api_key, error_code, error_rate,
                                            rng or random.Random()) > 0
    if not changed:
        return frame
    return messages.encode_response(api_key, api_version, resp.header.correlation_id, resp.body)


# -- the injector ------------------------------------------------------------------------------

@dataclass(slots=True)
class _Compiled:
    plan: FaultPlan
    delay_keys: frozenset[int] | None
    throttle_keys: frozenset[int] | None
    drop_keys: frozenset[int] | None
    error_keys: frozenset[int] | None
    error_code: int | None


def _compile(plan: FaultPlan) -> _Compiled:
    err = plan.error
    return _Compiled(plan, _api_keys(plan.delay_apis), _api_keys(plan.throttle_apis),
                     _api_keys(plan.drop_apis), _api_keys(err.apis) if err else None,
                     err.code if err else None)


def _applies(keys: frozenset[int] | None, api_key: int) -> bool:
    return keys is None or api_key in keys


@dataclass(slots=True)
class ErrorBudget:
    """How many responses an ``ErrorRewrite`` with a ``limit`` may still touch; shared
    by every stream of one proxy so the limit counts across connections."""

    remaining: int | None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self) -> bool:
        if self.remaining is None:
            return True
        with self.lock:
            if self.remaining <= 0:
                return False
            self.remaining -= 1
            return True


class FaultInjector:
    """Applies a ``FaultPlan`` to one connection's responses, deterministically for a seed."""

    def __init__(self, plan: FaultPlan, stream: int = 0, *, budget: ErrorBudget | None = None) -> None:
        self._c = _compile(plan)
        seed = plan.seed if plan.seed is not None else random.randrange(1 << 62)
        # A string seed hashes the same in every process (unlike hash() of a tuple).
        self.rng = random.Random(f"kctl-faults:{seed}:{stream}")
        self.budget = budget or ErrorBudget(plan.error.limit if plan.error else None)

    @property
    def plan(self) -> FaultPlan:
        return self._c.plan

    def needs_body(self, api_key: int) -> bool:
        """Whether ``on_response`` may rewrite a response of this API (the caller then
        passes the decoded body)."""
        c = self._c
        return bool((c.plan.throttle_ms and _applies(c.throttle_keys, api_key))
                    or (c.error_code is not None and _applies(c.error_keys, api_key)))

    def on_response(self, api_key: int, frame_size: int, body: Any | None = None) -> FaultDecision:
        """Decides the fate of one response; mutates ``body`` (a decoded response) when it
        injects a throttle or an error. ``frame_size`` counts the 4-byte size prefix.
        The caller re-encodes ``body`` when ``throttle_ms`` or ``errors_injected`` is set."""
        c = self._c
        plan = c.plan
        if not plan.active:
            return NO_FAULT
        if plan.blackhole:
            return FaultDecision(swallow=True)
        rng = self.rng
        throttle = 0
        errors = 0
        if body is not None:
            if plan.throttle_ms and _applies(c.throttle_keys, api_key):
                if inject_throttle(body, plan.throttle_ms):
                    throttle = plan.throttle_ms
            if c.error_code is not None and _applies(c.error_keys, api_key) and self.budget.take():
                assert plan.error is not None
                errors = rewrite_partition_errors(body, api_key, c.error_code, plan.error.rate, rng)
        delay_ns = 0
        d = plan.delay_ms
        if d and _applies(c.delay_keys, api_key):
            ms = rng.uniform(d[0], d[1]) if isinstance(d, tuple) else d
            delay_ns = int(ms * _NS_PER_MS)
        drop_at = None
        if plan.drop_rate and _applies(c.drop_keys, api_key) and rng.random() < plan.drop_rate:
            # Somewhere strictly inside the frame: the client has begun a response it
            # will never finish (at least the size prefix's first byte, never all of it).
            drop_at = rng.randrange(1, max(2, frame_size))
        return FaultDecision(delay_ns=delay_ns, drop_at=drop_at, segment_bytes=plan.tiny_segments,
                             throttle_ms=throttle, errors_injected=errors)


def segments(data: bytes, max_bytes: int) -> list[bytes]:
    """``data`` in writes of at most ``max_bytes`` (whole when ``max_bytes`` is 0)."""
    if not max_bytes or len(data) <= max_bytes:
        return [data]
    return [data[i:i + max_bytes] for i in range(0, len(data), max_bytes)]
