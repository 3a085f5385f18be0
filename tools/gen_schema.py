"""Generate kctl/protocol/schema_data.py from Kafka's published message definitions.

Kafka publishes every API message as a JSON file (with // comments) under
``clients/src/main/resources/common/message/``. This tool reads one or more
directories of such files, merges them and writes plain Python data tables that
kctl's codec (``kctl/protocol/schema.py`` and ``messages.py``) loads at import.

The committed ``schema_data.py`` was generated from these sources, oldest first
(the JSON inputs were unpacked under /tmp and are NOT part of kctl's repository):

  1. apache-2024-10  apache/kafka trunk at commit
                     1eb7644349cb07139d6a3c1ad1986979647cac99 (2024-10-25,
                     4.0.0-SNAPSHOT): the last tree that still has the versions
                     KIP-896 removed in Kafka 4.0 (e.g. Produce v0-2, Fetch v0-3).
  2. kafka-python    the definitions bundled in kafka-python 3.0.12
                     (kafka/protocol/schemas/resources/*.json, 54 APIs).
  3. kafka-4.3       Kafka's 4.3 release branch as mirrored in confluentinc/kafka,
                     branch ``4.3`` at commit 0157ac7cf2c652628443b270b9801dd44b4b0154
                     (2026-08-21, build version 8.3.2-0-ccs, i.e. Apache Kafka 4.3.x):
                     every API and version Kafka 4.3 defines, including
                     StreamsGroup*, *ShareGroupOffsets and Share* v1/v2.

Regenerate with::

    git -C <kafka repo> archive 1eb7644 clients/src/main/resources/common/message | tar -x -C /tmp/k24
    git -C <confluent kafka repo> archive 4.3 clients/src/main/resources/common/message | tar -x -C /tmp/k43
    python tools/gen_schema.py \
        apache-2024-10=/tmp/k24/clients/src/main/resources/common/message \
        kafka-python=.venv/lib/python3.11/site-packages/kafka/protocol/schemas/resources \
        kafka-4.3=/tmp/k43/clients/src/main/resources/common/message

Merge rule: for each message and each version, the NEWEST source (the last one
given) that defines that version wins. So a version Kafka 4.0 removed still
decodes with the older definition: an inspector must understand old clients.

The merged field tree is one tree per message, each field carrying the set of
versions in which it is on the wire (intersected with the versions its source
serves), so the codec sees one definition, exactly like Kafka's own generator.
The tool checks that, for every version, the merged tree restricted to that
version lists exactly the fields, in exactly the order, of the source that won it.
Common structs are inlined where used (the struct's name is kept).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import pprint
import re
import sys

TOP = 100  # "N+" means N..TOP before intersection with the message's valid versions

PRIMITIVES = {"int8", "int16", "int32", "int64", "uint16", "uint32", "float64",
              "string", "bytes", "bool", "uuid", "records"}


def load_json(path: pathlib.Path) -> dict:
    text = path.read_text()
    # Strip // comments (none of Kafka's strings contain "//" except URLs in "about";
    # only strip when the // is not inside a string).
    out_lines = []
    for line in text.splitlines():
        in_str = False
        esc = False
        cut = None
        for i, ch in enumerate(line):
            if esc:
                esc = False
                continue
            if ch == "\\":
                esc = True
            elif ch == '"':
                in_str = not in_str
            elif ch == "/" and not in_str and line[i + 1:i + 2] == "/":
                cut = i
                break
        out_lines.append(line if cut is None else line[:cut])
    return json.loads("\n".join(out_lines))


def parse_versions(spec: str | None) -> set[int]:
    if spec is None or spec == "none" or spec == "":
        return set()
    spec = spec.strip()
    if spec.endswith("+"):
        return set(range(int(spec[:-1]), TOP + 1))
    if "-" in spec:
        lo, hi = spec.split("-")
        return set(range(int(lo), int(hi) + 1))
    return {int(spec)}


def format_versions(vs: set[int]) -> str:
    """Closed ranges, e.g. "0-2,5-7"; "" for none."""
    if not vs:
        return ""
    out = []
    s = sorted(vs)
    lo = prev = s[0]
    for v in s[1:]:
        if v == prev + 1:
            prev = v
            continue
        out.append(f"{lo}-{prev}" if lo != prev else f"{lo}")
        lo = prev = v
    out.append(f"{lo}-{prev}" if lo != prev else f"{lo}")
    return ",".join(out)


def struct_name(ftype: str) -> str | None:
    t = ftype[2:] if ftype.startswith("[]") else ftype
    return None if t in PRIMITIVES else t


def resolve(fields: list[dict], common: dict[str, list[dict]], served: set[int],
            msg_flex: set[int]) -> list[dict]:
    """One source's field list, versions intersected with what this source serves."""
    out = []
    for f in fields:
        versions = parse_versions(f["versions"]) & served
        if not versions:
            continue
        sname = struct_name(f["type"])
        sub = None
        if sname is not None:
            raw = f.get("fields")
            if raw is None:
                if sname not in common:
                    raise SystemExit(f"unknown struct type {sname}")
                raw = common[sname]
            sub = resolve(raw, common, served, msg_flex)
        tagged = parse_versions(f.get("taggedVersions")) & versions
        node = {
            "name": f["name"],
            "type": f["type"],
            "versions": versions,
            "nullable": parse_versions(f.get("nullableVersions")) & versions,
            "tagged": tagged,
            "tag": f.get("tag"),
            "default": f.get("default"),
            "ignorable": bool(f.get("ignorable", False)),
            "struct": sname,
            "fields": sub,
        }
        if "flexibleVersions" in f:
            # Field-level override (RequestHeader.ClientId: never compact).
            node["flexible"] = parse_versions(f["flexibleVersions"]) & versions
        out.append(node)
    return out


