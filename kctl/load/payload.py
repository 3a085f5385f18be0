"""Record values and keys for load runs, generated once before the run.

How this works: a run draws values from a pool made in advance (the hot path
must not build bytes per record), cycling through it. ``--record-size`` with
``--payload random|text|zeros`` makes a pool of same-size values, so batches
can be laid out from a template; ``--compressibility`` (0..1) makes that
fraction of each value a repeated run, so compression ratios are realistic
and controllable. ``--payload-file`` (split by ``--payload-delimiter``, a
newline by default) gives values of their own sizes, as
kafka-producer-perf-test does; ``--payload-file -`` reads them from stdin.
``--payload-monotonic`` (perf-test's) makes each value the record's sequence number
as decimal text (``0``, ``1``, ``2``, ...), one sequence per worker: the pool holds a
worker's whole share, so values never repeat within a worker.

Keys (``--keys``): ``none``; ``seq`` (the record's position in its worker's
schedule, as decimal text); ``random:N`` (N distinct keys of one width,
``key-000`` .. ``key-999`` for N=1000, drawn uniformly); ``file:F`` (one key per
line of F, cycled). The worker lays keys and values out in a record pool once
(load/worker.py ``record_pool``), so the producer computes each distinct key's
partition once.
"""

from __future__ import annotations

import random
import string
import sys
from dataclasses import dataclass
from pathlib import Path

from kctl.errors import ConfigError

POOL_SIZE = 1024
#: Most values a monotonic pool holds (each is a Python bytes object in every worker).
MAX_MONOTONIC = 10_000_000
_TEXT = (string.ascii_letters + string.digits + " .,;-").encode()


@dataclass(frozen=True, slots=True)
class PayloadSpec:
    kind: str = "random"          # random | text | zeros | file | monotonic
    record_size: int = 100
    compressibility: float = 0.0
    file: str | None = None
    delimiter: bytes = b"\n"
    seed: int = 0
    count: int = 0                # monotonic: values per worker

    def validate(self) -> None:
        if self.kind == "monotonic":
            if not 0 < self.count <= MAX_MONOTONIC:
                raise ConfigError(f"--payload-monotonic holds one value per record of a worker's share: "
                                  f"1..{MAX_MONOTONIC:,} per worker, not {self.count:,}")
            return
        if self.kind not in ("random", "text", "zeros", "file"):
            raise ConfigError(f"--payload must be random, text or zeros, not {self.kind!r}")
        if self.kind != "file" and not 0 <= self.record_size <= 100 * 1024 * 1024:
            raise ConfigError(f"--record-size must be 0..104857600 bytes, not {self.record_size}")
        if not 0.0 <= self.compressibility <= 1.0:
            raise ConfigError(f"--compressibility must be between 0 and 1, not {self.compressibility}")


@dataclass(frozen=True, slots=True)
class PayloadPool:
    values: tuple[bytes | None, ...]  # None: a null value (kctl replay's null cells)
    value_size: int | None        # the common size, None when sizes vary or a value is null

    @property
    def mean_size(self) -> float:
        return sum(len(v) for v in self.values if v is not None) / len(self.values)


def make_pool(spec: PayloadSpec) -> PayloadPool:
    spec.validate()
    if spec.kind == "file":
        return _from_file(spec)
    if spec.kind == "monotonic":
        values = tuple(str(i).encode() for i in range(spec.count))
        return PayloadPool(values, None if spec.count > 10 else 1)
    rng = random.Random(spec.seed)
    size = spec.record_size
    count = 1 if spec.kind == "zeros" else POOL_SIZE
    values = []
    for _ in range(count):
        values.append(_one(spec.kind, size, spec.compressibility, rng))
    return PayloadPool(tuple(values), size)


def _one(kind: str, size: int, compressibility: float, rng: random.Random) -> bytes:
    if kind == "zeros":
        return bytes(size)
    repeated = int(size * compressibility)
    fresh = size - repeated
    if kind == "random":
        head = rng.randbytes(fresh)
    else:
        head = bytes(rng.choices(_TEXT, k=fresh))
    return head + (bytes([head[0] if head else 97]) * repeated)


def _from_file(spec: PayloadSpec) -> PayloadPool:
    if not spec.file:
        raise ConfigError("--payload-file needs a file name")
    path = Path(spec.file)
    if spec.file == "-" and sys.stdin.isatty():
        raise ConfigError("--payload-file -: stdin is a terminal; pipe the payloads in "
                          "(for example: cat values.txt | kctl produce --payload-file -)")
    try:
        data = sys.stdin.buffer.read() if spec.file == "-" else path.read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read --payload-file {spec.file}: {e.strerror}") from None
    if not spec.delimiter:
        raise ConfigError("--payload-delimiter must not be empty")
    values = [v for v in data.split(spec.delimiter) if v]
    if not values:
        raise ConfigError(f"--payload-file {spec.file} holds no payloads "
                          f"(split by {spec.delimiter!r})")
    sizes = {len(v) for v in values}
    return PayloadPool(tuple(values), sizes.pop() if len(sizes) == 1 else None)


@dataclass(frozen=True, slots=True)
class KeySpec:
    """Parsed ``--keys``: ``none``, ``seq``, ``random:N`` or ``file:F``."""

    kind: str
    count: int = 0
    keys: tuple[bytes, ...] = ()

    @property
    def keyed(self) -> bool:
        return self.kind != "none"

    def key_for(self, seq: int, rng: random.Random) -> bytes | None:
        if self.kind == "none":
            return None
        if self.kind == "seq":
            return str(seq).encode()
        if self.kind == "random":
            return self.keys[rng.randrange(self.count)]
        return self.keys[seq % len(self.keys)]


def parse_keys(text: str) -> KeySpec:
    kind, _, arg = text.partition(":")
    if kind == "none" and not arg:
        return KeySpec("none")
    if kind == "seq" and not arg:
        return KeySpec("seq")
    if kind == "random":
        try:
            n = int(arg)
        except ValueError:
            n = 0
        if n < 1:
            raise ConfigError(f"--keys random:N needs a positive N, not {text!r}")
        width = len(str(n - 1))
        return KeySpec("random", n, tuple(f"key-{i:0{width}d}".encode() for i in range(n)))
    if kind == "file":
        if not arg:
            raise ConfigError("--keys file:F needs a file name")
        try:
            keys = tuple(line for line in Path(arg).read_bytes().splitlines() if line)
        except OSError as e:
            raise ConfigError(f"cannot read --keys file {arg}: {e.strerror}") from None
        if not keys:
            raise ConfigError(f"--keys file {arg} holds no keys")
        return KeySpec("file", len(keys), keys)
    raise ConfigError(f"--keys must be none, seq, random:N or file:F, not {text!r}")
