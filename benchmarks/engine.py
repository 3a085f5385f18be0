"""kctl's producer engine (the library API) against confluent-kafka (librdkafka) and
kafka-python, side by side in one run, same broker, same settings.

One process per client, 100-byte values, 6 partitions, linger.ms=5, batch.size=16384,
no compression, idempotence off (the peers' default), acks=1 and acks=all; a fresh
embedded broker per run; ROUNDS interleaved rounds, the median printed.

- max throughput: N records as fast as the client takes them, counting deliveries
  and nothing else (kctl: a counting callback per ``send()``; confluent-kafka: a
  counting on_delivery function; kafka-python: a counting callback);
- latency at a fixed rate (--rate, default 5000 records/s, for --seconds): kctl and
  kafka-python time each record from send() to its callback; confluent-kafka reports
  ``Message.latency()``.

kctl is measured through ``send()`` (one record at a time, with and without a
callback) and through ``send_bulk()`` (the load generator's path: a record pool,
batches laid out from a template, completion per batch). With ``--baseline REV``
(a git revision of this repository) ``send()`` is also measured at that revision,
in a subprocess, for the issue-11 target: ``send()`` >= 2x its rate before.

Run:  .venv/bin/python benchmarks/engine.py [--records 300000] [--rounds 3]
      [--baseline 920dbb0]
Needs the `broker` and `peers` extras.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import peers

from kctl.broker import EmbeddedBroker
from kctl.config import ProducerConfig
from kctl.engine import admin
from kctl.engine.blocking_client import BlockingClient
from kctl.engine.bulk import RecordPool
from kctl.engine.producer import Producer

PARTITIONS = 6
TOPIC = "bench-engine"
VALUE = peers.VALUE


def kctl_config(bootstrap: str, acks: str) -> ProducerConfig:
    return ProducerConfig.from_properties({
        "bootstrap.servers": bootstrap, "acks": acks, "linger.ms": "5", "batch.size": "16384",
        "enable.idempotence": "false", "compression.type": "none"})


def kctl_send(bootstrap: str, acks: str, n: int, callback: bool = True) -> dict:
    """``send()`` one record at a time, counting acknowledgements in a callback."""
    acked = 0

    def count(handle) -> None:
        nonlocal acked
        if handle.error is None:
            acked += 1

    with Producer(kctl_config(bootstrap, acks)) as p:
        p.partitions_for(TOPIC)
        send = p.send
        start = time.perf_counter()
        if callback:
            for _ in range(n):
                send(TOPIC, VALUE, callback=count)
        else:
            handles = [send(TOPIC, VALUE) for _ in range(n)]
        p.flush()
        seconds = time.perf_counter() - start
    if not callback:
        acked = sum(1 for h in handles if h.error is None)
    return peers.result("kctl", acked, seconds, failed=n - acked)


def kctl_bulk(bootstrap: str, acks: str, n: int, slice_size: int = 2048) -> dict:
    acked = 0

    def on_batch(batch) -> None:
        nonlocal acked
        if batch.result is not None and batch.result.error is None:
            acked += batch.record_count

    pool = RecordPool.of([VALUE] * 4096)
    with Producer(kctl_config(bootstrap, acks), on_batch_done=on_batch) as p:
        p.partitions_for(TOPIC)
        start = time.perf_counter()
        sent = 0
        while sent < n:
            k = min(slice_size, n - sent)
            p.send_bulk(TOPIC, pool, sent, k)
            sent += k
        p.flush()
        seconds = time.perf_counter() - start
    return peers.result("kctl", acked, seconds, failed=n - acked)


def kctl_latency(bootstrap: str, acks: str, rate: float, seconds: float) -> dict:
    h = peers.hist()
    now = time.perf_counter_ns
    n = int(rate * seconds)
    interval = int(1e9 / rate)
    with Producer(kctl_config(bootstrap, acks)) as p:
        p.partitions_for(TOPIC)
        start = now()
        for i in range(n):
            due = start + i * interval
            while (wait := due - now()) > 0:
                p.poll(wait / 1e9 if wait > 200_000 else 0)
            t0 = now()
            p.send(TOPIC, VALUE, callback=lambda hd, t0=t0: h.record_value(max(1, (now() - t0) // 1000)))
        p.flush()
        out = peers.result("kctl", n, (now() - start) / 1e9, h=h)
    return out


# -- the baseline revision, in a subprocess ----------------------------------------------------------
_BASELINE_CHILD = r"""
import json, sys, time
from kctl.config import ProducerConfig
from kctl.engine.producer import Producer
bootstrap, topic, acks, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
value = bytes.fromhex(sys.argv[5])
acked = 0
def count(handle):
    global acked
    if handle.error is None:
        acked += 1
cfg = ProducerConfig.from_properties({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": "5",
    "batch.size": "16384", "enable.idempotence": "false", "compression.type": "none"})
with Producer(cfg) as p:
    p.partitions_for(topic)
    start = time.perf_counter()
    for _ in range(n):
        p.send(topic, value, callback=count)
    p.flush()
    seconds = time.perf_counter() - start
