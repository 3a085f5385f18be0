"""A bench workload: what to produce, and the matrix of producer settings to compare.

How this works: a workload comes from a TOML file (``load_workload``), from the command
line, or both (``Workload.with_overrides``: a command-line value replaces the file's).
``cells()`` expands the matrix into every combination, in the order the matrix was
given, each a ``Cell`` with a name that is also a valid topic-name suffix
(``acks-1_linger.ms-5``). Every check happens here, before a broker is touched: a bad
file or option raises ``ConfigError`` naming the key.

The file::

    [workload]
    topic = "kctl-bench"        # each cell produces to <topic>-<cell>
    partitions = 3
    record_size = 100
    rate = 5000                 # records/s over all workers; "max" or 0: as fast as possible
    duration = "2s"
    warmup = "1s"
    repetitions = 2

    [properties]                # the same in every cell
    "batch.size" = 16384

    [matrix]                    # one cell per combination
    acks = ["1", "all"]
    "linger.ms" = [0, 5]
"""

from __future__ import annotations

import itertools
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from kctl.config import REDACTED, SECRET_PROPERTIES, ProducerConfig, Setting, redact_properties
from kctl.errors import ConfigError, KctlError
from kctl.topics import validate_topic_name
from kctl.quantities import parse_duration, parse_rate, parse_warmup

__all__ = ["Cell", "Workload", "load_workload", "parse_matrix_option"]

_NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Cell:
    """One combination of the matrix. ``name`` is safe in topic and file names."""

    name: str
    properties: tuple[tuple[str, str], ...]

    @property
    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.properties) or "default"


@dataclass(frozen=True)
class Workload:
    bootstrap: str | None = None
    topic: str = "kctl-bench"
    partitions: int = 6
    record_size: int = 100
    payload: str = "random"
    compressibility: float = 0.0
    keys: str = "none"
    rate: float = 0.0                 # 0: as fast as possible
    duration: str = "10s"
    warmup: str | None = "2s"
    repetitions: int = 3
    workers: int | None = None
    #: also consume each run (``kctl produce --consume``): the e2e clock in every figure
    consume: bool = False
    #: the 24-byte ``kctl`` identity header on every record, as ``kctl produce`` sends it
    #: unless --no-id-headers: a bench cell and a produce run with the same flags are the
    #: same workload, bytes on the wire included
    id_headers: bool = True
    #: consumer properties of the --consume side (``kctl produce --consumer-property``)
    consumer_properties: tuple[str, ...] = ()
    properties: tuple[tuple[str, str], ...] = ()
    matrix: tuple[tuple[str, tuple[str, ...]], ...] = ()
    source: str | None = field(default=None, compare=False)

    def validate(self) -> Workload:
        where = f"{self.source}: " if self.source else ""
        if self.repetitions < 1:
            raise ConfigError(f"{where}repetitions must be at least 1, not {self.repetitions}")
        if self.partitions < 1:
            raise ConfigError(f"{where}partitions must be at least 1, not {self.partitions}")
        if self.rate < 0:
            raise ConfigError(f"{where}rate must not be negative, not {self.rate}")
        if self.record_size < 0:
            raise ConfigError(f"{where}record_size must not be negative, not {self.record_size}")
        if self.workers is not None and self.workers < 1:
            raise ConfigError(f"{where}workers must be at least 1, not {self.workers}")
        if self.consume and not self.id_headers:
            raise ConfigError(f"{where}consume measures e2e from the record identity header: "
                              "drop --no-id-headers (id_headers = false)")
        parse_duration(self.duration, f"{where}duration")
        parse_warmup(self.warmup, f"{where}warmup")
        validate_topic_name(self.topic, f"{where}topic")
        names = [k for k, _ in self.matrix]
        if len(set(names)) != len(names):
            raise ConfigError(f"{where}matrix names a property twice: {', '.join(names)}")
        for name, values in self.matrix:
            if not values:
                raise ConfigError(f"{where}matrix {name} has no values")
            if len(set(values)) != len(values):
                raise ConfigError(f"{where}matrix {name} repeats a value: {', '.join(values)}")
        for cell in self.cells():       # each cell produces to <topic>-<cell>
            validate_topic_name(f"{self.topic}-{cell.name}", f"{where}topic of cell {cell.label}")
        # Every cell's properties go through the producer's own validation now, so a
        # typo fails before the first run rather than in the middle of the matrix.
        for cell in self.cells():
            settings = [Setting(k, v, "bench") for k, v in self.properties + cell.properties]
            try:
                ProducerConfig.from_settings(settings + [Setting("bootstrap.servers", "x:1", "-b")])
            except KctlError as e:
                raise ConfigError(f"{where}cell {cell.label}: {e}") from None
        return self

    def cells(self) -> list[Cell]:
        if not self.matrix:
            return [Cell("default", ())]
        names = [k for k, _ in self.matrix]
        out = []
        for combo in itertools.product(*(v for _, v in self.matrix)):
            props = tuple(zip(names, combo, strict=True))
            slug = "_".join(f"{k}-{_NAME_CHARS.sub('', v) or 'x'}" for k, v in props)
            out.append(Cell(slug, props))
        return out

    def with_overrides(self, **changes: Any) -> Workload:
        """Command-line values over the file's; ``None`` means "not given"."""
        given = {k: v for k, v in changes.items() if v is not None}
        unknown = set(given) - {f.name for f in fields(self)}
        if unknown:
            raise ConfigError(f"unknown workload setting(s): {', '.join(sorted(unknown))}")
        return replace(self, **given)

    def to_dict(self) -> dict[str, Any]:
        return {"bootstrap": self.bootstrap, "topic": self.topic, "partitions": self.partitions,
                "record_size": self.record_size, "payload": self.payload,
                "compressibility": self.compressibility, "keys": self.keys,
                "rate": self.rate or None, "duration": self.duration, "warmup": self.warmup,
                "repetitions": self.repetitions, "workers": self.workers, "consume": self.consume,
                "id_headers": self.id_headers,
                "consumer_properties": redact_properties(
                    dict(x.partition("=")[::2] for x in self.consumer_properties)),
                # for output (bench results): secrets such as sasl.password are redacted
                "properties": redact_properties(dict(self.properties)),
                "matrix": {k: [REDACTED] * len(v) if k in SECRET_PROPERTIES else list(v)
                           for k, v in self.matrix}}


