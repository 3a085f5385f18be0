"""kctl consume: read a topic with several consumer processes, e2e latency, lag, live stats
(thin: options -> kctl.load.consume -> render)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Optional

import typer
from rich.live import Live

from kctl.commands._stop import EXIT_INTERRUPTED
from kctl.errors import ConfigError, KctlError
from kctl.commands._output import check_outputs
from kctl.load.consume import ConsumeOptions, execute, past_log_end, prepare, short_of_num_records
from kctl.quantities import parse_duration
from kctl.ui.console import stderr_console, stdout_console
from kctl.ui.consume_view import (ConsumeDashboardView, clock_text, perf_test_lines, plain_line,
                                  summary_renderable)


def consume(
    bootstrap_server: Optional[str] = typer.Option(
        None, "-b", "--bootstrap-server", help="Brokers (host:port,...). None: start the embedded broker (then --backlog is needed to have something to read)."),
    topic: str = typer.Option("kctl-perf", "-t", "--topic", help="Topic to read."),
    group: Optional[str] = typer.Option(None, "--group", help="Consume as this consumer group (JoinGroup/SyncGroup/Heartbeat, commits; each consumer's close commits and leaves within min(30 s, request.timeout.ms), as Java's close()); default: assign mode, no group."),
    consumers: Optional[int] = typer.Option(None, "--consumers", help="Consumer processes (default: cores - 1 when the broker is on this host, else one per core; assign mode: at most one per partition)."),
    start: Optional[str] = typer.Option(None, "--from", help="beginning (default; in assign mode an -X/--consumer-config auto.offset.reset decides instead when --from is not given, as Java's assign() without a seek: latest reads only new records, none fails), end, an offset, or a time: ISO 8601, @<unix ms>, -5m. With --group the positions are the group's committed offsets (committed, the default) and this says where partitions without one start: beginning|end (committed: beginning unless -X/--consumer-config set auto.offset.reset; the Java client's own default, latest, is --from end)."),
    from_latest: bool = typer.Option(False, "--from-latest", help="perf-test's spelling of --from end."),
    isolation_level: Optional[str] = typer.Option(None, "--isolation-level", help="read_uncommitted (default) or read_committed (aborted transactions are skipped)."),
    properties: list[str] = typer.Option([], "-X", help="Consumer property name=value (Kafka's names: fetch.min.bytes, fetch.max.wait.ms, max.partition.fetch.bytes, ...; repeatable)."),
    consumer_config: list[str] = typer.Option([], "--consumer-config", "--consumer.config", "--command-config", metavar="FILE", help="Java .properties file of consumer properties."),
    duration: Optional[str] = typer.Option(None, "--duration", help="Run length, --warmup included: 30s, 1m30s (default 10s without --num-records/--backlog)."),
    num_records: Optional[int] = typer.Option(None, "--num-records", "--messages", help="Stop after this many records over all consumers (perf-test: --messages). Counted in whole polls, as the Java consumer hands them out: a run can read up to consumers x max.poll.records more."),
    idle_timeout: Optional[str] = typer.Option(None, "--idle-timeout", help="Stop after this long without a record: 10s (perf-test's --timeout; the default with --num-records and no --duration)."),
    timeout_ms: Optional[int] = typer.Option(None, "--timeout", help="perf-test's spelling of --idle-timeout, in ms."),
    warmup: Optional[str] = typer.Option(None, "--warmup", help="A time excluded from the results (5s), the start of --duration (so shorter than it): its records are not counted, and the summary's rates and the perf-test line cover only the time after it (start.time = the warm-up's end, rebalance.time.ms the rejoining after it)."),
    interval: str = typer.Option("1s", "--interval", help="Time between interval reports."),
    verify: bool = typer.Option(False, "--verify", help="Check what was read: against the backlog's acknowledgements with --backlog, else each producer worker's sequence numbers (lost, duplicated, reordered), expected only where the read covers them in every partition: a partial read (--from an offset, --num-records) checks what it read."),
    backlog: Optional[int] = typer.Option(None, "--backlog", help="Write N records first (kctl produce's load path), then time the consumers reading all of them: from their common start (joined, at their positions, no Fetch before it) to the last partition's end. Unlike OMB's backlog test, nothing is written during the drain (OMB's producers keep writing, and it ends at backlogDrainRatio)."),
    record_size: Optional[int] = typer.Option(None, "--record-size", help="Value size of --backlog records (default 100; only with --backlog)."),
    partitions: Optional[int] = typer.Option(None, "--partitions", help="Partitions of a topic --backlog creates (default 6; only with --backlog)."),
    clock_peer: Optional[str] = typer.Option(None, "--clock-peer", help="host:port of 'kctl produce --clock-server' on the producers' host: measure and report the clock offset for e2e."),
    hdr_out: Optional[Path] = typer.Option(None, "--hdr-out", help="Write the HdrHistogram interval log (.hlog, tag e2e)."),
    json_out: Optional[Path] = typer.Option(None, "--json-out", help="Write the summary JSON."),
    quiet: bool = typer.Option(False, "--quiet", help="Print only the summary."),
) -> None:
    """Consume a topic: several consumer processes, e2e latency from identity headers, lag, backlog drain.

    Assign mode by default (each consumer takes its share of the partitions), or a consumer
    group with --group. The last two lines on stdout are kafka-consumer-perf-test's header
    and values line (after the e2e, backlog and verify lines; WARNING lines go to stderr).
    """
    check_outputs(files={"--hdr-out": hdr_out, "--json-out": json_out})
    if from_latest:
        if start is not None:
            raise ConfigError("give --from or --from-latest, not both")
        start = "end"
    if timeout_ms is not None:
        if idle_timeout is not None:
            raise ConfigError("give --idle-timeout or --timeout (perf-test's, in ms), not both")
        if timeout_ms <= 0:
            raise ConfigError(f"--timeout must be positive, not {timeout_ms}")
        idle_timeout = f"{timeout_ms}ms"
    plan = prepare(ConsumeOptions(
        bootstrap=bootstrap_server, topic=topic, group=group, consumers=consumers, start=start,
        isolation_level=isolation_level, properties=tuple(properties), consumer_config=tuple(consumer_config),
        duration=duration, num_records=num_records, idle_timeout=idle_timeout, warmup=warmup,
        interval=parse_duration(interval, "--interval"), verify=verify, backlog=backlog,
        record_size=record_size, partitions=partitions, clock_peer=clock_peer))
    out = stdout_console()
    err = stderr_console()
    live_view = out.is_terminal and not quiet
    for w in plan.warnings:
        err.print(f"[yellow]warning:[/] {w}", highlight=False)

    def on_event(message: str) -> None:
        if not quiet:
            err.print(message, highlight=False)

    live: Live | None = None

    def on_start(stats) -> None:
        nonlocal live
        if live_view:
            live = Live(ConsumeDashboardView(lambda: stats.snapshot(time.time_ns())), console=out,
                        refresh_per_second=4, transient=True)
            live.start()

    def on_round(stats, closed: int) -> None:
        if not live_view and not quiet:
            print(plain_line(stats.snapshot(time.time_ns())), flush=True)

    try:
        outcome = execute(plan, on_event=on_event, on_round=on_round, on_start=on_start,
                          hdr_out=str(hdr_out) if hdr_out else None)
    finally:
        if live is not None:
            live.stop()
    summary = outcome.summary
    if json_out:
        json_out.write_text(json.dumps(summary.to_json(), indent=2) + "\n")
    if out.is_terminal:
        out.print(summary_renderable(summary))
    e = summary.latency.get("e2e")
    if e is not None and not e.count:
        print(no_e2e_samples(summary))
    elif e is not None:
        print(f"e2e: p50 {e.p50_ms:.3f} ms, p99 {e.p99_ms:.3f} ms, p99.9 {e.p999_ms:.3f} ms, max {e.max_ms:.3f} ms, "
              f"{e.count} records, {e.negative or 0} negative (min {e.min_ms or 0.0:.3f} ms)")
    if not out.is_terminal and summary.clock is not None and summary.clock.samples:
        print(clock_text(summary.clock))   # --clock-peer's offset, beside the figures (the terminal's table has it)
    c = summary.counts
    if not out.is_terminal and (summary.run.mode == "group" or c.rebalances or c.commits or c.commit_failures):
        # the terminal's table has them; for a script, one line (consumers summed, as the JSON)
        print(f"group: {c.rebalances} rebalance(s) (joins completed, summed over the consumers), "
              f"{c.commits} commit(s), {c.commit_failures} failed")
    if summary.backlog is not None:
        b = summary.backlog
        print(f"backlog: {b.records} records {'drained' if b.drained else 'NOT drained'} in {b.drain_s:.3f} s "
              f"({b.records_per_s:.1f} records/s)")
    if outcome.verify is not None:
        v = outcome.verify   # before perf-test's two lines, which stay last (scripts take tail -1)
        print(f"verify: {v.expected} expected, {v.found} found, {v.lost} lost, {v.duplicated} duplicated, "
              f"{v.reordered} reordered, {v.misplaced} misplaced")
    # Warnings go to stderr (perf-test prints its WARNING on stdout; kctl keeps stdout for figures).
    past = past_log_end(summary)
    if past:
        err.print(past, highlight=False, markup=False)
    short = short_of_num_records(plan, outcome)
    if short:
        err.print(short, highlight=False, markup=False)
    for failed in summary.failed_commits:
        err.print(failed.warning(), highlight=False)
    header, values = perf_test_lines(summary, outcome.result.perf_test_times())
    print(header)
    print(values, flush=True)
    if outcome.result.interrupted:
        # The summary (and --json-out, --hdr-out) are written; the status says the run was cut short.
        err.print("interrupted: stopped before the consumers started (in the set-up): nothing was read"
                  if summary.run.stopped_in == "set-up"
                  else "interrupted: the consumers were stopped early; the summary covers what ran")
        sys.exit(EXIT_INTERRUPTED)
    failures = outcome.result.failures
    if failures:
        c, msg = sorted(failures.items())[0]
        raise KctlError(f"consumer {c} failed: {msg.splitlines()[0]}")
    status = 0
    if outcome.verify is not None:
        v = outcome.verify
        if not v.ok or v.expected == 0:
            status = 1
    if summary.backlog is not None and not summary.backlog.drained:
        status = 1
    if status:
        sys.exit(status)


def no_e2e_samples(summary) -> str:
    """The e2e line of a run without e2e samples: why there are none."""
    c = summary.counts
    if not c.records:
        return "e2e: no samples: no records were read"
    why = [f"{c.unidentified} without a kctl identity header (not written by kctl produce)"] if c.unidentified else []
    if c.foreign:
        why.append(f"{c.foreign} of another run")
    return f"e2e: no samples: of {c.records} records read, " + (", ".join(why) or "none carried an identity") + \
        "; e2e needs the send time kctl produce stamps on each record"


def register(app: typer.Typer) -> None:
    app.command("consume")(consume)
