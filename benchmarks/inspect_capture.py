"""`kctl produce` straight to the embedded broker against the same run through
`kctl inspect --capture`, side by side in one run (issue 14).

- max throughput: `kctl produce --num-records 500000` with its defaults (one worker
  per core, 100-byte records, Kafka's producer defaults), records/s and send-clock p99;
- fixed rate: `kctl produce --rate 50000 --duration 10s`, the intended-clock p99
  (coordinated omission included);
- the capture: Produce requests and records on its client leg, read back with
  `kctl decode --summary --json` (no --port: its default), against the producer's
  summary (`requests_sent`, records acknowledged).

The proxy runs as users run it: `kctl inspect --capture FILE` with `--processors 1`
and with the default (one per core), each in its own process with the broker, the
producer's workers and the proxy sharing the machine. Every cell is repeated
(`--reps`, interleaved direct / through / through ... so drift hits all alike) and the
median is printed with the min-max; ratios are against the direct runs' medians.

Targets: through >= 0.7x direct records/s; at 50,000/s intended p99 through <= direct
+ 5 ms; every Produce request the producer sent is in the capture. A target not
reached is printed as NOT REACHED with the figure.

Run: .venv/bin/python benchmarks/inspect_capture.py [--records 500000] [--rate 50000]
     [--seconds 10] [--reps 3] [--processors 1,2]
"""

from __future__ import annotations

import os
import sys

# This file is named like the standard library's ``inspect``, which dataclasses imports:
# keep its directory off the import path.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]

import argparse  # noqa: E402
import json  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

from kctl.broker import EmbeddedBroker, free_port  # noqa: E402
from kctl.engine import admin  # noqa: E402
from kctl.engine.blocking_client import BlockingClient  # noqa: E402

PARTITIONS = 6
_topic = iter(range(10**6))


def fresh_topic(client) -> str:
    name = f"bench-inspect-{next(_topic)}"
    admin.create_topics(client, [name], partitions=PARTITIONS)
    return name


def produce(bootstrap: str, topic: str, load: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "s.json")
        run = subprocess.run([sys.executable, "-m", "kctl", "produce", "-b", bootstrap, "-t", topic,
                              "--quiet", "--json-out", out, *load],
                             capture_output=True, text=True, timeout=900)
        if run.returncode:
            raise SystemExit(f"kctl produce failed: {run.stderr.strip()}")
        return json.load(open(out))


