"""kctl analyze: captures -> Parquet tables + Spark SQL summaries (thin: options -> kctl.spark.analyze -> render)."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Optional

import typer
from rich.table import Table

from kctl.errors import ConfigError
from kctl.commands._output import check_outputs

if TYPE_CHECKING:
    from kctl.spark.analyze import AnalyzeResult


def _table(title: str, rows: list[dict], columns: list[str]) -> Table:
    t = Table(title=title, title_justify="left")
    for c in columns:
        t.add_column(c, justify="left" if c in ("api_name", "topic", "direction", "client_id", "error", "notice")
                     else "right")
    for r in rows:
        t.add_row(*[_cell(r.get(c)) for c in columns])
    return t


def _cell(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, (float, Decimal)):
        return f"{float(v):,.3f}"
    return str(v)


def _source(name: str, port: list[str], leg: str | None):
    """One capture as analyze reads it: located (path or URI), its broker ports, and for a
    kctl inspect capture one leg (the client leg unless ``--leg``), as ``kctl decode`` reads it."""
    from kctl.inspect.legs import LEG_CHOICES, read_legs
    from kctl.inspect.session import guess_broker_ports
    from kctl.inspect.traffic import broker_ports
    from kctl.spark.analyze import CaptureSource
    from kctl.spark.storage import locate, open_at
    capture = locate(name)

    def opener(_: object):
        return open_at(capture.location)

    def guess() -> set[int]:
        return guess_broker_ports([name], open_file=opener)
    legs = read_legs(name, open_file=opener)
    if legs is None:
        if leg is not None:
            raise ConfigError(f"--leg {leg}: {name} is not a kctl inspect capture (it names no "
                              "legs); leave --leg out to read every packet")
        return CaptureSource(capture, tuple(sorted(broker_ports(port, guess))))
    chosen = LEG_CHOICES[leg or "client"]
    ports = broker_ports(port, lambda: set(legs.ports_for(chosen)) or guess())
    return CaptureSource(capture, tuple(sorted(ports)), tuple(sorted(legs.interfaces_for(chosen))))


def analyze(
    files: list[str] = typer.Argument(..., help="pcap or pcapng captures: paths, or URIs the cluster's "
                                                "tasks open (file://, s3://, hdfs://, ...)."),
    out_dir: str = typer.Option(..., "--out", help="Directory (or URI) for the Parquet tables requests/ and partitions/."),
    master: Optional[str] = typer.Option(None, "--master", help="Spark master URL (default local[*])."),
    port: list[str] = typer.Option(["auto"], "--port", "-p",
                                   help="Broker port (repeatable); 'auto' (the default): from a kctl "
                                        "capture's legs, else guessed from the traffic."),
    leg: Optional[str] = typer.Option(None, "--leg", help="kctl inspect captures: client (default), "
                                      "upstream or both legs of the proxy."),
    split_mb: Optional[int] = typer.Option(None, "--split-mb", min=1,
                                           help="Capture megabytes per task (default: 2 tasks per task slot, 1 on a single slot; at least 4)."),
    bucket: str = typer.Option("1s", "--bucket", help="Length of a throughput bucket: 500ms, 1s, 1m."),
    top: int = typer.Option(10, "--top", help="Top clients shown."),
    json_out: bool = typer.Option(False, "--json", help="Print the summaries as one JSON object."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace the tables an earlier analyze left in --out "
                                   "(without it, an --out that holds requests/ or partitions/ is refused)."),
) -> None:
    """Decode captures in parallel on Spark into Parquet; print latency, throughput, client, error and damage (notice) summaries."""
    from kctl.inspect.legs import LEG_CHOICES
    from kctl.inspect.traffic import no_kafka_traffic, tcp_port_bytes
    from kctl.quantities import parse_duration
    from kctl.spark.analyze import analyze as run_analyze
    from kctl.spark.session import check_master, exit_now, require_pyspark, spark_session
    from kctl.spark.storage import open_at
    from kctl.ui.console import stderr_console
    check_master(master)
    if top < 1:
        raise ConfigError(f"--top must be at least 1, not {top}")
    check_outputs(dirs={"--out": out_dir})
    if not overwrite:
        from kctl.spark.storage import existing_tables
        if found := existing_tables(out_dir, ("requests", "partitions")):
            raise ConfigError(f"--out {out_dir}: already holds {' and '.join(t + '/' for t in found)} "
                              "(an earlier analyze?): give --overwrite to replace them, or another --out")
    bucket_s = parse_duration(bucket, "--bucket")
    if bucket_s <= 0:
        raise ConfigError(f"--bucket must be longer than 0, not {bucket!r}")
    if leg is not None and leg not in LEG_CHOICES:
        raise ConfigError(f"--leg {leg!r}: expected client, upstream or both")
    require_pyspark()
    captures = [_source(f, port, leg) for f in files]
    spark = spark_session(master, app_name="kctl analyze", end_at_exit=True)
    res = run_analyze(captures, out_dir, spark=spark,
                      range_bytes=split_mb << 20 if split_mb else None, bucket_s=bucket_s, top=top,
                      write_mode="overwrite" if overwrite else "errorifexists")
    err = stderr_console(highlight=False)
    for d in res.damaged:
        err.print(f"kctl analyze: {d}; the frames before it are analyzed", markup=False)
    if res.requests == 0:
        from kctl.inspect.session import guess_broker_ports
        where = {c.name: c.file.location for c in captures}

        def opener(f: object):
            return open_at(where[str(f)])
        # Whether --port auto found ports or fell back to Kafka's default (read again only here).
        auto_found = "auto" in port and any(
            c.interfaces or guess_broker_ports([c.name], open_file=opener, default=None)
            for c in captures)
        err.print(no_kafka_traffic("analyze", files, {p for c in captures for p in c.broker_ports},
                                   auto="auto" in port, auto_found=auto_found,
                                   seen=tcp_port_bytes(files, open_file=opener)), markup=False)
        raise typer.Exit(1)
    _render(res, files, bucket_s, json_out)
    exit_now(spark)


def _render(res: AnalyzeResult, files: list[str], bucket_s: float, json_out: bool) -> None:
    from kctl.inspect.report import dumps, format_ts
    from kctl.ui.console import stdout_console
    out = stdout_console(highlight=False)
    if json_out:
        out.print(dumps(res.to_dict()), markup=False)
        return
    out.print(f"{res.requests} request/response rows, {res.partitions} partition rows from "
              f"{len(files)} capture(s) in {res.tasks} task(s); Parquet in {res.out}/requests and "
              f"{res.out}/partitions", markup=False)
    if res.repaired:
        out.print(f"{len(res.repaired)} connection(s) decoded again from the start of their capture "
                  "(the range readers could not agree on their frames): "
                  + "; ".join(res.repaired), markup=False)
    lat = [dict(r, **{k: v for k, v in (r["latency_ms"] or {}).items()}) for r in res.latency]
    out.print(_table("Latency per API (ms)", lat, ["api_name", "requests", "responses", "request_bytes",
                                                   "response_bytes", "p50", "p90", "p99", "p99.9", "p100"]))
    tp = [dict(r, t=format_ts(r["bucket_ns"])) for r in res.throughput]
    out.print(_table(f"Throughput per topic ({bucket_s:g} s buckets)", tp,
                     ["topic", "direction", "t", "records", "bytes", "records_per_s", "mb_per_s"]))
    out.print(_table("Top clients by bytes", res.clients,
                     ["client_id", "connections", "requests", "bytes", "request_bytes", "response_bytes"]))
    # Per API, as decode --summary counts them: NOT_LEADER_OR_FOLLOWER answering Produce is
    # not the one answering Fetch (--json also has the totals by name, "errors").
    out.print(_table("Errors per API", res.errors_by_api, ["api_name", "error", "count"])
              if res.errors_by_api else "no errors")
    # The damage kctl decode --summary reports as notices (gaps, frames cut off, bytes
    # skipped, a truncated file...), each counted once across the ranges.
    notices = [{"notice": k, "count": v} for k, v in res.notices.items()]
    out.print(_table("Notices by kind (as kctl decode --summary counts them)", notices,
                     ["notice", "count"]) if notices else "no notices")


def register(app: typer.Typer) -> None:
    app.command("analyze")(analyze)
