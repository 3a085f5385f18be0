"""Rich renderables and plain lines for ``kctl inspect``.

``InspectView`` is a plain object with ``__rich_console__``: given the proxy's
latest ``StatsSnapshot`` (merged over its processors; and the one before, for rates)
it draws per-API rates and latency percentiles, Produce records/s and codecs,
connections with their processor, handshake state and in-flight requests, error
codes, injected faults, and any processor that died with the connections it took. ``frame_line`` is one line per frame for ``--show frames``;
``stats_lines`` is the non-TTY form of the view.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from typing import Any

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.table import Table
from rich.text import Text

from kctl.inspect.proxy import FrameEvent
from kctl.inspect.report import gist
from kctl.inspect.session import METADATA_KEY, decode_frame_bytes, learn_topic_names
from kctl.inspect.proxy_stats import StatsSnapshot
from kctl.ui.units import human_bytes


def _ms(us: float) -> str:
    return f"{us / 1000:.1f}"


class InspectView:
    def __init__(self, snapshot: StatsSnapshot, previous: StatsSnapshot | None = None, *,
                 listeners: list[str] | None = None, faults: str = "") -> None:
        self.snapshot = snapshot
        self.previous = previous
        self.listeners = listeners or []
        self.faults = faults

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        s = self.snapshot
        rates = s.rates_since(self.previous)
        head = Text.assemble(("kctl inspect", "bold"), "  listening on ", ", ".join(self.listeners),
                             f"  processors {s.processors}",
                             f"  connections {len(s.connections)} open / {s.connections_total} total",
                             f"  in flight {s.in_flight}")
        produce = s.apis.get("Produce")
        if produce is not None and produce.records:
            head.append(f"  produce {s.records_rate_since(self.previous):,.0f} records/s "
                        f"({produce.records:,} in {produce.batches:,} batches)")
        if self.faults:
            head.append(f"  faults: {self.faults}", style="yellow")
        apis = Table(title="per API", expand=False)
        for col in ("API", "req/s", "bytes/s", "requests", "responses", "p50 ms", "p99 ms",
                    "p99.9 ms", "max ms", "throttled", "throttle max ms"):
            apis.add_column(col, justify="left" if col == "API" else "right")
        for name in sorted(s.apis):
            a = s.apis[name]
            rps, bps = rates.get(name, (0.0, 0.0))
            apis.add_row(name, f"{rps:.1f}", human_bytes(bps) + "/s", str(a.requests), str(a.responses),
                         _ms(a.latency_us[50.0]), _ms(a.latency_us[99.0]), _ms(a.latency_us[99.9]),
                         _ms(a.latency_max_us), str(a.throttled), str(a.throttle_ms_max))
        conns = Table(title="connections", expand=False)
        for col in ("#", "client", "listener", "upstream", "processor", "state", "in flight", "requests"):
            conns.add_column(col)
        for c in s.connections:
            conns.add_row(str(c.id), c.client, c.listener, c.upstream, str(c.processor), c.state,
                          str(c.in_flight), str(c.requests))
        parts: list[Any] = [head, apis, conns]
        if s.codecs:
            parts.append(Text("produce batches by codec: "
                              + ", ".join(f"{k} {v}" for k, v in sorted(s.codecs.items()))))
        for lost in s.lost:
            parts.append(Text(str(lost), style="bold red"))
        if s.errors:
            errs = Table(title="error codes in responses", expand=False)
            errs.add_column("API")
            errs.add_column("error")
            errs.add_column("count", justify="right")
            for (api, name), n in sorted(s.errors.items(), key=lambda kv: (-kv[1], kv[0])):
                errs.add_row(api, name, str(n))
            parts.append(errs)
        if s.faults:
            parts.append(Text("faults applied: " + ", ".join(f"{k} {v}" for k, v in sorted(s.faults.items())),
                              style="yellow"))
        yield Group(*parts)


def stats_lines(snapshot: StatsSnapshot, previous: StatsSnapshot | None = None) -> Iterator[str]:
    """The view as plain lines (no TTY): one per API, then errors and faults."""
    rates = snapshot.rates_since(previous)
    for name in sorted(snapshot.apis):
        a = snapshot.apis[name]
        rps, bps = rates.get(name, (0.0, 0.0))
        yield (f"{name}: {rps:.1f} req/s {human_bytes(bps)}/s requests={a.requests} responses={a.responses} "
               f"p50={_ms(a.latency_us[50.0])}ms p99={_ms(a.latency_us[99.0])}ms "
               f"max={_ms(a.latency_max_us)}ms throttled={a.throttled}")
    produce = snapshot.apis.get("Produce")
    if produce is not None and produce.records:
        yield (f"produce: {snapshot.records_rate_since(previous):,.0f} records/s records={produce.records} "
               f"batches={produce.batches} codecs="
               + ",".join(f"{k}:{v}" for k, v in sorted(snapshot.codecs.items())))
    yield (f"connections open={len(snapshot.connections)} total={snapshot.connections_total} "
           f"in_flight={snapshot.in_flight} processors={snapshot.processors}"
           + (f" lost_processors={len(snapshot.lost)}" if snapshot.lost else ""))
    if snapshot.errors:
        yield "errors: " + ", ".join(f"{api}/{name}={n}"
                                     for (api, name), n in sorted(snapshot.errors.items()))
    if snapshot.faults:
        yield "faults: " + ", ".join(f"{k}={v}" for k, v in sorted(snapshot.faults.items()))


def frame_line(e: FrameEvent, topic_names: dict[uuid.UUID, str] | None = None) -> str:
    """One frame as a line: ``conn 3 127.0.0.1:50712 -> Produce v9 corr=12 1234B acks=-1
    t/0: 1b 10r`` / ``conn 3 127.0.0.1:50712 <- Produce v9 corr=12 80B 2.1ms t/0@41
    NOT_LEADER_OR_FOLLOWER [errors-injected]``: the client, then what the frame says in
    ``kctl decode``'s words (``report.gist``: topics and partitions, records, error names,
    throttle), then the faults applied. ``topic_names`` (topic id -> name), when given, is
    the run's: the Metadata responses of every connection add to it, and a frame naming a
    topic by id (Fetch, Produce v13+) is shown with its name, as ``kctl decode`` names them
    from the capture's Metadata (``records-lost``: --lose-records forged the
    acknowledgement of a batch the broker never got)."""
    arrow = "->" if e.direction == "request" else "<-"
    line = (f"conn {e.connection_id} {e.client} {arrow} {e.api_name} v{e.api_version} "
            f"corr={e.correlation_id} {e.size}B")
    if e.direction == "response" and e.latency_ns is not None:
        line += f" {e.latency_ns / 1e6:.1f}ms"
    if e.api_key == 36 and e.redacted:   # only SaslAuthenticate decodes here: gist() decodes the rest
        line += " auth_bytes=<redacted>"
    elif e.api_key == 36 and getattr(e.body, "auth_bytes", None):   # SaslAuthenticate, --show-secrets
        line += f" auth_bytes={base64.b64encode(e.body.auth_bytes).decode()}"
    elif e.frame:
        df = decode_frame_bytes(e.frame, size_prefix=False,
                                api_key=None if e.direction == "request" else e.api_key,
                                api_version=e.api_version)
        if topic_names is not None:
            if e.direction == "response" and e.api_key == METADATA_KEY and df.body is not None:
                learn_topic_names(df.body, topic_names)
            df.topic_names = topic_names
        said = gist(df)
        if said:
            line += " " + said
    if e.direction == "response":
        f = e.fault
        if f is not None:
            notes = [n for n, on in (("delayed", f.delay_ns), ("errors-injected", f.errors_injected),
                                     ("records-lost", f.forged),
                                     ("dropped", f.drop_at is not None), ("swallowed", f.swallow),
                                     ("tiny", f.segment_bytes)) if on]
            if notes:
                line += " [" + " ".join(notes) + "]"
    return line
