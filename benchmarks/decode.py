"""`kctl decode` against tshark on the same large capture, in one run.

The capture (>= --size-mb, 200 MB by default) is made here unless it exists: tcpdump
on lo while `kctl produce` (2 workers, 1000-byte records) writes to the embedded
broker, chunk after chunk until the file is big enough (Produce requests carry
almost all the bytes). It lives under /tmp and is never committed.

Timed on that file, each as a subprocess writing to /dev/null:

- `kctl decode F --port P --json`       (every frame, full body, one JSON line each)
- `kctl decode F --port P --summary --json`
- `tshark -r F -d tcp.port==P,kafka -T json`  (full Kafka dissection as JSON)

MB/s is capture-file bytes per wall second; frames/s is Kafka frames (counted by
kctl's summary) per wall second for both, and also packets/s for tshark. tshark is
stopped after --tshark-timeout seconds; then it is reported with what it managed
(packets written before the timeout, from its JSON output) and marked so.

Run: .venv/bin/python benchmarks/decode.py [--capture /tmp/kctl-decode-bench.pcap]
     [--size-mb 200] [--tshark-timeout 900] [--remake]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from kctl.broker import EmbeddedBroker

DEFAULT_CAPTURE = "/tmp/kctl-decode-bench.pcap"
TOPIC = "bench-decode"


def _tcpdump(path: Path, port: int) -> subprocess.Popen:
    exe = shutil.which("tcpdump")
    if exe is None:
        sys.exit("tcpdump is not installed (tools/setup.sh installs it)")
    # -B: a 64 MiB kernel buffer so a burst of 1 KB records is not dropped.
    proc = subprocess.Popen([exe, "-i", "lo", "-n", "-B", "65536", "-w", str(path),
                             f"tcp port {port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    line = proc.stderr.readline().decode(errors="replace")
    if "listening on" not in line:
        proc.kill()
        sys.exit(f"tcpdump cannot capture on lo: {line.strip()}")
    return proc


def make_capture(path: Path, size_mb: int) -> int:
    """Write the capture; returns the broker port it was captured on."""
    with EmbeddedBroker() as broker:
        proc = _tcpdump(path, broker.port)
        try:
            chunk = 50_000
            while not path.exists() or path.stat().st_size < size_mb << 20:
                subprocess.run([sys.executable, "-m", "kctl", "produce", "-b", broker.bootstrap,
                                "-t", TOPIC, "--num-records", str(chunk), "--record-size", "1000",
                                "--workers", "2", "--quiet", "-X", "linger.ms=5"],
                               check=True, capture_output=True, timeout=600)
                print(f"  capture: {path.stat().st_size / 1e6:.0f} MB", file=sys.stderr)
            time.sleep(0.5)
        finally:
            proc.send_signal(signal.SIGINT)
            err = proc.communicate(timeout=30)[1].decode(errors="replace")
        dropped = [ln for ln in err.splitlines() if "dropped by kernel" in ln]
        print(f"  tcpdump: {'; '.join(dropped) or err.strip()}", file=sys.stderr)
        return broker.port


def _timed(args: list[str], timeout_s: float | None = None) -> tuple[float, bool, bytes]:
    """Wall seconds, whether it finished, and the first bytes of stdout when asked."""
    t0 = time.perf_counter()
    with open(os.devnull, "wb") as null:
        proc = subprocess.Popen(args, stdout=null, stderr=subprocess.PIPE)
        try:
            err = proc.communicate(timeout=timeout_s)[1]
            finished = True
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            err = proc.communicate()[1]
            finished = False
    secs = time.perf_counter() - t0
    if finished and proc.returncode != 0:
        sys.exit(f"{args[:4]} failed ({proc.returncode}): {err.decode(errors='replace')[-2000:]}")
    return secs, finished, err


def _tshark_packets_within(path: Path, port: int, timeout_s: float) -> tuple[float, int, bool]:
    """tshark -T json, counting the packet objects it writes until it ends or times out."""
    exe = shutil.which("tshark")
    t0 = time.perf_counter()
    proc = subprocess.Popen([exe, "-n", "-r", str(path), "-d", f"tcp.port=={port},kafka",
                             "-T", "json"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env={**os.environ, "HOME": "/tmp"})
    packets = 0
    finished = True
    assert proc.stdout is not None
    deadline = t0 + timeout_s
    for line in proc.stdout:          # each packet object opens with this line
        if line.startswith(b'    "_index"'):
            packets += 1
        if time.perf_counter() > deadline:
            finished = False
            proc.kill()
            break
    proc.wait()
    return time.perf_counter() - t0, packets, finished


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--capture", default=DEFAULT_CAPTURE)
    ap.add_argument("--port", type=int, help="broker port of an existing --capture (else 'auto')")
    ap.add_argument("--size-mb", type=int, default=200)
    ap.add_argument("--tshark-timeout", type=float, default=900.0)
    ap.add_argument("--remake", action="store_true", help="make the capture even if it exists")
    a = ap.parse_args()

    path = Path(a.capture)
    port = a.port
    if a.remake or not path.exists() or path.stat().st_size < a.size_mb << 20:
        print(f"making {path} (>= {a.size_mb} MB) ...", file=sys.stderr)
        port = make_capture(path, a.size_mb)
    size = path.stat().st_size
    if port is None:
        from kctl.inspect.session import guess_broker_ports
        port = min(guess_broker_ports([path]))
    kctl = [sys.executable, "-m", "kctl", "decode", str(path), "--port", str(port)]

    # The summary pass also gives the frame count the rates are computed with.
    t0 = time.perf_counter()
    run = subprocess.run(kctl + ["--summary", "--json"], capture_output=True, text=True)
    summary_s = time.perf_counter() - t0
    if run.returncode != 0:
        sys.exit(f"kctl decode --summary failed: {run.stderr[-2000:]}")
    s = json.loads(run.stdout)
    frames = s["frames"]
    records = sum(p["records"] for p in s["produced"])
    json_s, _, _ = _timed(kctl + ["--json"])
    tshark_s, packets, finished = _tshark_packets_within(path, port, a.tshark_timeout)
    packets_total = _packet_count(path)

    def line(name: str, secs: float, nbytes: float, nframes: float, extra: str = "") -> str:
        return (f"{name:<34} {secs:8.1f} s {nbytes / 1e6 / secs:8.1f} MB/s "
                f"{nframes / secs:10.0f} frames/s{extra}")

    print(f"capture {path}: {size / 1e6:.1f} MB, {packets_total} packets, {frames} Kafka frames, "
          f"{records} produced records, {len(s['produced'])} partitions, "
          f"marks {s['marks'] or '{}'}, notices {s['notices'] or '{}'}")
    print(line("kctl decode --summary --json", summary_s, size, frames))
    print(line("kctl decode --json", json_s, size, frames))
    if finished:
        print(line("tshark -T json", tshark_s, size, frames, f" {packets / tshark_s:10.0f} packets/s"))
    else:
        share = packets / packets_total if packets_total else 0.0
        print(f"{'tshark -T json (TIMED OUT)':<34} {tshark_s:8.1f} s: {packets} of {packets_total} packets "
              f"({share:.1%}) -> {share * size / 1e6 / tshark_s:.1f} MB/s, "
              f"{packets / tshark_s:.0f} packets/s, ~{share * frames / tshark_s:.0f} frames/s")
        tshark_s = tshark_s / share if share else float("inf")
        print(f"{'':<34} (extrapolated to the whole file: {tshark_s:.0f} s)")
    print(f"ratio tshark/kctl wall time: --json {tshark_s / json_s:.2f}x, "
          f"--summary {tshark_s / summary_s:.2f}x (above 1: kctl is faster)")


def _packet_count(path: Path) -> int:
    from kctl.inspect.pcap import CaptureReader
    with open(path, "rb") as f:
        return sum(1 for _ in CaptureReader(f, name=str(path)))


if __name__ == "__main__":
    main()
