"""``kctl produce`` without the rendering: options in, a finished run out.

How this works: ``prepare()`` turns the command's options into a validated
``ProducePlan`` (producer properties through config.py, payload and key
pools, schedule numbers) so every bad input fails before anything starts.
``execute()`` starts the embedded broker when no bootstrap server was given,
makes sure the topic exists (creating it when missing unless told not to),
runs the load (load/run.py), verifies when asked, and stops the broker. The
caller (the command) renders through the ``on_round``/``on_event`` callbacks.
"""

from __future__ import annotations

import os
import time

from collections.abc import Callable, Sequence
from contextlib import ExitStack, closing
from dataclasses import dataclass, replace
from typing import Any

from kctl.config import (
    ProducerConfig,
    Setting,
    canonical_setting,
    load_properties_file,
    parse_assignment,
    redact_properties,
)
from kctl.engine import admin, setup_retry
from kctl.engine.blocking_client import BlockingClient, setup_timeout_s
from kctl.engine.setup_retry import SetupRetry
from kctl.errors import ConfigError, KctlError
from kctl.consumer_config import ConsumerConfig, canonical_consumer_setting
from kctl.load.clock_sync import SAME_HOST, ClockServer
from kctl.load.consume_run import ConsumeResult, ConsumeRun, ConsumeSpec
from kctl.load.consume_verify import verify_against_acks
from kctl.load.consume_worker import StartPosition
from kctl.load.payload import MAX_MONOTONIC, KeySpec, PayloadSpec, make_pool, parse_keys
from kctl.load.run import LoadResult, LoadRun, LoadSpec, run_stats, warmup_records_each
from kctl.load.stop import PARENT_STOPS
from kctl.load.verify import VerifyResult, log_end_offsets, verify
from kctl.load.worker_count import WorkerCount, default_workers, paced_workers
from kctl.quantities import check_warmup_within, parse_duration, parse_warmup
from kctl.topics import validate_topic_name
from kctl.protocol.identity import run_tag
from kctl.stats.aggregate import RunStats
from kctl.stats.consume_aggregate import ConsumeStats
from kctl.stats.summary import RunSummary

@dataclass(frozen=True)
class ProduceOptions:
    bootstrap: str | None = None
    topic: str = "kctl-perf"
    partitions: int = 6
    replication_factor: int = 1
    create_topic: bool = True
    rate: float = 0.0
    rate_bytes: float = 0.0
    duration: str | None = None
    num_records: int | None = None
    warmup: str | None = None
    record_size: int = 100
    record_size_given: bool = False         # --record-size was on the command line
    payload: str = "random"
    payload_file: str | None = None
    payload_delimiter: str = "\\n"
    compressibility: float = 0.0
    keys: str = "none"
    headers: int = 0
    properties: Sequence[str] = ()
    producer_config: Sequence[str] = ()
    workers: int | None = None
    #: why ``workers`` (when given): the option that set it (named in its errors), or the
    #: reason a command chose it (e.g. one Spark task per slot)
    workers_reason: str = "--workers"
    #: the workers are Spark tasks (not bound by this host's cores)
    spark: bool = False
    interval: float = 1.0
    verify: bool = False
    id_headers: bool = True
    seed: int = 0
    transaction_duration_ms: int | None = None
    transactional_id: str | None = None
    consume: bool = False                   # --consume: consumers read the run as it goes
    consumers: int | None = None
    consumer_properties: Sequence[str] = ()
    consumer_config: Sequence[str] = ()
    drain_timeout: str | None = None        # how long the consumers may take after the producers
    clock_server: str | None = None         # [host:]port: answer clock-offset exchanges
    spin_ms: float = 0.0                    # paced: poll, not sleep, this long before a due record


#: The shortest --duration: a run of 0 would send nothing and report success.
MIN_DURATION_S = 0.001
#: The highest paced rate (records/s): the schedule spaces records in whole nanoseconds.
MAX_PACED_RATE = 1e9
#: Local worker processes per core at most (--workers).
WORKERS_PER_CORE = 4


