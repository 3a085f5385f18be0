"""`kctl produce` against confluent-kafka (librdkafka) on the embedded broker, in one run.

Workload (issue 11): 100-byte values, 6 partitions, linger.ms=5, batch.size=16384,
a fresh Tansu for every run (its in-memory log would otherwise grow from run to
run), ROUNDS interleaved rounds (kctl, peer, kctl, peer, ... per case), the median
of the rounds printed.

Max throughput (records/s from the first send to the last acknowledgement):

- kctl runs as users run it: `kctl produce --num-records N --record-size 100` with
  its defaults (identity header on, default worker count, idempotence on unless
  acks=1), `-X acks=...`, `-X compression.type=...`, `--keys random:1000`;
- confluent-kafka counts its delivery reports with a plain function and nothing
  else (peers.py); a second confluent-kafka row sends kctl's 24-byte `kctl` header
  on every record, so both put the same bytes on the wire;
- kctl rows with `--workers 1` / `--workers 2` and `--no-id-headers` show what the
  default worker count and the identity cost;
- with compression the batches differ (a line under the table says so): kctl fills
  batch.size with estimated compressed bytes, as Java's producer does, while
  librdkafka counts batch.size before compression.

Latency: separate fixed-rate runs (--rate, 20,000 records/s by default): kctl's
`send` clock (handed to the engine -> acknowledged) and `intended` clock (schedule
-> acknowledged) against confluent-kafka's `Message.latency()` (produce() ->
delivery report).

Targets (issue 11): keyless >= 1.5x confluent-kafka for acks=1 and acks=all, >= 1.0x
for lz4 and zstd; random:1000 keys >= 1.0x; fixed-rate p99 within 1.2x.

Run: .venv/bin/python benchmarks/produce.py [--records 1000000] [--rounds 3]
     [--rate 20000] [--seconds 5] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from collections.abc import Callable

import peers

from kctl.broker import EmbeddedBroker
from kctl.engine import admin
from kctl.engine.blocking_client import BlockingClient
from kctl.stats.summary import RunSummary

PARTITIONS = 6
TOPIC = "bench-produce"
KEYS = [b"key-%03d" % i for i in range(1000)]     # what kctl's --keys random:1000 draws from


def fresh(run: Callable[[str], dict]) -> dict:
    """``run(bootstrap)`` against a fresh embedded broker with the topic made."""
    with EmbeddedBroker() as broker:
        with BlockingClient(broker.bootstrap) as c:
            admin.create_topics(c, [TOPIC], partitions=PARTITIONS)
        return run(broker.bootstrap)


def kctl(bootstrap: str, *args: str, n: int = 0, rate: float = 0.0, seconds: float = 0.0) -> dict:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "s.json")
        cmd = [sys.executable, "-m", "kctl", "produce", "-b", bootstrap, "-t", TOPIC,
               "--record-size", "100", "--quiet", "--json-out", out, *args]
        cmd += ["--rate", str(rate), "--duration", f"{seconds}s"] if rate else ["--num-records", str(n)]
        subprocess.run(cmd, check=True, capture_output=True, timeout=600)
        with open(out) as f:
            s = RunSummary.from_json(json.load(f))
    send, intended = s.latency["send"], s.latency["intended"]
    return {"rps": s.rates.records_per_s, "mb_per_s": s.rates.mb_per_s,
            "wire_mb_per_s": s.rates.wire_mb_per_s,
            "workers": s.run.workers, "failed": s.counts.failed,
            "records_per_batch": s.batching.records_per_batch,
            "compression_rate": s.batching.compression_rate_avg,
            "p50_ms": send.p50_ms, "p99_ms": send.p99_ms, "intended_p99_ms": intended.p99_ms}


def print_table(title: str, rows: list[tuple[str, dict]], base: str, target: float | None,
                latency: bool = False) -> None:
    print(f"\n{title}")
    b = dict(rows)[base]
    if latency:
        print(f"  {'client':44} {'p50 ms':>8} {'p99 ms':>8} {'p99 vs librdkafka':>18}  {'intended p99':>12}")
        for name, r in rows:
            ratio = r["p99_ms"] / b["p99_ms"] if b["p99_ms"] else 0.0
            intended = f"{r['intended_p99_ms']:.2f}" if r.get("intended_p99_ms") is not None else "-"
            mark = ""
            if name.startswith("kctl"):
                mark = "  target met" if ratio <= 1.2 else "  TARGET NOT MET (<= 1.2x)"
            print(f"  {name:44} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f} {ratio:17.2f}x  {intended:>12}{mark}")
        return
    print(f"  {'client':44} {'records/s':>11} {'MB/s':>7} {'vs librdkafka':>14}   rounds")
    for name, r in rows:
        ratio = r["rps"] / b["rps"] if b["rps"] else 0.0
        mark = ""
        if target is not None and name.startswith("kctl") and "*" in name:
            mark = "  target met" if ratio >= target else f"  TARGET NOT MET (>= {target}x)"
        print(f"  {name:44} {r['rps']:11,.0f} {r['mb_per_s']:7.1f} {ratio:13.2f}x   "
              f"{', '.join(f'{x:,}' for x in r['runs'])}{mark}")
    sys.stdout.flush()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rate", type=float, default=20_000)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--quick", action="store_true", help="the keyless acks=1 case only, no latency")
    args = ap.parse_args()
    n = args.records
    rng = random.Random(1)
    peer_keys = [KEYS[rng.randrange(len(KEYS))] for _ in range(16384)]
    cores = os.cpu_count()
    # case -> [(row name, runner(bootstrap) -> dict)]; "*" marks kctl's default row.
    cases: dict[str, tuple[float | None, list[tuple[str, Callable[[str], dict]]]]] = {
        "keyless, acks=1": (1.5, [
            ("kctl produce *", lambda b: kctl(b, "-X", "acks=1", n=n)),
            ("confluent-kafka", lambda b: peers.confluent(b, TOPIC, acks="1", n=n)),
            ("confluent-kafka + kctl header", lambda b: peers.confluent(b, TOPIC, acks="1", n=n, headers=True)),
            ("kctl produce --workers 1", lambda b: kctl(b, "-X", "acks=1", "--workers", "1", n=n)),
            (f"kctl produce --workers {cores}", lambda b: kctl(b, "-X", "acks=1", "--workers", str(cores), n=n)),
            ("kctl produce --no-id-headers", lambda b: kctl(b, "-X", "acks=1", "--no-id-headers", n=n)),
        ]),
        "keyless, acks=all": (1.5, [
            ("kctl produce *", lambda b: kctl(b, "-X", "acks=all", n=n)),
            ("confluent-kafka", lambda b: peers.confluent(b, TOPIC, acks="all", n=n)),
        ]),
        "keyless, acks=1, lz4": (1.0, [
            ("kctl produce *", lambda b: kctl(b, "-X", "acks=1", "-X", "compression.type=lz4", n=n)),
            ("confluent-kafka", lambda b: peers.confluent(b, TOPIC, acks="1", n=n, compression="lz4")),
        ]),
        "keyless, acks=1, zstd": (1.0, [
            ("kctl produce *", lambda b: kctl(b, "-X", "acks=1", "-X", "compression.type=zstd", n=n)),
            ("confluent-kafka", lambda b: peers.confluent(b, TOPIC, acks="1", n=n, compression="zstd")),
        ]),
        "--keys random:1000, acks=1": (1.0, [
            ("kctl produce --keys random:1000 *", lambda b: kctl(b, "-X", "acks=1", "--keys", "random:1000", n=n)),
            ("confluent-kafka (same 1000 keys)", lambda b: peers.confluent(b, TOPIC, acks="1", n=n, keys=peer_keys)),
        ]),
    }
    if args.quick:
        cases = {k: v for k, v in cases.items() if k == "keyless, acks=1"}
    print(f"{n:,} records of 100 bytes per run; {PARTITIONS} partitions; linger.ms=5, batch.size=16384; "
          f"a fresh embedded broker (Tansu, in-memory) per run; median of {args.rounds} interleaved rounds; "
          f"{cores} cores; python {sys.version.split()[0]}")
    print("peers' settings:")
    print(f"  confluent-kafka: {peers.SETTINGS['confluent-kafka']}")
    print("  kctl produce: its defaults (identity header on; idempotence on, except acks=1; "
          "compression.lz4.level=9 = lz4's fast mode, as Java) with -X acks and compression.type")
    results: dict[str, dict[str, list[dict]]] = {c: {name: [] for name, _ in rows} for c, (_, rows) in cases.items()}
    for r in range(args.rounds):
        for case, (_, rows) in cases.items():
            for name, run in rows:
                results[case][name].append(fresh(run))
        print(f"  round {r + 1}/{args.rounds} done", flush=True)
    for case, (target, rows) in cases.items():
        table = [(name, peers.median_row(results[case][name])) for name, _ in rows]
        base = next(name for name, _ in rows if name.startswith("confluent-kafka"))
        print_table(f"max throughput: {case}", table, base, target)
        workers = {r["workers"] for name, r in table if name.endswith("*")}
        print(f"  (kctl's default ran {', '.join(map(str, sorted(workers)))} worker(s))")
        kctl_row = next(r for name, r in table if name.endswith("*"))
        if kctl_row.get("compression_rate") is not None:
            # Same records, not the same batches: say so (the peer's batch.size is uncompressed bytes).
            print(f"  batches differ: kctl fills batch.size with estimated compressed bytes, as Java does "
                  f"({kctl_row['records_per_batch']:.1f} records/batch, compression rate "
                  f"{kctl_row['compression_rate']:.2f}); librdkafka counts batch.size before compression")
    if args.quick:
        return
    lat_rows: dict[str, dict[str, list[dict]]] = {}
    for r in range(args.rounds):
        for acks in ("1", "all"):
            case = f"fixed rate {args.rate:,.0f} records/s for {args.seconds:g} s, acks={acks}"
            rows = lat_rows.setdefault(case, {"kctl produce": [], "confluent-kafka": []})
            rows["kctl produce"].append(fresh(lambda b, a=acks: kctl(b, "-X", f"acks={a}", rate=args.rate,
                                                                     seconds=args.seconds)))
            rows["confluent-kafka"].append(fresh(lambda b, a=acks: peers.latency_confluent(
                b, TOPIC, acks=a, rate=args.rate, seconds=args.seconds)))
    print("\nlatency: kctl's send clock (handed to the engine -> acknowledged) and intended clock "
          "(schedule -> acknowledged); confluent-kafka's Message.latency() (produce() -> delivery report). "
          "Target: p99 within 1.2x of confluent-kafka's.")
    for case, rows in lat_rows.items():
        table = [(name, peers.median_row(runs)) for name, runs in rows.items()]
        print_table(case, table, "confluent-kafka", None, latency=True)


if __name__ == "__main__":
    main()
