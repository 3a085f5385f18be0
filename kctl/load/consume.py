"""``kctl consume`` without the rendering: options in, a finished run out.

How this works: ``prepare()`` turns the options into a validated ``ConsumePlan``
(consumer properties through consumer_config.py, ``--from``, ``--isolation-level``,
durations) so every bad input fails before anything starts. ``execute()`` starts the
embedded broker when no bootstrap server was given, checks the topic, writes the backlog
first when ``--backlog N`` asks for one (``kctl produce``'s own load path, its
acknowledgements giving each partition's start and end), runs the consumers
(load/consume_run.py), verifies when asked and returns the summary. The command renders
through ``on_round`` / ``on_event`` / ``on_start``.

``--from`` (assign mode; kafka-consumer-perf-test reads from the beginning too):
``beginning`` (the default), ``end``, an offset (``1234``), a time: ISO 8601
(``2024-05-01T12:00:00Z``), ``@<unix ms>`` or ``-<duration>`` (``-5m``: five minutes
ago). Without ``--from``, an ``auto.offset.reset`` given by ``-X`` or a consumer config
decides instead, as for Java's ``assign()`` without a seek (``latest``: only new records;
``none``: the run fails with NoOffsetForPartitionException's line). In group mode positions are the group's committed offsets; ``--from beginning|end``
then says where a partition without one starts (``auto.offset.reset``): ``beginning``
without ``--from`` or with ``--from committed`` (the same thing spelled out; perf-test's
default, which sets earliest unless --from-latest), unless a consumer config or ``-X`` sets
``auto.offset.reset``. The Java client's own default, latest, is not taken silently: one
rule for a group whatever the spelling, and ``--from end`` or ``-X auto.offset.reset=latest``
asks for it.

Stops: ``--duration``, ``--num-records`` (over all consumers), ``--idle-timeout``
without a record; ``--num-records`` with no ``--duration`` gets perf-test's 10 s
``--timeout`` by default, so a topic holding fewer records does not hang the run.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack, closing
from dataclasses import dataclass
from datetime import datetime


from kctl.config import Setting, load_properties_file, parse_assignment, redact_properties
from kctl.consumer_config import ConsumerConfig, canonical_consumer_setting
from kctl.engine import admin, setup_retry
from kctl.engine.batch import TopicPartition
from kctl.engine.blocking_client import BlockingClient, setup_timeout_s
from kctl.engine.setup_retry import SetupRetry
from kctl.errors import ConfigError, EndOffsetsError, KctlError, RetriesExhaustedError
from kctl.load.clock_sync import SAME_HOST, check_peer_address
from kctl.load.consume_run import ConsumeResult, ConsumeRun, ConsumeSpec
from kctl.load.consume_verify import ReadExtent, verify_against_acks, verify_sequences
from kctl.load.consume_worker import StartPosition
from kctl.load.stop import STOP_GRACE_S
from kctl.load.worker_count import WorkerCount, default_workers
from kctl.protocol.identity import run_tag
from kctl.quantities import check_warmup_within, parse_duration, parse_warmup
from kctl.stats.consume_aggregate import ConsumeStats
from kctl.stats.consume_summary import BacklogResult, ConsumeSummary
from kctl.stats.summary import VerifyResult
from kctl.topics import validate_topic_name

__all__ = ["ConsumeOptions", "ConsumeOutcome", "ConsumePlan", "execute", "parse_start", "prepare",
           "past_log_end", "read_extents", "short_of_num_records"]

#: How long a backlog may take to drain before the run gives up (and says so).
BACKLOG_DRAIN_LIMIT_S = 600.0
#: --idle-timeout when --num-records is the only stop (kafka-consumer-perf-test's --timeout
#: default: 10000 ms between returned records).
DEFAULT_IDLE_TIMEOUT_S = 10.0
#: --backlog's records and topic when --record-size / --partitions are not given.
DEFAULT_BACKLOG_RECORD_SIZE = 100
DEFAULT_BACKLOG_PARTITIONS = 6


@dataclass(frozen=True)
class ConsumeOptions:
    bootstrap: str | None = None
    topic: str = "kctl-perf"
    group: str | None = None
    consumers: int | None = None
    start: str | None = None              # --from
    isolation_level: str | None = None
    properties: Sequence[str] = ()
    consumer_config: Sequence[str] = ()
    duration: str | None = None
    num_records: int | None = None
    idle_timeout: str | None = None
    warmup: str | None = None
    interval: float = 1.0
    verify: bool = False
    backlog: int | None = None
    record_size: int | None = None        # backlog records' value size (prepare: 100 with --backlog)
    partitions: int | None = None         # a topic --backlog creates (prepare: 6 with --backlog)
    create_topic: bool = True
    clock_peer: str | None = None


@dataclass(frozen=True)
class ConsumePlan:
    options: ConsumeOptions
    settings: tuple[Setting, ...]
    config: ConsumerConfig
    start: StartPosition
    duration_s: float | None
    num_records: int | None
    idle_timeout_s: float | None
    warmup_s: float
    consumers: WorkerCount
    warnings: tuple[str, ...] = ()


@dataclass
class ConsumeOutcome:
    bootstrap: str
    embedded: bool
    result: ConsumeResult
    summary: ConsumeSummary
    verify: VerifyResult | None


def parse_start(text: str | None, *, group: bool, now_ms: int | None = None) -> StartPosition:
    """``--from`` (module docstring)."""
    if text is None:
        return StartPosition("committed" if group else "beginning")
    t = text.strip()
    low = t.lower()
    if low in ("beginning", "earliest", "start"):
        kind = StartPosition("beginning")
    elif low in ("end", "latest"):
        kind = StartPosition("end")
    elif low == "committed":
        if not group:
            raise ConfigError("--from committed needs --group (the group's committed offsets)")
        return StartPosition("committed")
    elif t.isdigit():
        kind = StartPosition("offset", int(t))
    elif t.startswith("@") and t[1:].isdigit():
        kind = StartPosition("timestamp", int(t[1:]))
    elif t.startswith("-"):
        ago = parse_duration(t[1:], "--from")
        now = now_ms if now_ms is not None else time.time_ns() // 1_000_000
        kind = StartPosition("timestamp", now - int(ago * 1000))
    else:
        try:
            when = datetime.fromisoformat(t.replace("Z", "+00:00"))
        except ValueError:
            raise ConfigError(
                f"--from {text!r}: expected beginning, end, an offset (1234), a time (ISO 8601 such as "
                "2024-05-01T12:00:00Z, @<unix ms>, or -5m for five minutes ago)") from None
        if when.tzinfo is None:
            raise ConfigError(f"--from {text!r}: give the time zone (Z or +02:00)")
        kind = StartPosition("timestamp", int(when.timestamp() * 1000))
    if group and kind.kind in ("offset", "timestamp"):
        raise ConfigError("--from an offset or a time needs assign mode: a group's positions are its "
                          "committed offsets (drop --group, or use --from beginning|end)")
    return kind


def prepare(o: ConsumeOptions) -> ConsumePlan:
    validate_topic_name(o.topic)
    if o.consumers is not None and o.consumers < 1:
        raise ConfigError(f"--consumers must be at least 1, not {o.consumers}")
    if o.num_records is not None and o.num_records < 1:
        raise ConfigError(f"--num-records must be at least 1, not {o.num_records}")
    if o.backlog is not None and o.backlog < 1:
        raise ConfigError(f"--backlog must be at least 1 record, not {o.backlog}")
    if o.interval <= 0:
        raise ConfigError(f"--interval must be positive, not {o.interval}")
    if o.backlog is not None and o.start is not None:
        raise ConfigError("--backlog starts where the backlog starts: drop --from")
    if o.backlog is None and (o.record_size is not None or o.partitions is not None):
        raise ConfigError("--record-size and --partitions shape what --backlog writes: give --backlog "
                          "or drop them")
    if o.record_size is not None and o.record_size < 0:
        raise ConfigError(f"--record-size must not be negative, not {o.record_size}")
    if o.partitions is not None and o.partitions < 1:
        raise ConfigError(f"--partitions must be at least 1, not {o.partitions}")
    if o.backlog is not None:
        o = dataclasses.replace(o, record_size=DEFAULT_BACKLOG_RECORD_SIZE if o.record_size is None else o.record_size,
                    partitions=DEFAULT_BACKLOG_PARTITIONS if o.partitions is None else o.partitions)
    if o.clock_peer is not None:
        check_peer_address(o.clock_peer)
    group = o.group is not None
    start = parse_start(o.start, group=group)
    committed_only = start.kind == "committed"     # no --from with --group, or --from committed
    settings: list[Setting] = []
    for f in o.consumer_config:
        settings.extend(load_properties_file(f, what="consumer"))
    settings.extend(parse_assignment(x, "-X", what="consumer") for x in o.properties)
    settings = [canonical_consumer_setting(x) for x in settings]
    named = {s.name: s for s in settings}
    if o.isolation_level is not None:
        if "isolation.level" in named and str(named["isolation.level"].value).lower() != o.isolation_level.lower():
            raise ConfigError("--isolation-level and -X isolation.level disagree: give one")
        settings.append(Setting("isolation.level", o.isolation_level, "--isolation-level"))
    if group:
        if "group.id" in named and named["group.id"].value != o.group:
            raise ConfigError("--group and -X group.id disagree: give one")
        settings.append(Setting("group.id", o.group, "--group"))
        if start.kind in ("beginning", "end"):
            reset = "earliest" if start.kind == "beginning" else "latest"
            if "auto.offset.reset" in named and str(named["auto.offset.reset"].value) != reset:
                raise ConfigError("--from and -X auto.offset.reset disagree: give one")
            settings.append(Setting("auto.offset.reset", reset, "--from"))
            start = StartPosition("committed")
    elif "group.id" in named:
        raise ConfigError("give the group as --group (assign mode takes no group.id)")
    elif o.start is None and o.backlog is None and "auto.offset.reset" in named:
        # Java's assign() without a seek: each partition starts by auto.offset.reset
        # (latest: only new records; none: NoOffsetForPartitionException). --from wins.
        start = StartPosition("reset")
    if committed_only and "auto.offset.reset" not in named:
        # No --from, or --from committed: a partition without a committed offset starts at
        # the beginning (kafka-consumer-perf-test's default too), not the Java client's
        # latest. A consumer config's or -X's auto.offset.reset wins.
        settings.append(Setting("auto.offset.reset", "earliest", "--backlog" if o.backlog is not None
                                else "--from (default beginning)" if o.start is None
                                else "--from committed (default beginning)"))
    config = ConsumerConfig.from_settings(
        settings + [Setting("bootstrap.servers", o.bootstrap or "127.0.0.1:9092", "-b")])
    if start.kind == "reset":
        start = StartPosition("reset", reset=config.auto_offset_reset.to_text())
    duration_s = parse_duration(o.duration, "--duration") if o.duration else None
    idle_s = parse_duration(o.idle_timeout, "--idle-timeout") if o.idle_timeout else None
    if idle_s is None and o.num_records is not None and duration_s is None and o.backlog is None:
        # Nothing else ends a run that may never see --num-records: perf-test's --timeout default.
        idle_s = DEFAULT_IDLE_TIMEOUT_S
    if duration_s is None and o.num_records is None and o.backlog is None and idle_s is None:
        duration_s = 10.0
    warm_records, warm_s = parse_warmup(o.warmup)
    check_warmup_within(warm_s, duration_s, o.warmup, o.duration)
    if warm_records:
        raise ConfigError("--warmup for kctl consume is a time (5s), not a record count")
    if o.consumers is not None:
        consumers = WorkerCount(o.consumers, "--consumers")
    else:
        given = o.bootstrap or next((str(x.value) for x in reversed(settings) if x.name == "bootstrap.servers"),
                                    None)
        consumers = default_workers(given)
    return ConsumePlan(o, tuple(settings), config, start, duration_s, o.num_records, idle_s, warm_s,
                       consumers, tuple(config.warnings))


def _describe_start(start: StartPosition, config: ConsumerConfig) -> str:
    """Where the consumers start, for the start line: a group's committed offsets say where
    a partition without one starts (auto.offset.reset, which --from beginning|end sets)."""
    if start.kind != "committed":
        return start.describe()
    reset = config.auto_offset_reset.to_text()
    where = {"earliest": "the beginning", "latest": "the end"}.get(reset, f"auto.offset.reset={reset}")
    return f"the group's committed offsets (partitions without one: {where})"


def _bootstrap_from(plan: ConsumePlan) -> str | None:
    if plan.options.bootstrap:
        return plan.options.bootstrap
    for s in reversed(plan.settings):
        if s.name == "bootstrap.servers":
            return str(s.value)
    return None


def _topic_partitions(client: BlockingClient, plan: ConsumePlan) -> tuple[int, ...]:
    o = plan.options
    md = admin.fetch_metadata(client, [o.topic])
    info = md.topics.get(o.topic)
    missing = info is None or info.error == "UNKNOWN_TOPIC_OR_PARTITION" or not info.partitions
    if missing:
        if o.backlog is not None and o.create_topic:
            admin.create_topics(client, [o.topic], partitions=o.partitions)
            return tuple(range(o.partitions))
        raise KctlError(f"topic {o.topic!r} does not exist on {client.address}")
    if info.error:
        raise KctlError(f"topic {o.topic!r} on {client.address}: {info.error}")
    return tuple(sorted(p.partition for p in info.partitions))


@dataclass(frozen=True)
class _Backlog:
    run_id: str
    acked: dict[int, dict[int, list[tuple[int, int, int]]]]
    starts: dict[int, int]
    ends: dict[int, int]
    records: int
    produce_s: float


def _write_backlog(plan: ConsumePlan, bootstrap: str, on_event: Callable[[str], None]) -> _Backlog:
    from kctl.load.produce import ProduceOptions, execute as produce, prepare as prepare_produce
    o = plan.options
    on_event(f"writing a backlog of {o.backlog} records to {o.topic} before the consumers start")
    pp = prepare_produce(ProduceOptions(bootstrap=bootstrap, topic=o.topic, partitions=o.partitions,
                                        create_topic=o.create_topic, num_records=o.backlog,
                                        record_size=o.record_size, interval=o.interval))
    pp = dataclasses.replace(pp, spec_args={**pp.spec_args, "collect_acked": True})
    t0 = time.monotonic()
    outcome = produce(pp)
    produce_s = time.monotonic() - t0
    if outcome.result.interrupted:
        raise KeyboardInterrupt     # a stop while the backlog was written: the consumers never start
    if outcome.result.failures:
        w, err = sorted(outcome.result.failures.items())[0]
        raise KctlError(f"writing the backlog failed: producer worker {w}: {err.splitlines()[0]}")
    acked = outcome.result.acked_runs
    starts: dict[int, int] = {}
    ends: dict[int, int] = {}
    count = 0
    for parts in acked.values():
        for p, runs in parts.items():
            for offset, n, _ in runs:
                count += n
                if offset < 0:
                    continue
                starts[p] = min(starts.get(p, offset), offset)
                ends[p] = max(ends.get(p, 0), offset + n)
    if count < o.backlog:
        on_event(f"warning: only {count} of {o.backlog} backlog records were acknowledged")
    return _Backlog(outcome.summary.run.id, acked, starts, ends, count, produce_s)


def _commit_group_start(config: ConsumerConfig, topic: str, offsets: dict[int, int]) -> None:
    """A fresh group's starting offsets, committed before its members join (a backlog
    read by a group starts where the backlog starts)."""
    from kctl.engine.consumer import Consumer
    with Consumer(config.with_properties({"enable.auto.commit": "false"})) as c:
        c.assign([TopicPartition(topic, p) for p in offsets])
        result = c.commit_sync({TopicPartition(topic, p): o for p, o in offsets.items()}, timeout_s=30)
        if not result.ok:
            raise KctlError(f"could not commit the backlog's start for group {config.group_id!r}: "
                            f"{sorted(set(result.errors.values()))}")


@dataclass
class _SetUpSoFar:
    """What ``execute``'s set-up has learned, for the summary of a run stopped before its
    common start."""
    bootstrap: str | None = None
    embedded: bool = False
    partitions: int | None = None
    consumers: int | None = None
    started: bool = False


def execute(plan: ConsumePlan, *, on_event: Callable[[str], None] = lambda _m: None,
            on_round: Callable[[ConsumeStats, int], None] | None = None,
            on_start: Callable[[ConsumeStats], None] | None = None,
            hdr_out: str | None = None) -> ConsumeOutcome:
    """A stop (Ctrl-C, SIGTERM) before the consumers' common start (the embedded broker,
    the topic's look-up, writing a --backlog, the consumers starting or joining their
    group) ends set-up and returns an interrupted outcome whose summary has zero counts and
    ``run.stopped_in`` "set-up"."""
    so_far = _SetUpSoFar()
    try:
        return _execute(plan, so_far, on_event=on_event, on_round=on_round, on_start=on_start,
                        hdr_out=hdr_out)
    except KeyboardInterrupt:
        if so_far.started:
            raise
        return _stopped_before_start(plan, so_far)


def _stopped_before_start(plan: ConsumePlan, so_far: _SetUpSoFar) -> ConsumeOutcome:
    o = plan.options
    config = {"bootstrap": so_far.bootstrap, "embedded_broker": so_far.embedded, "topic": o.topic,
              "partitions": so_far.partitions, "consumers": so_far.consumers, "group": o.group,
              "duration_s": plan.duration_s, "num_records": plan.num_records, "backlog": o.backlog,
              "verify": o.verify, "consumer": redact_properties({s.name: str(s.value) for s in plan.settings})}
    stats = ConsumeStats(consumers=so_far.consumers or 0, start_wall_ns=time.time_ns(), config=config,
                         mode="group" if o.group is not None else "assign")
    stats.interrupted = True
    stats.stopped_in = "set-up"
    summary = stats.summary()
    result = ConsumeResult(summary, {}, {}, True, stats)
    return ConsumeOutcome(so_far.bootstrap or "", so_far.embedded, result, summary, None)


def _execute(plan: ConsumePlan, so_far: _SetUpSoFar, *, on_event: Callable[[str], None],
             on_round: Callable[[ConsumeStats, int], None] | None,
             on_start: Callable[[ConsumeStats], None] | None, hdr_out: str | None) -> ConsumeOutcome:
    o = plan.options
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
        config = plan.config.with_properties({"bootstrap.servers": bootstrap})
        # The topic check is asked again over a new connection while the connection breaks,
        # for at most default.api.timeout.ms (as the Java consumer's partitionsFor); so are
        # the final end offsets while their errors may pass (as its endOffsets).
        retry = SetupRetry(config.default_api_timeout_ms, "default.api.timeout.ms",
                           min(config.retry_backoff_ms, config.retry_backoff_max_ms), config.retry_backoff_max_ms)
        with closing(BlockingClient(bootstrap.split(",")[0], client_id="kctl-consume-admin",
                                    security=config.security,
                                    setup_timeout_s=setup_timeout_s(config.network))) as client:
            partitions = setup_retry.call(client, lambda c: _topic_partitions(c, plan), retry,
                                          what=f"looking up topic {o.topic!r}")
        so_far.partitions = len(partitions)
        backlog = _write_backlog(plan, bootstrap, on_event) if o.backlog is not None else None
        group = o.group is not None
        consumers = plan.consumers.count
        reason = plan.consumers.reason
        if not group and consumers > len(partitions):
            consumers, reason = len(partitions), f"{reason}; at most one per partition in assign mode"
        start = plan.start
        targets = None
        tag = None
        if backlog is not None:
            start = StartPosition("offsets", offsets=backlog.starts) if not group else StartPosition("committed")
            targets = {p: backlog.ends.get(p, backlog.starts.get(p, 0)) for p in partitions}
            tag = run_tag(backlog.run_id)
            if group:
                _commit_group_start(config, o.topic, {p: backlog.starts.get(p, 0) for p in partitions})
        on_event(f"consuming {o.topic} ({len(partitions)} partitions) on {bootstrap} with {consumers} "
                 f"consumer(s) ({reason}), {'group ' + repr(o.group) if group else 'assign mode'}, "
                 f"from {_describe_start(start, config)}")
        spec = ConsumeSpec(
            topic=o.topic, config=config, partitions=partitions, consumers=consumers, group=group,
            start=start, run_tag=tag, duration_s=plan.duration_s if backlog is None else
            (plan.duration_s or BACKLOG_DRAIN_LIMIT_S), max_records=plan.num_records,
            idle_timeout_s=plan.idle_timeout_s, targets=targets, stop_when_caught_up=backlog is not None,
            interval_s=o.interval, warmup_s=plan.warmup_s, verify=o.verify, clock_peer=o.clock_peer)
        summary_config = {
            "bootstrap": bootstrap, "embedded_broker": embedded, "topic": o.topic, "partitions": len(partitions),
            "consumers": consumers, "consumers_reason": reason, "group": o.group, "from": start.describe(),
            "duration_s": spec.duration_s, "num_records": plan.num_records, "idle_timeout_s": plan.idle_timeout_s,
            "warmup_s": plan.warmup_s, "backlog": o.backlog, "verify": o.verify,
            "consumer": redact_properties({**{s.name: str(s.value) for s in plan.settings},
                                           "bootstrap.servers": bootstrap})}
        so_far.consumers = consumers
        run = ConsumeRun(spec, config_for_summary=summary_config, hdr_out=hdr_out, on_round=on_round)
        run.start()
        so_far.started = True
        stats = run.begin()
        if backlog is not None and o.clock_peer is None:
            stats.clock = SAME_HOST   # the backlog was written from this host
        if on_start is not None:
            on_start(stats)
        result = run.wait()
        # After a stop, the final end offsets get the stop grace, not default.api.timeout.ms
        # (a cluster that stopped answering must not hold the exit for a minute).
        ends_retry, answer_s = (retry.after_stop(STOP_GRACE_S), STOP_GRACE_S) \
            if result.interrupted else (retry, None)
        summary = _with_final_ends(result.summary, bootstrap=bootstrap.split(",")[0].strip(),
                                   client_for=lambda address: BlockingClient(
                                       address, client_id="kctl-consume-admin", security=config.security,
                                       setup_timeout_s=setup_timeout_s(config.network),
                                       **({"timeout_s": answer_s} if answer_s is not None else {})),
                                   isolation_level=int(config.isolation_level), retry=ends_retry, on_event=on_event)
        if backlog is not None:
            done = stats.caught_up_at()
            drain_s = (done - stats.start_wall_ns) / 1e9 if done else summary.run.duration_s
            summary = summary.with_backlog(BacklogResult(
                backlog.records, done is not None, round(drain_s, 6),
                round(backlog.records / drain_s, 3) if drain_s > 0 else 0.0, round(backlog.produce_s, 6)))
        checked = None
        if o.verify and not result.failures:
            on_event("verifying what the consumers read")
            checked = (verify_against_acks(backlog.run_id, backlog.acked, result.seen) if backlog is not None
                       else verify_sequences(result.seen, read_extents(partitions, start, group, summary)))
            summary = summary.with_verify(checked)
        return ConsumeOutcome(bootstrap, embedded, result, summary, checked)




def _with_final_ends(summary: ConsumeSummary, *, bootstrap: str, client_for: Callable[[str], BlockingClient],
                     isolation_level: int, retry: SetupRetry, on_event: Callable[[str], None],
                     now_ns: Callable[[], int] = time.monotonic_ns,
                     sleep_ns: Callable[[int], None] = lambda ns: time.sleep(ns / 1e9)) -> ConsumeSummary:
    """The final lag over every partition: the end offsets of partitions the consumers
    never fetched (a run that stopped before reaching them) asked after the run of each
    partition's leader (``admin.log_end_offsets``: Metadata from ``bootstrap``, ListOffsets
    per leader), asked again while the errors may pass (a leader moving, an election, a
    connection) for at most ``retry`` (``default.api.timeout.ms``, as the Java consumer's
    ``endOffsets``). A partition whose end offset stays unknown (no leader, the leader's
    error, Metadata or the connection failing) is said in one warning line and left out of
    the final lag, which is then partial (``lag_unknown``), never a lag of 0."""
    unknown = [p.partition for p in summary.partitions if p.end_offset < 0]
    ends: dict[int, int] = {}
    if unknown and summary.partitions:
        topic = summary.partitions[0].topic
        listed = ", ".join(map(str, unknown))
        failed: EndOffsetsError | None = None
        tried = ""
        try:
            with closing(client_for(bootstrap)) as client:
                ends = setup_retry.call(
                    client, lambda c: admin.log_end_offsets(c, topic, unknown, client_for=client_for,
                                                            isolation_level=isolation_level),
                    retry, what=f"the end offsets of partition(s) {listed} never fetched",
                    now_ns=now_ns, sleep_ns=sleep_ns)
        except EndOffsetsError as e:                    # an error that does not pass: at once
            failed = e
        except RetriesExhaustedError as e:              # errors that may pass, for the whole bound
            if isinstance(e.last, EndOffsetsError):
                failed, tried = e.last, f"; asked {e.attempts} time(s) for {e.bound}"
            else:
                on_event(f"warning: {e}; the final lag leaves them out")
        except (KctlError, OSError) as e:               # Metadata, the bootstrap connection
            on_event(f"warning: could not ask the end offsets of partition(s) {listed} never fetched: {e}; "
                     "the final lag leaves them out")
        if failed is not None:
            ends = failed.offsets
            left = ", ".join(map(str, sorted(set(unknown) - ends.keys())))
            on_event(f"warning: the end offset of partition(s) {left} never fetched is unknown "
                     f"({failed.describe_errors()}{tried}); the final lag leaves them out")
    return summary.with_end_offsets(ends)


def read_extents(partitions: Sequence[int], start: StartPosition, group: bool,
                 summary: ConsumeSummary) -> dict[int, ReadExtent]:
    """How much of each partition the run read, for ``--verify`` without acknowledgements:
    from the log start when assign mode sought to the beginning; to the end when the
    partition's final position reached its end offset. A partition never fetched has
    neither (its end offset is unknown)."""
    from_start = not group and (start.kind == "beginning"
                                or (start.kind == "reset" and start.reset == "earliest"))
    at_end = {s.partition for s in summary.partitions if s.end_offset >= 0 and s.position >= s.end_offset}
    return {p: ReadExtent(from_start, p in at_end) for p in partitions}


def past_log_end(summary: ConsumeSummary) -> str | None:
    """One WARNING line when partitions ended the run positioned past their log end (a
    ``--from`` offset beyond it: a broker answers OFFSET_OUT_OF_RANGE and the consumer
    resets by auto.offset.reset, but one that answers with no records leaves the position
    there, and lag shows 0); None when none is."""
    past = [p for p in summary.partitions if 0 <= p.end_offset < p.position]
    if not past:
        return None
    listed = ", ".join(f"{p.partition} (position {p.position}, end offset {p.end_offset})" for p in past)
    return (f"WARNING: position past the log end in partition(s) {listed}: nothing was there to read "
            "and their lag shows as 0")


def short_of_num_records(plan: ConsumePlan, outcome: ConsumeOutcome) -> str | None:
    """One line when the run ended before --num-records were read: how many of how many,
    and what ended it (None when they were read, or none were asked)."""
    asked = plan.num_records
    read = outcome.summary.counts.records
    if asked is None or read >= asked:
        return None
    run = outcome.summary.run
    if outcome.result.interrupted:
        why = "interrupted"
    elif outcome.result.failures:
        why = "a consumer failed"
    elif plan.duration_s is not None and run.duration_s >= plan.duration_s:
        why = f"--duration {plan.duration_s:g} s ended"
    elif plan.idle_timeout_s is not None:
        why = (f"no record for {plan.idle_timeout_s:g} s (--idle-timeout; --timeout in ms, "
               "raise it to wait longer)")
    else:
        why = "the run ended"
    return f"WARNING: read {read} of the {asked} records asked (--num-records): {why}"
