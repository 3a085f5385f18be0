"""kctl produce: load-test a cluster (thin: options -> kctl.load.produce -> render)."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.live import Live

from kctl.commands._stop import EXIT_INTERRUPTED
from kctl.errors import ConfigError, KctlError
from kctl.commands._output import check_outputs
from kctl.load.produce import ProduceOptions, ScheduleLag, execute, prepare
from kctl.load.stop import later_stops_hurry
from kctl.quantities import parse_byte_rate, parse_duration, parse_rate
from kctl.ui.console import stderr_console, stdout_console
from kctl.ui.produce_view import (
    ProduceDashboard, clock_line, no_verdict_line, plain_line, spark_start_line, summary_line,
    summary_renderable, verify_line,
)

if TYPE_CHECKING:
    from kctl.stats.summary import Counts, RunSummary

#: kafka-producer-perf-test takes several properties after one flag (argparse nargs="+").
_MULTI_VALUE = ("--producer-props", "--command-property")


def expand_args(args: list[str]) -> list[str]:
    """``--producer-props a=1 b=2`` -> ``--producer-props a=1 --producer-props b=2``:
    every following ``name=value`` word belongs to the flag, as in perf-test."""
    out: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        out.append(a)
        i += 1
        if a in _MULTI_VALUE:
            first = True
            while i < len(args) and "=" in args[i] and not args[i].startswith("-"):
                if not first:
                    out.append(a)
                out.append(args[i])
                first = False
                i += 1
    return out


def _perf_test_rate(throughput: str | None, rate: str | None) -> float:
    """perf-test's --throughput: records/s; any negative value (-1) = no throttling."""
    if throughput is None:
        return parse_rate(rate, "--rate")
    if rate is not None:
        raise ConfigError("give --rate or --throughput (perf-test's spelling), not both")
    try:
        value = float(throughput)
    except ValueError:
        raise ConfigError(f"--throughput must be records/s, or -1 for as fast as possible, "
                          f"not {throughput!r}") from None
    if value < 0:
        return 0.0
    if value == 0:
        raise ConfigError("--throughput 0 would never send (perf-test blocks forever); "
                          "use -1 for as fast as possible")
    return value


