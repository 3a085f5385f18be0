"""``kctl inspect``: a transparent Kafka proxy with live statistics, captures and fault injection."""

from __future__ import annotations

import json
import uuid
import queue
import sys
import time
from pathlib import Path

import typer

from kctl.commands._stop import sigterm_as_ctrl_c
from kctl.config import ProducerConfig, SecurityConfig, Setting, parse_assignment
from kctl.errors import ConfigError, KctlError
from kctl.commands._output import check_outputs
from kctl.inspect.faults import ErrorRewrite, FaultPlan
from kctl.inspect.proxy import (
    FrameEvent, InspectorProxy, ListenerTls, default_processors, parse_hostport)
from kctl.inspect.proxy_stats import ProcessorLost, StatsSnapshot
from kctl.quantities import parse_duration


def _describe(plan: FaultPlan) -> str:
    parts = []
    if plan.delay_ms:
        d = plan.delay_ms
        parts.append(f"delay {d[0]}-{d[1]}ms" if isinstance(d, tuple) else f"delay {d}ms")
    if plan.throttle_ms:
        parts.append(f"throttle {plan.throttle_ms}ms")
    if plan.error:
        parts.append(plan.error.describe())
    if plan.drop_rate:
        parts.append(f"drop {plan.drop_rate}")
    if plan.tiny_segments:
        parts.append(f"segments<={plan.tiny_segments}B")
    if plan.blackhole:
        parts.append("blackhole")
    if plan.lose_rate:
        limit = f" (at most {plan.lose_limit})" if plan.lose_limit is not None else ""
        what = f"reject records with {plan.lose_error}" if plan.lose_error else "lose records"
        parts.append(f"{what} {plan.lose_rate}{limit}")
    if parts and plan.seed is not None:
        parts.append(f"seed {plan.seed}")
    return ", ".join(parts)


def _secret(value: str | None, flag: str) -> str | None:
    """A password given as is, or ``@path``: the file's content (one trailing newline dropped)."""
    if value is None or not value.startswith("@"):
        return value
    try:
        text = Path(value[1:]).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{flag}: cannot read the secret file {value[1:]!r}: {e.strerror or e}") from None
    return text[:-1] if text.endswith("\n") else text


def upstream_security(properties: list[str], *, tls: bool, ca: str | None, cert: str | None,
                      key: str | None) -> SecurityConfig | None:
    """The upstream TLS settings from ``-X`` client properties (security.protocol, ssl.*), read
    as every kctl client reads them; any other property is refused (inspect uses none); the ``--upstream-*`` flags are shorthands for those
    properties and win over them. ``None`` for plaintext. The context is built here once
    (``engine.tls.context_for``) so a bad setting is one line before anything listens."""
    settings = [parse_assignment(x, "-X") for x in properties]
    for x in settings:
        # Only these reach an upstream connection; any other client property would be
        # accepted and change nothing (inspect forwards its clients' requests as they are).
        if x.name.startswith("sasl."):
            raise ConfigError(f"-X {x.name}: kctl inspect passes SASL through from its clients: "
                              "give SASL settings to the client")
        if x.name != "security.protocol" and not x.name.startswith("ssl."):
            raise ConfigError(f"-X {x.name}: kctl inspect's -X sets only its upstream connections' TLS "
                              "(security.protocol, ssl.*); give client properties to the client")
    for flag, name, value in (("--upstream-tls", "security.protocol", "SSL" if tls else None),
                              ("--upstream-ca", "ssl.ca.location", ca),
                              ("--upstream-cert", "ssl.certificate.location", cert),
                              ("--upstream-key", "ssl.key.location", key)):
        if value is not None:
            settings.append(Setting(name, value, flag))
    protocols = [str(x.value).strip().upper() for x in settings if x.name == "security.protocol"]
    if protocols and protocols[-1].startswith("SASL_"):
        raise ConfigError("kctl inspect passes SASL through from its clients: give the upstream "
                          "security.protocol as SSL or PLAINTEXT, and SASL settings to the client")
    security = ProducerConfig.from_settings(settings).security
    if not security.uses_tls:
        if any(x.split("=", 1)[0].strip().startswith("ssl.") for x in properties) or ca or cert or key:
            raise ConfigError("upstream ssl.* settings given without TLS: add --upstream-tls "
                              "(or -X security.protocol=SSL)")
        return None
    from kctl.engine.tls import context_for
    context_for(security)
    return security


