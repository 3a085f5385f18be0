"""Generates kctl/protocol/error_codes.py from Apache Kafka's own sources.

What it reads (Kafka is the single source of truth for the table):

- ``clients/src/main/java/org/apache/kafka/common/protocol/Errors.java``: each enum
  constant gives the code, Kafka's name, Kafka's default message and the exception
  class the Java client raises for it;
- the exception classes it names (``common/errors/*.java`` and the few elsewhere,
  found through Errors.java's imports): an error is *retriable* exactly when its
  class extends ``RetriableException``, directly or through a superclass such as
  ``InvalidMetadataException``. This is the same test Kafka's own ``Errors.toHtml``
  uses for the protocol guide's "Retriable" column.

Release read: apache/kafka trunk at 1eb7644349cb07139d6a3c1ad1986979647cac99
(2024-10-25, version 4.0.0-SNAPSHOT), codes -1..128. Codes Kafka added after that
snapshot are listed in ``LATER_CODES`` below, and messages Kafka reworded since in
``LATER_MESSAGES``, each with where it was checked, because no full checkout of a
newer Errors.java was at hand. Run against a newer checkout, the later codes are read
from Kafka like the rest (a code found in both must agree, or the tool stops).

Usage:
    python tools/gen_error_codes.py --kafka-git /work/.mirror/apache+kafka/repo [--rev HEAD] \
        > kctl/protocol/error_codes.py
``--kafka-git`` may be a bare repository (read with ``git show``) or ``--kafka-dir``
a work tree.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ERRORS_JAVA = "clients/src/main/java/org/apache/kafka/common/protocol/Errors.java"
JAVA_ROOT = "clients/src/main/java/"

# Codes newer than the snapshot above: (code, NAME, retriable, message, where checked).
# Retriable follows the exception class's superclass, as for the rest.
LATER_CODES: tuple[tuple[int, str, bool, str, str], ...] = (
    (129, "REBOOTSTRAP_REQUIRED", False,
     "Client metadata is stale. The client should rebootstrap to obtain new metadata.",
     "Kafka 4.0 (KIP-1102); RebootstrapRequiredException extends ApiException"),
    (130, "STREAMS_INVALID_TOPOLOGY", False, "The supplied topology is invalid.",
     "Kafka 4.1 (KIP-1071); StreamsInvalidTopologyException extends ApiException"),
    (131, "STREAMS_INVALID_TOPOLOGY_EPOCH", False, "The supplied topology epoch is invalid.",
     "Kafka 4.1 (KIP-1071); StreamsInvalidTopologyEpochException extends ApiException"),
    (132, "STREAMS_TOPOLOGY_FENCED", False, "The supplied topology epoch is outdated.",
     "Kafka 4.1 (KIP-1071); StreamsTopologyFencedException extends ApiException"),
    (133, "SHARE_SESSION_LIMIT_REACHED", True, "The limit of share sessions has been reached.",
     "Kafka 4.1 (KIP-932); ShareSessionLimitReachedException extends RetriableException"),
    # 134-136 are on Kafka trunk after 4.2 (not in a release when read). Their names,
    # codes and exception classes were read from apache/kafka; the messages from a
    # port of Errors.java, as no copy of the newer Errors.java itself was at hand.
    (134, "GROUP_DELETION_FAILED", False,
     "DeleteGroups could not complete; see the error message on the per-group result for details.",
     "Kafka trunk after 4.2; GroupDeletionFailedException extends ApiException"),
    (135, "STREAMS_TOPOLOGY_DESCRIPTION_UPDATE_FAILED", False,
     "The broker could not process the topology description update; see the error message for details.",
     "Kafka trunk after 4.2; StreamsTopologyDescriptionUpdateFailedException extends ApiException"),
    (136, "CONTROLLER_ID_NOT_REGISTERED", False, "The given controller ID was not registered.",
     "Kafka trunk after 4.2; ControllerIdNotRegisteredException extends ApiException"),
)

# Default messages Kafka reworded after the snapshot: {code: (message, where checked)}.
LATER_MESSAGES: dict[int, tuple[str, str]] = {
    24: ("The group id is invalid.",
         "Kafka 4.0+ Errors.java (as copied by kroxylicious; kio 0.6.5 agrees)"),
    81: ("The group has reached its maximum size.",
         "Kafka 4.0+ Errors.java (as copied by kroxylicious; kio 0.6.5 agrees)"),
}


@dataclass(frozen=True)
class Row:
    code: int
    name: str
    retriable: bool
    description: str
    exception: str  # Java class, for the generated comment only


class Source:
    """Reads files of one Kafka revision, from a bare git repo or a work tree."""

    def __init__(self, git_dir: Path | None, work_tree: Path | None, rev: str) -> None:
        self.git_dir, self.work_tree, self.rev = git_dir, work_tree, rev

    def read(self, path: str) -> str | None:
        if self.work_tree is not None:
            p = self.work_tree / path
            return p.read_text() if p.exists() else None
        r = subprocess.run(["git", "-C", str(self.git_dir), "show", f"{self.rev}:{path}"],
                           capture_output=True, text=True)
        return r.stdout if r.returncode == 0 else None

    def describe(self) -> str:
        if self.work_tree is not None:
            return str(self.work_tree)
        out = subprocess.run(["git", "-C", str(self.git_dir), "log", "-1", "--format=%H %cs", self.rev],
                             capture_output=True, text=True, check=True).stdout.split()
        return f"apache/kafka {out[0]} ({out[1]})"


def strip_comments(java: str) -> str:
    # Removes /* */ and // comments outside string literals.
    out, i, n = [], 0, len(java)
    while i < n:
        c = java[i]
        if c == '"':
            j = i + 1
            while java[j] != '"':
                j += 2 if java[j] == "\\" else 1
            out.append(java[i:j + 1])
            i = j + 1
        elif java.startswith("/*", i):
            i = java.index("*/", i) + 2
        elif java.startswith("//", i):
            i = java.find("\n", i)
            i = n if i < 0 else i
        else:
            out.append(c)
            i += 1
    return "".join(out)


_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')
_CONSTANT = re.compile(r"\b([A-Z][A-Z0-9_]*)\s*\(")


def java_string(expr: str) -> str | None:
    """Value of a constant string expression: literals joined by ``+``, or null."""
    expr = expr.strip()
    if expr == "null":
        return None
    parts = _STRING.findall(expr)
    if not parts or _STRING.sub("", expr).replace("+", "").strip():
        raise ValueError(f"not a constant string expression: {expr!r}")
    return "".join(bytes(p, "utf-8").decode("unicode_escape") for p in parts)


def split_args(body: str) -> list[str]:
    args, depth, cur, i = [], 0, [], 0
    while i < len(body):
        c = body[i]
        if c == '"':
            m = _STRING.match(body, i)
            cur.append(m.group(0))
            i = m.end()
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == "," and depth == 0:
            args.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    args.append("".join(cur))
    return args


def enum_constants(java: str) -> list[tuple[str, list[str]]]:
    """(NAME, [args]) for each constant of ``public enum Errors``."""
    java = strip_comments(java)
    i = java.index("{", java.index("public enum Errors")) + 1
    out = []
    while True:
        m = _CONSTANT.search(java, i)
        if m is None:
            raise ValueError("end of Errors enum constants not found")
        # Constants are separated by ',' and ended by ';' at depth 0.
        between = java[i:m.start()].strip()
        if between not in ("", ","):
            break
        j, depth = m.end(), 1
        while depth:
            c = java[j]
            if c == '"':
                j = _STRING.match(java, j).end()
                continue
            depth += c == "("
            depth -= c == ")"
            j += 1
        out.append((m.group(1), split_args(java[m.end():j - 1])))
        i = j
        nxt = java[i:].lstrip()[:1]
        if nxt == ";":
            break
    return out


def imports(java: str) -> dict[str, str]:
    return {m.group(2): m.group(1) + m.group(2)
            for m in re.finditer(r"^import\s+([\w.]+\.)(\w+);", java, re.M)}


class Hierarchy:
    """Decides whether an exception class extends RetriableException."""

    ROOTS = {"RetriableException": True, "ApiException": False, "KafkaException": False,
             "RuntimeException": False, "Exception": False}

    def __init__(self, src: Source) -> None:
        self.src = src
        self.memo: dict[str, bool] = {}

    def retriable(self, fqcn: str) -> bool:
        simple = fqcn.rsplit(".", 1)[-1]
        if simple in self.ROOTS:
            return self.ROOTS[simple]
        if fqcn in self.memo:
            return self.memo[fqcn]
        text = self.src.read(JAVA_ROOT + fqcn.replace(".", "/") + ".java")
        if text is None:
            raise FileNotFoundError(f"exception class {fqcn} not found in the Kafka sources")
        m = re.search(rf"class\s+{simple}\b[^{{]*?\bextends\s+([\w.]+)", strip_comments(text))
        if m is None:
            raise ValueError(f"no superclass found for {fqcn}")
        parent = m.group(1)
        if "." not in parent:
            parent = imports(text).get(parent, fqcn.rsplit(".", 1)[0] + "." + parent)
        self.memo[fqcn] = result = self.retriable(parent)
        return result


def read_rows(src: Source) -> list[Row]:
    java = src.read(ERRORS_JAVA)
    if java is None:
        raise FileNotFoundError(ERRORS_JAVA)
    imported = imports(java)
    hierarchy = Hierarchy(src)
    rows = []
    for name, args in enum_constants(java):
        code = int(args[0].strip())
        message = java_string(args[1]) if len(args) > 1 else None
        builder = args[2] if len(args) > 2 else ""
        m = re.search(r"(\w+)::new", builder) or re.search(r"new\s+(\w+)\s*\(", builder)
        if m is None:  # NONE: the builder yields no exception
            rows.append(Row(code, name, False, message or "", ""))
            continue
        cls = m.group(1)
        fqcn = imported.get(cls, "org.apache.kafka.common.errors." + cls)
        rows.append(Row(code, name, hierarchy.retriable(fqcn), message or "", cls))
    return rows


def merge_later(rows: list[Row]) -> list[Row]:
    by_code = {r.code: r for r in rows}
    for code, name, retriable, message, _where in LATER_CODES:
        if code in by_code:
            have = by_code[code]
            if (have.name, have.retriable, have.description) != (name, retriable, message):
                raise ValueError(f"LATER_CODES entry {code} disagrees with the Kafka sources: {have}")
            continue
        by_code[code] = Row(code, name, retriable, message, "")
    for code, (message, _where) in LATER_MESSAGES.items():
        by_code[code] = dataclasses.replace(by_code[code], description=message)
    return [by_code[c] for c in sorted(by_code)]


HEADER = '''\
"""Kafka's error codes: every code, Kafka's name, whether it is retriable, Kafka's message.