def produce(
    bootstrap_server: Optional[str] = typer.Option(
        None, "-b", "--bootstrap-server", help="Brokers (host:port,...). Left out: start the embedded broker."),
    topic: str = typer.Option("kctl-perf", "-t", "--topic", help="Topic; created when missing."),
    partitions: int = typer.Option(6, "--partitions", help="Partitions for a topic kctl creates."),
    replication_factor: int = typer.Option(1, "--replication-factor", help="Replication for a topic kctl creates."),
    no_create_topic: bool = typer.Option(False, "--no-create-topic", help="Fail instead of creating a missing topic."),
    rate: Optional[str] = typer.Option(None, "--rate", help="Records/s over all workers: 5000, 5k, 1.5M (at most 1G), or max (the default: as fast as possible; 0 is refused, as --throughput 0)."),
    throughput: Optional[str] = typer.Option(None, "--throughput", help="perf-test's spelling of --rate: records/s; -1 (any negative) = as fast as possible; 0 is refused."),
    rate_bytes: Optional[str] = typer.Option(None, "--rate-bytes", help="Value bytes/s instead of --rate: 200000, 10MB, 10MiB (0 is refused: leave it out for as fast as possible)."),
    duration: Optional[str] = typer.Option(None, "--duration", help="Run length, --warmup included: 500ms, 30s, 1m30s, 2h, or seconds (at least 1ms; default 10s). A paced run (--rate) sends every record scheduled in it, however long that takes; with --num-records too the first bound reached ends the run."),
    num_records: Optional[int] = typer.Option(None, "--num-records", help="Records to send (over all workers)."),
    warmup: Optional[str] = typer.Option(None, "--warmup", help="Excluded from results: a time (5s, 1m; the start of --duration, so shorter than it) or a record count (10000); the records scheduled in it, whenever acknowledged."),
    warmup_records: Optional[int] = typer.Option(None, "--warmup-records", help="perf-test's (KIP-1052): the first N records are warm-up, not counted."),
    record_size: Optional[int] = typer.Option(None, "--record-size", help="Value size in bytes (default 100; not with --payload-file, whose values set the sizes)."),
    payload: str = typer.Option("random", "--payload", help="random | text | zeros."),
    payload_monotonic: bool = typer.Option(False, "--payload-monotonic", help="perf-test's: each value is the record's sequence number as text (one sequence per worker; needs --num-records)."),
    payload_file: Optional[str] = typer.Option(None, "--payload-file", help="Values from a file ('-': stdin), split by --payload-delimiter."),
    payload_delimiter: str = typer.Option("\\n", "--payload-delimiter", help="Separator in --payload-file (escapes allowed)."),
    compressibility: float = typer.Option(0.0, "--compressibility", help="0..1: fraction of each value that compresses away."),
    keys: str = typer.Option("none", "--keys", help="none | seq | random:N | file:F."),
    headers: int = typer.Option(0, "--headers", help="Extra headers per record."),
    properties: list[str] = typer.Option([], "-X", help="Producer property name=value (Kafka names, or librdkafka's where they mean the same; repeatable)."),
    producer_props: list[str] = typer.Option([], "--producer-props", "--command-property", metavar="NAME=VALUE...", help="perf-test's spelling of -X (and KIP-1147's): one or more name=value after the flag."),
    producer_config: list[str] = typer.Option([], "--producer-config", "--producer.config", "--command-config", metavar="FILE", help="Java .properties file of producer properties (perf-test: --producer.config; KIP-1147: --command-config)."),
    workers: Optional[int] = typer.Option(None, "--workers", help="Worker processes (default: cores - 1 when the broker is on this host, else one per core; at most 4 per core)."),
    hdr_out: Optional[Path] = typer.Option(None, "--hdr-out", help="Write the HdrHistogram interval log (.hlog)."),
    json_out: Optional[Path] = typer.Option(None, "--json-out", help="Write the summary JSON."),
    interval: str = typer.Option("1s", "--interval", help="Time between interval reports: 250ms, 1s, 5s."),
    verify: bool = typer.Option(False, "--verify", help="Read the produced range back (records acknowledged without an offset, acks=0 or a retry answered DUPLICATE_SEQUENCE_NUMBER: from each partition's log end before the run); report lost, duplicated, reordered records, and records reported failed or abandoned that are in the log anyway."),
    quiet: bool = typer.Option(False, "--quiet", help="Print only the summary."),
    no_id_headers: bool = typer.Option(False, "--no-id-headers", help="Do not add the 24-byte kctl identity header (run, worker, sequence, intended time)."),
    seed: int = typer.Option(0, "--seed", help="Seed for payloads and keys."),
    spin_ms: float = typer.Option(0.0, "--spin-ms", help="With --rate: each worker polls instead of sleeping for the last N ms before a record is due (a sleeping thread can wake milliseconds late on a small or virtual host). Costs CPU: a whole core per worker once records are due less than N ms apart. 0: sleep until due."),
    transaction_duration_ms: Optional[int] = typer.Option(None, "--transaction-duration-ms", help="Transactions, as kafka-producer-perf-test: commit every N ms (default 3000 when transactional.id is set; sets transactional.id to perf-test's default when it is not). With several workers each uses <transactional.id>-<worker>. A record counts as acked when its transaction commits (with its acknowledgement's latency); one of an aborted transaction counts failed (TRANSACTION_ABORTED). A commit waits at most max.block.ms; a stop (Ctrl-C, SIGTERM) during it ends the wait within the stop grace (5 s)."),
    transactional_id: Optional[str] = typer.Option(None, "--transactional-id", help="perf-test's spelling of -X transactional.id=ID."),
    consume: bool = typer.Option(False, "--consume", help="Also consume the run as it goes: the e2e clock (consumed - intended send time) beside the other three."),
    consumers: Optional[int] = typer.Option(None, "--consumers", help="Consumer processes with --consume (default 1; at most one per partition)."),
    consumer_property: list[str] = typer.Option([], "--consumer-property", metavar="NAME=VALUE", help="Consumer property with --consume (fetch.min.bytes, fetch.max.wait.ms, isolation.level, ...; repeatable)."),
    consumer_config: list[str] = typer.Option([], "--consumer-config", metavar="FILE", help="Java .properties file of consumer properties with --consume."),
    drain_timeout: Optional[str] = typer.Option(None, "--drain-timeout", help="With --consume: how long the consumers may read on after the producers finish (default 30s)."),
    clock_server: Optional[str] = typer.Option(None, "--clock-server", metavar="[HOST:]PORT", help="Answer clock-offset exchanges here, for 'kctl consume --clock-peer' on another host."),
    spark: bool = typer.Option(False, "--spark", help="Run the workers as Spark tasks (needs kctl[spark])."),
    master: Optional[str] = typer.Option(None, "--master", help="Spark master URL with --spark (default local[*]; refused without --spark)."),
    tasks: Optional[int] = typer.Option(None, "--tasks", help="Spark tasks with --spark (default: --workers, else the cluster's slots; refused without --spark)."),
) -> None:
    """Load-test a cluster: open-loop rate schedule, three latency clocks, live stats.

    kafka-producer-perf-test's spellings work too: --throughput (-1: as fast as possible),
    --producer-props a=1 b=2, --producer.config FILE, their KIP-1147 names --command-property
    and --command-config, --warmup-records N and --payload-monotonic. The last line on stdout
    is perf-test's closing line (then --verify's, when asked); the line before it names the
    latency clock.
    """
    check_outputs(files={"--hdr-out": hdr_out, "--json-out": json_out})
    if warmup_records is not None:
        if warmup is not None:
            raise ConfigError("give --warmup or --warmup-records, not both")
        if warmup_records < 0:
            raise ConfigError(f"--warmup-records must not be negative, not {warmup_records}")
        if num_records is not None and warmup_records >= num_records:
            raise ConfigError("--warmup-records must be fewer than --num-records (as in perf-test)")
        warmup = str(warmup_records) if warmup_records else None
    if payload_monotonic:
        payload = "monotonic"
    if not spark and (master is not None or tasks is not None):
        raise ConfigError(f"{'--master' if master is not None else '--tasks'} goes with --spark "
                          f"(add --spark to run the workers as Spark tasks)")
    use_spark = spark
    records_per_s = _perf_test_rate(throughput, rate)
    if rate is not None and rate.strip().lower() != "max" and records_per_s == 0:
        raise ConfigError(f"--rate {rate} would never send; use --rate max (or leave it out) for "
                          f"as fast as possible")
    bytes_per_s = parse_byte_rate(rate_bytes, "--rate-bytes")
    if rate_bytes is not None and bytes_per_s == 0:
        raise ConfigError(f"--rate-bytes {rate_bytes} would never send; leave it out for as fast as possible")
    options = ProduceOptions(
        bootstrap=bootstrap_server, topic=topic, partitions=partitions,
        replication_factor=replication_factor, create_topic=not no_create_topic,
        rate=records_per_s, rate_bytes=bytes_per_s,
        duration=duration, num_records=num_records, warmup=warmup,
        record_size=100 if record_size is None else record_size, record_size_given=record_size is not None,
        payload=payload, payload_file=payload_file,
        payload_delimiter=payload_delimiter, compressibility=compressibility, keys=keys,
        headers=headers, properties=tuple(properties) + tuple(producer_props),
        producer_config=tuple(producer_config),
        workers=tasks if use_spark and tasks is not None else workers,
        workers_reason="--tasks" if use_spark and tasks is not None else "--workers", spark=use_spark,
        interval=parse_duration(interval, "--interval"), verify=verify,
        id_headers=not no_id_headers, seed=seed, transaction_duration_ms=transaction_duration_ms,
        transactional_id=transactional_id, consume=consume, consumers=consumers,
        consumer_properties=tuple(consumer_property), consumer_config=tuple(consumer_config),
        drain_timeout=drain_timeout, clock_server=_clock_address(clock_server), spin_ms=spin_ms)
    plan = prepare(options)
    run_factory = None
    if use_spark:
        from kctl.spark.load import slot_tasks, spark_run_factory   # imports pyspark only here
        if options.workers is None:
            # One task per slot: asked of the cluster once every option is checked.
            count = slot_tasks(master)
            plan = prepare(replace(options, workers=count.count, workers_reason=count.reason))
        else:
            # The tasks must fit the cluster's slots at once (a barrier stage): refused
            # before the run has any effect (no topic created, no line printed).
            from kctl.spark.session import check_barrier_slots, spark_session
            check_barrier_slots(spark_session(master), options.workers)
        run_factory = spark_run_factory(master)
    out = stdout_console()
    err = stderr_console()
    live_view = out.is_terminal and not quiet
    for w in plan.warnings:
        err.print(f"[yellow]warning:[/] {w}", highlight=False)

    def on_event(message: str) -> None:
        if not quiet:
            err.print(message, highlight=False)

    live: Live | None = None
    consume_stats: list = []

    def consume_state():
        return consume_stats[0].snapshot(time.time_ns()) if consume_stats else None

    def on_start(run) -> None:
        nonlocal live
        if live_view:
            live = Live(ProduceDashboard(lambda: run.stats.snapshot(time.time_ns()),
                                         consume_fn=consume_state if consume else None),
                        console=out, refresh_per_second=4, transient=True)
            live.start()

    lag = ScheduleLag(plan.spec_args["rate"])

    def on_round(stats, closed: int) -> None:
        snapshot = stats.snapshot(time.time_ns())
        if not live_view and not quiet:
            print(plain_line(snapshot, consume_state()), flush=True)
        if (behind := lag.step(snapshot)) is not None:
            err.print(f"[yellow]warning:[/] {behind}", highlight=False)

    # Ctrl-C, and SIGTERM taken as Ctrl-C (cli.py, commands/_stop.py), stop the run: the
    # workers end their schedule and report every record, the summary is written, exit 130.
    # A second stop shortens that stop (load/stop.py) but the summary is still written.
    with later_stops_hurry():
        try:
            outcome = execute(plan, on_event=on_event, on_round=on_round, on_start=on_start,
                              hdr_out=str(hdr_out) if hdr_out else None,
                              on_consume_start=consume_stats.append,
                              **({"run_factory": run_factory} if run_factory else {}))
        finally:
            if live is not None:
                live.stop()
        summary = outcome.summary
        json_error = None
        if json_out:
            try:
                json_out.write_text(json.dumps(summary.to_json(), indent=2, sort_keys=False) + "\n")
            except OSError as e:
                # Checked before the run, yet it can still fail (disk full, removed directory):
                # the summary below is printed all the same, then this line, exit 2.
                json_error = f"--json-out {json_out}: cannot be written ({e.strerror or e})"
        if out.is_terminal:
            out.print(summary_renderable(summary))
        # perf-test's closing line, last on stdout (scripts take it with tail -1); the clock
        # its latencies come from on the line before.
        e2e = summary.latency.get("e2e")
        if e2e is not None:
            print(f"e2e: p50 {e2e.p50_ms:.3f} ms, p99 {e2e.p99_ms:.3f} ms, p99.9 {e2e.p999_ms:.3f} ms, "
                  f"max {e2e.max_ms:.3f} ms, {e2e.count} records consumed, {e2e.negative or 0} negative")
        if (line := spark_start_line(summary)) is not None:
            print(line)
        print(clock_line(summary))
        print(summary_line(summary), flush=True)
        if json_error is not None:
            print(f"kctl: error: {json_error}", file=sys.stderr, flush=True)
        if _warmup_took_all(summary, plan):
            err.print(f"[yellow]warning:[/] the warm-up (--warmup {plan.options.warmup}) covered the whole "
                      f"run: no steady-state records to report; give more --num-records or a shorter --warmup",
                      highlight=False)
        if outcome.result.interrupted:
            # The summary (and --json-out, --hdr-out) are written; the status says the run was cut short.
            if summary.verify_error is not None:
                print(f"kctl: error: {summary.verify_error}", file=sys.stderr, flush=True)
            if outcome.verify is not None:
                print(verify_line(outcome.verify, acks=plan.config.acks), flush=True)
            err.print(interrupted_line(summary))
            if summary.unaccounted:
                err.print(no_verdict_line(summary.unaccounted, spark=run_factory is not None))
            sys.exit(EXIT_INTERRUPTED)
        counts = summary.counts
        failures = outcome.result.failures
        if failures:
            if counts.failed:
                err.print(failed_line(counts), highlight=False)
            first = sorted(failures.items())[0]
            raise KctlError(f"worker {first[0]} failed: {first[1].splitlines()[0]}")
        status = 0
        if summary.verify_error is not None:
            # The run's summary (and --json-out) stand; the read back failed: one line, exit 2.
            print(f"kctl: error: {summary.verify_error}", file=sys.stderr, flush=True)
            status = 2
        if outcome.verify is not None:
            v = outcome.verify
            print(verify_line(v, acks=plan.config.acks))
            if not v.ok or v.expected == 0:
                status = 1
        if counts.failed:
            err.print(failed_line(counts), highlight=False)
            status = status or 1
        if json_error is not None:
            status = status or 2
        if status:
            sys.exit(status)


