"""Fault injection for the inspector proxy, sans-IO.

How this works
--------------
A ``FaultPlan`` says what to do to responses on their way back to a client:
delay them (a fixed time or a uniform range), put a ``throttle_time_ms`` into
Produce and Fetch responses, rewrite partition error codes in Produce (and
optionally Fetch or ListOffsets) responses at a rate, or the error codes of the transaction
coordinator's answers (FindCoordinator, InitProducerId, AddPartitionsToTxn, EndTxn)
at a rate per response, cut the connection part-way through a
response at a rate, deliver responses in tiny TCP writes, or never answer at
all (blackhole). One fault acts on requests: *lost records* takes one
partition's batch out of a Produce request and, when the answer comes back,
acknowledges it anyway (see "Lost records" below). A plan is a frozen value;
the proxy swaps plans atomically.

A ``FaultInjector`` applies a plan to one stream of requests and responses (one
client connection). It makes every random choice from its own
``random.Random``, seeded from the plan's seed and the stream's number, so a
run with the same seed and the same traffic makes the same choices; it never
reads a clock or touches a socket (conventions rule 1): ``on_request`` and
``on_response`` mutate the decoded body and return a ``RequestDecision`` /
``FaultDecision`` that the proxy carries out.

The body rewriters (``inject_throttle``, ``rewrite_partition_errors``,
``rewrite_coordinator_errors``,
``remove_partition``, ``forge_produce_success``) work on decoded messages;
``rewrite_response_frame`` is the bytes-in, bytes-out form that decodes a
response frame, rewrites it and re-encodes it at the same version.

Lost records
------------
The data loss a ``--verify`` run must catch: the broker never wrote a batch,
yet the client was told it did. For a Produce request (at ``lose_rate``, at most
``lose_limit`` requests across the proxy) ``on_request`` removes ONE
partition's batch from the body the proxy forwards and returns it as
``RequestDecision.lost``; the proxy keeps the decision with the in-flight
request and hands it back to ``on_response``, which adds a success entry for
that partition (error_code 0, log_append_time_ms -1) to the broker's answer.
When the batch was the request's only one the proxy forwards nothing and
answers from an empty ``ProduceResponse`` (same correlation id and version,
throttle 0) when the request's turn comes; an acks=0 request is just dropped.

The forged ``base_offset`` is the partition's *next offset* as the proxy has
seen it: the ``base_offset`` of the last batch the broker acknowledged there
plus that batch's offset count (read from the request the proxy forwarded),
advanced past each forged batch as well, so a client sees offsets rise. With
one producer per partition that is exactly the offset the broker would have
given the lost batch (and then gives the next real one: two batches claim the
same offsets, as after an unclean leader election). To keep it that plausible, a
batch is only ever lost from a partition whose next offset is known, i.e. one
with a batch acknowledged through the proxy since the plan was set: the first
batch of each partition always gets through (acks=0 requests, never answered,
may lose any batch). ``log_start_offset`` is the one
the broker last reported for that partition. The offsets live in a
``LossLedger`` shared by the proxy's connections, keyed by topic name, or by
topic id for Produce v13+ (a client mixing both is tracked twice, harmlessly).

With idempotence on, the broker answers the next batch of that partition
with OUT_OF_ORDER_SEQUENCE_NUMBER (a sequence gap), which is what a real loss
looks like to an idempotent producer.

Rejected batches (``lose_error``): the same removal, but the answer carries that
error for the batch (base_offset -1) instead of a forged success: the broker
refused a batch it never wrote. An error rewrite of a response cannot stand in for
this when the client retries under a new sequence (an epoch bump after
OUT_OF_ORDER_SEQUENCE_NUMBER or UNKNOWN_PRODUCER_ID): the broker has the batch,
so the retry would write it twice.
"""

from __future__ import annotations

import dataclasses
import random
import struct
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from kctl.errors import ConfigError
from kctl.protocol import messages, schema
from kctl.protocol.error_codes import ERRORS_BY_NAME
from kctl.protocol.records import decode_batches

