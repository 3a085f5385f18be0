"""kctl metadata: brokers, topics, partitions, leaders and each broker's API versions (kcat -L)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from kctl.config import ProducerConfig, Setting, load_properties_file, parse_assignment
from kctl.engine.admin import cluster_overview
from kctl.engine.blocking_client import setup_timeout_s
from kctl.topics import validate_topic_name


def metadata(
    bootstrap_server: str = typer.Option(..., "-b", "--bootstrap-server", help="Brokers (host:port,...)."),
    topic: list[str] = typer.Option([], "-t", "--topic", help="Only these topics (repeatable; default all). A topic named here that comes back with an error exits 1."),
    properties: list[str] = typer.Option([], "-X", help="Client property name=value (security.protocol, ssl.*, sasl.*)."),
    producer_config: list[Path] = typer.Option([], "--producer-config", help="Java .properties file."),
    apis: bool = typer.Option(True, "--apis/--no-apis", help="List the API versions each broker supports."),
    json_out: bool = typer.Option(False, "--json", help="One JSON document instead of text."),
) -> None:
    """List the cluster's brokers, topics, partitions and leaders, and each broker's API versions.

    Exits 1 when a topic named with -t comes back with an error (UNKNOWN_TOPIC_OR_PARTITION,
    an authorization error): the listing is printed first, then one line naming it."""
    for t in topic:
        validate_topic_name(t)
    settings: list[Setting] = []
    for f in producer_config:
        settings.extend(load_properties_file(f))
    settings.extend(parse_assignment(x, "-X") for x in properties)
    config = ProducerConfig.from_settings(settings)
    md, brokers = cluster_overview(bootstrap_server, security=config.security, topics=topic or None,
                                   timeout_s=config.request_timeout_ms / 1000,
                                   setup_timeout_s=setup_timeout_s(config.network))
    if json_out:
        print(json.dumps({
            "cluster_id": md.cluster_id, "controller_id": md.controller_id,
            "brokers": [{"node_id": b.broker.node_id, "host": b.broker.host, "port": b.broker.port,
                         "rack": b.broker.rack, "error": b.error,
                         **({"apis": [{"api": n, "min": lo, "max": hi, "kctl_uses": use}
                                      for n, lo, hi, use in b.apis]} if apis else {})}
                        for b in brokers],
            "topics": [{"name": t.name, "error": t.error, "partitions": [
                {"partition": p.partition, "leader": p.leader, "replicas": list(p.replicas),
                 "isr": list(p.isr), "error": p.error} for p in t.partitions]}
                for t in sorted(md.topics.values(), key=lambda t: t.name)],
        }, indent=2))
        _exit_if_a_topic_failed(md, topic)
        return
    print(f"Metadata for {'all topics' if not topic else ', '.join(topic)} "
          f"(cluster {md.cluster_id or '-'}, controller {md.controller_id}):")
    print(f" {len(brokers)} brokers:")
    for b in brokers:
        print(f"  broker {b.broker.node_id} at {b.broker.host}:{b.broker.port}"
              + (f" (rack {b.broker.rack})" if b.broker.rack else "")
              + (f"  ERROR: {b.error}" if b.error else ""))
        if apis:
            for name, lo, hi, use in b.apis:
                used = f"kctl uses v{use}" if use is not None else "not used by kctl"
                print(f"    {name:<32} v{lo}-v{hi}  ({used})")
    print(f" {len(md.topics)} topics:")
    for t in sorted(md.topics.values(), key=lambda t: t.name):
        print(f"  topic \"{t.name}\" with {len(t.partitions)} partitions:"
              + (f" ERROR: {t.error}" if t.error else ""))
        for p in t.partitions:
            print(f"    partition {p.partition}, leader {p.leader}, replicas: "
                  f"{','.join(map(str, p.replicas))}, isrs: {','.join(map(str, p.isr))}"
                  + (f", error {p.error}" if p.error else ""))
    _exit_if_a_topic_failed(md, topic)


def _exit_if_a_topic_failed(md, asked: list[str]) -> None:
    """Exit 1 (after the listing) when a topic named with -t came back with an error."""
    failed = [f"{t} ({md.topics[t].error if t in md.topics else 'not in the answer'})"
              for t in dict.fromkeys(asked) if t not in md.topics or md.topics[t].error]
    if failed:
        print(f"kctl: error: metadata: topic{'s' if len(failed) > 1 else ''} {', '.join(failed)}",
              file=sys.stderr)
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("metadata")(metadata)