def _value_text(v: Any, what: str) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float | str):
        return str(v)
    raise ConfigError(f"{what} must be a string, number or boolean, not {v!r}")


def parse_matrix_option(text: str) -> tuple[str, tuple[str, ...]]:
    """``--matrix 'linger.ms=0,5,50'`` -> ``("linger.ms", ("0", "5", "50"))``."""
    name, sep, values = text.partition("=")
    vals = tuple(v.strip() for v in values.split(",") if v.strip())
    if not sep or not name.strip() or not vals:
        raise ConfigError(f"--matrix expects name=value1,value2,..., got {text!r} (for example acks=1,all)")
    return name.strip(), vals


_WORKLOAD_KEYS = {"bootstrap", "topic", "partitions", "record_size", "payload", "compressibility",
                  "keys", "rate", "duration", "warmup", "repetitions", "workers", "consume",
                  "id_headers"}


def _workload_from_table(t: Mapping[str, Any], src: str) -> dict[str, Any]:
    unknown = set(t) - _WORKLOAD_KEYS
    if unknown:
        raise ConfigError(f"{src}: unknown key(s) in [workload]: {', '.join(sorted(unknown))} "
                          f"(known: {', '.join(sorted(_WORKLOAD_KEYS))})")
    out: dict[str, Any] = {}
    types = {"bootstrap": str, "topic": str, "payload": str, "keys": str, "partitions": int,
             "record_size": int, "repetitions": int, "workers": int}
    for k, typ in types.items():
        if k in t:
            if not isinstance(t[k], typ) or isinstance(t[k], bool):
                raise ConfigError(f"{src}: [workload] {k} must be a{'n integer' if typ is int else ' string'}, "
                                  f"not {t[k]!r}")
            out[k] = t[k]
    if "compressibility" in t:
        out["compressibility"] = float(t["compressibility"])
    for k in ("consume", "id_headers"):
        if k in t:
            if not isinstance(t[k], bool):
                raise ConfigError(f"{src}: [workload] {k} must be true or false, not {t[k]!r}")
            out[k] = t[k]
    for k in ("duration", "warmup"):
        if k in t:
            v = t[k]
            out[k] = f"{v}s" if isinstance(v, int | float) and not isinstance(v, bool) else _value_text(v, f"{src}: {k}")
    if "rate" in t:
        out["rate"] = parse_rate(t["rate"], f"{src}: [workload] rate")
    return out


def load_workload(path: str | Path) -> Workload:
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"workload file {p}: a directory; bench reads a TOML workload file "
                          "(e.g. examples/bench.toml)")
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"workload file {p} does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read workload file {p}: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: not valid TOML: {e}") from None
    src = str(p)
    unknown = set(data) - {"workload", "properties", "matrix"}
    if unknown:
        raise ConfigError(f"{src}: unknown table(s) {', '.join(sorted(unknown))} "
                          "(expected [workload], [properties], [matrix])")
    for name in ("workload", "properties", "matrix"):
        if name in data and not isinstance(data[name], dict):
            raise ConfigError(f"{src}: {name} must be a table")
    kwargs = _workload_from_table(data.get("workload", {}), src)
    props = tuple((k, _value_text(v, f"{src}: [properties] {k}"))
                  for k, v in data.get("properties", {}).items())
    matrix = []
    for k, v in data.get("matrix", {}).items():
        values: Sequence[Any] = v if isinstance(v, list) else [v]
        matrix.append((k, tuple(_value_text(x, f"{src}: [matrix] {k}") for x in values)))
    return Workload(properties=props, matrix=tuple(matrix), source=src, **kwargs)
