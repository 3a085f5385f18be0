"""`kctl produce` against confluent-kafka (librdkafka), kafka-python and aiokafka on
the same embedded broker, same settings, in one run.

Workload (issue 5): 100-byte records, 6 partitions, linger.ms=5, batch.size=16384,
idempotence off (the peers' default), for acks=1 and acks=all, compression none,
lz4 and zstd:

- max throughput: records/s and MB/s (payload bytes) from first send to last ack,
  with send-to-ack p50/p99;
- latency at a fixed 20,000 records/s: p50/p99 of send-to-ack (kctl's `send` clock,
  comparable with the peers' delivery callbacks) and kctl's `intended` clock.

kctl runs as users run it: `kctl produce` with its default worker count (one
process per core); each peer is one producer in one process, as their own perf
tools run. Ratios are against confluent-kafka.

Run: .venv/bin/python benchmarks/produce.py [--records 300000] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import peers

from kctl.broker import EmbeddedBroker
from kctl.engine import admin
from kctl.engine.blocking_client import BlockingClient

PARTITIONS = 6
_cell = iter(range(10**6))


def fresh_topic(client) -> str:
    name = f"bench-produce-{next(_cell)}"
    admin.create_topics(client, [name], partitions=PARTITIONS)
    return name


def kctl_produce(bootstrap: str, topic: str, *, acks: str, n: int, rate: float = 0.0,
                 compression: str = "none", seconds: float = 0.0) -> dict:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "s.json")
        args = [sys.executable, "-m", "kctl", "produce", "-b", bootstrap, "-t", topic,
                "--record-size", "100", "--quiet", "--json-out", out,
                "-X", f"acks={acks}", "-X", "linger.ms=5", "-X", "batch.size=16384",
                "-X", "enable.idempotence=false", "-X", f"compression.type={compression}"]
        if rate:
            args += ["--rate", str(rate), "--duration", f"{seconds}s"]
        else:
            args += ["--num-records", str(n)]
        subprocess.run(args, check=True, capture_output=True, timeout=600)
        s = json.load(open(out))
    acked = s["counts"]["acked"]
    secs = s["run"]["measured_s"]
    lat = s["latency"]
    return {"client": f"kctl produce ({s['run']['workers']} workers)", "records": acked,
            "seconds": secs, "rps": s["rates"]["records_per_s"],
            "mb_per_s": acked * 100 / secs / 2**20 if secs else 0.0,
            "p50_ms": lat["send"]["p50_ms"], "p99_ms": lat["send"]["p99_ms"],
            "max_ms": lat["send"]["max_ms"],
            "intended_p99_ms": lat["intended"]["p99_ms"] if rate else None,
            "failed": s["counts"]["failed"]}


def table(title: str, rows: list[dict]) -> None:
    print(f"\n{title}")
    base = next((r for r in rows if r["client"] == "confluent-kafka"), None)
    print(f"  {'client':26} {'records/s':>11} {'MB/s':>7} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'rate vs librdkafka':>19} {'p99 vs librdkafka':>18}")
    for r in rows:
        rr = f"{r['rps'] / base['rps']:.2f}x" if base and base["rps"] else "-"
        pr = f"{r['p99_ms'] / base['p99_ms']:.2f}x" if base and base["p99_ms"] else "-"
        extra = (f"   (intended p99 {r['intended_p99_ms']:.2f} ms)"
                 if r.get("intended_p99_ms") is not None else "")
        print(f"  {r['client']:26} {r['rps']:11,.0f} {r['mb_per_s']:7.1f} {r['p50_ms']:8.2f} "
              f"{r['p99_ms']:8.2f} {rr:>19} {pr:>18}{extra}")
    sys.stdout.flush()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--slow-peer-records", type=int, default=60_000,
                    help="records for kafka-python and aiokafka (they are ~10x slower)")
    ap.add_argument("--rate", type=float, default=20_000)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--quick", action="store_true", help="acks=1 and no compression only")
    args = ap.parse_args()
    acks_list = ["1"] if args.quick else ["1", "all"]
    codecs = ["none"] if args.quick else ["none", "lz4", "zstd"]
    with EmbeddedBroker() as broker, BlockingClient(broker.bootstrap) as client:
        print(f"broker {broker.bootstrap} (Tansu, in-memory); {PARTITIONS} partitions; 100-byte records; "
              f"linger.ms=5, batch.size=16384, idempotence off; {os.cpu_count()} cores")
        for acks in acks_list:
            for codec in codecs:
                rows = [kctl_produce(broker.bootstrap, fresh_topic(client), acks=acks, n=args.records,
                                     compression=codec)]
                for name, fn in peers.PEERS.items():
                    n = args.records if name == "confluent-kafka" else args.slow_peer_records
                    rows.append(fn(broker.bootstrap, fresh_topic(client), acks=acks, n=n,
                                   compression=codec))
                table(f"max throughput: acks={acks}, compression={codec}", rows)
        for acks in acks_list:
            n = int(args.rate * args.seconds)
            rows = [kctl_produce(broker.bootstrap, fresh_topic(client), acks=acks, n=n,
                                 rate=args.rate, seconds=args.seconds)]
            for name, fn in peers.PEERS.items():
                rows.append(fn(broker.bootstrap, fresh_topic(client), acks=acks, n=n, rate=args.rate))
            table(f"fixed rate {args.rate:,.0f} records/s for {args.seconds:g} s: acks={acks} "
                  f"(p50/p99: send-to-ack)", rows)


if __name__ == "__main__":
    main()
