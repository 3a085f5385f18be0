"""Peer clients for the side-by-side benchmarks: confluent-kafka (librdkafka),
kafka-python and aiokafka, each producing N 100-byte records with the given
settings, optionally paced at a fixed rate, and timing send-to-acknowledgement
per record (their delivery callbacks). Benchmarks only: kctl never imports these
clients at run time.
"""

from __future__ import annotations

import asyncio
import os
import time

from hdrh.histogram import HdrHistogram

VALUE = os.urandom(100)


def hist() -> HdrHistogram:
    return HdrHistogram(1, 60_000_000, 3)  # microseconds


def result(name: str, n: int, seconds: float, h: HdrHistogram, bytes_per_record: int = 100) -> dict:
    return {"client": name, "records": n, "seconds": seconds,
            "rps": n / seconds if seconds else 0.0,
            "mb_per_s": n * bytes_per_record / seconds / 2**20 if seconds else 0.0,
            "p50_ms": h.get_value_at_percentile(50) / 1000,
            "p99_ms": h.get_value_at_percentile(99) / 1000,
            "max_ms": h.get_max_value() / 1000}


def confluent(bootstrap: str, topic: str, *, acks: str, n: int, rate: float = 0.0,
              linger_ms: int = 5, compression: str = "none", batch_size: int = 16384) -> dict:
    from confluent_kafka import Producer
    h = hist()
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": linger_ms,
                  "batch.size": batch_size, "enable.idempotence": False,
                  "compression.type": compression, "queue.buffering.max.messages": 2_000_000})
    now = time.perf_counter_ns
    failed = 0

    def cb(err, msg, t0):
        nonlocal failed
        if err is None:
            h.record_value(max(1, (now() - t0) // 1000))
        else:
            failed += 1
    start = now()
    interval = int(1e9 / rate) if rate else 0
    for i in range(n):
        if interval:
            due = start + i * interval
            while now() < due:
                p.poll(0)
        t0 = now()
        while True:
            try:
                p.produce(topic, VALUE, on_delivery=lambda e, m, t0=t0: cb(e, m, t0))
                break
            except BufferError:
                p.poll(0.001)
        if i % 1000 == 0:
            p.poll(0)
    p.flush()
    out = result("confluent-kafka", n, (now() - start) / 1e9, h)
    out["failed"] = failed
    return out


def kafka_python(bootstrap: str, topic: str, *, acks: str, n: int, rate: float = 0.0,
                 linger_ms: int = 5, compression: str = "none", batch_size: int = 16384) -> dict:
    from kafka import KafkaProducer
    h = hist()
    p = KafkaProducer(bootstrap_servers=bootstrap, acks=acks if acks == "all" else int(acks),
                      linger_ms=linger_ms, batch_size=batch_size, enable_idempotence=False,
                      compression_type=None if compression == "none" else compression)
    now = time.perf_counter_ns
    start = now()
    interval = int(1e9 / rate) if rate else 0
    for i in range(n):
        if interval:
            due = start + i * interval
            while now() < due:
                time.sleep(0)
        t0 = now()
        p.send(topic, VALUE).add_callback(lambda md, t0=t0: h.record_value(max(1, (now() - t0) // 1000)))
    p.flush()
    out = result("kafka-python", n, (now() - start) / 1e9, h)
    p.close()
    return out


def aiokafka(bootstrap: str, topic: str, *, acks: str, n: int, rate: float = 0.0,
             linger_ms: int = 5, compression: str = "none", batch_size: int = 16384) -> dict:
    from aiokafka import AIOKafkaProducer

    async def run() -> dict:
        h = hist()
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=acks if acks == "all" else int(acks),
                             linger_ms=linger_ms, max_batch_size=batch_size,
                             enable_idempotence=False,
                             compression_type=None if compression == "none" else compression)
        await p.start()
        now = time.perf_counter_ns
        start = now()
        interval = int(1e9 / rate) if rate else 0
        pending = []
        for i in range(n):
            if interval:
                due = start + i * interval
                delay = (due - now()) / 1e9
                if delay > 0:
                    await asyncio.sleep(delay)
            t0 = now()
            fut = await p.send(topic, VALUE)
            fut.add_done_callback(lambda f, t0=t0: h.record_value(max(1, (now() - t0) // 1000)))
            pending.append(fut)
            if len(pending) >= 10_000:
                await asyncio.gather(*pending)
                pending.clear()
        await p.flush()
        await asyncio.gather(*pending)
        out = result("aiokafka", n, (now() - start) / 1e9, h)
        await p.stop()
        return out

    return asyncio.run(run())


PEERS = {"confluent-kafka": confluent, "kafka-python": kafka_python, "aiokafka": aiokafka}
