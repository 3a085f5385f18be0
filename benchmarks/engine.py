"""kctl's producer engine against confluent-kafka (librdkafka) and kafka-python,
side by side in one run on the same embedded broker, same settings.

One process per client, 100-byte records, 6 partitions, linger.ms=5,
batch.size=16384, no compression, idempotence off (the peers' default), for
acks=1 and acks=all:

- max throughput: N records as fast as the client takes them; records/s from
  the first send to the last acknowledgement, and send-to-ack latency p50/p99;
- latency at a fixed rate (--rate, default 5000 records/s for --seconds):
  send-to-ack p50/p99/max.

kctl is measured twice: through ``send()`` (a handle and a callback per record,
like the peers) and through ``send_bulk()`` (the load generator's path: values
laid into batches from a template, latency taken per batch).

Run:  .venv/bin/python benchmarks/engine.py [--records 200000] [--rate 5000]
Needs the `broker` and `peers` extras.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import peers

from kctl.broker import EmbeddedBroker
from kctl.config import ProducerConfig
from kctl.engine import admin
from kctl.engine.blocking_client import BlockingClient
from kctl.engine.producer import Producer
from kctl.protocol.batch_builder import BatchTemplate

PARTITIONS = 6
VALUE = peers.VALUE


hist = peers.hist
summary = peers.result


# -- kctl ----------------------------------------------------------------------------
def kctl_config(bootstrap, acks):
    return ProducerConfig.from_properties({
        "bootstrap.servers": bootstrap, "acks": acks, "linger.ms": "5", "batch.size": "16384",
        "enable.idempotence": "false", "compression.type": "none"})


def kctl_send(bootstrap, topic, acks, n, rate=0.0):
    h = hist()
    with Producer(kctl_config(bootstrap, acks)) as p:
        p.partitions_for(topic)
        now = time.perf_counter_ns
        def record(handle, t0):
            h.record_value(max(1, (now() - t0) // 1000))
        start = now()
        interval = int(1e9 / rate) if rate else 0
        for i in range(n):
            if interval:
                due = start + i * interval
                while now() < due:
                    p.poll(0)
            t0 = now()
            p.send(topic, VALUE, callback=lambda hd, t0=t0: record(hd, t0))
        p.flush()
        elapsed = (now() - start) / 1e9
    return summary("kctl send()", n, elapsed, h)


def kctl_bulk(bootstrap, topic, acks, n, rate=0.0, slice_size=150):
    h = hist()
    template = BatchTemplate()
    record_bytes = len(VALUE) + 8
    values = [VALUE] * slice_size

    def on_batch(batch):
        done = time.monotonic_ns()
        for s in batch.slices:
            h.record_value(max(1, (done - s.appended_ns) // 1000), s.count)

    with Producer(kctl_config(bootstrap, acks), on_batch_done=on_batch) as p:
        p.partitions_for(topic)
        start = time.monotonic_ns()
        sent = 0
        part = 0
        step = int(1e9 / rate) if rate else 0
        while sent < n:
            k = min(slice_size, n - sent)
            if step:
                due = start + sent * step
                while time.monotonic_ns() < due:
                    p.poll(0)
                k = min(k, max(1, (time.monotonic_ns() - start) // step - sent + 1))
            p.send_bulk(topic, part, values[:k], template=template, record_bytes=record_bytes,
                        value_size=len(VALUE))
            part = (part + 1) % PARTITIONS
            sent += k
        p.flush()
        elapsed = (time.monotonic_ns() - start) / 1e9
    return summary("kctl send_bulk()", n, elapsed, h)


# -- peers ---------------------------------------------------------------------------
def confluent(bootstrap, topic, acks, n, rate=0.0):
    return peers.confluent(bootstrap, topic, acks=acks, n=n, rate=rate)


def kafka_python(bootstrap, topic, acks, n, rate=0.0):
    return peers.kafka_python(bootstrap, topic, acks=acks, n=n, rate=rate)


CLIENTS = [("kctl send_bulk()", kctl_bulk), ("kctl send()", kctl_send),
           ("confluent-kafka", confluent), ("kafka-python", kafka_python)]


def table(title, rows):
    print(f"\n{title}")
    base = next((r for r in rows if r["client"] == "confluent-kafka"), None)
    print(f"  {'client':18} {'records/s':>11} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'vs librdkafka':>14}")
    for r in rows:
        ratio = f"{r['rps'] / base['rps']:.2f}x" if base and base["rps"] else "-"
        print(f"  {r['client']:18} {r['rps']:11,.0f} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f} "
              f"{r['max_ms']:8.2f} {ratio:>14}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--kafka-python-records", type=int, default=50_000)
    ap.add_argument("--rate", type=float, default=5000)
    ap.add_argument("--seconds", type=float, default=4)
    ap.add_argument("--repeat", type=int, default=1, help="runs per cell; the median is shown")
    args = ap.parse_args()
    with EmbeddedBroker() as broker, BlockingClient(broker.bootstrap) as admin_client:
        print(f"broker {broker.bootstrap} (Tansu, in-memory); {PARTITIONS} partitions, 100-byte records, "
              f"linger.ms=5, batch.size=16384, no compression, idempotence off; python {sys.version.split()[0]}")
        cell = 0
        for acks in ("1", "all"):
            rows = []
            for name, fn in CLIENTS:
                n = args.kafka_python_records if name == "kafka-python" else args.records
                runs = []
                for _ in range(args.repeat):
                    cell += 1
                    topic = f"bench-engine-{cell}"
                    admin.create_topics(admin_client, [topic], partitions=PARTITIONS)
                    runs.append(fn(broker.bootstrap, topic, acks, n))
                runs.sort(key=lambda r: r["rps"])
                rows.append(runs[len(runs) // 2])
            table(f"max throughput, acks={acks}", rows)
        n_rate = int(args.rate * args.seconds)
        for acks in ("1", "all"):
            rows = []
            for name, fn in CLIENTS:
                cell += 1
                topic = f"bench-engine-{cell}"
                admin.create_topics(admin_client, [topic], partitions=PARTITIONS)
                rows.append(fn(broker.bootstrap, topic, acks, n_rate, rate=args.rate))
            table(f"latency at {args.rate:,.0f} records/s for {args.seconds:g} s, acks={acks}", rows)


if __name__ == "__main__":
    main()