def max_local_workers() -> int:
    """The most local worker processes --workers may ask for on this host."""
    return WORKERS_PER_CORE * (os.cpu_count() or 1)


#: kafka-producer-perf-test's defaults: a transaction's duration when transactional.id is
#: given without one, and the transactional.id when only the duration is given.
DEFAULT_TRANSACTION_DURATION_MS = 3000
DEFAULT_TRANSACTIONAL_ID = "performance-producer-default-transactional-id"


@dataclass(frozen=True)
class ProducePlan:
    options: ProduceOptions
    settings: tuple[Setting, ...]
    config: ProducerConfig
    spec_args: dict[str, Any]
    warnings: tuple[str, ...] = ()
    consumer: ConsumerConfig | None = None  # --consume
    consumers: int = 0
    drain_timeout_s: float = 30.0


@dataclass
class ProduceOutcome:
    bootstrap: str
    embedded: bool
    result: LoadResult
    verify: VerifyResult | None
    summary: RunSummary
    consume: ConsumeResult | None = None


def _delimiter(text: str) -> bytes:
    try:
        return text.encode().decode("unicode_escape").encode("latin-1")
    except (UnicodeDecodeError, UnicodeEncodeError):
        raise ConfigError(f"--payload-delimiter {text!r} is not a valid escape sequence") from None


