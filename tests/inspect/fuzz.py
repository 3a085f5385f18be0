"""Mutation fuzzing of ``kctl decode``, as Wireshark's fuzz-test does with editcap.

Three targets, each run in-process on bytes:

- ``capture``: a pcap/pcapng file through the whole decode path (reader, reassembly, frame
  and record decoding, the JSON and line views, ``--records``, the summary, and on a
  quarter of the inputs the Rich ``--summary`` tables and ``--verbose`` trees), as
  ``kctl decode`` runs it. Input: 2 bytes of broker port, then the file.
- ``frame``: one Kafka frame through ``decode_hex_frame`` (``--hex``) and its views.
  Input: 1 byte (0 request, 1 response), API key and version (2 bytes each), the frame.
- ``batches``: a records blob through ``scan_batches``, ``iter_batch_records`` and
  ``decode_batches``, which must agree.

Seeds are real captures (``fuzz_seeds/``, made by tcpdump around kctl and kafka-python on
the embedded broker) and the frames and record sets inside them. Mutations: byte flips at
about 2%, truncation, splices of two inputs, inserted/deleted/duplicated runs, boundary
integers; for captures also packet windows (a capture that starts mid-stream), duplicated,
dropped and reordered packets.

An input *fails* when it raises anything but kctl's own errors, takes more CPU time than the
limit per 64 KiB of input (the best of up to four runs), or grows the
process's peak RSS by more than the memory limit (``/proc/self/clear_refs`` resets the peak
per input). Failing inputs are written to ``fuzz_corpus/`` (``TARGET-KIND-SHA.bin``), which
``test_fuzz.py`` replays on every run.

    .venv/bin/python -m tests.inspect.fuzz --inputs 1000000     # the long campaign
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import random
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from crc32c import crc32c
from rich.console import Console

from kctl.errors import KctlError
from kctl.inspect import report
from kctl.inspect.session import CaptureNotice, DecodedFrame, decode_hex_frame, decode_stream
from kctl.inspect.summary import CaptureSummary
from kctl.protocol.compression import DecompressionBudget
from kctl.protocol.records import decode_batches, iter_batch_records, scan_batches
from kctl.ui.decode_view import frame_tree, summary_tables

HERE = Path(__file__).resolve().parent
SEEDS = HERE / "fuzz_seeds"
CORPUS = HERE / "fuzz_corpus"

#: The issue's targets: no input over 100 ms per 64 KiB, none over 64 MiB.
TARGET_S_PER_64K = 0.100
TARGET_MEM_BYTES = 64 << 20


# -- targets ----------------------------------------------------------------------------

def run_capture(data: bytes) -> None:
    port = int.from_bytes(data[:2], "big")
    summary = CaptureSummary()
    # The Rich views (--summary tables, --verbose trees) on a quarter of the inputs, chosen
    # by the input itself so that a corpus entry replays the same way: they cost more.
    rich = len(data) % 4 == 0
    tree = False
    for item in decode_stream(io.BytesIO(data[2:]), "fuzz", {port}):
        summary.add(item)
        if isinstance(item, DecodedFrame):
            _views(item)
            if rich and not tree:
                _render(frame_tree(item))
                tree = True
        else:
            str(item)
    totals = summary.to_dict()
    report.dumps(totals)
    if rich:
        for table in summary_tables(totals):
            _render(table)


def _render(renderable: object) -> None:
    Console(file=io.StringIO(), width=100, color_system=None).print(renderable)


def run_frame(data: bytes) -> None:
    if len(data) < 5:
        return
    kind, key, version = data[0] & 1, *struct.unpack_from(">hh", data, 1)
    if kind:
        f = decode_hex_frame(data[5:], api_key=key, api_version=version).frame
    else:
        f = decode_hex_frame(data[5:]).frame
    _views(f)


def run_batches(data: bytes) -> None:
    scan = scan_batches(data, budget=DecompressionBudget.fixed(8 << 20))
    streamed = 0
    try:
        for _ in iter_batch_records(data, budget=DecompressionBudget.fixed(8 << 20),
                                    max_batches=len(scan.batches)):
            streamed += 1
    except KctlError:
        raise AssertionError("a batch that scanned clean failed to stream") from None
    if streamed != scan.record_count:
        raise AssertionError(f"scan counted {scan.record_count} records, stream gave {streamed}")
    try:
        d = decode_batches(data, max_decompressed=8 << 20)
    except KctlError:
        if scan.error is None:
            raise AssertionError("decode_batches failed where scan_batches did not") from None
        return
    if scan.error is not None or sum(len(b.records) for b in d.batches) != scan.record_count:
        raise AssertionError("decode_batches and scan_batches disagree")


def _views(f: DecodedFrame) -> None:
    """What the decode command renders: the JSON object, the line, every record."""
    report.dumps(report.frame_json(f))
    report.frame_line(f)
    for rv in report.iter_records(f):
        report.dumps(report.record_json(rv))
        report.format_record(report.DEFAULT_RECORD_FORMAT, rv)
    report.topics_of(f)
    report.has_errors(f)


TARGETS: dict[str, Callable[[bytes], None]] = {
    "capture": run_capture, "frame": run_frame, "batches": run_batches,
}


# -- seeds ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Seeds:
    captures: tuple[bytes, ...]     # port + file
    frames: tuple[bytes, ...]       # kind + key + version + frame
    batches: tuple[bytes, ...]

    def of(self, target: str) -> tuple[bytes, ...]:
        return {"capture": self.captures, "frame": self.frames, "batches": self.batches}[target]


@cache
def seeds() -> Seeds:
    from tests.inspect.live_capture import decode_keeping_bytes
    captures, frames, batches = [], [], []
    for path in sorted(SEEDS.glob("real.p*.pcap*")):
        port = int(path.name.split(".")[1][1:])
        data = path.read_bytes()
        captures.append(port.to_bytes(2, "big") + data)
        if path.suffix != ".pcap":
            continue
        d = decode_keeping_bytes(path, port)
        for f, raw in zip(d.frames, d.data):
            if f.api_key is None or f.api_version is None:
                continue
            kind = 0 if f.direction == "request" else 1
            frames.append(bytes([kind]) + struct.pack(">hh", f.api_key, f.api_version) + raw)
            batches += [rs.data for rs in f.record_sets if rs.data]
    return Seeds(tuple(captures), tuple(frames), tuple(dict.fromkeys(batches)))


# -- mutations --------------------------------------------------------------------------

_INTERESTING = (b"\x00", b"\xff", b"\x7f", b"\x80", b"\x00\x00", b"\xff\xff", b"\x7f\xff",
                b"\x80\x00", b"\x00\x00\x00\x00", b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff",
                b"\x80\x00\x00\x00", b"\x00\x00\x10\x00", b"\x00\x10\x00\x00", b"\x01\x00\x00\x00")


def _flip(data: bytearray, rng: random.Random, rate: float = 0.02) -> None:
    """About ``rate`` of the bytes changed, or (half the time) one to three: heavy damage
    finds crashes in framing, light damage gets deep into the decoders."""
    if rng.random() < 0.5:
        n = rng.randint(1, 3)
    else:
        n = max(1, int(len(data) * rate * rng.random() * 2))
    for _ in range(n):
        i = rng.randrange(len(data))
        data[i] = rng.randrange(256) if rng.random() < 0.5 else data[i] ^ (1 << rng.randrange(8))


def mutate_bytes(data: bytes, rng: random.Random, pool: tuple[bytes, ...], keep: int = 0) -> bytes:
    """One to three byte-level mutations; the first ``keep`` bytes (a target's own header)
    are mutated only rarely."""
    head, body = bytearray(data[:keep]), bytearray(data[keep:])
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(8)
        if not body:
            body = bytearray(rng.randbytes(rng.randint(1, 64)))
        if op <= 1:
            _flip(body, rng)
        elif op == 2:
            del body[rng.randrange(len(body) + 1):]
        elif op == 3 and pool:
            other = rng.choice(pool)[keep:]
            body = body[:rng.randrange(len(body) + 1)] + other[rng.randrange(len(other) + 1):]
        elif op == 4:
            at = rng.randrange(len(body) + 1)
            body[at:at] = rng.randbytes(rng.randint(1, 16))
        elif op == 5:
            at = rng.randrange(len(body))
            del body[at:at + rng.randint(1, 64)]
        elif op == 6:
            a = rng.randrange(len(body))
            piece = body[a:a + rng.randint(1, 256)]
            at = rng.randrange(len(body) + 1)
            body[at:at] = piece * rng.randint(1, 4)
        else:
            v = rng.choice(_INTERESTING)
            at = rng.randrange(len(body))
            body[at:at + len(v)] = v
    if head and rng.random() < 0.05:
        _flip(head, rng, 0.5)
    return bytes(head + body)


def _split_capture(data: bytes) -> tuple[bytes, list[bytes], str] | None:
    """(file header, packet records, byte order) of a well-formed seed capture."""
    if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        recs, pos = [], 24
        while pos + 16 <= len(data):
            n = struct.unpack_from("<I", data, pos + 8)[0]
            recs.append(data[pos:pos + 16 + n])
            pos += 16 + n
        return data[:24], recs, "<"
    if data[:4] == b"\x0a\x0d\x0d\x0a":
        o = "<" if data[8:12] == b"\x4d\x3c\x2b\x1a" else ">"
        blocks, pos = [], 0
        while pos + 12 <= len(data):
            n = struct.unpack_from(o + "I", data, pos + 4)[0]
            blocks.append(data[pos:pos + n])
            pos += n
        return b"".join(blocks[:2]), blocks[2:], o
    return None


def mutate_capture(data: bytes, rng: random.Random, pool: tuple[bytes, ...]) -> bytes:
    """Packet-level changes (a window of packets, duplicates, drops, reordering), then
    sometimes byte-level ones."""
    port, file = data[:2], data[2:]
    split = _split_capture(file)
    if split is not None:
        head, recs, _ = split
        if rng.random() < 0.9 and recs:
            a = rng.randrange(len(recs))
            recs = recs[a:a + rng.randint(1, 80)]
        for _ in range(rng.randint(0, 3)):
            if not recs:
                break
            op = rng.randrange(3)
            i = rng.randrange(len(recs))
            if op == 0:
                recs.insert(rng.randrange(len(recs) + 1), recs[i])
            elif op == 1:
                del recs[i]
            else:
                j = min(len(recs), i + rng.randint(2, 12))
                window = recs[i:j]
                rng.shuffle(window)
                recs[i:j] = window
        file = head + b"".join(recs)
    if split is None or rng.random() < 0.7:
        file = mutate_bytes(file, rng, tuple(p[2:] for p in pool))
    return port + file


def fix_crcs(data: bytes) -> bytes:
    """Recomputes the CRC-32C of every v2 batch header found in ``data``, so that damage
    inside a batch reaches the record decoder instead of stopping at the CRC check."""
    buf = bytearray(data)
    i = buf.find(b"\x02", 16)
    while i != -1:
        at = i - 16
        length = struct.unpack_from(">i", buf, at + 8)[0]
        if 49 <= length <= len(buf) - at - 12:
            crc = crc32c(bytes(buf[at + 21:at + 12 + length]))
            buf[at + 17:at + 21] = crc.to_bytes(4, "big")
        i = buf.find(b"\x02", i + 1)
    return bytes(buf)


def mutate(target: str, data: bytes, rng: random.Random, pool: tuple[bytes, ...]) -> bytes:
    if target == "capture":
        return mutate_capture(data, rng, pool)
    out = mutate_bytes(data, rng, pool, keep=5 if target == "frame" else 0)
    if rng.random() < 0.6:
        out = fix_crcs(out)
    return out


# -- running ----------------------------------------------------------------------------

def _reset_peak() -> int:
    """Resets this process's peak RSS to its current RSS (Linux) and returns it in bytes."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    return _status("VmRSS")


def _status(key: str) -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


@dataclass
class Outcome:
    error: str | None       # an exception that is not kctl's own, with its type
    seconds: float          # CPU seconds of this process: the work, whatever else runs
    mem_bytes: int


def run_one(target: str, data: bytes) -> Outcome:
    rss = _reset_peak()
    # CPU time, not wall time: on a shared machine the wall clock also counts the time
    # other processes had the core (an ordinary input measured 167 ms per 64 KiB of wall
    # time under contention, 24 ms alone); quadratic work shows in CPU time all the same.
    t0 = time.process_time()
    error = None
    try:
        TARGETS[target](data)
    except KctlError:
        pass
    except Exception as e:  # noqa: BLE001 - the point: anything else is a finding
        error = f"{type(e).__name__}: {e}"[:300]
    secs = time.process_time() - t0
    return Outcome(error, secs, max(0, _status("VmHWM") - rss))


def per_64k(seconds: float, nbytes: int) -> float:
    return seconds / max(1.0, nbytes / 65536)


@dataclass
class Finding:
    target: str
    kind: str               # exception | slow | memory
    detail: str
    path: Path | None


@dataclass
class Report:
    inputs: int = 0
    by_target: dict[str, int] = field(default_factory=dict)
    kctl_errors: int = 0
    findings: list[Finding] = field(default_factory=list)
    slowest: tuple[float, str, int] = (0.0, "", 0)      # s per 64 KiB, target, bytes
    largest: tuple[int, str, int] = (0, "", 0)          # bytes, target, input bytes
    seconds: float = 0.0

    def lines(self) -> list[str]:
        return [f"{self.inputs} inputs in {self.seconds:.0f} s ({self.by_target})",
                f"exceptions other than kctl's errors: "
                f"{sum(f.kind == 'exception' for f in self.findings)}",
                f"slowest input: {self.slowest[0] * 1000:.1f} ms of CPU per 64 KiB "
                f"({self.slowest[1]}, {self.slowest[2]} bytes)",
                f"largest memory: {self.largest[0] / 2**20:.1f} MiB of peak RSS growth "
                f"({self.largest[1]}, {self.largest[2]} bytes)",
                *(f"FINDING {f.target} {f.kind}: {f.detail} -> {f.path}" for f in self.findings)]


def save(target: str, kind: str, data: bytes, corpus: Path = CORPUS) -> Path:
    corpus.mkdir(exist_ok=True)
    path = corpus / f"{target}-{kind}-{hashlib.sha1(data).hexdigest()[:16]}.bin"
    path.write_bytes(data)
    return path


def check(target: str, data: bytes, rep: Report, *, s_per_64k: float, mem_bytes: int,
          corpus: Path | None) -> None:
    """Runs one input and records what it did; a failure is confirmed, saved and listed."""
    out = run_one(target, data)
    rep.inputs += 1
    rep.by_target[target] = rep.by_target.get(target, 0) + 1
    for _ in range(3):
        # Over the limit: timed again (the best of up to four runs counts), because a stall
        # of a shared machine is not the input's doing.
        if per_64k(out.seconds, len(data)) <= s_per_64k or out.error is not None:
            break
        again = run_one(target, data)
        out = again if again.seconds < out.seconds else out
    speed = per_64k(out.seconds, len(data))
    if speed > rep.slowest[0]:
        rep.slowest = (speed, target, len(data))
    if out.mem_bytes > rep.largest[0]:
        rep.largest = (out.mem_bytes, target, len(data))
    for kind, bad, detail in (
            ("exception", out.error is not None, out.error or ""),
            ("slow", speed > s_per_64k, f"{speed * 1000:.0f} ms per 64 KiB"),
            ("memory", out.mem_bytes > mem_bytes, f"{out.mem_bytes / 2**20:.0f} MiB")):
        if bad:
            path = save(target, kind, data, corpus) if corpus is not None else None
            rep.findings.append(Finding(target, kind, detail, path))


def corpus_inputs(corpus: Path = CORPUS) -> Iterator[tuple[str, bytes, Path]]:
    for path in sorted(corpus.glob("*.bin")):
        yield path.name.split("-", 1)[0], path.read_bytes(), path


def campaign(*, seconds: float | None = None, inputs: int | None = None, seed: int = 0,
             weights: dict[str, float] | None = None, s_per_64k: float = TARGET_S_PER_64K,
             mem_bytes: int = TARGET_MEM_BYTES, corpus: Path | None = CORPUS,
             progress: Callable[[Report], None] | None = None) -> Report:
    """Mutated seeds through the targets until ``seconds`` or ``inputs`` run out."""
    weights = weights or {"capture": 0.4, "frame": 0.3, "batches": 0.3}
    rng = random.Random(seed)
    s = seeds()
    names = list(weights)
    rep = Report()
    t0 = time.perf_counter()
    while True:
        if inputs is not None and rep.inputs >= inputs:
            break
        if seconds is not None and time.perf_counter() - t0 >= seconds:
            break
        target = rng.choices(names, [weights[n] for n in names])[0]
        pool = s.of(target)
        data = mutate(target, rng.choice(pool), rng, pool)
        check(target, data, rep, s_per_64k=s_per_64k, mem_bytes=mem_bytes, corpus=corpus)
        if progress is not None and rep.inputs % 10_000 == 0:
            progress(rep)
    rep.seconds = time.perf_counter() - t0
    return rep


def main() -> None:
    ap = argparse.ArgumentParser(description="kctl decode's mutation fuzz campaign")
    ap.add_argument("--inputs", type=int, default=1_000_000)
    ap.add_argument("--seconds", type=float)
    ap.add_argument("--seed", type=int, default=int(os.environ.get("KCTL_FUZZ_SEED", "13")))
    ap.add_argument("--target", choices=list(TARGETS), action="append")
    a = ap.parse_args()
    weights = {t: 1.0 for t in a.target} if a.target else None

    def progress(rep: Report) -> None:
        print(f"  {rep.inputs} inputs, {time.perf_counter() - t0:.0f} s, "
              f"{len(rep.findings)} findings, slowest {rep.slowest[0] * 1000:.1f} ms/64KiB, "
              f"largest {rep.largest[0] / 2**20:.1f} MiB", flush=True)
    t0 = time.perf_counter()
    rep = campaign(seconds=a.seconds, inputs=None if a.seconds else a.inputs, seed=a.seed,
                   weights=weights, progress=progress)
    print("\n".join(rep.lines()))


if __name__ == "__main__":
    main()
