"""kctl produce: load-test a cluster (thin: options -> kctl.load.produce -> render)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.live import Live

from kctl.errors import KctlError
from kctl.load.produce import ProduceOptions, execute, prepare
from kctl.ui.produce_view import ProduceDashboard, plain_line, summary_line, summary_renderable


def produce(
    bootstrap_server: Optional[str] = typer.Option(
        None, "-b", "--bootstrap-server", help="Brokers (host:port,...). None: start the embedded broker."),
    topic: str = typer.Option("kctl-perf", "-t", "--topic", help="Topic; created when missing."),
    partitions: int = typer.Option(6, "--partitions", help="Partitions for a topic kctl creates."),
    replication_factor: int = typer.Option(1, "--replication-factor", help="Replication for a topic kctl creates."),
    no_create_topic: bool = typer.Option(False, "--no-create-topic", help="Fail instead of creating a missing topic."),
    rate: float = typer.Option(0.0, "--rate", help="Records/s over all workers; 0 = as fast as possible."),
    rate_bytes: float = typer.Option(0.0, "--rate-bytes", help="Payload bytes/s instead of --rate."),
    duration: Optional[str] = typer.Option(None, "--duration", help="Run length: 30s, 2m, 500ms (default 10s)."),
    num_records: Optional[int] = typer.Option(None, "--num-records", help="Records to send (over all workers)."),
    warmup: Optional[str] = typer.Option(None, "--warmup", help="Excluded from results: a time (5s) or a record count (10000)."),
    record_size: int = typer.Option(100, "--record-size", help="Value size in bytes."),
    payload: str = typer.Option("random", "--payload", help="random | text | zeros."),
    payload_file: Optional[str] = typer.Option(None, "--payload-file", help="Values from a file, split by --payload-delimiter."),
    payload_delimiter: str = typer.Option("\\n", "--payload-delimiter", help="Separator in --payload-file (escapes allowed)."),
    compressibility: float = typer.Option(0.0, "--compressibility", help="0..1: fraction of each value that compresses away."),
    keys: str = typer.Option("none", "--keys", help="none | seq | random:N | file:F."),
    headers: int = typer.Option(0, "--headers", help="Extra headers per record."),
    properties: list[str] = typer.Option([], "-X", help="Producer property name=value (Kafka names; repeatable)."),
    producer_config: list[str] = typer.Option([], "--producer-config", help="Java .properties file of producer properties."),
    workers: Optional[int] = typer.Option(None, "--workers", help="Worker processes (default: cores - 1 when the broker is on this host, else one per core)."),
    hdr_out: Optional[Path] = typer.Option(None, "--hdr-out", help="Write the HdrHistogram interval log (.hlog)."),
    json_out: Optional[Path] = typer.Option(None, "--json-out", help="Write the summary JSON."),
    interval: float = typer.Option(1.0, "--interval", help="Seconds between interval reports."),
    verify: bool = typer.Option(False, "--verify", help="Read the produced range back; report lost, duplicated, reordered records."),
    quiet: bool = typer.Option(False, "--quiet", help="Print only the summary."),
    no_id_headers: bool = typer.Option(False, "--no-id-headers", help="Do not add the 24-byte kctl identity header (run, worker, sequence, intended time)."),
    seed: int = typer.Option(0, "--seed", help="Seed for payloads and keys."),
    spark: bool = typer.Option(False, "--spark", help="Run the workers as Spark tasks (needs kctl[spark])."),
    master: Optional[str] = typer.Option(None, "--master", help="Spark master URL with --spark (default local[*])."),
    tasks: Optional[int] = typer.Option(None, "--tasks", help="Spark tasks with --spark (default: --workers, else the cluster's slots)."),
) -> None:
    """Load-test a cluster: open-loop rate schedule, three latency clocks, live stats."""
    plan = prepare(ProduceOptions(
        bootstrap=bootstrap_server, topic=topic, partitions=partitions,
        replication_factor=replication_factor, create_topic=not no_create_topic, rate=rate,
        rate_bytes=rate_bytes, duration=duration, num_records=num_records, warmup=warmup,
        record_size=record_size, payload=payload, payload_file=payload_file,
        payload_delimiter=payload_delimiter, compressibility=compressibility, keys=keys,
        headers=headers, properties=tuple(properties), producer_config=tuple(producer_config),
        workers=tasks if spark and tasks is not None else workers, interval=interval, verify=verify,
        id_headers=not no_id_headers, seed=seed))
    run_factory = None
    if spark or master or tasks is not None:
        from kctl.spark.load import spark_run_factory   # imports pyspark only here
        run_factory = spark_run_factory(master, explicit_tasks=tasks is not None or workers is not None)
    out = Console()
    err = Console(stderr=True)
    live_view = out.is_terminal and not quiet
    for w in plan.warnings:
        err.print(f"[yellow]warning:[/] {w}", highlight=False)

    def on_event(message: str) -> None:
        if not quiet:
            err.print(message, highlight=False)

    live: Live | None = None
    state: dict = {}

    def on_start(run) -> None:
        nonlocal live
        if live_view:
            live = Live(ProduceDashboard(lambda: run.stats.snapshot(time.time_ns())),
                        console=out, refresh_per_second=4, transient=True)
            live.start()

    def on_round(stats, closed: int) -> None:
        if not live_view and not quiet:
            print(plain_line(stats.snapshot(time.time_ns())), flush=True)

    try:
        outcome = execute(plan, on_event=on_event, on_round=on_round, on_start=on_start,
                          hdr_out=str(hdr_out) if hdr_out else None,
                          **({"run_factory": run_factory} if run_factory else {}))
    finally:
        if live is not None:
            live.stop()
    summary = outcome.summary
    if json_out:
        json_out.write_text(json.dumps(summary.to_json(), indent=2, sort_keys=False) + "\n")
    if out.is_terminal:
        out.print(summary_renderable(summary))
    else:
        print(summary_line(summary))
    if outcome.result.interrupted:
        err.print("interrupted: the schedule was stopped early; the summary covers what ran")
    failures = outcome.result.failures
    if failures:
        first = sorted(failures.items())[0]
        raise KctlError(f"worker {first[0]} failed: {first[1].splitlines()[0]}")
    status = 0
    if outcome.verify is not None:
        v = outcome.verify
        line = (f"verify: {v.expected} acknowledged, {v.found} found, {v.lost} lost, "
                f"{v.duplicated} duplicated, {v.reordered} reordered, {v.misplaced} misplaced")
        print(line)
        if not v.ok or v.expected == 0:
            status = 1
    counts = summary.counts
    if counts.failed:
        by_error = ", ".join(f"{name} x{n}" for name, n in counts.failed_by_error.items())
        err.print(f"{counts.failed} record(s) failed: {by_error}", highlight=False)
        status = 1
    if status:
        sys.exit(status)


def register(app: typer.Typer) -> None:
    app.command("produce")(produce)