def inspect(
    listen: str = typer.Option("127.0.0.1:9092", "--listen", help="HOST:PORT of the first listener."),
    upstream: list[str] = typer.Option(..., "--upstream", help="Broker HOST:PORT to front (repeatable)."),
    capture: str = typer.Option(None, "--capture", help="Write a pcapng capture of both legs here."),
    seed: int = typer.Option(None, "--seed", help="Seed for the fault choices (reproducible runs)."),
    delay_ms: str = typer.Option(None, "--delay-ms", help="Delay responses: MS or LO-HI."),
    throttle_ms: int = typer.Option(0, "--throttle-ms", min=0,
                                    help="throttle_time_ms put into Produce/Fetch responses."),
    inject_error: str = typer.Option(None, "--inject-error",
                                     help="NAME[@API,...][:RATE] Kafka error put into responses: Produce "
                                          "(default), Fetch and ListOffsets each partition at RATE; "
                                          "FindCoordinator, "
                                          "InitProducerId, AddPartitionsToTxn, EndTxn each response at "
                                          "RATE (all its error codes), e.g. NOT_LEADER_OR_FOLLOWER:0.01, "
                                          "CONCURRENT_TRANSACTIONS@EndTxn:0.5; FindCoordinator/transaction "
                                          "(or /group, /share) hits only lookups of that key type."),
    drop_rate: float = typer.Option(0.0, "--drop-rate", min=0.0, max=1.0,
                                    help="Probability of cutting a connection mid-response."),
    tiny_segments: int = typer.Option(0, "--tiny-segments", min=0,
                                      help="Deliver responses in writes of at most N bytes."),
    blackhole: bool = typer.Option(False, "--blackhole", help="Never answer (requests still go upstream)."),
    lose_records: str = typer.Option(None, "--lose-records",
                                     help="RATE[:LIMIT] Produce requests lose one partition's batch, "
                                          "yet it is acknowledged (data loss), e.g. 1:1. Only from a "
                                          "partition with a batch already acknowledged through the "
                                          "proxy (the forged offset follows it): a partition's first "
                                          "batch always gets through."),
    reject_records: str = typer.Option(None, "--reject-records",
                                       help="NAME:RATE[:LIMIT] Produce requests have one partition's batch "
                                            "refused with error NAME without the broker writing it, "
                                            "e.g. OUT_OF_ORDER_SEQUENCE_NUMBER:1:1. As --lose-records, "
                                            "never a partition's first batch. Not with --lose-records "
                                            "(one or the other per run)."),
    virtual_brokers: int = typer.Option(1, "--virtual-brokers", min=1,
                                        help="Present the one upstream broker as N brokers."),
    show: str = typer.Option("stats", "--show", help="stats (live view) or frames (one line per frame)."),
    duration: str = typer.Option(None, "--duration", help="Stop after this long: 500ms, 5s, 1m30s, or seconds (at least 1ms; default: until Ctrl-C)."),
    listen_tls_cert: str = typer.Option(None, "--listen-tls-cert",
                                        help="Terminate TLS from clients with this PEM certificate chain."),
    listen_tls_key: str = typer.Option(None, "--listen-tls-key",
                                       help="The listener certificate's PEM key (if not in the cert file)."),
    listen_tls_key_password: str = typer.Option(
        None, "--listen-tls-key-password",
        help="The listener key's password when it is encrypted, or @file (safer: argv is visible to "
             "other users). The upstream key's is -X ssl.key.password."),
    upstream_tls: bool = typer.Option(False, "--upstream-tls",
                                      help="Speak TLS to the brokers (= -X security.protocol=SSL)."),
    upstream_ca: str = typer.Option(None, "--upstream-ca", help="CA file for the brokers' certificates "
                                    "(= -X ssl.ca.location; default: the system's CAs)."),
    upstream_cert: str = typer.Option(None, "--upstream-cert",
                                      help="Client certificate for the brokers (= -X ssl.certificate.location)."),
    upstream_key: str = typer.Option(None, "--upstream-key",
                                     help="Its key (= -X ssl.key.location; an encrypted key's "
                                          "password: -X ssl.key.password=@file)."),
    properties: list[str] = typer.Option([], "-X", help="Upstream TLS property name=value, only "
                                         "security.protocol=SSL and ssl.* (host names are checked unless "
                                         "ssl.endpoint.identification.algorithm= is empty)."),
    show_secrets: bool = typer.Option(False, "--show-secrets",
                                      help="Show SaslAuthenticate credentials in --show frames "
                                           "(redacted by default)."),
    processors: int = typer.Option(None, "--processors", min=1,
                                   help="Processor processes that own the connections "
                                        "(default: the number of cores; 1: one event loop)."),
    json_out: Path = typer.Option(None, "--json-out",
                                  help="Write the run's statistics as JSON here at the end "
                                       "(docs/inspect-summary.md)."),
) -> None:
    """Run a transparent Kafka proxy: live stats or frames, pcapng capture, fault injection.

    With --listen-tls-cert the proxy terminates TLS from clients; with --upstream-tls it
    speaks TLS to the brokers; either way it sees and decodes the Kafka frames. The
    --capture file holds those frames in clear, as the proxy forwards them (no TLS),
    SASL credentials included: treat it as a secret (kctl decode redacts them on display).
    """
    check_outputs(files={"--capture": capture, "--json-out": json_out})
    duration_s = parse_duration(duration, "--duration") if duration is not None else None
    if duration_s is not None and duration_s < 0.001:
        raise ConfigError(f"--duration must be at least 1ms, not {duration!r} (leave it out to run until Ctrl-C)")
    if show not in ("stats", "frames"):
        raise ConfigError(f"--show {show!r}: expected stats or frames")
    if (listen_tls_key or listen_tls_key_password) and not listen_tls_cert:
        raise ConfigError("--listen-tls-key and --listen-tls-key-password need --listen-tls-cert")
    listen_tls = None
    if listen_tls_cert:
        listen_tls = ListenerTls(listen_tls_cert, listen_tls_key,
                                 _secret(listen_tls_key_password, "--listen-tls-key-password"))
        listen_tls.context()        # a bad certificate is one line now, not in each processor
    up_security = upstream_security(properties, tls=upstream_tls, ca=upstream_ca, cert=upstream_cert,
                                    key=upstream_key)
    host, port = parse_hostport(listen, what="--listen")
    if lose_records and reject_records:
        raise ConfigError("give --lose-records or --reject-records, not both")
    lose_rate, lose_limit = FaultPlan.parse_lose(lose_records) if lose_records is not None else (0.0, None)
    lose_error = None
    if reject_records is not None:
        lose_error, lose_rate, lose_limit = FaultPlan.parse_reject(reject_records)
    plan = FaultPlan(
        delay_ms=FaultPlan.parse_delay(delay_ms) if delay_ms else None, throttle_ms=throttle_ms,
        error=ErrorRewrite.parse(inject_error) if inject_error is not None else None, drop_rate=drop_rate,
        tiny_segments=tiny_segments, blackhole=blackhole, lose_rate=lose_rate,
        lose_limit=lose_limit, lose_error=lose_error, seed=seed)
    lines: queue.SimpleQueue[FrameEvent | ProcessorLost] = queue.SimpleQueue()
    n = processors or default_processors()
    proxy = InspectorProxy(upstream, host, port, faults=plan, capture=capture,
                           virtual_brokers=virtual_brokers,
                           on_frame=lines.put if show == "frames" else None,
                           listen_tls=listen_tls, upstream_security=up_security,
                           show_secrets=show_secrets, processors=n, processes=True,
                           on_lost=lines.put)
    try:
        with sigterm_as_ctrl_c(sigint=True), proxy:
            _run(proxy, show, lines, duration_s, _describe(plan),
                 tls=", ".join(n for n, c in (("TLS from clients", listen_tls),
                                              ("TLS upstream", up_security)) if c is not None))
    except KeyboardInterrupt:
        pass
    # Once stopped: the processors' last reports count what stopping cut off too (responses
    # held then are undelivered).
    final = _final_snapshot(proxy)
    while not lines.empty():            # a processor lost while stopping
        item = lines.get()
        if isinstance(item, ProcessorLost):
            typer.echo(f"kctl inspect: {item}", err=True)
    if final is not None:
        typer.echo(f"kctl inspect: {_summary_line(final)}", err=True)
        note = lose_note(plan, final)
        if note:
            typer.echo(f"kctl inspect: {note}", err=True)
        if json_out is not None:
            json_out.write_text(json.dumps(summary_json(final), indent=2) + "\n")
    if capture:
        merged = proxy.capture_result
        extra = f" ({merged.packets} packets merged from {n} processors)" if merged else ""
        typer.echo(f"capture written to {capture}{extra}", err=True)
        if merged is not None:
            for line in merged.damaged:
                typer.echo(f"kctl inspect: capture part cut short: {line}", err=True)
    if proxy.lost:
        # Said above, one line per processor, as it happened: the run was damaged.
        raise typer.Exit(1)