def _wait_listening(port: int, proc: subprocess.Popen, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"kctl inspect exited: {proc.stderr.read()}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("kctl inspect did not start listening")


def through(broker: str, topic: str, load: list[str], processors: int, capture: str) -> tuple[dict, dict, float]:
    """The producer's summary, kctl inspect's own (--json-out) and the seconds it took to stop."""
    port = free_port()
    with tempfile.TemporaryDirectory() as d:
        summary = os.path.join(d, "inspect.json")
        proc = subprocess.Popen([sys.executable, "-m", "kctl", "inspect", "--listen", f"127.0.0.1:{port}",
                                 "--upstream", broker, "--capture", capture, "--processors",
                                 str(processors), "--json-out", summary],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            _wait_listening(port, proc)
            s = produce(f"127.0.0.1:{port}", topic, load)
            stopped = time.monotonic()
            proc.terminate()
            _, err = proc.communicate(timeout=300)
            stop_s = time.monotonic() - stopped
        finally:
            proc.kill()
        if proc.returncode:
            raise SystemExit(f"kctl inspect failed: {err.strip()}")
        return s, json.load(open(summary)), stop_s


def decoded(capture: str) -> dict:
    run = subprocess.run([sys.executable, "-m", "kctl", "decode", capture, "--summary", "--json"],
                         capture_output=True, text=True, timeout=900)
    if run.returncode:
        raise SystemExit(f"kctl decode failed: {run.stderr.strip()}")
    s = json.loads(run.stdout)
    produce = s["apis"].get("Produce", {})
    return {"requests": produce.get("requests", 0),
            "records": sum(p["records"] for p in s.get("produced", [])),
            "frames": s["frames"]}


def _row(s: dict) -> dict:
    return {"rps": s["rates"]["records_per_s"], "send_p99": s["latency"]["send"]["p99_ms"],
            "intended_p99": s["latency"]["intended"]["p99_ms"],
            "requests": s["counts"]["requests_sent"], "acked": s["counts"]["acked"],
            "failed": s["counts"]["failed"], "workers": s["run"]["workers"]}


def _med(rows: list[dict], key: str) -> tuple[float, float, float]:
    vals = [r[key] for r in rows]
    return statistics.median(vals), min(vals), max(vals)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--rate", type=float, default=50_000)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--processors", default=f"1,{os.cpu_count() or 1}",
                    help="comma-separated --processors values to run through")
    args = ap.parse_args()
    procs = sorted({int(x) for x in args.processors.split(",")})
    cells = ["direct"] + [f"through p={n}" for n in procs]
    maxrows: dict[str, list[dict]] = {c: [] for c in cells}
    raterows: dict[str, list[dict]] = {c: [] for c in cells}
    checks: list[tuple[str, dict, dict, dict]] = []
    with EmbeddedBroker() as broker, BlockingClient(broker.bootstrap) as client, \
            tempfile.TemporaryDirectory() as tmp:
        print(f"broker {broker.bootstrap} (Tansu, in-memory); {PARTITIONS} partitions; "
              f"{os.cpu_count()} cores shared by broker, producer workers and proxy")
        print("producer: kctl produce defaults (workers = cores, 100-byte records, acks=all, "
              "linger.ms=5, batch.size=16384, idempotence on); proxy: kctl inspect --capture FILE "
              f"--processors {'/'.join(map(str, procs))}")
        for mode, load, rows in (("max", ["--num-records", str(args.records)], maxrows),
                                 ("rate", ["--rate", str(args.rate), "--duration", f"{args.seconds:g}s"],
                                  raterows)):
            for rep in range(args.reps):
                for cell in cells:
                    topic = fresh_topic(client)
                    if cell == "direct":
                        rows[cell].append(_row(produce(broker.bootstrap, topic, load)))
                        continue
                    n = int(cell.split("=")[1])
                    capture = os.path.join(tmp, f"{mode}-{rep}-p{n}.pcapng")
                    s, own, stop_s = through(broker.bootstrap, topic, load, n, capture)
                    r = _row(s)
                    r["stop_s"] = stop_s
                    r["capture_mb"] = os.path.getsize(capture) / 1e6
                    rows[cell].append(r)
                    if rep == 0:
                        checks.append((f"{mode} {cell}", r, own, decoded(capture)))
                    os.remove(capture)
                print(f"  {mode} rep {rep + 1}/{args.reps} done", file=sys.stderr, flush=True)

    direct_rps = _med(maxrows["direct"], "rps")[0]
    direct_p99 = _med(raterows["direct"], "intended_p99")[0]
    print(f"\nmax throughput: --num-records {args.records:,} (median of {args.reps}, [min-max])")
    print(f"  {'path':16} {'records/s':>22} {'vs direct':>10} {'send p99 ms':>22} {'capture MB':>11} {'stop s':>7}")
    for cell in cells:
        m, lo, hi = _med(maxrows[cell], "rps")
        p, plo, phi = _med(maxrows[cell], "send_p99")
        cap = f"{_med(maxrows[cell], 'capture_mb')[0]:11.0f}" if cell != "direct" else f"{'-':>11}"
        stop = f"{_med(maxrows[cell], 'stop_s')[0]:7.1f}" if cell != "direct" else f"{'-':>7}"
        print(f"  {cell:16} {m:9,.0f} [{lo:,.0f}-{hi:,.0f}] {m / direct_rps:9.2f}x "
              f"{p:8.1f} [{plo:.0f}-{phi:.0f}] {cap} {stop}")
    print(f"\nfixed rate {args.rate:,.0f} records/s for {args.seconds:g} s: intended-clock p99 "
          f"(median of {args.reps}, [min-max])")
    print(f"  {'path':16} {'records/s':>10} {'intended p99 ms':>24} {'minus direct':>13}")
    for cell in cells:
        m, lo, hi = _med(raterows[cell], "intended_p99")
        print(f"  {cell:16} {_med(raterows[cell], 'rps')[0]:10,.0f} {m:10.2f} [{lo:.2f}-{hi:.2f}] "
              f"{m - direct_p99:+12.2f}")
    print("\ncapture against the producer's summary (first repetition of each cell)")
    print(f"  {'run':22} {'producer requests':>18} {'in capture':>11} {'proxy counted':>14} "
          f"{'records acked':>14} {'in capture':>11}")
    all_in = True
    for name, r, own, dec in checks:
        proxy_produce = own["apis"].get("Produce", {}).get("requests", 0)
        ok = dec["requests"] >= r["requests"] and dec["records"] >= r["acked"]
        all_in &= ok
        print(f"  {name:22} {r['requests']:18,} {dec['requests']:11,} {proxy_produce:14,} "
              f"{r['acked']:14,} {dec['records']:11,}{'' if ok else '   MISSING FRAMES'}")
    print("\ntargets")
    for cell in cells[1:]:
        ratio = _med(maxrows[cell], "rps")[0] / direct_rps
        extra = _med(raterows[cell], "intended_p99")[0] - direct_p99
        print(f"  {cell}: max throughput {ratio:.2f}x direct (target >= 0.70x): "
              f"{'reached' if ratio >= 0.7 else 'NOT REACHED'}; intended p99 at {args.rate:,.0f}/s "
              f"direct {extra:+.2f} ms (target <= +5 ms): {'reached' if extra <= 5 else 'NOT REACHED'}")
    print(f"  every Produce request in the capture: {'reached' if all_in else 'NOT REACHED'}")


if __name__ == "__main__":
    main()