def merge_fields(newer: list[dict], older: list[dict], where: str) -> list[dict]:
    """Merges ``older`` into ``newer`` (both already restricted to disjoint versions)."""
    merged = [dict(f) for f in newer]
    index = {f["name"]: i for i, f in enumerate(merged)}
    prev_name = None
    for f in older:
        if f["name"] in index:
            m = merged[index[f["name"]]]
            if m["type"] != f["type"]:
                # Same wire shape under a renamed struct is fine; different wire types are not.
                if (m["type"].startswith("[]") != f["type"].startswith("[]")
                        or (struct_name(m["type"]) is None) != (struct_name(f["type"]) is None)
                        or (struct_name(m["type"]) is None and m["type"] != f["type"])):
                    raise SystemExit(f"{where}.{f['name']}: type {f['type']} vs {m['type']}")
            if m.get("tag") != f.get("tag") and m["tagged"] and f["tagged"]:
                raise SystemExit(f"{where}.{f['name']}: tag {f['tag']} vs {m['tag']}")
            if m["default"] != f["default"]:
                # Kafka's generator has one default per field; keep the newer one but say so.
                print(f"note: {where}.{f['name']}: default {f['default']!r} (older) vs "
                      f"{m['default']!r} (newer); keeping the newer", file=sys.stderr)
            m["versions"] = m["versions"] | f["versions"]
            m["nullable"] = m["nullable"] | f["nullable"]
            m["tagged"] = m["tagged"] | f["tagged"]
            if m.get("tag") is None:
                m["tag"] = f.get("tag")
            m["ignorable"] = m["ignorable"] or f["ignorable"]
            if "flexible" in f or "flexible" in m:
                m["flexible"] = m.get("flexible", set()) | f.get("flexible", set())
            if m["fields"] is not None or f["fields"] is not None:
                m["fields"] = merge_fields(m["fields"] or [], f["fields"] or [],
                                           f"{where}.{f['name']}")
        else:
            pos = index[prev_name] + 1 if prev_name is not None else 0
            merged.insert(pos, dict(f))
            index = {g["name"]: i for i, g in enumerate(merged)}
        prev_name = f["name"]
    return merged


def field_order(fields: list[dict], version: int) -> list:
    return [(f["name"], f["type"] if f["fields"] is None else field_order(f["fields"], version))
            for f in fields if version in f["versions"]]