PRODUCE: Final = schema.API_BY_NAME["Produce"].api_key
FETCH: Final = schema.API_BY_NAME["Fetch"].api_key
LIST_OFFSETS: Final = schema.API_BY_NAME["ListOffsets"].api_key
FIND_COORDINATOR: Final = schema.API_BY_NAME["FindCoordinator"].api_key
INIT_PRODUCER_ID: Final = schema.API_BY_NAME["InitProducerId"].api_key
ADD_PARTITIONS_TO_TXN: Final = schema.API_BY_NAME["AddPartitionsToTxn"].api_key
END_TXN: Final = schema.API_BY_NAME["EndTxn"].api_key
_NS_PER_MS: Final = 1_000_000
# NONE is in Kafka's error table as code 0, success: injecting it would change nothing.
_NONE_IS_NO_ERROR: Final = ("error name NONE is Kafka's code 0, no error: nothing would be "
                            "injected; name an error such as {example}")


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


#: The APIs whose answers ``ErrorRewrite`` can rewrite: the data path (each partition
#: at ``rate``) and the transaction coordinator's (each response at ``rate``, all of its
#: error codes; ``rewrite_coordinator_errors``).
PARTITION_ERROR_APIS: Final = ("Produce", "Fetch", "ListOffsets")
COORDINATOR_ERROR_APIS: Final = ("FindCoordinator", "InitProducerId", "AddPartitionsToTxn", "EndTxn")
ERROR_APIS: Final = PARTITION_ERROR_APIS + COORDINATOR_ERROR_APIS
#: FindCoordinator's ``key_type`` (Kafka's ``CoordinatorType``; v0 requests have none and
#: look up a group): ``NAME@FindCoordinator/TYPE`` hits only the lookups of that type.
COORDINATOR_KEY_TYPES: Final = {"group": 0, "transaction": 1, "share": 2}