def prepare(o: ProduceOptions) -> ProducePlan:
    """Validates everything up front; raises ConfigError naming the bad option."""
    if o.rate < 0 or o.rate_bytes < 0:
        raise ConfigError("--rate and --rate-bytes must not be negative")
    if o.rate and o.rate_bytes:
        raise ConfigError("give --rate or --rate-bytes, not both")
    if o.num_records is not None and o.num_records < 1:
        raise ConfigError(f"--num-records must be at least 1, not {o.num_records}")
    if o.partitions < 1:
        raise ConfigError(f"--partitions must be at least 1, not {o.partitions}")
    if o.replication_factor < 1:
        raise ConfigError(f"--replication-factor must be at least 1, not {o.replication_factor}")
    if o.headers < 0:
        raise ConfigError(f"--headers must not be negative, not {o.headers}")
    if o.interval <= 0:
        raise ConfigError(f"--interval must be positive, not {o.interval}")
    if not 0 <= o.spin_ms <= 1000:
        raise ConfigError(f"--spin-ms must be between 0 and 1000, not {o.spin_ms}")
    if o.workers is not None and o.workers < 1:
        raise ConfigError(f"{o.workers_reason} must be at least 1, not {o.workers}")
    if o.workers is not None and not o.spark and o.workers > max_local_workers():
        raise ConfigError(f"--workers must be at most {max_local_workers()} ({WORKERS_PER_CORE} per core "
                          f"here): each worker is a process that keeps a core busy, so more would measure "
                          f"process switching, not the cluster; not {o.workers}")
    if o.bootstrap is not None and not o.bootstrap.strip():
        raise ConfigError("--bootstrap-server is empty: give host:port, or leave it out to start "
                          "the embedded broker")
    if o.payload_file and o.record_size_given:
        raise ConfigError("give --payload-file or --record-size, not both: the file's values set "
                          "the sizes (as in kafka-producer-perf-test)")
    if o.verify and not o.id_headers:
        raise ConfigError("--verify needs the record identity headers: drop --no-id-headers")
    if o.consume and not o.id_headers:
        raise ConfigError("--consume measures e2e from the record identity headers: drop --no-id-headers")
    if not o.consume and (o.consumers is not None or o.consumer_properties or o.consumer_config
                          or o.drain_timeout):
        raise ConfigError("--consumers, --consumer-property, --consumer-config and --drain-timeout "
                          "go with --consume")
    if o.consumers is not None and o.consumers < 1:
        raise ConfigError(f"--consumers must be at least 1, not {o.consumers}")
    validate_topic_name(o.topic)
    duration_s = parse_duration(o.duration, "--duration") if o.duration is not None else None
    if duration_s is not None and duration_s < MIN_DURATION_S:
        raise ConfigError(f"--duration must be at least 1ms, not {o.duration!r}")
    num_records = o.num_records
    if duration_s is None and num_records is None:
        duration_s = 10.0
    warm_records, warm_s = parse_warmup(o.warmup)
    check_warmup_within(warm_s, duration_s, o.warmup, o.duration)

    settings: list[Setting] = []
    for f in o.producer_config:
        settings.extend(load_properties_file(f))
    settings.extend(parse_assignment(x, "-X") for x in o.properties)
    # librdkafka's names for Java properties become the Java names here, so the workers,
    # the summary and the report all see one spelling.
    settings = [canonical_setting(x) for x in settings]
    if o.transaction_duration_ms is not None and o.transaction_duration_ms <= 0:
        raise ConfigError(f"--transaction-duration-ms must be positive, not {o.transaction_duration_ms}")
    if o.transactional_id is not None:
        settings.append(Setting("transactional.id", o.transactional_id, "--transactional-id"))
    elif o.transaction_duration_ms is not None and not any(
            x.name == "transactional.id" and x.value not in (None, "") for x in settings):
        settings.append(Setting("transactional.id", DEFAULT_TRANSACTIONAL_ID, "--transaction-duration-ms"))
    if o.workers is not None:
        workers = WorkerCount(o.workers, o.workers_reason)
    else:
        given = o.bootstrap or next((str(x.value) for x in reversed(settings)
                                     if x.name == "bootstrap.servers"), None)
        workers = default_workers(given)

    monotonic_count = 0
    if o.payload == "monotonic":
        if o.payload_file:
            raise ConfigError("give --payload-file or --payload-monotonic, not both")
        if num_records is None:
            raise ConfigError("--payload-monotonic numbers the records: give --num-records "
                              "(as kafka-producer-perf-test requires)")
        monotonic_count = -(-num_records // workers.count)
    payload_spec = PayloadSpec(kind="file" if o.payload_file else o.payload,
                               record_size=o.record_size, compressibility=o.compressibility,
                               file=o.payload_file, delimiter=_delimiter(o.payload_delimiter),
                               seed=o.seed, count=monotonic_count)
    pool = make_pool(payload_spec)
    keys: KeySpec = parse_keys(o.keys)
    rate = o.rate
    if o.rate_bytes:
        rate = o.rate_bytes / max(pool.mean_size, 1.0)
    if rate > MAX_PACED_RATE:
        what = "--rate-bytes" if o.rate_bytes else "--rate"
        raise ConfigError(f"{what} must be at most 1G records/s (one record a "
                          f"nanosecond, the schedule's resolution), not {rate:.3g} records/s; "
                          f"leave it out for as fast as possible")
    bound_notes = _bound_notes(o, rate, num_records, duration_s, warm_s)
    paced = paced_workers(workers, rate, pool.mean_size)
    if o.workers is None and paced != workers and (not monotonic_count or num_records <= MAX_MONOTONIC):
        workers = paced
        if monotonic_count:
            pool = make_pool(replace(payload_spec, count=num_records))
            if o.rate_bytes:
                rate = o.rate_bytes / max(pool.mean_size, 1.0)

    # bootstrap.servers comes from -b (or the embedded broker); a value in -X or a file
    # is used when -b is absent.
    config = ProducerConfig.from_settings(
        settings + [Setting("bootstrap.servers", o.bootstrap or "127.0.0.1:9092", "-b")])
    check_record_size(config, record_size_upper_bound(
        max(map(len, pool.values)), _max_key_len(keys, num_records),
        _header_sizes(o.headers, o.id_headers)), what=_size_origin(o, pool))
    spec_args = dict(topic=o.topic, rate=rate, num_records=num_records, duration_s=duration_s,
                     warmup_records=warm_records, warmup_s=warm_s, payload=pool, keys=keys,
                     extra_headers=o.headers, id_headers=o.id_headers, workers=workers.count,
                     workers_reason=workers.reason,
                     interval_s=o.interval, verify=o.verify and not o.consume, seed=o.seed,
                     spin_ms=o.spin_ms,
                     collect_acked=o.consume,
                     transaction_duration_ms=(o.transaction_duration_ms or DEFAULT_TRANSACTION_DURATION_MS)
                     if config.transactional_id is not None else None)
    warnings = list(config.warnings) + bound_notes
    consumer = None
    if o.consume:
        csettings: list[Setting] = []
        for f in o.consumer_config:
            csettings.extend(load_properties_file(f, what="consumer"))
        csettings.extend(parse_assignment(x, "--consumer-property", what="consumer")
                         for x in o.consumer_properties)
        csettings = [canonical_consumer_setting(x) for x in csettings]
        if any(x.name == "group.id" for x in csettings):
            raise ConfigError("--consume reads in assign mode (each consumer its share of the partitions): "
                              "drop group.id")
        consumer = ConsumerConfig.from_settings(
            csettings + [Setting("bootstrap.servers", o.bootstrap or "127.0.0.1:9092", "-b")])
        warnings.extend(consumer.warnings)
    drain_s = parse_duration(o.drain_timeout, "--drain-timeout") if o.drain_timeout else 30.0
    consumers = o.consumers or 1
    return ProducePlan(o, tuple(settings), config, spec_args, tuple(warnings), consumer, consumers, drain_s)


def _bound_notes(o: ProduceOptions, rate: float, num_records: int | None, duration_s: float | None,
                 warm_s: float) -> list[str]:
    """A paced run given both bounds ends at the first: a warning when that is --duration
    (fewer records than --num-records); a --warmup time in which every record is scheduled
    would leave nothing to measure: refused."""
    if rate <= 0 or num_records is None:
        return []
    schedule_s = num_records / rate
    if warm_s and schedule_s <= warm_s:
        raise ConfigError(f"--warmup {o.warmup} covers the whole run: the {num_records} records of "
                          f"--num-records are all scheduled in its first {schedule_s:g}s at "
                          f"{rate:g} records/s; give a shorter --warmup or more --num-records")
    if duration_s is not None and o.duration is not None and schedule_s > duration_s:
        return [f"--duration {o.duration} ends the run before --num-records {num_records} is sent: "
                f"at {rate:g} records/s about {int(rate * duration_s)} records fit in it"]
    return []


class ScheduleLag:
    """Warns once, live, when a paced run falls far behind its schedule.

    The end of --duration does not stop a paced run: every record scheduled before it is
    sent, late if need be, so a rate the cluster (or this host) cannot carry runs on long
    after the duration. Behind is measured per closed round as the interval's median
    intended-clock latency less its median send-clock latency (how late records left,
    the broker's own time taken out); the warning comes when that is over ``threshold_s``
    and has grown in each of the last ``rounds`` rounds (still falling behind, not a slow
    start catching up: 8 workers starting on a loaded 2-core host were 1.2 s late for a
    round at 500 records/s, and caught up).
    """

    def __init__(self, rate: float, threshold_s: float = 1.0, rounds: int = 3) -> None:
        self.rate = rate
        self.threshold_s = threshold_s
        self.rounds = rounds
        self.warned = False
        self._last_s: float | None = None
        self._growing = 0           # rounds in a row in which the lag grew

    def step(self, snapshot: Any) -> str | None:
        """One closed round's snapshot in; the warning, once, when it is due."""
        if self.warned or self.rate <= 0:
            return None
        intended = snapshot.interval_latency.get("intended")
        send = snapshot.interval_latency.get("send")
        if intended is None or not intended.count:
            return None
        behind_s = (intended.p50_ms - (send.p50_ms if send is not None and send.count else 0.0)) / 1000
        self._growing = self._growing + 1 if self._last_s is not None and behind_s > self._last_s else 0
        self._last_s = behind_s
        if behind_s <= self.threshold_s or self._growing < self.rounds:
            return None
        self.warned = True
        return (f"the run is {behind_s:.1f}s behind its schedule of {self.rate:g} records/s and falling "
                f"further: it goes on until every scheduled record is sent (the end of --duration does not "
                f"stop a paced run); bound it with --num-records or a lower --rate, or stop it with Ctrl-C")


# -- the Java client's checks before a record is sent -----------------------------------------

#: Java's DefaultRecordBatch header (RECORD_BATCH_OVERHEAD) in front of every batch.
_BATCH_OVERHEAD = 61
#: kctl's record identity: one header "kctl" with a 24-byte value (docs/DESIGN.md).
_IDENTITY_HEADER = (len(b"kctl"), 24)


def _varint_len(n: int) -> int:
    z = (n << 1) ^ (n >> 63)
    length = 1
    while z >= 0x80:
        z >>= 7
        length += 1
    return length


def record_size_upper_bound(value_len: int, key_len: int | None,
                            headers: Sequence[tuple[int, int]]) -> int:
    """What the Java producer's ``ensureValidRecordSize`` compares with max.request.size and
    buffer.memory: ``AbstractRecords.estimateSizeInBytesUpperBound`` for RecordBatch v2, one
    record with the largest offset and timestamp deltas, plus the batch header."""
    body = 1 + 10 + 5          # attributes, timestamp delta (varlong max), offset delta (varint max)
    body += 1 if key_len is None else _varint_len(key_len) + key_len
    body += _varint_len(value_len) + value_len
    body += _varint_len(len(headers))
    for k, v in headers:
        body += _varint_len(k) + k + _varint_len(v) + v
    return _BATCH_OVERHEAD + _varint_len(body) + body


def check_record_size(config: ProducerConfig, size: int, *, what: str) -> None:
    """Java's RecordTooLargeException, raised before anything is created or sent."""
    if size > config.max_request_size:
        raise ConfigError(
            f"RecordTooLargeException: {what} is {size} bytes when serialized, larger than "
            f"{config.max_request_size}, the value of max.request.size "
            "(raise -X max.request.size, and the topic's max.message.bytes, or send smaller records)")
    if size > config.buffer_memory:
        raise ConfigError(
            f"RecordTooLargeException: {what} is {size} bytes when serialized, larger than the "
            f"total memory buffer of {config.buffer_memory} bytes configured with buffer.memory")


def _max_key_len(keys: KeySpec, num_records: int | None) -> int | None:
    if not keys.keyed:
        return None
    if keys.kind == "seq":
        return len(str(num_records)) if num_records else 20
    return max(map(len, keys.keys))


def _header_sizes(extra: int, id_headers: bool) -> list[tuple[int, int]]:
    """(key bytes, value bytes) of every header a record carries (load/worker.py's)."""
    sizes = [(len(f"h{i}"), len(f"value-{i}")) for i in range(extra)]
    return sizes + ([_IDENTITY_HEADER] if id_headers else [])


def _size_origin(o: ProduceOptions, pool) -> str:
    if o.payload_file:
        return f"the largest payload of --payload-file ({max(map(len, pool.values))} bytes)"
    if o.payload == "monotonic":
        return "a --payload-monotonic record"
    return f"a record of --record-size {o.record_size}"


def _bootstrap_from(plan: ProducePlan) -> str | None:
    if plan.options.bootstrap:
        return plan.options.bootstrap
    for s in reversed(plan.settings):
        if s.name == "bootstrap.servers":
            return str(s.value)
    return None


def ensure_topic(client: BlockingClient, plan: ProducePlan) -> int:
    o = plan.options
    md = admin.fetch_metadata(client, [o.topic])
    info = md.topics.get(o.topic)
    missing = info is None or info.error == "UNKNOWN_TOPIC_OR_PARTITION" or not info.partitions
    if missing:
        if not o.create_topic:
            raise KctlError(f"topic {o.topic!r} does not exist on {client.address} "
                            "(and --no-create-topic was given)")
        admin.create_topics(client, [o.topic], partitions=o.partitions,
                            replication_factor=o.replication_factor)
        return o.partitions
    if info.error:
        raise KctlError(f"topic {o.topic!r} on {client.address}: {info.error}")
    return len(info.partitions)


def _acked_ends(acked: dict[int, dict[int, list[tuple[int, int, int]]]]) -> dict[int, int]:
    """Per partition, one past the last acknowledged offset."""
    ends: dict[int, int] = {}
    for parts in acked.values():
        for p, runs in parts.items():
            for offset, count, _ in runs:
                if offset >= 0:
                    ends[p] = max(ends.get(p, 0), offset + count)
    return ends


@dataclass
class _SetUpSoFar:
    """What ``execute``'s set-up has learned, for the summary of a run stopped before its
    start (``_stopped_before_start``)."""
    bootstrap: str | None = None
    embedded: bool = False
    partitions: int | None = None
    started: bool = False           # the run's common start passed (or the run returned)


def execute(plan: ProducePlan, *, on_event: Callable[[str], None] = lambda _m: None,
            on_round: Callable[[RunStats, int], None] | None = None,
            on_start: Callable[[LoadRun], None] | None = None,
            hdr_out: str | None = None,
            run_factory: Callable[..., LoadRun] = LoadRun,
            on_consume_start: Callable[[ConsumeStats], None] | None = None) -> ProduceOutcome:
    """``run_factory``: what runs the load (``LoadRun``: local worker processes;
    ``kctl.spark.load.SparkLoadRun``: Spark tasks), called like ``LoadRun``.

    A stop (Ctrl-C, SIGTERM) before the run's common start (the embedded broker starting,
    the topic's set-up, the log end offsets for --verify, the workers or Spark starting)
    ends set-up and returns an interrupted outcome whose summary has zero counts and
    ``run.stopped_in`` "set-up": nothing was scheduled.

    With ``--consume``, consumer processes (load/consume_run.py) are started before the
    producers, each positioned at the end of its share of the partitions; they begin at
    the producers' common start, read the run's records (by its identity's run tag),
    and after the producers finish read on until every acknowledged record is read (the
    acknowledgements give each partition's end) or ``drain_timeout`` passes. Their e2e
    clock joins the summary (``latency.e2e``, and ``consume``) and the .hlog; ``--verify``
    is then checked on what the consumers read, not by reading the topic again."""
    so_far = _SetUpSoFar()
    try:
        return _execute(plan, so_far, on_event=on_event, on_round=on_round, on_start=on_start,
                        hdr_out=hdr_out, run_factory=run_factory, on_consume_start=on_consume_start)
    except KeyboardInterrupt:
        if so_far.started:
            raise
        return _stopped_before_start(plan, so_far, hdr_out)


def _stopped_before_start(plan: ProducePlan, so_far: _SetUpSoFar, hdr_out: str | None) -> ProduceOutcome:
    """The outcome of a run stopped in its set-up: an interrupted summary with zero counts
    (and an .hlog without intervals)."""
    spec = LoadSpec(producer=plan.config, **plan.spec_args)
    config = _summary_config(plan, spec, bootstrap=so_far.bootstrap, embedded=so_far.embedded,
                             partitions=so_far.partitions)
    stats = run_stats(spec, time.time_ns(), config=config, hdr_out=hdr_out)
    stats.interrupted = True
    stats.stopped_in = "set-up"
    summary = stats.summary()
    if stats.hlog is not None:
        stats.hlog.close()
    result = LoadResult(summary, {}, True, {})
    return ProduceOutcome(so_far.bootstrap or "", so_far.embedded, result, None, summary)


def _summary_config(plan: ProducePlan, spec: LoadSpec, *, bootstrap: str | None, embedded: bool,
                    partitions: int | None) -> dict[str, Any]:
    """The run's settings as its summary's ``config`` (a stop in set-up gives what was known)."""
    props = {s.name: str(s.value) for s in plan.settings}
    if bootstrap is not None:
        props["bootstrap.servers"] = bootstrap
    return {
        "bootstrap": bootstrap, "embedded_broker": embedded, "topic": plan.options.topic,
        "partitions": partitions, "workers": spec.workers,
        "workers_reason": spec.workers_reason, "rate": spec.rate or None,
        "num_records": spec.num_records, "duration_s": spec.duration_s,
        "warmup_records": spec.warmup_records, "warmup_s": spec.warmup_s,
        "record_size": plan.options.record_size if not plan.options.payload_file else None,
        "payload": "file" if plan.options.payload_file else plan.options.payload,
        "compressibility": plan.options.compressibility, "keys": plan.options.keys,
        "headers": plan.options.headers, "id_headers": spec.id_headers,
        "verify": spec.verify, "transaction_duration_ms": spec.transaction_duration_ms,
        "spin_ms": spec.spin_ms if spec.rate else None,
        "producer": redact_properties(props)}


def _execute(plan: ProducePlan, so_far: _SetUpSoFar, *, on_event: Callable[[str], None],
             on_round: Callable[[RunStats, int], None] | None, on_start: Callable[[LoadRun], None] | None,
             hdr_out: str | None, run_factory: Callable[..., LoadRun],
             on_consume_start: Callable[[ConsumeStats], None] | None) -> ProduceOutcome:
    with ExitStack() as stack:
        bootstrap = _bootstrap_from(plan)
        embedded = so_far.embedded = bootstrap is None
        if embedded:
            from kctl.broker import EmbeddedBroker
            broker = stack.enter_context(EmbeddedBroker())
            bootstrap = broker.bootstrap
            on_event(f"no --bootstrap-server given: started the embedded broker (Tansu) at {bootstrap}; "
                     "it stops when the run ends")
        so_far.bootstrap = bootstrap
        first = bootstrap.split(",")[0]
        security = plan.config.security
        # Set-up is asked again over a new connection while the connection breaks, for at
        # most max.block.ms (as the Java producer blocks for its metadata): setup_retry.py.
        retry = SetupRetry.of_producer(plan.config)
        with closing(BlockingClient(first, client_id="kctl-produce-admin", security=security,
                                    setup_timeout_s=setup_timeout_s(plan.config.network))) as client:
            partitions = setup_retry.call(client, lambda c: ensure_topic(c, plan), retry,
                                          what=f"setting up topic {plan.options.topic!r} on {first}")
        so_far.partitions = partitions
        on_event(f"producing to {plan.options.topic} ({partitions} partitions) on {bootstrap} "
                 f"with {plan.spec_args['workers']} worker(s) ({plan.spec_args['workers_reason']})")
        producer = plan.config.with_properties({"bootstrap.servers": bootstrap})
        spec = LoadSpec(producer=producer, **plan.spec_args)
        summary_config = _summary_config(plan, spec, bootstrap=bootstrap, embedded=embedded,
                                         partitions=partitions)
        consume_run = None
        if plan.consumer is not None:
            if run_factory is not LoadRun:
                raise ConfigError("--consume runs its consumers on this host: it does not go with --spark yet")
            consume_run = _start_consumers(plan, bootstrap, spec, partitions, on_event, hdr_out)
            summary_config["consumers"] = consume_run.spec.consumers
            summary_config["consumer"] = redact_properties({
                **{s.name: str(s.value) for s in plan.consumer.settings}, "bootstrap.servers": bootstrap})
        clock_server = stack.enter_context(ClockServer(plan.options.clock_server)) \
            if plan.options.clock_server else None
        if clock_server is not None:
            on_event(f"answering clock-offset exchanges at {clock_server.address} (kctl consume --clock-peer)")

        def started(run: LoadRun) -> None:
            so_far.started = True
            if consume_run is not None:
                stats = consume_run.begin(run.stats.start_wall_ns, hlog=run.stats.hlog)
                stats.clock = SAME_HOST
                if on_consume_start is not None:
                    on_consume_start(stats)
            if on_start is not None:
                on_start(run)

        # Records acknowledged without an offset (acks=0; a retry the broker answered
        # DUPLICATE_SEQUENCE_NUMBER, offset -1 as in the Java client) are looked for from
        # each partition's log end before the run.
        since = log_end_offsets(bootstrap, spec.topic, security=security, retry=retry) \
            if spec.verify else None
        # started() is called by the run once its stats exist (after the workers' common start).
        extra = {"close_hlog": False} if consume_run is not None else {}
        run = run_factory(spec, config_for_summary=summary_config, hdr_out=hdr_out, on_round=on_round,
                          on_start=started, **extra)
        try:
            result = run.run()
            so_far.started = True
        except BaseException:
            if consume_run is not None:
                consume_run.stop()
                try:
                    consume_run.wait(5)
                except Exception:  # noqa: BLE001 - the first error is the one to report
                    pass
            raise
        consumed = None
        if consume_run is not None:
            consume_run.set_targets(_acked_ends(result.acked_runs))
            on_event(f"producers done: the consumers read on to the acknowledged end "
                     f"(at most {plan.drain_timeout_s:g} s)")
            try:
                consumed = consume_run.wait(0.1 if result.interrupted else plan.drain_timeout_s,
                                            interrupted=result.interrupted)
            finally:
                if run.stats is not None and run.stats.hlog is not None:
                    run.stats.hlog.close()
        checked = None
        verify_error = None
        if spec.verify and not result.failures and PARENT_STOPS.again.is_set():
            verify_error = "--verify skipped: the run was stopped a second time"
        elif spec.verify and not result.failures:
            on_event("verifying: reading the produced range back")
            # After a stop, the read back has the stop grace, not max.block.ms, to reach
            # the cluster (a stop waits that long for verdicts too).
            patience = retry if not result.interrupted else retry.after_stop(spec.stop_grace_s)
            try:
                checked = verify(bootstrap, spec.topic, spec.run_id, result.acked_runs, security=security,
                                 read_committed=spec.transaction_duration_ms is not None, since=since,
                                 retry=patience,
                                 answer_timeout_s=spec.stop_grace_s if result.interrupted else None,
                                 look_for_unacked=_had_no_ack(result.summary))
            except KctlError as e:
                # The run stands (its summary, --json-out); the verdict is missing, and says why.
                verify_error = str(e)
            except KeyboardInterrupt:
                # A stop while reading back: the run's summary is still written, without a verdict.
                verify_error = "--verify stopped before it finished (Ctrl-C or SIGTERM)"
                result = replace(result, interrupted=True, summary=result.summary.interrupted_now("verify"))
        elif plan.options.verify and consumed is not None and not result.failures and not consumed.failures:
            on_event("verifying what the consumers read against the acknowledgements")
            checked = verify_against_acks(spec.run_id, result.acked_runs, consumed.seen)
        summary = result.summary.with_verify(checked, verify_error)
        if consumed is not None:
            summary = summary.with_consume(consumed.summary)
        return ProduceOutcome(bootstrap, embedded, result, checked, summary, consumed)


def _had_no_ack(summary: RunSummary) -> bool:
    """Records of the run ended failed or abandoned: --verify looks for them in the log too."""
    c = summary.counts
    return bool(c.failed or c.abandoned or summary.run.warmup.records_failed)


def _start_consumers(plan: ProducePlan, bootstrap: str, spec: LoadSpec, partitions: int,
                     on_event: Callable[[str], None], hdr_out: str | None) -> ConsumeRun:
    """The consumers of ``--consume``, started and standing at the end of each partition."""
    assert plan.consumer is not None
    consumers = min(plan.consumers, partitions)
    config = plan.consumer.with_properties({"bootstrap.servers": bootstrap})
    if spec.transaction_duration_ms is not None and not any(
            s.name == "isolation.level" for s in plan.consumer.settings):
        # A transactional run is read as its committed records, as --verify reads it.
        config = config.with_properties({"isolation.level": "read_committed"})
    cspec = ConsumeSpec(
        topic=spec.topic, config=config, partitions=tuple(range(partitions)), consumers=consumers,
        start=StartPosition("end"), run_id=spec.run_id, run_tag=run_tag(spec.run_id), targets=None,
        stop_when_caught_up=True, interval_s=spec.interval_s, warmup_s=spec.warmup_s,
        # e2e covers the records the producers measured (scheduled after the warm-up),
        # so it counts the records the acknowledged count does
        e2e_by_schedule=True, warmup_records=warmup_records_each(spec),
        verify=plan.options.verify, same_host_clock=True)
    run = ConsumeRun(cspec, config_for_summary={"topic": spec.topic, "consumers": consumers})
    on_event(f"starting {consumers} consumer(s) at the end of {spec.topic}")
    run.start()
    return run