def emit_fields(fields: list[dict]) -> list[dict]:
    out = []
    for f in fields:
        d = {
            "name": f["name"],
            "type": f["type"],
            "versions": format_versions(f["versions"]),
        }
        if f["nullable"]:
            d["nullable_versions"] = format_versions(f["nullable"])
        if f["tagged"]:
            d["tagged_versions"] = format_versions(f["tagged"])
            d["tag"] = f["tag"]
        if f["default"] is not None:
            d["default"] = f["default"]
        if f["ignorable"]:
            d["ignorable"] = True
        if "flexible" in f:
            d["flexible_versions"] = format_versions(f["flexible"])
        if f["struct"] is not None:
            d["struct"] = f["struct"]
            d["fields"] = emit_fields(f["fields"])
        out.append(d)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sources", nargs="+", metavar="LABEL=DIR",
                    help="definition directories, OLDEST FIRST")
    ap.add_argument("--out", default=str(pathlib.Path(__file__).resolve().parent.parent
                                         / "kctl" / "protocol" / "schema_data.py"))
    args = ap.parse_args(argv)

    sources: list[tuple[str, pathlib.Path]] = []
    for s in args.sources:
        label, _, d = s.partition("=")
        sources.append((label, pathlib.Path(d)))

    # name -> list of (label, json), oldest first
    defs: dict[str, list[tuple[str, dict]]] = {}
    for label, d in sources:
        files = sorted(d.glob("*.json"))
        if not files:
            raise SystemExit(f"no JSON definitions in {d}")
        for p in files:
            j = load_json(p)
            if j.get("type") not in ("request", "response", "header", "data"):
                continue
            # Keyed by (api key, type): an API renamed between releases
            # (ListClientMetricsResources -> ListConfigResources, key 74) is one API.
            key = (j["apiKey"], j["type"]) if "apiKey" in j else (j["name"], j["type"])
            defs.setdefault(key, []).append((label, j))

    messages = {}
    for key in sorted(defs, key=lambda k: (str(k[0]), k[1])):
        entries = defs[key]
        name = entries[-1][1]["name"]
        claimed: set[int] = set()
        trees = []  # newest first
        flexible: set[int] = set()
        version_source: dict[int, str] = {}
        per_version_order = {}
        for label, j in reversed(entries):
            valid = parse_versions(j["validVersions"])
            served = valid - claimed
            if not served:
                continue
            claimed |= served
            common = {c["name"]: c["fields"] for c in j.get("commonStructs", [])}
            flex = parse_versions(j.get("flexibleVersions", "none"))
            tree = resolve(j["fields"], common, served, flex)
            flexible |= flex & served
            for v in served:
                version_source[v] = label
                per_version_order[v] = field_order(tree, v)
            trees.append((label, j, tree))
        merged = trees[0][2]
        for _, _, tree in trees[1:]:
            merged = merge_fields(merged, tree, name)
        for v, order in per_version_order.items():
            got = field_order(merged, v)
            if got != order:
                raise SystemExit(f"{name} v{v}: merged field order differs from its source")
        newest = trees[0][1]
        messages[name] = {
            "name": name,
            "older_names": tuple(dict.fromkeys(j["name"] for _, j in entries if j["name"] != name)),
            "api_key": newest.get("apiKey"),
            "type": newest["type"],
            "listeners": tuple(newest.get("listeners", ())),
            "valid_versions": format_versions(claimed),
            "flexible_versions": format_versions(flexible),
            "latest_version_unstable": bool(newest.get("latestVersionUnstable", False)),
            "sources": {lab: format_versions({v for v, s in version_source.items() if s == lab})
                        for lab in dict.fromkeys(version_source[v] for v in sorted(version_source))},
            "common_structs": tuple(c["name"] for c in newest.get("commonStructs", [])),
            "fields": emit_fields(merged),
        }

    header = (
        '"""Kafka message definitions as plain data (GENERATED by tools/gen_schema.py; do not edit).\n\n'
        "Sources, oldest first (for each message and version the newest source defining it wins):\n"
        + "".join(f"  {label}\n" for label, _ in sources)
        + "\nSee tools/gen_schema.py for exact commits and releases. Version sets are closed ranges\n"
        '("0-2,5-7"); every field carries the versions in which it is on the wire.\n"""\n\n'
        "# fmt: off\n"
        "# ruff: noqa\n"
    )
    messages = dict(sorted(messages.items()))
    body = "MESSAGES = " + pprint.pformat(messages, width=110, sort_dicts=False) + "\n"
    pathlib.Path(args.out).write_text(header + body)
    print(f"wrote {len(messages)} messages to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
