"""`kctl analyze` (Spark, local[*]) against single-process `kctl decode --json` on one capture.

The capture is benchmarks/decode.py's (tcpdump on lo while `kctl produce` writes 1000-byte
records; >= --size-mb, 200 MB by default), made with its ``make_capture`` unless it exists.
A load run has few TCP connections, so analyze can split it only that far (a TCP stream is
never split); --split-mb sets the size above which a capture is split.

Timed, each as a subprocess (Spark's cold start included for analyze):

- `kctl decode F --port P --json > /dev/null`   frames/s
- `kctl analyze F --port P --out DIR --json`     request/response rows/s (and frames/s:
  two frames per answered row)

Run: .venv/bin/python benchmarks/analyze.py [--capture /tmp/kctl-decode-bench.pcap]
     [--size-mb 200] [--master local[*]] [--split-mb 16]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from decode import DEFAULT_CAPTURE, make_capture  # noqa: E402  (benchmarks/decode.py)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--capture", default=DEFAULT_CAPTURE)
    ap.add_argument("--port", type=int)
    ap.add_argument("--size-mb", type=int, default=200)
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--split-mb", type=int, default=16)
    a = ap.parse_args()
    path = Path(a.capture)
    port = a.port
    if not path.exists() or path.stat().st_size < a.size_mb << 20:
        print(f"making {path} (>= {a.size_mb} MB) ...", file=sys.stderr)
        port = make_capture(path, a.size_mb)
    if port is None:
        from kctl.inspect.session import guess_broker_ports
        port = min(guess_broker_ports([path]))
    base = [sys.executable, "-m", "kctl"]
    t0 = time.perf_counter()
    with open("/dev/null", "wb") as null:
        subprocess.run(base + ["decode", str(path), "--port", str(port), "--json"], stdout=null, check=True)
    decode_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        run = subprocess.run(base + ["analyze", str(path), "--port", str(port), "--out", out,
                                     "--master", a.master, "--split-mb", str(a.split_mb), "--json"],
                             capture_output=True, text=True, check=True)
        analyze_s = time.perf_counter() - t0
    res = json.loads(run.stdout)
    rows = res["requests"]
    frames = sum(r["requests"] + r["responses"] for r in res["latency"])
    mb = path.stat().st_size / 1e6
    print(f"capture {path}: {mb:.0f} MB, {frames} frames, {rows} request/response rows, "
          f"{res['shards']} analyze task(s) on {a.master}")
    print(f"kctl decode --json   {decode_s:8.1f} s  {frames / decode_s:10.0f} frames/s  "
          f"{rows / decode_s:10.0f} rows/s  {mb / decode_s:6.1f} MB/s")
    print(f"kctl analyze         {analyze_s:8.1f} s  {frames / analyze_s:10.0f} frames/s  "
          f"{rows / analyze_s:10.0f} rows/s  {mb / analyze_s:6.1f} MB/s  (x{decode_s / analyze_s:.2f})")


if __name__ == "__main__":
    main()
