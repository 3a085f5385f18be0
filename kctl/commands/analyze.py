"""kctl analyze: captures -> Parquet tables + Spark SQL summaries (thin: options -> kctl.spark.analyze -> render)."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from kctl.errors import ConfigError


def _table(title: str, rows: list[dict], columns: list[str]) -> Table:
    t = Table(title=title, title_justify="left")
    for c in columns:
        t.add_column(c, justify="left" if c in ("api_name", "topic", "direction", "client_id", "error") else "right")
    for r in rows:
        t.add_row(*[_cell(r.get(c)) for c in columns])
    return t


def _cell(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, (float, Decimal)):
        return f"{float(v):,.3f}"
    return str(v)


def analyze(
    files: list[Path] = typer.Argument(..., help="pcap or pcapng capture files."),
    out_dir: Path = typer.Option(..., "--out", help="Directory for the Parquet tables requests/ and partitions/."),
    master: Optional[str] = typer.Option(None, "--master", help="Spark master URL (default local[*])."),
    port: list[str] = typer.Option(["9092"], "--port", "-p",
                                   help="Broker port (repeatable); 'auto' guesses from the traffic."),
    split_mb: int = typer.Option(64, "--split-mb", min=1, help="Split captures larger than this across tasks (by TCP connection)."),
    bucket: str = typer.Option("1s", "--bucket", help="Length of a throughput bucket: 500ms, 1s, 1m."),
    top: int = typer.Option(10, "--top", help="Top clients shown."),
    json_out: bool = typer.Option(False, "--json", help="Print the summaries as one JSON object."),
) -> None:
    """Decode captures in parallel on Spark into Parquet; print latency, throughput, client and error summaries."""
    from kctl.commands.decode import _ports
    from kctl.inspect.report import dumps, format_ts
    from kctl.spark.analyze import analyze as run_analyze
    from kctl.quantities import parse_duration
    from kctl.spark.session import spark_session
    from kctl.ui.console import stdout_console
    bucket_s = parse_duration(bucket, "--bucket")
    if bucket_s <= 0:
        raise ConfigError(f"--bucket must be longer than 0, not {bucket!r}")
    missing = [str(f) for f in files if not f.exists()]
    if missing:
        raise ConfigError(f"no such capture: {', '.join(missing)}")
    ports = _ports(port, files)
    spark = spark_session(master, app_name="kctl analyze")
    res = run_analyze([str(f) for f in files], ports, str(out_dir), spark=spark,
                      split_bytes=split_mb << 20, bucket_s=bucket_s, top=top)
    out = stdout_console(highlight=False)
    if json_out:
        out.print(dumps(res.to_dict()), markup=False)
        return
    out.print(f"{res.requests} request/response rows, {res.partitions} partition rows from "
              f"{len(files)} capture(s) in {res.shards} task(s); Parquet in {res.out}/requests and {res.out}/partitions")
    lat = [dict(r, **{k: v for k, v in (r["latency_ms"] or {}).items()}) for r in res.latency]
    out.print(_table("Latency per API (ms)", lat, ["api_name", "requests", "responses", "request_bytes",
                                                   "response_bytes", "p50", "p90", "p99", "p99.9", "p100"]))
    tp = [dict(r, t=format_ts(r["bucket_ns"])) for r in res.throughput]
    out.print(_table(f"Throughput per topic ({bucket_s:g} s buckets)", tp,
                     ["topic", "direction", "t", "records", "bytes", "records_per_s", "mb_per_s"]))
    out.print(_table("Top clients by bytes", res.clients,
                     ["client_id", "connections", "requests", "bytes", "request_bytes", "response_bytes"]))
    out.print(_table("Errors by name", res.errors, ["error", "count"]) if res.errors else "no errors")


def register(app: typer.Typer) -> None:
    app.command("analyze")(analyze)
