"""kctl analyze: captures -> Parquet tables + Spark SQL summaries (thin: options -> kctl.spark.analyze -> render)."""

from __future__ import annotations

from decimal import Decimal
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


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _broker_ports(values: list[str], guess) -> set[int]:
    ports: set[int] = set()
    for v in values:
        if v == "auto":
            ports |= guess()
            continue
        try:
            p = int(v)
        except ValueError:
            raise ConfigError(f"--port {v!r}: a port number or 'auto'") from None
        if not 0 < p < 65536:
            raise ConfigError(f"--port {p}: outside 1..65535")
        ports.add(p)
    return ports


def analyze(
    files: list[str] = typer.Argument(..., help="pcap or pcapng captures: paths, or URIs the cluster's "
                                                "tasks open (file://, s3://, hdfs://, ...)."),
    out_dir: str = typer.Option(..., "--out", help="Directory (or URI) for the Parquet tables requests/ and partitions/."),
    master: Optional[str] = typer.Option(None, "--master", help="Spark master URL (default local[*])."),
    port: list[str] = typer.Option(["auto"], "--port", "-p",
                                   help="Broker port (repeatable); 'auto' (the default) guesses from the traffic."),
    split_mb: Optional[int] = typer.Option(None, "--split-mb", min=1,
                                           help="Capture megabytes per task (default: 4 tasks per task slot, at least 4)."),
    bucket: str = typer.Option("1s", "--bucket", help="Length of a throughput bucket: 500ms, 1s, 1m."),
    top: int = typer.Option(10, "--top", help="Top clients shown."),
    json_out: bool = typer.Option(False, "--json", help="Print the summaries as one JSON object."),
) -> None:
    """Decode captures in parallel on Spark into Parquet; print latency, throughput, client and error summaries."""
    from kctl.inspect.report import dumps, format_ts
    from kctl.inspect.session import guess_broker_ports
    from kctl.quantities import parse_duration
    from kctl.spark.analyze import analyze as run_analyze, tcp_ports_seen
    from kctl.spark.session import require_pyspark, spark_session
    from kctl.spark.storage import locate, open_at
    from kctl.ui.console import stderr_console, stdout_console
    bucket_s = parse_duration(bucket, "--bucket")
    if bucket_s <= 0:
        raise ConfigError(f"--bucket must be longer than 0, not {bucket!r}")
    require_pyspark()
    captures = [locate(f) for f in files]
    where = {c.name: c.location for c in captures}
    ports = _broker_ports(port, lambda: guess_broker_ports(files, open_file=lambda f: open_at(where[str(f)])))
    spark = spark_session(master, app_name="kctl analyze")
    res = run_analyze(files, ports, out_dir, spark=spark,
                      range_bytes=split_mb << 20 if split_mb else None, bucket_s=bucket_s, top=top)
    err = stderr_console(highlight=False)
    for d in res.damaged:
        err.print(f"kctl analyze: {d}; the frames before it are analyzed", markup=False)
    if res.requests == 0:
        seen = ", ".join(f"{p} ({_size(n)})" for p, n in tcp_ports_seen(captures)[:10]) or "none"
        tried = sorted(ports)
        err.print(f"kctl analyze: no Kafka traffic found in {', '.join(files)} on port"
                  f"{'s' if len(tried) > 1 else ''} {', '.join(map(str, tried))}; TCP ports seen, "
                  f"with their payload bytes: {seen}; give the broker's with --port", markup=False)
        raise typer.Exit(1)
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
    out.print(_table("Errors by name", res.errors, ["error", "count"]) if res.errors else "no errors")


def register(app: typer.Typer) -> None:
    app.command("analyze")(analyze)