GENERATED by tools/gen_error_codes.py from {source}
plus the later codes listed in that tool; do not edit by hand, re-run the tool.

``retriable`` is Kafka's own classification: the Java client's exception for the
code extends ``RetriableException``. A code this table does not know (a newer
broker) is not an error here: ``error_for`` returns an ``ErrorCode`` named
``UNKNOWN_ERROR_CODE_<n>``, not retriable, so callers treat it as fatal, as the
Java client does (it maps unknown codes to UNKNOWN_SERVER_ERROR).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from kctl.errors import BrokerError


@dataclass(frozen=True, slots=True)
class ErrorCode:
    """One Kafka error code."""

    code: int
    name: str
    retriable: bool
    description: str

    @property
    def is_error(self) -> bool:
        return self.code != 0


# (code, name, retriable, description), ordered by code.
_TABLE: Final[tuple[tuple[int, str, bool, str], ...]] = (
'''

FOOTER = '''\
)

ERRORS_BY_CODE: Final = MappingProxyType({row[0]: ErrorCode(*row) for row in _TABLE})
ERRORS_BY_NAME: Final = MappingProxyType({e.name: e for e in ERRORS_BY_CODE.values()})

NONE: Final = ERRORS_BY_CODE[0]


def error_for(code: int) -> ErrorCode:
    """The ``ErrorCode`` for ``code``; a code Kafka has not defined (yet) gets a placeholder."""
    known = ERRORS_BY_CODE.get(code)
    if known is not None:
        return known
    return ErrorCode(code, f"UNKNOWN_ERROR_CODE_{code}", False,
                     f"Error code {code} is not known to kctl (a newer broker?).")


def broker_error(code: int, message: str = "") -> BrokerError:
    """A ``BrokerError`` for ``code``; ``message`` is the broker's (else Kafka's default)."""
    e = error_for(code)
    return BrokerError(e.code, e.name, e.retriable, message or e.description)
'''


def render(rows: list[Row], source: str) -> str:
    lines = [HEADER.format(source=source)]
    for r in rows:
        lines.append(f"    ({r.code}, {r.name!r}, {r.retriable}, {r.description!r}),\n")
    lines.append(FOOTER)
    return "".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--kafka-git", type=Path, help="apache/kafka git directory (bare is fine)")
    g.add_argument("--kafka-dir", type=Path, help="apache/kafka work tree")
    p.add_argument("--rev", default="HEAD")
    p.add_argument("-o", "--output", type=Path, help="write here instead of stdout")
    a = p.parse_args(argv)
    src = Source(a.kafka_git, a.kafka_dir, a.rev)
    text = render(merge_later(read_rows(src)), src.describe())
    if a.output:
        a.output.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
