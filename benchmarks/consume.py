"""`kctl consume` and `kctl produce --consume` against confluent-kafka (librdkafka), in one run.

1. Read throughput (issue 17 target: kctl >= 1.0x confluent-kafka's consumer). One
   embedded broker; a topic of RECORDS records (100-byte values, the kctl identity
   header on every record, 6 partitions) written once by `kctl produce`; then ROUNDS
   interleaved rounds, each client reading the whole topic from the beginning in
   assign mode with the same fetch settings (FETCH): kctl as its users run it
   (`kctl consume --from beginning --num-records N` with its default consumer count),
   confluent-kafka as its users run it at its best: `assign()` at OFFSET_BEGINNING,
   `consume(num_messages=10000)` in a loop that only counts (no per-record work).
   records/s: kctl's summary (its consumers' common start to the last record's
   report); confluent-kafka's from `assign()` to the last record. kctl's whole command
   (process start-up, metadata, positions, shutdown included) is printed beside it.

2. End-to-end latency at a fixed rate (RATE records/s, SECONDS s; fresh broker per run):
   `kctl produce --consume` (e2e = consume time - the record's intended send time from
   its identity header, ns) against confluent-kafka's producer paced at the same rate
   in one process and its consumer in another (e2e = consume time - the record's
   CreateTime, the producer's timestamp at produce(), ms resolution; poll() for the first
   record, then whatever else is queued), the same
   producer and fetch settings on both sides, one table.

   Both at fetch.max.wait.ms=500 (Kafka's default) and 20: the embedded broker does not
   answer a Fetch as soon as records arrive (fetch.min.bytes=1) but after a share of its
   wait, so at 500 ms the broker's wait dominates both clients' figures.

Run: .venv/bin/python benchmarks/consume.py [--records 1000000] [--rounds 3]
     [--rate 20000] [--seconds 10] [--waits 500,20]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time

import peers

from kctl.broker import EmbeddedBroker
from kctl.engine import admin
from kctl.engine.blocking_client import BlockingClient

PARTITIONS = 6
#: The consumer settings both clients get (Kafka's names; librdkafka's where they differ).
FETCH = {"fetch.min.bytes": "1", "fetch.max.wait.ms": "500", "max.partition.fetch.bytes": "1048576",
         "fetch.max.bytes": "52428800"}
_RDKAFKA_NAMES = {"fetch.max.wait.ms": "fetch.wait.max.ms"}
#: The producer settings of the e2e runs, both clients.
PRODUCER = {"acks": "all", "linger.ms": "5", "batch.size": "16384"}


def _x(props: dict[str, str]) -> list[str]:
    return [a for k, v in props.items() for a in ("-X", f"{k}={v}")]


def fill(bootstrap: str, topic: str, n: int) -> None:
    subprocess.run([sys.executable, "-m", "kctl", "produce", "-b", bootstrap, "-t", topic, "--partitions",
                    str(PARTITIONS), "--num-records", str(n), "--record-size", "100", "--quiet", "-X", "acks=1"],
                   check=True, capture_output=True, timeout=900)


def kctl_consume(bootstrap: str, topic: str, n: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "c.json")
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-m", "kctl", "consume", "-b", bootstrap, "-t", topic, "--from", "beginning",
                        "--num-records", str(n), "--quiet", "--json-out", out, *_x(FETCH)],
                       check=True, capture_output=True, timeout=900)
        wall = time.monotonic() - t0
        with open(out) as f:
            s = json.load(f)
    return {"rps": s["rates"]["records_per_s"], "records": s["counts"]["records"], "wall_s": wall,
            "wall_rps": s["counts"]["records"] / wall, "consumers": s["run"]["consumers"],
            "records_per_fetch": s["rates"]["records_per_fetch"]}


def _rdkafka_consumer(bootstrap: str, group: str, fetch: dict[str, str] = FETCH):
    from confluent_kafka import Consumer
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
            "enable.partition.eof": False}
    conf.update({_RDKAFKA_NAMES.get(k, k): int(v) for k, v in fetch.items()})
    return Consumer(conf)


def confluent_consume(bootstrap: str, topic: str, n: int) -> dict:
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition
    t_start = time.monotonic()
    c = _rdkafka_consumer(bootstrap, f"bench-{os.getpid()}-{time.monotonic_ns()}")
    t0 = time.monotonic()
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got = 0
    consume = c.consume
    deadline = t0 + 600
    while got < n and time.monotonic() < deadline:
        got += len(consume(num_messages=10000, timeout=1.0))
    t1 = time.monotonic()
    c.close()
    wall = time.monotonic() - t_start
    return {"rps": got / (t1 - t0), "records": got, "wall_s": wall, "wall_rps": got / wall}


# -- e2e ------------------------------------------------------------------------------------------
def kctl_e2e(bootstrap: str, topic: str, rate: float, seconds: float, fetch: dict[str, str]) -> dict:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "p.json")
        subprocess.run([sys.executable, "-m", "kctl", "produce", "-b", bootstrap, "-t", topic, "--partitions",
                        str(PARTITIONS), "--rate", str(rate), "--duration", f"{seconds}s", "--record-size", "100",
                        "--consume", "--quiet", "--json-out", out, *_x(PRODUCER),
                        *(a for k, v in fetch.items() for a in ("--consumer-property", f"{k}={v}"))],
                       check=True, capture_output=True, timeout=900)
        with open(out) as f:
            s = json.load(f)
    e = s["latency"]["e2e"]
    return {"p50_ms": e["p50_ms"], "p99_ms": e["p99_ms"], "p999_ms": e["p999_ms"], "max_ms": e["max_ms"],
            "count": e["count"], "sent": s["counts"]["acked"], "negative": e["negative"],
            "achieved": s["rates"]["records_per_s"]}


def _peer_consumer(bootstrap: str, topic: str, n: int, fetch: dict[str, str], ready, out) -> None:
    from confluent_kafka import OFFSET_END, TopicPartition
    c = _rdkafka_consumer(bootstrap, f"bench-e2e-{os.getpid()}", fetch)
    c.assign([TopicPartition(topic, p, OFFSET_END) for p in range(PARTITIONS)])
    # Stand at the end before the producer starts (positions resolved by a first poll).
    t_end = time.monotonic() + 3
    while time.monotonic() < t_end:
        c.consume(num_messages=1, timeout=0.1)
        if all(tp.offset >= 0 for tp in c.position(c.assignment())):
            break
    ready.set()
    h = peers.hist()
    got = 0
    deadline = time.monotonic() + 120
    while got < n and time.monotonic() < deadline:
        # poll() returns as soon as a record is there (consume(n, timeout) would wait
        # for n records or the whole timeout); then what else is queued, without waiting.
        first = c.poll(0.5)
        if first is None:
            continue
        msgs = [first, *c.consume(num_messages=10000, timeout=0)]
        now_ms = time.time_ns() / 1e6
        for m in msgs:
            if m.error() is None:
                # CreateTime (ms) set by the producer at produce(): e2e in µs, >= 1
                h.record_value(max(1, int((now_ms - m.timestamp()[1]) * 1000)))
                got += 1
    c.close()
    out.put((h.get_value_at_percentile(50) / 1000, h.get_value_at_percentile(99) / 1000,
             h.get_value_at_percentile(99.9) / 1000, h.get_max_value() / 1000, got))


def confluent_e2e(bootstrap: str, topic: str, rate: float, seconds: float, fetch: dict[str, str]) -> dict:
    from confluent_kafka import Producer
    n = int(rate * seconds)
    p = Producer({"bootstrap.servers": bootstrap, **{k: v for k, v in PRODUCER.items()},
                  "enable.idempotence": True, "queue.buffering.max.messages": 2_000_000})
    # Connected, producer id acquired and metadata known before the timed records (kctl's
    # workers are ready before their common start too): one record per partition, flushed,
    # before the consumer stands at the end.
    for part in range(PARTITIONS):
        p.produce(topic, b"warm-up", partition=part)
    p.flush(30)
    ctx = mp.get_context("spawn")
    ready, out = ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=_peer_consumer, args=(bootstrap, topic, n, fetch, ready, out), daemon=True)
    proc.start()
    ready.wait(30)
    produce, poll = p.produce, p.poll
    value, headers = peers.VALUE, peers.KCTL_HEADER
    t0 = time.perf_counter()
    for i in range(n):
        due = t0 + i / rate
        ahead = due - time.perf_counter()
        if ahead > 0:
            poll(ahead)         # serves delivery reports while it waits for the record's time
        produce(topic, value, headers=headers)
        if i % 100 == 0:
            poll(0)
    achieved = n / (time.perf_counter() - t0)
    p.flush(60)
    p50, p99, p999, mx, got = out.get(timeout=180)
    proc.join(10)
    return {"p50_ms": p50, "p99_ms": p99, "p999_ms": p999, "max_ms": mx, "count": got, "sent": n,
            "negative": None, "achieved": achieved}


def fresh(run) -> dict:
    with EmbeddedBroker() as broker:
        with BlockingClient(broker.bootstrap) as c:
            admin.create_topics(c, ["bench-e2e"], partitions=PARTITIONS)
        return run(broker.bootstrap)


def med(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rate", type=float, default=20_000)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--waits", default="500,20", help="fetch.max.wait.ms values of the e2e runs")
    args = ap.parse_args()
    import confluent_kafka
    n = args.records
    version = confluent_kafka.version()
    version = version[0] if isinstance(version, tuple) else version
    print(f"{os.cpu_count()} cores; python {sys.version.split()[0]}; confluent-kafka {version} "
          f"(librdkafka {confluent_kafka.libversion()[0]}); embedded broker (Tansu, in-memory)")
    print("settings:")
    print(f"  fetch (both): {', '.join(f'{k}={v}' for k, v in FETCH.items())} "
          "(librdkafka: fetch.wait.max.ms); assign mode, from the beginning")
    print("  kctl consume: its defaults otherwise (consumer count: cores - 1 against a broker on this host)")
    print("  confluent-kafka: enable.auto.commit=false, assign() at OFFSET_BEGINNING, consume(num_messages=10000) "
          "counting batch lengths, nothing per record")
    print(f"  e2e producers (both): {', '.join(f'{k}={v}' for k, v in PRODUCER.items())}, idempotence on, "
          "100-byte values + the kctl header's bytes; confluent-kafka paced by perf_counter, poll(0) every 100")

    with EmbeddedBroker() as broker:
        topic = "bench-consume"
        t = time.monotonic()
        fill(broker.bootstrap, topic, n)
        print(f"\nwrote {n:,} records to {topic} ({PARTITIONS} partitions) in {time.monotonic() - t:.1f} s")
        runs: dict[str, list[dict]] = {"kctl consume *": [], "confluent-kafka": []}
        for r in range(args.rounds):
            runs["kctl consume *"].append(kctl_consume(broker.bootstrap, topic, n))
            runs["confluent-kafka"].append(confluent_consume(broker.bootstrap, topic, n))
            print(f"  round {r + 1}/{args.rounds}: kctl {runs['kctl consume *'][-1]['rps']:,.0f}/s, "
                  f"confluent-kafka {runs['confluent-kafka'][-1]['rps']:,.0f}/s", flush=True)
    base = med(runs["confluent-kafka"], "rps")
    print(f"\nread throughput: {n:,} records from the beginning, median of {args.rounds} interleaved rounds")
    print(f"  {'client':22} {'records/s':>11} {'vs librdkafka':>14} {'whole command s':>16}  rounds")
    for name, rs in runs.items():
        rps = med(rs, "rps")
        mark = ""
        if name.startswith("kctl"):
            mark = "  target met (>= 1.0x)" if rps >= base else "  TARGET NOT MET (>= 1.0x)"
        print(f"  {name:22} {rps:11,.0f} {rps / base:13.2f}x {med(rs, 'wall_s'):16.2f}  "
              f"{', '.join(format(x['rps'], ',.0f') for x in rs)}{mark}")
    print(f"  (kctl ran {runs['kctl consume *'][0]['consumers']} consumer process(es); "
          f"{med(runs['kctl consume *'], 'records_per_fetch'):,.0f} records per Fetch answer)")

    # fetch.max.wait.ms as given (Kafka's default, 500) and short (20): this broker answers
    # a Fetch after a share of its wait even when records are there (fetch.min.bytes=1),
    # so the default's figures show the broker's wait more than either client.
    waits = [w for w in args.waits.split(",") if w]
    e2e: dict[tuple[str, str], list[dict]] = {}
    for r in range(args.rounds):
        for w in waits:
            fetch = {**FETCH, "fetch.max.wait.ms": w}
            e2e.setdefault(("kctl produce --consume", w), []).append(
                fresh(lambda b: kctl_e2e(b, "bench-e2e", args.rate, args.seconds, fetch)))
            e2e.setdefault(("confluent-kafka producer + consumer", w), []).append(
                fresh(lambda b: confluent_e2e(b, "bench-e2e", args.rate, args.seconds, fetch)))
        print(f"  e2e round {r + 1}/{args.rounds} done", flush=True)
    print(f"\ne2e latency at {args.rate:,.0f} records/s for {args.seconds:g} s (median of {args.rounds} rounds; "
          "kctl: consumed - intended send time, ns; confluent-kafka: consumed - CreateTime, ms)")
    print(f"  {'client':38} {'max.wait':>8} {'achieved/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'p99.9 ms':>9} "
          f"{'max ms':>8} {'consumed':>10} {'p99 vs librdkafka':>18}")
    for (name, w), rs in e2e.items():
        peer = e2e[("confluent-kafka producer + consumer", w)]
        ratio = med(rs, "p99_ms") / med(peer, "p99_ms") if med(peer, "p99_ms") else 0.0
        print(f"  {name:38} {w + ' ms':>8} {med(rs, 'achieved'):10,.0f} {med(rs, 'p50_ms'):8.2f} "
              f"{med(rs, 'p99_ms'):8.2f} {med(rs, 'p999_ms'):9.2f} {med(rs, 'max_ms'):8.2f} "
              f"{int(med(rs, 'count')):>10,} {ratio:17.2f}x")


if __name__ == "__main__":
    main()
