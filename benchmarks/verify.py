"""`kctl produce --verify`'s read-back against confluent-kafka's consumer reading the same
topic, in one run.

A fresh embedded broker per round; `kctl produce --num-records N --record-size 100
--verify` writes N records (identity header on) to a 6-partition topic and reads them
back: the summary's `verify.read_s` is the time from connecting to the last record
accounted for (metadata, parallel Fetches, identity scan, lost/duplicate/order
checks). Then confluent-kafka's consumer (assign mode, all partitions from offset 0,
fetch.max.bytes 64 MiB, max.partition.fetch.bytes 32 MiB, queued.min.messages
1,000,000 (its default of 100,000 makes this read five times slower here),
consume() in batches of up to 10,000 messages, counting them and nothing else) reads
the same topic, timed from creating the consumer to the N-th message. Median of the
rounds.

Target (issue 11): verify reads back at least as fast as confluent-kafka's consumer.

Run: .venv/bin/python benchmarks/verify.py [--records 1000000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from kctl.broker import EmbeddedBroker
from kctl.engine import admin
from kctl.engine.blocking_client import BlockingClient
from kctl.stats.summary import RunSummary

PARTITIONS = 6
TOPIC = "bench-verify"


def kctl_verify(bootstrap: str, n: int) -> float:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "s.json")
        subprocess.run([sys.executable, "-m", "kctl", "produce", "-b", bootstrap, "-t", TOPIC,
                        "--num-records", str(n), "--record-size", "100", "-X", "acks=1",
                        "--verify", "--quiet", "--json-out", out],
                       check=True, capture_output=True, timeout=900)
        with open(out) as f:
            v = RunSummary.from_json(json.load(f)).verify
    if v is None or not v.ok or v.found != n:
        raise SystemExit(f"verify did not account for every record: {v}")
    return v.read_s


def confluent_read(bootstrap: str, n: int) -> float:
    from confluent_kafka import Consumer, TopicPartition
    start = time.perf_counter()
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-verify",
                  "enable.auto.commit": False, "fetch.max.bytes": 64 * 1024 * 1024,
                  "max.partition.fetch.bytes": 32 * 1024 * 1024,
                  # librdkafka stops prefetching at queued.min.messages per partition
                  # (100,000 by default): with it, this read takes 5x longer on this broker.
                  "queued.min.messages": 1_000_000, "queued.max.messages.kbytes": 1024 * 1024})
    c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    seen = 0
    deadline = time.monotonic() + 120
    while seen < n and time.monotonic() < deadline:
        # Ask for no more than are left: consume() waits for the full count until timeout.
        for m in c.consume(num_messages=min(10_000, n - seen), timeout=1.0):
            if m.error() is None:
                seen += 1
    seconds = time.perf_counter() - start
    c.close()
    if seen < n:
        raise SystemExit(f"confluent-kafka read {seen} of {n} records")
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    n = args.records
    print(f"{n:,} records of 100 bytes (+ the 24-byte kctl header), {PARTITIONS} partitions, "
          f"a fresh embedded broker (Tansu) per round, median of {args.rounds} rounds")
    print("confluent-kafka consumer: assign mode from offset 0, fetch.max.bytes=64MiB, "
          "max.partition.fetch.bytes=32MiB, queued.min.messages=1000000, "
          "queued.max.messages.kbytes=1GiB, consume(<=10000) counting messages")
    kctl_s, conf_s = [], []
    for _ in range(args.rounds):
        with EmbeddedBroker() as broker:
            with BlockingClient(broker.bootstrap) as c:
                admin.create_topics(c, [TOPIC], partitions=PARTITIONS)
            kctl_s.append(kctl_verify(broker.bootstrap, n))
            conf_s.append(confluent_read(broker.bootstrap, n))
    k, c = statistics.median(kctl_s), statistics.median(conf_s)
    print(f"\n  {'reader':40} {'seconds':>8} {'records/s':>12} {'vs librdkafka':>14}   rounds (s)")
    print(f"  {'kctl produce --verify (read + check)':40} {k:8.2f} {n / k:12,.0f} {c / k:13.2f}x   "
          f"{', '.join(f'{x:.2f}' for x in kctl_s)}")
    print(f"  {'confluent-kafka consumer (read, count)':40} {c:8.2f} {n / c:12,.0f} {1.0:13.2f}x   "
          f"{', '.join(f'{x:.2f}' for x in conf_s)}")
    verdict = "target met" if k <= c else "TARGET NOT MET"
    print(f"  verify vs confluent-kafka: {c / k:.2f}x as fast (target >= 1.0x: {verdict})")


if __name__ == "__main__":
    main()