print(json.dumps({"acked": acked, "seconds": seconds}))
"""


def baseline_tree(rev: str) -> str:
    """This repository at ``rev``, extracted to a temporary directory."""
    root = Path(__file__).resolve().parent.parent
    d = tempfile.mkdtemp(prefix=f"kctl-{rev}-")
    data = subprocess.run(["git", "-C", str(root), "archive", rev], check=True,
                          capture_output=True).stdout
    tar = Path(d) / "tree.tar"
    tar.write_bytes(data)
    with tarfile.open(tar) as t:
        t.extractall(d, filter="data")
    return d


def baseline_send(tree: str, bootstrap: str, acks: str, n: int) -> dict:
    out = subprocess.run([sys.executable, "-c", _BASELINE_CHILD, bootstrap, TOPIC, acks, str(n),
                          VALUE.hex()], check=True, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": tree}, cwd=tree)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return peers.result("kctl", r["acked"], r["seconds"], failed=n - r["acked"])


# -- running -------------------------------------------------------------------------------------------
def fresh(run: Callable[[str], dict]) -> dict:
    with EmbeddedBroker() as broker:
        with BlockingClient(broker.bootstrap) as c:
            admin.create_topics(c, [TOPIC], partitions=PARTITIONS)
        return run(broker.bootstrap)


def table(title: str, rows: list[tuple[str, dict]], latency: bool = False) -> None:
    print(f"\n{title}")
    base = dict(rows).get("confluent-kafka")
    if latency:
        print(f"  {'client':34} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'p99 vs librdkafka':>18}")
        for name, r in rows:
            ratio = f"{r['p99_ms'] / base['p99_ms']:.2f}x" if base and base["p99_ms"] else "-"
            print(f"  {name:34} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f} {r['max_ms']:8.2f} {ratio:>18}")
        return
    print(f"  {'client':34} {'records/s':>11} {'vs librdkafka':>14}   rounds")
    for name, r in rows:
        ratio = f"{r['rps'] / base['rps']:.2f}x" if base and base["rps"] else "-"
        print(f"  {name:34} {r['rps']:11,.0f} {ratio:>14}   {', '.join(f'{x:,}' for x in r['runs'])}")
    sys.stdout.flush()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--kafka-python-records", type=int, default=50_000)
    ap.add_argument("--rate", type=float, default=5000)
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", metavar="REV", help="also measure send() at this git revision")
    args = ap.parse_args()
    n, nk = args.records, args.kafka_python_records
    tree = baseline_tree(args.baseline) if args.baseline else None
    print(f"{PARTITIONS} partitions, 100-byte values, linger.ms=5, batch.size=16384, no compression, "
          f"idempotence off; a fresh embedded broker (Tansu) per run; median of {args.rounds} "
          f"interleaved rounds; python {sys.version.split()[0]}, {os.cpu_count()} cores")
    print("peers' settings:")
    for name in ("confluent-kafka", "kafka-python"):
        print(f"  {name}: {peers.SETTINGS[name]}")
    print("  kctl send(): a counting callback per record (or none, handles kept); "
          "send_bulk(): slices of 2048 from a 4096-record pool (as kctl produce at max throughput), counted per acknowledged batch")
    for acks in ("1", "all"):
        clients: list[tuple[str, Callable[[str], dict]]] = [
            ("kctl send_bulk()", lambda b, a=acks: kctl_bulk(b, a, n)),
            ("kctl send() + callback", lambda b, a=acks: kctl_send(b, a, n)),
            ("kctl send(), no callback", lambda b, a=acks: kctl_send(b, a, n, callback=False)),
            ("confluent-kafka", lambda b, a=acks: peers.confluent(b, TOPIC, acks=a, n=n)),
            ("kafka-python", lambda b, a=acks: peers.kafka_python(b, TOPIC, acks=a, n=nk)),
        ]
        if tree is not None:
            clients.insert(2, (f"kctl send() + callback @{args.baseline}",
                               lambda b, a=acks: baseline_send(tree, b, a, n)))
        runs: dict[str, list[dict]] = {name: [] for name, _ in clients}
        for _ in range(args.rounds):
            for name, fn in clients:
                runs[name].append(fresh(fn))
        rows = [(name, peers.median_row(runs[name])) for name, _ in clients]
        table(f"max throughput, acks={acks} (deliveries counted, nothing else)", rows)
        if tree is not None:
            now = dict(rows)["kctl send() + callback"]["rps"]
            before = dict(rows)[f"kctl send() + callback @{args.baseline}"]["rps"]
            verdict = "target met" if now >= 2 * before else "TARGET NOT MET"
            print(f"  send() vs {args.baseline}: {now / before:.2f}x (target >= 2x: {verdict})")
    for acks in ("1", "all"):
        clients = [
            ("kctl send()", lambda b, a=acks: kctl_latency(b, a, args.rate, args.seconds)),
            ("confluent-kafka", lambda b, a=acks: peers.latency_confluent(
                b, TOPIC, acks=a, rate=args.rate, seconds=args.seconds)),
            ("kafka-python", lambda b, a=acks: peers.latency_kafka_python(
                b, TOPIC, acks=a, rate=args.rate, seconds=args.seconds)),
        ]
        runs = {name: [] for name, _ in clients}
        for _ in range(args.rounds):
            for name, fn in clients:
                runs[name].append(fresh(fn))
        table(f"latency at {args.rate:,.0f} records/s for {args.seconds:g} s, acks={acks} "
              "(kctl, kafka-python: send() to callback; confluent-kafka: Message.latency())",
              [(name, peers.median_row(runs[name])) for name, _ in clients], latency=True)


if __name__ == "__main__":
    main()
