"""Peer clients for the side-by-side benchmarks: confluent-kafka (librdkafka),
kafka-python and aiokafka. Benchmarks only: kctl never imports these clients at
run time.

Every peer runs as its users would run it at its best:

- throughput runs count deliveries and nothing else: a plain function that adds
  one per delivery report (no per-record timing, no lambda per record), polled in
  batches (confluent-kafka: ``poll(0)`` every 1000 records, ``poll(0.001)`` when its
  queue is full); records/s from the first send to the last delivery;
- latency comes from separate fixed-rate runs (``latency_*``): confluent-kafka's own
  ``Message.latency()`` (produce() call to delivery report, measured by librdkafka),
  the others time each record from ``send()`` to its callback (per-record work in
  Python is fine at a fixed rate).

``SETTINGS`` says what each peer is given; the benchmarks print it beside their tables.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time

from hdrh.histogram import HdrHistogram

VALUE = os.urandom(100)
#: What kctl's identity header takes on the wire: key "kctl", a 24-byte value.
KCTL_HEADER = [("kctl", os.urandom(24))]

SETTINGS = {
    "confluent-kafka": "linger.ms=5, batch.size=16384, enable.idempotence=false (its default), "
                       "queue.buffering.max.messages=2000000, acks and compression.type as the row says; "
                       "on_delivery = a counting function, poll(0) every 1000 records",
    "kafka-python": "linger_ms=5, batch_size=16384, enable_idempotence=False; "
                    "a counting callback per future",
    "aiokafka": "linger_ms=5, max_batch_size=16384, enable_idempotence=False; "
                "futures gathered every 10000 records",
}


def hist() -> HdrHistogram:
    return HdrHistogram(1, 60_000_000, 3)  # microseconds


def result(name: str, n: int, seconds: float, *, failed: int = 0, value_bytes: int = 100,
           h: HdrHistogram | None = None) -> dict:
    out = {"client": name, "records": n, "seconds": seconds,
           "rps": n / seconds if seconds else 0.0,
           "mb_per_s": n * value_bytes / seconds / 2**20 if seconds else 0.0, "failed": failed}
    if h is not None:
        out.update(p50_ms=h.get_value_at_percentile(50) / 1000,
                   p99_ms=h.get_value_at_percentile(99) / 1000, max_ms=h.get_max_value() / 1000)
    return out


# -- confluent-kafka ------------------------------------------------------------------------------
def _confluent(bootstrap: str, acks: str, compression: str):
    from confluent_kafka import Producer
    return Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
                     "batch.size": 16384, "enable.idempotence": False,
                     "compression.type": compression, "queue.buffering.max.messages": 2_000_000})


def confluent(bootstrap: str, topic: str, *, acks: str, n: int, compression: str = "none",
              keys: list[bytes] | None = None, headers: bool = False) -> dict:
    """Max throughput: ``n`` records, counting delivery reports. ``keys``: the key of
    record i is ``keys[i % len(keys)]``; ``headers``: every record carries the
    ``kctl`` header's bytes (same bytes on the wire as kctl's identity)."""
    p = _confluent(bootstrap, acks, compression)
    delivered = failed = 0

    def on_delivery(err, _msg):
        nonlocal delivered, failed
        if err is None:
            delivered += 1
        else:
            failed += 1

    produce, poll = p.produce, p.poll
    hdrs = KCTL_HEADER if headers else None
    start = time.perf_counter()
    if keys is None and hdrs is None:
        for i in range(n):
            while True:
                try:
                    produce(topic, VALUE, on_delivery=on_delivery)
                    break
                except BufferError:
                    poll(0.001)
            if i % 1000 == 0:
                poll(0)
    elif keys is None:
        for i in range(n):
            while True:
                try:
                    produce(topic, VALUE, headers=hdrs, on_delivery=on_delivery)
                    break
                except BufferError:
                    poll(0.001)
            if i % 1000 == 0:
                poll(0)
    else:
        m = len(keys)
        for i in range(n):
            while True:
                try:
                    produce(topic, VALUE, key=keys[i % m], headers=hdrs, on_delivery=on_delivery)
                    break
                except BufferError:
                    poll(0.001)
            if i % 1000 == 0:
                poll(0)
    p.flush()
    seconds = time.perf_counter() - start
    return result("confluent-kafka", delivered, seconds, failed=failed)


def latency_confluent(bootstrap: str, topic: str, *, acks: str, rate: float, seconds: float,
                      compression: str = "none") -> dict:
    """A fixed rate for ``seconds``; latency = ``Message.latency()`` per record."""
    p = _confluent(bootstrap, acks, compression)
    h = hist()
    failed = 0

    def on_delivery(err, msg):
        nonlocal failed
        if err is None:
            h.record_value(max(1, int(msg.latency() * 1e6)))
        else:
            failed += 1

    n = int(rate * seconds)
    interval = 1.0 / rate
    produce, poll = p.produce, p.poll
    start = time.perf_counter()
    i = 0
    while i < n:
        due = int((time.perf_counter() - start) / interval) + 1
        while i < min(due, n):
            produce(topic, VALUE, on_delivery=on_delivery)
            i += 1
        poll(0)
        wait = start + i * interval - time.perf_counter()
        if wait > 0.0002:
            time.sleep(wait - 0.0001)
    p.flush()
    out = result("confluent-kafka", n, time.perf_counter() - start, failed=failed, h=h)
    return out


# -- kafka-python ------------------------------------------------------------------------------------
def _kafka_python(bootstrap: str, acks: str, compression: str):
    from kafka import KafkaProducer
    return KafkaProducer(bootstrap_servers=bootstrap, acks=acks if acks == "all" else int(acks),
                         linger_ms=5, batch_size=16384, enable_idempotence=False,
                         compression_type=None if compression == "none" else compression)


def kafka_python(bootstrap: str, topic: str, *, acks: str, n: int, compression: str = "none") -> dict:
    p = _kafka_python(bootstrap, acks, compression)
    delivered = 0

    def on_delivery(_md):
        nonlocal delivered
        delivered += 1

    send = p.send
    start = time.perf_counter()
    for _ in range(n):
        send(topic, VALUE).add_callback(on_delivery)
    p.flush()
    seconds = time.perf_counter() - start
    p.close()
    return result("kafka-python", delivered, seconds, failed=n - delivered)


def latency_kafka_python(bootstrap: str, topic: str, *, acks: str, rate: float,
                         seconds: float) -> dict:
    p = _kafka_python(bootstrap, acks, "none")
    h = hist()
    now = time.perf_counter_ns
    n = int(rate * seconds)
    interval = int(1e9 / rate)
    start = now()
    for i in range(n):
        due = start + i * interval
        while (wait := due - now()) > 0:
            time.sleep(wait / 1e9 if wait > 200_000 else 0)
        t0 = now()
        p.send(topic, VALUE).add_callback(lambda _md, t0=t0: h.record_value(max(1, (now() - t0) // 1000)))
    p.flush()
    out = result("kafka-python", n, (now() - start) / 1e9, h=h)
    p.close()
    return out


# -- aiokafka ------------------------------------------------------------------------------------------
def aiokafka(bootstrap: str, topic: str, *, acks: str, n: int, compression: str = "none") -> dict:
    from aiokafka import AIOKafkaProducer

    async def run() -> dict:
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=acks if acks == "all" else int(acks),
                             linger_ms=5, max_batch_size=16384, enable_idempotence=False,
                             compression_type=None if compression == "none" else compression)
        await p.start()
        start = time.perf_counter()
        pending = []
        for _ in range(n):
            pending.append(await p.send(topic, VALUE))
            if len(pending) >= 10_000:
                await asyncio.gather(*pending)
                pending.clear()
        await p.flush()
        await asyncio.gather(*pending)
        out = result("aiokafka", n, time.perf_counter() - start)
        await p.stop()
        return out

    return asyncio.run(run())


def latency_aiokafka(bootstrap: str, topic: str, *, acks: str, rate: float, seconds: float) -> dict:
    from aiokafka import AIOKafkaProducer

    async def run() -> dict:
        h = hist()
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=acks if acks == "all" else int(acks),
                             linger_ms=5, max_batch_size=16384, enable_idempotence=False)
        await p.start()
        now = time.perf_counter_ns
        n = int(rate * seconds)
        interval = int(1e9 / rate)
        start = now()
        pending = []
        for i in range(n):
            delay = (start + i * interval - now()) / 1e9
            if delay > 0:
                await asyncio.sleep(delay)
            t0 = now()
            fut = await p.send(topic, VALUE)
            fut.add_done_callback(lambda _f, t0=t0: h.record_value(max(1, (now() - t0) // 1000)))
            pending.append(fut)
        await p.flush()
        await asyncio.gather(*pending)
        out = result("aiokafka", n, (now() - start) / 1e9, h=h)
        await p.stop()
        return out

    return asyncio.run(run())


def median_row(runs: list[dict]) -> dict:
    """One table row from several rounds' results: each figure's median, and every
    round's records/s under ``runs``."""
    out = dict(runs[0])
    for k, v in runs[0].items():
        if isinstance(v, int | float) and not isinstance(v, bool):
            out[k] = statistics.median(r[k] for r in runs)
    out["runs"] = [round(r["rps"]) for r in runs]
    return out
