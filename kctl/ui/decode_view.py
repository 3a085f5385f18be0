"""Rich views for ``kctl decode``: the full decoded tree of a frame, and the summary tables."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from kctl.inspect.report import frame_json, frame_line

__all__ = ["frame_tree", "summary_tables"]

_HEAD_KEYS = ("ts", "src", "dst", "direction", "api_name", "api_version", "correlation_id",
              "client_id", "latency_ms", "throttle_time_ms", "error_codes", "marks", "topic_names",
              "consumer_protocol",
              "decode_error")


def _add(node: Tree, key: str, value: Any) -> None:
    if isinstance(value, dict) and set(value) == {"$base64"}:
        node.add(Text(f"{key}: <{len(value['$base64']) * 3 // 4} bytes, base64> {value['$base64'][:64]}"))
    elif isinstance(value, dict):
        sub = node.add(Text(key, style="bold"))
        for k, v in value.items():
            _add(sub, k, v)
    elif isinstance(value, list):
        sub = node.add(Text(f"{key} [{len(value)}]", style="bold"))
        for i, v in enumerate(value):
            _add(sub, f"[{i}]", v)
    else:
        node.add(Text(f"{key}: {value!r}"))


def frame_tree(frame: Any) -> Tree:
    """A Rich tree of everything known about one ``DecodedFrame``."""
    d = frame_json(frame)
    tree = Tree(Text(frame_line(frame), style="cyan"))
    for k in _HEAD_KEYS:
        if k in d and d[k] not in (None, [], {}):
            _add(tree, k, d[k])
    for k in ("produce", "fetch"):
        if d.get(k):
            _add(tree, k, d[k])
    if d.get("body") is not None:
        _add(tree, "body", d["body"])
    if d.get("raw_body") is not None:
        _add(tree, "raw_body", d["raw_body"])
    return tree


def summary_tables(s: dict[str, Any]) -> list[Table]:
    """Tables for ``CaptureSummary.to_dict()``."""
    out = []
    t = Table(title=f"{s['frames']} frames, {s['connections']} connections, {s['duration_s']:.3f} s")
    for col in ("API", "requests", "responses", "req bytes", "resp bytes", "p50 ms", "p99 ms",
                "max ms"):
        t.add_column(col, justify="left" if col == "API" else "right")
    for name, a in s["apis"].items():
        lat = a.get("latency_ms", {})
        t.add_row(Text(name), str(a["requests"]), str(a["responses"]), str(a["request_bytes"]),
                  str(a["response_bytes"]), *(f"{lat[p]:.3f}" if p in lat else "-"
                                              for p in ("p50", "p99", "max")))
    out.append(t)
    for key, title in (("produced", "Produced"), ("fetched", "Fetched")):
        if not s[key]:
            continue
        t = Table(title=title)
        for col in ("topic", "partition", "records", "bytes", "batches", "codecs"):
            t.add_column(col, justify="left" if col in ("topic", "codecs") else "right")
        for p in s[key]:
            # Text, not str: a topic name from the capture is data, never Rich markup.
            t.add_row(Text(p["topic"]), str(p["partition"]), str(p["records"]), str(p["bytes"]),
                      str(p["batches"]), ", ".join(f"{c}×{n}" for c, n in p["codecs"].items()))
        out.append(t)
    if s["errors"] or s["throttle"]["responses"] or s["notices"] or s["marks"]:
        t = Table(title="Errors, throttling, notices")
        t.add_column("what")
        t.add_column("count", justify="right")
        # Per API, as kctl inspect's plain lines name them (API/ERROR): NOT_LEADER_OR_FOLLOWER
        # answering Produce is not the one answering Fetch.
        per_api = [(api, name, n) for api, errors in s["errors_by_api"].items()
                   for name, n in errors.items()]
        for api, name, n in sorted(per_api, key=lambda x: (-x[2], x[0], x[1])):
            t.add_row(Text(f"{api}/{name}"), str(n))
        if s["throttle"]["responses"]:
            t.add_row(f"throttled responses ({s['throttle']['total_ms']} ms in all)",
                      str(s["throttle"]["responses"]))
        for name, n in s["marks"].items():
            t.add_row(f"frames marked {name}", str(n))
        for name, n in s["notices"].items():
            t.add_row(f"notice: {name}", str(n))
        out.append(t)
    return out
