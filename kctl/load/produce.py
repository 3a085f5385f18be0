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

from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from kctl.config import (
    ProducerConfig,
    Setting,
    canonical_setting,
    load_properties_file,
    parse_assignment,
    redact_properties,
)
from kctl.engine import admin
from kctl.engine.blocking_client import BlockingClient
from kctl.errors import ConfigError, KctlError
from kctl.load.payload import KeySpec, PayloadSpec, make_pool, parse_keys
from kctl.load.run import LoadResult, LoadRun, LoadSpec
from kctl.load.verify import VerifyResult, verify
from kctl.load.worker_count import WorkerCount, default_workers
from kctl.quantities import parse_duration, parse_warmup
from kctl.topics import validate_topic_name
from kctl.stats.aggregate import RunStats
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
    payload: str = "random"
    payload_file: str | None = None
    payload_delimiter: str = "\\n"
    compressibility: float = 0.0
    keys: str = "none"
    headers: int = 0
    properties: Sequence[str] = ()
    producer_config: Sequence[str] = ()
    workers: int | None = None
    interval: float = 1.0
    verify: bool = False
    id_headers: bool = True
    seed: int = 0


@dataclass(frozen=True)
class ProducePlan:
    options: ProduceOptions
    settings: tuple[Setting, ...]
    config: ProducerConfig
    spec_args: dict[str, Any]
    warnings: tuple[str, ...] = ()


@dataclass
class ProduceOutcome:
    bootstrap: str
    embedded: bool
    result: LoadResult
    verify: VerifyResult | None
    summary: RunSummary


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
    if o.workers is not None and o.workers < 1:
        raise ConfigError(f"--workers must be at least 1, not {o.workers}")
    if o.verify and not o.id_headers:
        raise ConfigError("--verify needs the record identity headers: drop --no-id-headers")
    validate_topic_name(o.topic)
    duration_s = parse_duration(o.duration, "--duration") if o.duration else None
    num_records = o.num_records
    if duration_s is None and num_records is None:
        duration_s = 10.0
    warm_records, warm_s = parse_warmup(o.warmup)

    settings: list[Setting] = []
    for f in o.producer_config:
        settings.extend(load_properties_file(f))
    settings.extend(parse_assignment(x, "-X") for x in o.properties)
    # librdkafka's names for Java properties become the Java names here, so the workers,
    # the summary and the report all see one spelling.
    settings = [canonical_setting(x) for x in settings]
    if o.workers is not None:
        workers = WorkerCount(o.workers, "--workers")
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
                     interval_s=o.interval, verify=o.verify, seed=o.seed)
    return ProducePlan(o, tuple(settings), config, spec_args, tuple(config.warnings))


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


def execute(plan: ProducePlan, *, on_event: Callable[[str], None] = lambda _m: None,
            on_round: Callable[[RunStats, int], None] | None = None,
            on_start: Callable[[LoadRun], None] | None = None,
            hdr_out: str | None = None,
            run_factory: Callable[..., LoadRun] = LoadRun) -> ProduceOutcome:
    """``run_factory``: what runs the load (``LoadRun``: local worker processes;
    ``kctl.spark.load.SparkLoadRun``: Spark tasks), called like ``LoadRun``."""
    with ExitStack() as stack:
        bootstrap = _bootstrap_from(plan)
        embedded = bootstrap is None
        if embedded:
            from kctl.broker import EmbeddedBroker
            broker = stack.enter_context(EmbeddedBroker())
            bootstrap = broker.bootstrap
            on_event(f"no --bootstrap-server given: started the embedded broker (Tansu) at {bootstrap}; "
                     "it stops when the run ends")
        first = bootstrap.split(",")[0]
        security = plan.config.security
        with BlockingClient(first, client_id="kctl-produce-admin", security=security) as client:
            partitions = ensure_topic(client, plan)
        on_event(f"producing to {plan.options.topic} ({partitions} partitions) on {bootstrap} "
                 f"with {plan.spec_args['workers']} worker(s) ({plan.spec_args['workers_reason']})")
        props = {s.name: str(s.value) for s in plan.settings}
        props["bootstrap.servers"] = bootstrap
        producer = plan.config.with_properties({"bootstrap.servers": bootstrap})
        spec = LoadSpec(producer=producer, **plan.spec_args)
        summary_config = {
            "bootstrap": bootstrap, "embedded_broker": embedded, "topic": plan.options.topic,
            "partitions": partitions, "workers": spec.workers,
            "workers_reason": spec.workers_reason, "rate": spec.rate or None,
            "num_records": spec.num_records, "duration_s": spec.duration_s,
            "warmup_records": spec.warmup_records, "warmup_s": spec.warmup_s,
            "record_size": plan.options.record_size if not plan.options.payload_file else None,
            "payload": "file" if plan.options.payload_file else plan.options.payload,
            "compressibility": plan.options.compressibility, "keys": plan.options.keys,
            "headers": plan.options.headers, "id_headers": spec.id_headers,
            "verify": spec.verify, "producer": redact_properties(props)}
        # on_start is called by the run once its stats exist (after the workers' common start).
        run = run_factory(spec, config_for_summary=summary_config, hdr_out=hdr_out, on_round=on_round,
                          on_start=on_start)
        result = run.run()
        checked = None
        if spec.verify and not result.failures:
            on_event("verifying: reading the produced range back")
            checked = verify(bootstrap, spec.topic, spec.run_id, result.acked_runs, security=security)
        return ProduceOutcome(bootstrap, embedded, result, checked, result.summary.with_verify(checked))
