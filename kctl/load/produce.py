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

import re
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from kctl.config import (
    ProducerConfig,
    Setting,
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
from kctl.stats.aggregate import RunStats
from kctl.stats.summary import RunSummary

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_S = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(text: str, what: str) -> float:
    """``"90"``, ``"90s"``, ``"500ms"``, ``"2m"``, ``"1h"`` -> seconds."""
    m = _DURATION.match(text)
    if not m:
        raise ConfigError(f"{what} must be a duration such as 30s, 500ms, 2m or 1h, not {text!r}")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


def parse_warmup(text: str | None) -> tuple[int, float]:
    """``--warmup``: a plain number is records, a number with a unit is time."""
    if not text:
        return 0, 0.0
    t = text.strip()
    if t.isdigit():
        return int(t), 0.0
    return 0, parse_duration(t, "--warmup")


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
    duration_s = parse_duration(o.duration, "--duration") if o.duration else None
    num_records = o.num_records
    if duration_s is None and num_records is None:
        duration_s = 10.0
    warm_records, warm_s = parse_warmup(o.warmup)

    payload_spec = PayloadSpec(kind="file" if o.payload_file else o.payload,
                               record_size=o.record_size, compressibility=o.compressibility,
                               file=o.payload_file, delimiter=_delimiter(o.payload_delimiter),
                               seed=o.seed)
    pool = make_pool(payload_spec)
    keys: KeySpec = parse_keys(o.keys)
    rate = o.rate
    if o.rate_bytes:
        rate = o.rate_bytes / max(pool.mean_size, 1.0)

    settings: list[Setting] = []
    for f in o.producer_config:
        settings.extend(load_properties_file(f))
    settings.extend(parse_assignment(x, "-X") for x in o.properties)
    # bootstrap.servers comes from -b (or the embedded broker); a value in -X or a file
    # is used when -b is absent.
    config = ProducerConfig.from_settings(
        settings + [Setting("bootstrap.servers", o.bootstrap or "127.0.0.1:9092", "-b")])
    if o.workers is not None:
        workers = WorkerCount(o.workers, "--workers")
    else:
        given = o.bootstrap or next((str(x.value) for x in reversed(settings)
                                     if x.name == "bootstrap.servers"), None)
        workers = default_workers(given)
    spec_args = dict(topic=o.topic, rate=rate, num_records=num_records, duration_s=duration_s,
                     warmup_records=warm_records, warmup_s=warm_s, payload=pool, keys=keys,
                     extra_headers=o.headers, id_headers=o.id_headers, workers=workers.count,
                     workers_reason=workers.reason,
                     interval_s=o.interval, verify=o.verify, seed=o.seed)
    return ProducePlan(o, tuple(settings), config, spec_args, tuple(config.warnings))


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