@dataclass(frozen=True, slots=True)
class ErrorRewrite:
    """Rewrite error codes to ``error`` (a Kafka error name) in the responses of
    ``apis`` (``ERROR_APIS``): in Produce, Fetch and ListOffsets each partition with probability
    ``rate``; in FindCoordinator, InitProducerId, AddPartitionsToTxn and EndTxn each
    response with probability ``rate`` (every error code it carries). At most ``limit``
    responses are touched when ``limit`` is set. ``key_type`` (``COORDINATOR_KEY_TYPES``):
    only FindCoordinator lookups of that key type (a transactional producer's, not its
    consumers' group lookups); None: every lookup."""

    error: str
    rate: float = 1.0
    apis: tuple[str, ...] = ("Produce",)
    limit: int | None = None
    key_type: int | None = None

    def __post_init__(self) -> None:
        if self.error == "NONE":
            raise ConfigError(_NONE_IS_NO_ERROR.format(example="NOT_LEADER_OR_FOLLOWER"))
        if self.error not in ERRORS_BY_NAME:
            raise ConfigError(f"unknown Kafka error name {self.error!r} (e.g. NOT_LEADER_OR_FOLLOWER)")
        if not 0.0 <= self.rate <= 1.0:
            raise ConfigError(f"error rate {self.rate} is outside 0..1")
        if not self.apis:
            raise ConfigError("error rewriting needs at least one API")
        bad = [a for a in self.apis if a not in ERROR_APIS]
        if bad:
            raise ConfigError(f"error rewriting supports {', '.join(ERROR_APIS)} responses, "
                              f"not {', '.join(bad)}")
        if self.key_type is not None:
            if "FindCoordinator" not in self.apis:
                raise ConfigError("a coordinator key type selects FindCoordinator lookups: "
                                  "name FindCoordinator among the APIs")
            if self.key_type not in COORDINATOR_KEY_TYPES.values():
                raise ConfigError(f"FindCoordinator key type {self.key_type} is not one of "
                                  + ", ".join(f"{v} ({k})" for k, v in COORDINATOR_KEY_TYPES.items()))

    @property
    def code(self) -> int:
        return ERRORS_BY_NAME[self.error].code

    @classmethod
    def parse(cls, text: str) -> ErrorRewrite:
        """``NAME[@API[,API...]][:RATE]`` as given to ``--inject-error``
        (``NOT_LEADER_OR_FOLLOWER:0.01``, ``COORDINATOR_LOAD_IN_PROGRESS@EndTxn:0.5``);
        the APIs are Produce when none is named. API names are Kafka's, any case.
        ``FindCoordinator/TYPE`` (group, transaction, share) hits only the lookups of that
        key type (``COORDINATOR_NOT_AVAILABLE@FindCoordinator/transaction``)."""
        head, _, rate = text.partition(":")
        name, at, apis_text = head.partition("@")
        if not name.strip():
            raise ConfigError(f"--inject-error {text!r}: expected NAME[@API,...][:RATE], e.g. "
                              "NOT_LEADER_OR_FOLLOWER:0.01 (a Kafka error name first)")
        apis: tuple[str, ...] = ("Produce",)
        key_type = None
        if at:
            by_lower = {a.lower(): a for a in ERROR_APIS}
            given = []
            for a in apis_text.split(","):
                api, slash, kind = a.strip().partition("/")
                if slash:
                    if api.lower() != "findcoordinator":
                        raise ConfigError(f"--inject-error {text!r}: only FindCoordinator takes "
                                          f"a key type (/{kind}), not {api}")
                    key_type = COORDINATOR_KEY_TYPES.get(kind.strip().lower())
                    if key_type is None:
                        raise ConfigError(f"--inject-error {text!r}: FindCoordinator key type "
                                          f"{kind!r} is not one of "
                                          f"{', '.join(COORDINATOR_KEY_TYPES)}")
                given.append(api)
            unknown = [a for a in given if a.lower() not in by_lower]
            if unknown or not apis_text.strip():
                raise ConfigError(f"--inject-error {text!r}: API {', '.join(unknown) or '(none)'} "
                                  f"is not one of {', '.join(ERROR_APIS)}")
            apis = tuple(dict.fromkeys(by_lower[a.lower()] for a in given))
        try:
            value = float(rate) if rate else 1.0
        except ValueError:
            value = None
        if value is not None and not 0.0 <= value <= 1.0:
            raise ConfigError(f"--inject-error {text!r}: the rate {value} is outside 0..1")
        try:
            if value is None:
                raise ValueError(rate)
            return cls(name.strip().upper(), value, apis, key_type=key_type)
        except ConfigError as e:
            raise ConfigError(f"--inject-error {text!r}: {e}") from None
        except ValueError:
            raise ConfigError(f"--inject-error {text!r}: expected NAME[@API,...][:RATE], e.g. "
                              "NOT_LEADER_OR_FOLLOWER:0.01 or CONCURRENT_TRANSACTIONS@EndTxn:0.5") from None

    def describe(self) -> str:
        """``NAME@API,API rate`` for the live view's fault line."""
        kind = {v: k for k, v in COORDINATOR_KEY_TYPES.items()}.get(self.key_type)
        apis = [f"{a}/{kind}" if a == "FindCoordinator" and kind else a for a in self.apis]
        return f"{self.error}@{','.join(apis)} {self.rate}"


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
    lose_rate       probability that a Produce request loses one partition's batch
                    while the client is told it was written (module docstring)
    lose_limit      at most this many requests lose a batch, across the proxy's
                    connections (None: no limit)
    lose_error      a Kafka error name: the lost batch is answered with this error
                    (rejected, never written) instead of a forged success
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
    lose_rate: float = 0.0
    lose_limit: int | None = None
    lose_error: str | None = None
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
        if not 0.0 <= self.lose_rate <= 1.0:
            raise ConfigError(f"lose rate {self.lose_rate} is outside 0..1")
        if self.lose_limit is not None and self.lose_limit < 0:
            raise ConfigError(f"lose limit {self.lose_limit} is negative")
        if self.lose_error == "NONE":
            raise ConfigError(_NONE_IS_NO_ERROR.format(example="OUT_OF_ORDER_SEQUENCE_NUMBER"))
        if self.lose_error is not None and self.lose_error not in ERRORS_BY_NAME:
            raise ConfigError(f"--reject-records: unknown Kafka error name {self.lose_error!r} for rejected batches")
        for names in (self.delay_apis, self.throttle_apis, self.drop_apis):
            _api_keys(names)  # validates

    @property
    def active(self) -> bool:
        return bool(self.delay_ms or self.throttle_ms or self.error or self.drop_rate
                    or self.tiny_segments or self.blackhole or self.lose_rate)

    @staticmethod
    def parse_delay(text: str) -> int | tuple[int, int]:
        """``"50"`` -> 50; ``"10-100"`` -> (10, 100) (``--delay-ms``)."""
        try:
            lo, sep, hi = text.partition("-")
            return (int(lo), int(hi)) if sep else int(lo)
        except ValueError:
            raise ConfigError(f"--delay-ms {text!r}: expected MS or LO-HI, e.g. 50 or 10-100") from None

    @staticmethod
    def parse_lose(text: str, flag: str = "--lose-records", given: str | None = None) -> tuple[float, int | None]:
        """``"0.01"`` -> (0.01, None); ``"1:3"`` -> (1.0, 3) (``--lose-records RATE[:LIMIT]``).
        Errors name ``flag`` and ``given`` (the option's whole value; default ``text``)."""
        shown = text if given is None else given
        rate, sep, limit = text.partition(":")
        try:
            value, most = float(rate), (int(limit) if sep else None)
        except ValueError:
            raise ConfigError(f"{flag} {shown!r}: expected RATE[:LIMIT], e.g. 0.01 or 1:3") from None
        if not 0.0 <= value <= 1.0:
            raise ConfigError(f"{flag} {shown!r}: the rate {value} is outside 0..1")
        if most is not None and most < 0:
            raise ConfigError(f"{flag} {shown!r}: the limit {most} is negative (a count of batches)")
        return value, most

    @staticmethod
    def parse_reject(text: str) -> tuple[str, float, int | None]:
        """``"OUT_OF_ORDER_SEQUENCE_NUMBER:1:1"`` -> (name, 1.0, 1) (``--reject-records
        NAME[:RATE[:LIMIT]]``, RATE 1 when left out). Errors name the option and its value."""
        name, _, rest = text.partition(":")
        name = name.strip().upper()
        if not name:
            raise ConfigError(f"--reject-records {text!r}: expected NAME[:RATE[:LIMIT]], "
                              "e.g. OUT_OF_ORDER_SEQUENCE_NUMBER:1:1 (a Kafka error name first)")
        if name == "NONE":
            raise ConfigError(f"--reject-records {text!r}: "
                              + _NONE_IS_NO_ERROR.format(example="OUT_OF_ORDER_SEQUENCE_NUMBER"))
        if name not in ERRORS_BY_NAME:
            raise ConfigError(f"--reject-records {text!r}: unknown Kafka error name {name!r} "
                              "(e.g. OUT_OF_ORDER_SEQUENCE_NUMBER)")
        rate, limit = FaultPlan.parse_lose(rest or "1", "--reject-records", text)
        return name, rate, limit


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
    errors_injected error codes rewritten (partitions of Produce/Fetch/ListOffsets, coordinator entries)
    forged          success entries added for lost batches (0: none)
    """

    frame: bytes | None = None
    delay_ns: int = 0
    drop_at: int | None = None
    segment_bytes: int = 0
    swallow: bool = False
    throttle_ms: int = 0
    errors_injected: int = 0
    forged: int = 0


NO_FAULT: Final = FaultDecision()

TopicKey = str | uuid.UUID   # a topic's name, or its id in Produce v13+


def topic_key(topic: Any) -> TopicKey:
    """How a Produce request or response names a topic entry: by name, or (v13+,
    where the name is absent and decodes as "") by topic id."""
    return topic.name or topic.topic_id


@dataclass(frozen=True, slots=True)
class LostBatch:
    """The batch ``on_request`` took out of a Produce request."""

    name: str                       # "" in Produce v13+
    topic_id: uuid.UUID             # the zero UUID before v13
    partition: int
    offset_count: int               # offsets the batch would have taken (its record count)
    records: bytes
    error_code: int = 0             # non-zero: answered with this error (rejected), not forged

    @property
    def topic(self) -> TopicKey:
        return self.name or self.topic_id


@dataclass(frozen=True, slots=True)
class RequestDecision:
    """What the proxy does with one request (its body already rewritten when ``lost`` is set).

    lost            the batch removed from the body (None: the request is untouched)
    forward         False: nothing is left to send upstream; the proxy answers the
                    request itself (acks != 0) or not at all (acks=0)
    offset_counts   (topic, partition) -> offsets taken by each batch that was
                    forwarded, so ``on_response`` can learn each partition's next offset
    key_type        a FindCoordinator request's key_type, read when the error rewrite
                    selects one (``ErrorRewrite.key_type``)
    """

    lost: LostBatch | None = None
    forward: bool = True
    offset_counts: Mapping[tuple[TopicKey, int], int] = field(default_factory=dict)
    key_type: int | None = None

    @property
    def re_encode(self) -> bool:
        """Whether the forwarded request differs from the client's."""
        return self.lost is not None and self.forward