def interrupted_line(summary: RunSummary) -> str:
    """What a stop cut short: the run, or its set-up (nothing was sent), or its --verify."""
    where = summary.run.stopped_in
    if where == "set-up":
        return "interrupted: stopped before the run started (in its set-up): nothing was sent"
    if where == "verify":
        return "interrupted: the run had ended; its --verify was stopped before a verdict"
    return "interrupted: the run was stopped early; the summary covers what ran"


def failed_line(counts: Counts) -> str:
    """How many records failed, by error (``TRANSACTION_ABORTED`` / ``TRANSACTION_NOT_COMMITTED``:
    acknowledged in a transaction that never committed)."""
    by_error = ", ".join(f"{name} x{n}" for name, n in counts.failed_by_error.items())
    return f"{counts.failed} record(s) failed: {by_error}"


def _warmup_took_all(summary, plan) -> bool:
    """A warm-up was asked for and no record was left after it (a run at full speed that
    --num-records ended inside the --warmup time)."""
    return bool(plan.options.warmup) and summary.counts.acked == 0 and summary.counts.scheduled > 0 \
        and not summary.run.interrupted


_CLOCK_FORM = "[HOST:]PORT with PORT 0..65535 (e.g. 7079 or 0.0.0.0:7079; 0: a free port, printed)"


def _clock_address(text: str | None) -> str | None:
    """``--clock-server PORT`` listens on every interface; ``HOST:PORT`` on one."""
    if text is None:
        return None
    host, sep, port = text.strip().rpartition(":")
    if not (port.isascii() and port.isdigit()) or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--clock-server must be {_CLOCK_FORM}, not {text!r}")
    return f"{host}:{int(port)}" if sep else f"0.0.0.0:{int(port)}"


def register(app: typer.Typer) -> None:
    app.command("produce")(produce)