def _final_snapshot(proxy: InspectorProxy) -> StatsSnapshot | None:
    try:
        return proxy.snapshot()
    except KctlError:
        return None


def _summary_line(s: StatsSnapshot) -> str:
    produce = s.apis.get("Produce")
    records = f", {produce.records} records in {produce.batches} batches" if produce else ""
    # Responses the client never had are not responses: name them beside the count.
    missed = ", ".join(f"{s.faults[k]} {k}" for k in ("dropped", "undelivered", "swallowed")
                       if s.faults.get(k))
    return (f"{s.requests} requests, {s.responses} responses{f' (not delivered: {missed})' if missed else ''}"
            f"{records}; "
            f"{_n(s.connections_total, 'connection')} over {_n(s.processors, 'processor')}"
            + (f"; {_n(len(s.lost), 'processor')} lost" if s.lost else ""))


def lose_note(plan: FaultPlan, s: StatsSnapshot) -> str | None:
    """Why --lose-records / --reject-records took no batch over a whole run, if so."""
    if not plan.lose_rate or s.faults.get("lost") or s.faults.get("rejected"):
        return None
    what = "--reject-records refused" if plan.lose_error else "--lose-records lost"
    produce = s.apis.get("Produce")
    if produce is None or not produce.requests:
        return f"{what} no batch: no Produce request passed through the proxy"
    chance = (f" (and at rate {plan.lose_rate:g} the draws may have spared the others)"
              if plan.lose_rate < 1 else "")
    return (f"{what} no batch in {_n(produce.requests, 'Produce request')}: a batch is only taken "
            "from a partition with a batch already acknowledged through the proxy (the forged "
            "offset follows that acknowledgement), so each partition's first batch gets through"
            + chance)


