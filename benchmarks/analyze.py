"""`kctl analyze` on Spark (local[1], local[2], a standalone cluster) against single-process
`kctl decode --json`, on one load capture of a few long connections.

The capture (>= --size-mb, 220 MB by default) is tcpdump on lo while ONE `kctl produce`
run (2 workers, 100-byte records, linger.ms=5: the project's standard workload) writes to
the embedded broker: a handful of connections, two of them carrying almost every byte, as
a load test's capture is. It is made unless it exists, and never committed.

Timed on that file, each as a subprocess, start-up included (interpreter, JVM, Spark):

- `kctl decode F --port P --json > /dev/null`          one process, one core
- `kctl analyze F --port P --out D --master local[1]`   Spark, one task slot
- `kctl analyze F --port P --out D --master local[2]`   Spark, two task slots
- `kctl analyze F ... --master spark://127.0.0.1:...`   a standalone cluster started here
  (master + two 1-core workers, tests/spark/standalone.py), after the timed runs

and analyze local[1] and local[2] on the file's first 200 packets: Spark's start-up and
fixed costs, printed for context (the targets are on the full timings).

analyze uses its defaults (ranges for 2 tasks per task slot, 1 on one slot, 8 MiB lookback); decode its
own. Targets: local[2] at least 1.5x local[1] (it scales with cores); local[1] at least
0.5x decode --json (Spark's overhead is bounded). The requests tables of the three analyze
runs are read back (pyarrow) and compared row for row; their frame counts against decode's.

Run: .venv/bin/python benchmarks/analyze.py [--capture /tmp/kctl-analyze-bench.pcap]
     [--size-mb 220] [--no-cluster] [--repeat 1]
(under `cpu-exclusive` for figures worth reporting)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Not benchmarks/ on the path: a sibling script named like a stdlib module (inspect.py)
# would shadow it. benchmarks/decode.py is loaded by its path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"]
sys.path.insert(0, str(ROOT))


def _sibling(name: str):
    import importlib.util
    spec = importlib.util.spec_from_file_location(f"kctl_bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_tcpdump = _sibling("decode")._tcpdump

DEFAULT_CAPTURE = "/tmp/kctl-analyze-bench.pcap"
BYTES_PER_RECORD = 186      # 100-byte records on the wire, batches and TCP/IP included
STARTUP_PACKETS = 200


def make_capture(path: Path, size_mb: int) -> int:
    """One kctl produce run under tcpdump, sized to reach ``size_mb``; the broker port."""
    from kctl.broker import EmbeddedBroker
    records = (size_mb << 20) // BYTES_PER_RECORD + 50_000
    with EmbeddedBroker() as broker:
        proc = _tcpdump(path, broker.port)
        try:
            subprocess.run([sys.executable, "-m", "kctl", "produce", "-b", broker.bootstrap,
                            "-t", "bench-analyze", "--num-records", str(records), "--record-size", "100",
                            "--workers", "2", "--quiet", "-X", "linger.ms=5"],
                           check=True, capture_output=True, timeout=1200)
            time.sleep(0.5)
        finally:
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=30)
    print(f"  capture: {path.stat().st_size / 1e6:.0f} MB, broker port {broker.port}", file=sys.stderr)
    return broker.port


def head_capture(src: Path, dst: Path, packets: int) -> None:
    """The first ``packets`` packets of a classic pcap file: a capture with next to nothing
    to decode, so ``kctl analyze`` on it times Spark's start-up and fixed costs alone."""
    with open(src, "rb") as f, open(dst, "wb") as out:
        head = f.read(24)
        out.write(head)
        order = "<" if head[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
        for _ in range(packets):
            rec = f.read(16)
            if len(rec) < 16:
                break
            out.write(rec + f.read(struct.unpack(order + "I", rec[8:12])[0]))


def timed(args: list[str], stdout: int | None = None) -> tuple[float, str]:
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "kctl", *args], stdout=stdout or subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - t0
    if res.returncode:
        sys.exit(f"kctl {' '.join(args)} failed: {res.stderr[-2000:]}")
    return elapsed, res.stdout or ""