NO_REQUEST_FAULT: Final = RequestDecision()


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
    """Sets ``error_code`` on each partition of a Produce, Fetch or ListOffsets response
    with probability ``rate``; returns how many partitions were rewritten.

    Produce partitions also get ``base_offset = -1`` (and no log append time), as a
    broker answers for a failed partition; Fetch partitions lose their records and
    get high watermark -1; ListOffsets partitions get offset and timestamp -1 (v0: no
    offsets).
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
    elif api_key == LIST_OFFSETS:
        for topic in body.topics:
            for p in topic.partitions:
                if rate >= 1.0 or rng.random() < rate:
                    p.error_code = error_code
                    p.offset, p.timestamp, p.leader_epoch = -1, -1, -1
                    p.old_style_offsets = []
                    n += 1
    else:
        n = rewrite_coordinator_errors(body, api_key, error_code, rate, rng)
    return n


def rewrite_coordinator_errors(body: Any, api_key: int, error_code: int, rate: float,
                               rng: random.Random) -> int:
    """With probability ``rate`` (once per response), sets every error code of a
    FindCoordinator, InitProducerId, AddPartitionsToTxn or EndTxn response to
    ``error_code``, the other fields as a broker answers with that error; returns how
    many error codes were set (0: the response was left alone).

    FindCoordinator: v0-3 the top-level error, v4+ each coordinator entry (batched
    keys); node -1, host "", port -1, no message. InitProducerId, EndTxn: the one
    error, producer id and epoch -1 (EndTxn v5+ carries them). AddPartitionsToTxn:
    each partition result (v0-3 ``results_by_topic_v3_and_below``, v4+ in each
    transaction's results) and, v4+, the top-level error.
    """
    if rate < 1.0 and rng.random() >= rate:
        return 0
    n = 0
    if api_key == FIND_COORDINATOR:
        targets = body.coordinators or [body]    # v4+ batched; before, the body itself
        for c in targets:
            c.error_code = error_code
            c.error_message = None
            c.node_id, c.host, c.port = -1, "", -1
            n += 1
    elif api_key == INIT_PRODUCER_ID or api_key == END_TXN:
        body.error_code = error_code
        body.producer_id, body.producer_epoch = -1, -1
        n = 1
    elif api_key == ADD_PARTITIONS_TO_TXN:
        topics = list(body.results_by_topic_v3_and_below)
        for txn in body.results_by_transaction:
            topics.extend(txn.topic_results)
        for t in topics:
            for p in t.results_by_partition:
                p.partition_error_code = error_code
                n += 1
        if body.results_by_transaction or not body.results_by_topic_v3_and_below:
            body.error_code = error_code     # v4+: the request-level error
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


_V2_LAST_OFFSET_DELTA: Final = struct.Struct(">i")   # at byte 23 of a v2 batch
_BATCH_LENGTH: Final = struct.Struct(">i")           # at byte 8 of every magic


def offset_count(records: bytes | None) -> int:
    """How many offsets a records blob takes when appended: the sum of each v2
    batch's last offset delta + 1 (read from the batch header, nothing decoded),
    or the record count of magic 0/1 message sets (decoded, CRC not checked)."""
    if not records:
        return 0
    n = len(records)
    pos = 0
    total = 0
    while pos + 27 <= n and records[pos + 16] == 2:
        total += _V2_LAST_OFFSET_DELTA.unpack_from(records, pos + 23)[0] + 1
        pos += 12 + _BATCH_LENGTH.unpack_from(records, pos + 8)[0]
    if pos < n:
        total += sum(len(b.records) for b in decode_batches(records[pos:], verify_crc=False))
    return total


def remove_partition(body: Any, topic_index: int, partition_index: int) -> LostBatch:
    """Takes ``body.topic_data[topic_index].partition_data[partition_index]`` out of a
    Produce request (and the topic entry with it if that was its last partition)."""
    topic = body.topic_data[topic_index]
    p = topic.partition_data.pop(partition_index)
    if not topic.partition_data:
        del body.topic_data[topic_index]
    return LostBatch(topic.name, topic.topic_id, p.index, offset_count(p.records), p.records or b"")


def forge_produce_success(body: Any, lost: LostBatch, base_offset: int, log_start_offset: int) -> None:
    """Adds a success entry for ``lost`` to a Produce response: error_code 0, the given
    offsets, log_append_time_ms -1 (the topic's timestamps are CreateTime, as far as
    the client can tell). Joins the topic's entry when the response has one."""
    _add_produce_entry(body, lost, 0, base_offset, log_start_offset)


def forge_produce_error(body: Any, lost: LostBatch, log_start_offset: int) -> None:
    """Adds an entry for a rejected batch: its error code, base_offset -1, and the
    partition's log start offset as last seen (-1: unknown)."""
    _add_produce_entry(body, lost, lost.error_code, -1, log_start_offset)


def _add_produce_entry(body: Any, lost: LostBatch, error_code: int, base_offset: int,
                       log_start_offset: int) -> None:
    cls = type(body)
    entry = cls.PartitionProduceResponse(index=lost.partition, error_code=error_code,
                                         base_offset=base_offset, log_append_time_ms=-1,
                                         log_start_offset=log_start_offset)
    for t in body.responses:
        if topic_key(t) == lost.topic:
            t.partition_responses.append(entry)
            return
    body.responses.append(cls.TopicProduceResponse(name=lost.name, topic_id=lost.topic_id,
                                                   partition_responses=[entry]))


def empty_produce_response(api_version: int, correlation_id: int) -> bytes:
    """The frame (no size prefix) of a Produce response naming no partition, throttle 0:
    what the proxy answers for a request it did not forward, before ``on_response``
    adds the forged entry."""
    body = messages.response_class(PRODUCE)(responses=[], throttle_time_ms=0)
    return messages.encode_response(PRODUCE, api_version, correlation_id, body)


def encode_request_frame(request: messages.Request) -> bytes:
    """A decoded request (header and body, e.g. after ``remove_partition``) as a frame
    (no size prefix), at the version and header version it was read at; unknown
    tagged fields of the header are written back."""
    h = request.header
    version = h.request_api_version
    return (messages.encode(h, schema.request_header_version(h.request_api_key, version))
            + messages.encode(request.body, version))


# -- the injector ------------------------------------------------------------------------------

@dataclass(slots=True)
class _Compiled:
    plan: FaultPlan
    delay_keys: frozenset[int] | None
    throttle_keys: frozenset[int] | None
    drop_keys: frozenset[int] | None
    error_keys: frozenset[int] | None
    error_code: int | None
    key_type: int | None        # FindCoordinator lookups of this key type only


def _compile(plan: FaultPlan) -> _Compiled:
    err = plan.error
    return _Compiled(plan, _api_keys(plan.delay_apis), _api_keys(plan.throttle_apis),
                     _api_keys(plan.drop_apis), _api_keys(err.apis) if err else None,
                     err.code if err else None, err.key_type if err else None)


def _applies(keys: frozenset[int] | None, api_key: int) -> bool:
    return keys is None or api_key in keys


class Budget(Protocol):
    """How many more times a limited fault may act; ``take()`` spends one."""

    def take(self) -> bool: ...


@dataclass(slots=True)
class ErrorBudget:
    """How many more times a limited fault may act (the responses an ``ErrorRewrite``
    with a ``limit`` may still touch, the requests ``lose_limit`` may still rob);
    shared by every stream of one proxy so the limit counts across connections."""

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


class SharedBudget:
    """A budget shared by processor processes: a ``multiprocessing`` shared integer
    (negative: no limit) behind its own lock. Made in the parent, handed to each
    processor when it starts; ``reset`` when a new plan takes over."""

    __slots__ = ("_value",)

    def __init__(self, value: Any) -> None:
        self._value = value          # multiprocessing.Value("q")

    @classmethod
    def create(cls, context: Any, limit: int | None) -> SharedBudget:
        return cls(context.Value("q", -1 if limit is None else limit))

    def reset(self, limit: int | None) -> None:
        with self._value.get_lock():
            self._value.value = -1 if limit is None else limit

    def take(self) -> bool:
        with self._value.get_lock():
            v = self._value.value
            if v < 0:
                return True
            if v == 0:
                return False
            self._value.value = v - 1
            return True


@dataclass(slots=True)
class LossLedger:
    """Shared by every stream of one proxy: how many more requests may lose a batch
    (``lose_limit``), and each partition's next offset and log start offset as the
    acknowledgements passing through have shown them (module docstring)."""

    budget: Budget
    # (topic, partition) -> (next offset, log start offset)
    next_offsets: dict[tuple[TopicKey, int], tuple[int, int]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def for_plan(cls, plan: FaultPlan, budget: Budget | None = None) -> LossLedger:
        return cls(budget if budget is not None else ErrorBudget(plan.lose_limit))

    def knows(self, topic: TopicKey, partition: int) -> bool:
        return (topic, partition) in self.next_offsets

    def on_acked(self, topic: TopicKey, partition: int, base_offset: int, count: int,
                 log_start_offset: int) -> None:
        """The broker wrote ``count`` offsets at ``base_offset``."""
        key = (topic, partition)
        with self.lock:
            nxt, _ = self.next_offsets.get(key, (0, 0))
            self.next_offsets[key] = (max(nxt, base_offset + count), log_start_offset)

    def log_start(self, topic: TopicKey, partition: int) -> int:
        """The partition's log start offset as last acknowledged (-1: not seen)."""
        with self.lock:
            known = self.next_offsets.get((topic, partition))
        return -1 if known is None else known[1]

    def forge(self, topic: TopicKey, partition: int, count: int) -> tuple[int, int]:
        """(base_offset, log_start_offset) to tell the client for a lost batch of
        ``count`` offsets; later forgeries on the partition come after it. (-1, -1)
        for a partition never seen acknowledged (``on_request`` avoids those)."""
        key = (topic, partition)
        with self.lock:
            known = self.next_offsets.get(key)
            if known is None:
                return -1, -1
            nxt, log_start = known
            self.next_offsets[key] = (nxt + count, log_start)
            return nxt, log_start


class FaultInjector:
    """Applies a ``FaultPlan`` to one connection's requests and responses, deterministically
    for a seed."""

    def __init__(self, plan: FaultPlan, stream: int = 0, *, budget: Budget | None = None,
                 ledger: LossLedger | None = None, generation: int = 0) -> None:
        self._c = _compile(plan)
        self.generation = generation      # the FaultSwitch plan this injector applies
        seed = plan.seed if plan.seed is not None else random.randrange(1 << 62)
        # A string seed hashes the same in every process (unlike hash() of a tuple).
        self.rng = random.Random(f"kctl-faults:{seed}:{stream}")
        self.budget = budget or ErrorBudget(plan.error.limit if plan.error else None)
        self.ledger = ledger or LossLedger.for_plan(plan)

    @property
    def plan(self) -> FaultPlan:
        return self._c.plan

    def needs_body(self, api_key: int) -> bool:
        """Whether ``on_response`` may rewrite a response of this API (the caller then
        passes the decoded body)."""
        c = self._c
        return bool((c.plan.throttle_ms and _applies(c.throttle_keys, api_key))
                    or (c.error_code is not None and _applies(c.error_keys, api_key))
                    or (c.plan.lose_rate and api_key == PRODUCE))

    def needs_request_body(self, api_key: int) -> bool:
        """Whether ``on_request`` may rewrite a request of this API, or must read it (a
        FindCoordinator request's key_type, when the error rewrite selects one)."""
        c = self._c
        if api_key == FIND_COORDINATOR:
            return c.key_type is not None and _applies(c.error_keys, api_key)
        return bool(c.plan.lose_rate) and api_key == PRODUCE

    def on_request(self, api_key: int, body: Any | None) -> RequestDecision:
        """Decides the fate of one request; with a lose fault, may take one partition's
        batch out of ``body`` (a decoded Produce request). The caller keeps the decision
        with the in-flight request and passes it to ``on_response`` with the answer.
        Only partitions with a known next offset may lose a batch (module docstring),
        except in an acks=0 request, which is never answered."""
        if body is None or not self.needs_request_body(api_key):
            return NO_REQUEST_FAULT
        if api_key == FIND_COORDINATOR:
            return RequestDecision(key_type=body.key_type)     # v0: group, the default
        ledger = self.ledger
        unanswered = body.acks == 0
        counts: dict[tuple[TopicKey, int], int] = {}
        candidates: list[tuple[int, int]] = []
        for ti, t in enumerate(body.topic_data):
            key = topic_key(t)
            for pi, p in enumerate(t.partition_data):
                if p.records is None:
                    continue
                counts[(key, p.index)] = offset_count(p.records)
                if unanswered or ledger.knows(key, p.index):
                    candidates.append((ti, pi))
        plan = self._c.plan
        if (not candidates or (plan.lose_rate < 1.0 and self.rng.random() >= plan.lose_rate)
                or not ledger.budget.take()):
            return RequestDecision(offset_counts=counts)
        ti, pi = candidates[self.rng.randrange(len(candidates))]
        lost = remove_partition(body, ti, pi)
        if plan.lose_error is not None:
            lost = dataclasses.replace(lost, error_code=ERRORS_BY_NAME[plan.lose_error].code)
        del counts[(lost.topic, lost.partition)]
        return RequestDecision(lost, forward=bool(body.topic_data), offset_counts=counts)

    def _learn_offsets(self, body: Any, counts: Mapping[tuple[TopicKey, int], int]) -> None:
        """Each forwarded batch the broker acknowledged moves its partition's next offset."""
        ledger = self.ledger
        for t in body.responses:
            key = topic_key(t)
            for p in t.partition_responses:
                n = counts.get((key, p.index))
                if n and p.error_code == 0 and p.base_offset >= 0:
                    ledger.on_acked(key, p.index, p.base_offset, n, p.log_start_offset)

    def on_response(self, api_key: int, frame_size: int, body: Any | None = None,
                    request: RequestDecision | None = None) -> FaultDecision:
        """Decides the fate of one response; mutates ``body`` (a decoded response) when it
        injects a throttle or an error, or forges the entry of the batch that ``request``
        (the ``on_request`` decision for this response's request, whatever plan made
        it) lost. ``frame_size`` counts the 4-byte size prefix. The caller re-encodes
        ``body`` when ``throttle_ms``, ``errors_injected`` or ``forged`` is set."""
        if request is None or body is None or api_key != PRODUCE:
            return self._response_faults(api_key, frame_size, body, request)
        # The broker's own answers first (before an error rewrite hides their offsets).
        if request.offset_counts:
            self._learn_offsets(body, request.offset_counts)
        decision = self._response_faults(api_key, frame_size, body, request)
        lost = request.lost
        if lost is None:
            return decision
        # Last, so no other fault touches it, and even if the plan has changed since:
        # the client must see its batch answered, never missing from the answer.
        if lost.error_code:
            forge_produce_error(body, lost, self.ledger.log_start(lost.topic, lost.partition))
            return dataclasses.replace(decision, errors_injected=decision.errors_injected + 1)
        base_offset, log_start = self.ledger.forge(lost.topic, lost.partition, lost.offset_count)
        forge_produce_success(body, lost, base_offset, max(log_start, 0))
        return dataclasses.replace(decision, forged=1)

    def _response_faults(self, api_key: int, frame_size: int, body: Any | None,
                         request: RequestDecision | None = None) -> FaultDecision:
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
            if (c.error_code is not None and _applies(c.error_keys, api_key)
                    and (c.key_type is None or api_key != FIND_COORDINATOR
                         or (request is not None and request.key_type == c.key_type))
                    and self.budget.take()):
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


class FaultSwitch:
    """The plan in force for one proxy (or one processor of it), swappable while running.

    ``set_plan`` may be called from any thread; each connection asks ``injector`` at its
    next request or response and gets a new ``FaultInjector`` when the plan changed
    (seeded from the plan's seed and the connection's id, so its choices do not depend
    on which processor owns it). The budgets of limited faults (``ErrorRewrite.limit``,
    ``lose_limit``) and the ``LossLedger`` are shared by every connection under one plan;
    ``budgets`` makes them for a plan (processes pass ``SharedBudget``s so a limit counts
    across processors)."""

    def __init__(self, plan: FaultPlan | None = None, *,
                 budgets: Any | None = None) -> None:
        self._lock = threading.Lock()
        self._budgets = budgets or _local_budgets
        self._generation = 0
        self._install(plan or FaultPlan())

    def _install(self, plan: FaultPlan) -> None:
        error_budget, lose_budget = self._budgets(plan)
        self._plan = plan
        self._error_budget = error_budget
        self._ledger = LossLedger.for_plan(plan, lose_budget)
        self._generation += 1

    @property
    def plan(self) -> FaultPlan:
        return self._plan

    @property
    def rewrites_requests(self) -> bool:
        """Whether some request may be rewritten (only the lost-records fault does)."""
        return bool(self._plan.lose_rate)

    def set_plan(self, plan: FaultPlan | None) -> None:
        """Replaces the plan; connections switch at their next request or response.
        A batch lost under the old plan is still acknowledged under the new one."""
        with self._lock:
            self._install(plan or FaultPlan())

    def injector(self, conn_id: int, current: FaultInjector | None) -> FaultInjector:
        if current is not None and current.generation == self._generation:
            return current
        with self._lock:
            return FaultInjector(self._plan, conn_id, budget=self._error_budget, ledger=self._ledger,
                                 generation=self._generation)


def _local_budgets(plan: FaultPlan) -> tuple[Budget, Budget]:
    return (ErrorBudget(plan.error.limit if plan.error else None), ErrorBudget(plan.lose_limit))


def segments(data: bytes, max_bytes: int) -> list[bytes]:
    """``data`` in writes of at most ``max_bytes`` (whole when ``max_bytes`` is 0)."""
    if not max_bytes or len(data) <= max_bytes:
        return [data]
    return [data[i:i + max_bytes] for i in range(0, len(data), max_bytes)]
