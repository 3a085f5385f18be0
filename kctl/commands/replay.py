"""kctl replay: produce a dataset (Parquet/JSON/CSV) from Spark executors (thin: options -> kctl.spark.replay)."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Optional

import typer

from kctl.commands._stop import EXIT_INTERRUPTED
from kctl.errors import ConfigError
from kctl.commands._output import check_outputs


def replay(
    dataset: str = typer.Argument(..., help="Parquet, JSON or CSV file or directory."),
    topic: str = typer.Option(..., "-t", "--topic", help="Topic; created when missing."),
    bootstrap_server: Optional[str] = typer.Option(
        None, "-b", "--bootstrap-server", help="Brokers (host:port,...). None: start the embedded broker."),
    fmt: Optional[str] = typer.Option(None, "--format", help="parquet | json | csv (default: from the name)."),
    key_col: Optional[str] = typer.Option(None, "--key-col", help="Column for the record key (default: no key): binary as is, any other scalar as UTF-8 text (not a struct, map or array); a null cell is a null key."),
    value_col: Optional[str] = typer.Option(None, "--value-col", help="Column for the value (default: the whole row as JSON); a null cell is a null value (a tombstone)."),
    value_format: str = typer.Option("json", "--value-format", help="json | raw."),
    rate: Optional[str] = typer.Option(None, "--rate", help="Records/s over all tasks (5000, 5k), or max (the default)."),
    master: Optional[str] = typer.Option(None, "--master", help="Spark master URL (default local[*])."),
    tasks: Optional[int] = typer.Option(None, "--tasks", help="Producing tasks (default: the cluster's slots)."),
    partitions: int = typer.Option(6, "--partitions", help="Partitions for a topic kctl creates."),
    properties: list[str] = typer.Option([], "-X", help="Producer property name=value (Kafka names; repeatable)."),
    producer_config: list[str] = typer.Option([], "--producer-config", help="Java .properties file of producer properties."),
    hdr_out: Optional[Path] = typer.Option(None, "--hdr-out", help="Write the HdrHistogram interval log (.hlog)."),
    json_out: Optional[Path] = typer.Option(None, "--json-out", help="Write the summary JSON."),
    interval: str = typer.Option("1s", "--interval", help="Time between interval reports: 250ms, 1s, 5s."),
    verify: bool = typer.Option(False, "--verify", help="Read the topic back; report lost, duplicated, reordered records."),
    quiet: bool = typer.Option(False, "--quiet", help="Print only the summary."),
) -> None:
    """Produce the rows of a dataset to a topic from Spark executors, reported like kctl produce."""
    import time

    from kctl.load.produce import ProduceOptions, execute, prepare
    from kctl.commands.produce import interrupted_line
    from kctl.load.stop import later_stops_hurry
    from kctl.quantities import parse_duration, parse_rate
    from kctl.topics import validate_topic_name
    from kctl.spark.replay import FORMATS, load_records, replay_run_factory
    from kctl.load.worker_count import WorkerCount
    from kctl.spark.load import slot_tasks
    from kctl.spark.session import check_barrier_slots, check_master, spark_session
    from kctl.ui.console import stderr_console
    from kctl.ui.produce_view import (clock_line, no_verdict_line, plain_line, spark_start_line,
                                      summary_line, verify_line)
    err = stderr_console()
    # Every value is checked before Spark starts.
    check_outputs(files={"--hdr-out": hdr_out, "--json-out": json_out})
    validate_topic_name(topic)
    rate_per_s = parse_rate(rate, "--rate")
    interval_s = parse_duration(interval, "--interval")
    check_master(master)
    if not Path(dataset).exists() and "://" not in dataset:
        raise ConfigError(f"no such dataset: {dataset}")
    if fmt is not None and fmt not in FORMATS:
        raise ConfigError(f"--format {fmt!r}: expected {', '.join(FORMATS)}")
    if value_format not in ("json", "raw"):
        raise ConfigError(f"--value-format must be json or raw, not {value_format!r}")
    if value_format == "raw" and value_col is None:
        raise ConfigError("--value-format raw needs --value-col (a whole row has no raw form)")
    if tasks is not None and tasks < 1:
        raise ConfigError(f"--tasks must be at least 1, not {tasks}")

    def options(count: int, workers: int, reason: str) -> ProduceOptions:
        return ProduceOptions(
            bootstrap=bootstrap_server, topic=topic, partitions=partitions, rate=rate_per_s,
            num_records=count, properties=tuple(properties), producer_config=tuple(producer_config),
            workers=workers, workers_reason=reason, interval=interval_s, verify=verify,
            spark=True, payload="zeros", record_size=0)
    # The producer options (-X, --producer-config, --partitions...) too, with a stand-in row
    # count and task count: the real ones are known once Spark has read the dataset.
    prepare(options(1, tasks or 1, "--tasks"))
    spark = spark_session(master, app_name="kctl replay")
    records, count = load_records(spark, dataset, fmt, key_col=key_col, value_col=value_col,
                                  value_format=value_format)
    if count == 0:
        raise ConfigError(f"{dataset}: no rows to replay")
    chosen = WorkerCount(tasks, "--tasks") if tasks is not None else slot_tasks(master)
    n = min(chosen.count, count)
    reason = chosen.reason if n == chosen.count else f"{chosen.reason}, at most one per row"
    # The tasks must fit the cluster's slots at once (a barrier stage): refused before the
    # run has any effect (no topic created, no line printed).
    check_barrier_slots(spark, n)
    plan = prepare(options(count, n, reason))

    def on_event(message: str) -> None:
        if not quiet:
            err.print(message, highlight=False)

    def on_round(stats, closed: int) -> None:
        if not quiet:
            print(plain_line(stats.snapshot(time.time_ns())), flush=True)

    # A second stop shortens the stop (load/stop.py) but the summary is still written.
    with later_stops_hurry():
        on_event(f"replaying {count} rows of {dataset} with {n} Spark task(s)")
        outcome = execute(plan, on_event=on_event, on_round=on_round,
                          hdr_out=str(hdr_out) if hdr_out else None,
                          run_factory=replay_run_factory(records, keyed=key_col is not None, master=master))
        summary = replace(outcome.summary, config=dict(
            outcome.summary.config, dataset=dataset, key_col=key_col, value_col=value_col,
            value_format=value_format, record_size=None, payload="dataset",
            keys=f"column:{key_col}" if key_col is not None else "none"))
        if json_out:
            json_out.write_text(json.dumps(summary.to_json(), indent=2) + "\n")
        if (line := spark_start_line(summary)) is not None:
            print(line)
        print(clock_line(summary))
        print(summary_line(summary), flush=True)
        if outcome.result.interrupted:
            # As kctl produce: the tasks were stopped and the summary is written, then 130.
            if summary.verify_error is not None:
                print(f"kctl: error: {summary.verify_error}", file=sys.stderr, flush=True)
            if outcome.verify is not None:
                print(verify_line(outcome.verify, acks=plan.config.acks), flush=True)
            err.print("interrupted: the Spark tasks were stopped; the summary covers what ran"
                      if summary.run.stopped_in == "run" else interrupted_line(summary))
            if summary.unaccounted:
                err.print(no_verdict_line(summary.unaccounted, spark=True))   # replay runs on Spark
            sys.exit(EXIT_INTERRUPTED)
        if summary.verify_error is not None:
            # As kctl produce: the summary stands; the read back failed: one line, exit 2.
            print(f"kctl: error: {summary.verify_error}", file=sys.stderr, flush=True)
            sys.exit(2)
        if outcome.verify is not None:
            v = outcome.verify
            print(verify_line(v, acks=plan.config.acks))
            if not v.ok:
                sys.exit(1)


def register(app: typer.Typer) -> None:
    app.command("replay")(replay)