def table_rows(out: str) -> list[str]:
    import pyarrow.parquet as pq
    t = pq.read_table(os.path.join(out, "requests")).drop_columns(["file"])  # path vs file:// URI
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in t.to_pylist())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--capture", default=DEFAULT_CAPTURE)
    ap.add_argument("--port", type=int)
    ap.add_argument("--size-mb", type=int, default=220)
    ap.add_argument("--no-cluster", action="store_true")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each (the best is shown)")
    a = ap.parse_args()
    path = Path(a.capture)
    port = a.port
    if not path.exists() or path.stat().st_size < a.size_mb << 20:
        print(f"making {path} (>= {a.size_mb} MB) ...", file=sys.stderr)
        port = make_capture(path, a.size_mb)
    if port is None:
        from kctl.inspect.session import guess_broker_ports
        port = min(guess_broker_ports([path]))
    mb = path.stat().st_size / 1e6
    work = Path(tempfile.mkdtemp(prefix="kctl-analyze-bench-"))
    times: dict[str, float] = {}
    results: dict[str, dict] = {}
    try:
        for _ in range(a.repeat):
            with open(os.devnull, "w") as null:
                t, _o = timed(["decode", str(path), "--port", str(port), "--json"], stdout=null)
            times["decode --json"] = min(t, times.get("decode --json", t))
            for master in ("local[1]", "local[2]"):
                out = work / master.replace("[", "").replace("]", "")
                t, text = timed(["analyze", str(path), "--port", str(port), "--out", str(out),
                                 "--master", master, "--json", "--overwrite"])
                times[master] = min(t, times.get(master, t))
                results[master] = json.loads(text) | {"dir": str(out)}
        # Start-up and fixed costs: the same command on the capture's first packets only.
        head = work / "head.pcap"
        head_capture(path, head, STARTUP_PACKETS)
        startup: dict[str, float] = {}
        for master in ("local[1]", "local[2]"):
            startup[master] = timed(["analyze", str(head), "--port", str(port), "--out",
                                     str(work / "head-out"), "--master", master, "--json", "--overwrite"])[0]
        summary = json.loads(timed(["decode", str(path), "--port", str(port), "--summary", "--json"])[1])
        if not a.no_cluster:
            from tests.spark.standalone import StandaloneCluster
            cluster = StandaloneCluster(work / "cluster")
            try:
                cluster.start()
                out = work / "standalone"
                t, text = timed(["analyze", path.resolve().as_uri(), "--port", str(port), "--out",
                                 str(out), "--master", cluster.url, "--json"])
                times["standalone"] = t
                results["standalone"] = json.loads(text) | {"dir": str(out)}
            finally:
                cluster.stop()
        frames = summary["frames"]
        print(f"capture {path}: {mb:.0f} MB, {frames} Kafka frames (kctl decode --summary), "
              f"broker port {port}; best of {a.repeat}")
        print("settings: decode --json (one process, every frame as a JSON line to /dev/null); "
              "analyze: defaults (2 tasks per task slot, 1 on one slot, 8 MiB lookback, Parquet + SQL summaries); "
              "standalone: master + 2 workers x 1 core on this machine, capture as a file:// URI")
        print(f"{'run':<16} {'seconds':>8} {'MB/s':>7} {'frames/s':>9} {'tasks':>6} {'rows':>7} {'repaired':>8}")
        for name, t in times.items():
            r = results.get(name, {})
            print(f"{name:<16} {t:8.1f} {mb / t:7.1f} {frames / t:9.0f} {r.get('tasks', '-'):>6} "
                  f"{r.get('requests', '-'):>7} {len(r.get('repaired_connections', [])) if r else '-':>8}")
        for master, t in startup.items():
            print(f"{master + ' start-up':<16} {t:8.1f}   (the capture's first {STARTUP_PACKETS} "
                  "packets: Spark's fixed costs)")
        l1, l2, dec = times["local[1]"], times["local[2]"], times["decode --json"]
        print(f"local[2] vs local[1]: x{l1 / l2:.2f} (target >= 1.5: {'reached' if l1 / l2 >= 1.5 else 'NOT reached'})")
        print(f"local[1] vs decode --json: x{dec / l1:.2f} (target >= 0.5: {'reached' if dec / l1 >= 0.5 else 'NOT reached'})")
        w1, w2 = l1 - startup["local[1]"], l2 - startup["local[2]"]
        print(f"for context, without the fixed costs (not the targets): local[2] vs local[1] "
              f"x{w1 / w2:.2f}; local[1] vs decode --json x{dec / w1:.2f}")
        base = table_rows(results["local[1]"]["dir"])
        for name, r in results.items():
            counted = sum(x["requests"] + x["responses"] for x in r["latency"])
            same = table_rows(r["dir"]) == base if name != "local[1]" else True
            print(f"{name}: {r['requests']} rows, {counted} frames ({'=' if counted == frames else '!='} "
                  f"decode's {frames}); rows {'equal to' if same else 'DIFFER from'} local[1]'s")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