def _n(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def summary_json(s: StatsSnapshot) -> dict:
    """``--json-out``: the run's merged statistics (docs/inspect-summary.md)."""
    return {
        "schema": "kctl.inspect.summary/1",
        "processors": s.processors,
        "connections_total": s.connections_total,
        "connections_open": len(s.connections),
        "requests": s.requests,
        "responses": s.responses,
        "decode_errors": s.decode_errors,
        "apis": {name: {"requests": a.requests, "responses": a.responses,
                        "request_bytes": a.request_bytes, "response_bytes": a.response_bytes,
                        "records": a.records, "batches": a.batches,
                        "latency_ms": {f"p{p:g}": a.latency_us[p] / 1000 for p in a.latency_us}
                        | {"max": a.latency_max_us / 1000, "mean": round(a.latency_mean_us / 1000, 3)},
                        "throttled": a.throttled, "throttle_ms_max": a.throttle_ms_max}
                 for name, a in sorted(s.apis.items())},
        "codecs": dict(sorted(s.codecs.items())),
        "errors": dict(sorted(s.errors_by_name.items())),
        "errors_by_api": _errors_by_api(s),
        "faults": dict(sorted(s.faults.items())),
        "lost_processors": [{"processor": x.processor, "pid": x.pid, "exitcode": x.exitcode,
                             "connections": [c.id for c in x.connections]} for x in s.lost],
    }


def _errors_by_api(s: StatsSnapshot) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (api, name), n in sorted(s.errors.items()):
        out.setdefault(api, {})[name] = n
    return out


def _run(proxy: InspectorProxy, show: str, lines: queue.SimpleQueue, duration: float | None,
         faults: str, tls: str = "") -> None:
    from kctl.ui.inspect_view import InspectView, frame_line, stats_lines

    listeners = [f"{h}:{p}" for h, p in proxy.listeners]
    typer.echo(f"kctl inspect: listening on {', '.join(listeners)} -> "
               f"{', '.join(f'{h}:{p}' for h, p in proxy.upstreams)}"
               + f" ({proxy.processors} processor{'s' if proxy.processors > 1 else ''})"
               + (f" ({tls})" if tls else "")
               + (f" (faults: {faults})" if faults else ""), err=True)
    deadline = None if duration is None else time.monotonic() + duration

    last_tls_error: str | None = None

    def remaining() -> float:
        # Each wait of the loops below passes here: say why upstream TLS failed (the
        # client only sees its connection reset), once per new reason; and which
        # processor died, with the connections it took with it.
        nonlocal last_tls_error
        if proxy.last_upstream_tls_error != last_tls_error:
            last_tls_error = proxy.last_upstream_tls_error
            typer.echo(f"kctl inspect: {last_tls_error}", err=True)
        if show != "frames":
            while not lines.empty():
                typer.echo(f"kctl inspect: {lines.get()}", err=True)
        if not proxy.alive_processors:
            raise KctlError("every kctl inspect processor died: nothing is left to serve clients")
        return 1.0 if deadline is None else max(0.0, deadline - time.monotonic())

    if show == "frames":
        topic_names: dict[uuid.UUID, str] = {}    # from every connection's Metadata, for Fetch's ids
        while remaining() > 0:
            try:
                event = lines.get(timeout=min(0.2, remaining() or 0.01))
            except queue.Empty:
                continue
            if isinstance(event, ProcessorLost):
                typer.echo(f"kctl inspect: {event}", err=True)
            else:
                typer.echo(frame_line(event, topic_names))
        return
    previous = None
    if sys.stdout.isatty():
        from rich.live import Live

        def view() -> InspectView:
            nonlocal previous
            snap = proxy.snapshot()
            v = InspectView(snap, previous, listeners=[f"{h}:{p}" for h, p in proxy.listeners],
                            faults=faults)
            previous = snap
            return v

        with Live(view(), refresh_per_second=2, get_renderable=view, screen=False):
            while remaining() > 0:
                time.sleep(min(0.2, remaining()))
        return
    while remaining() > 0:
        time.sleep(min(1.0, remaining()))
        snap = proxy.snapshot()
        for line in stats_lines(snap, previous):
            typer.echo(line)
        previous = snap


def register(app: typer.Typer) -> None:
    app.command("inspect")(inspect)
