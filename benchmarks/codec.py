"""RecordBatch v2 encode/decode speed: kctl's generic encoder, kctl's hot-path
BatchTemplate, and kafka-python's DefaultRecordBatchBuilder / reader, on the
same batches in the same run.

    .venv/bin/python benchmarks/codec.py [--quick]

Each cell is the best of several timed runs (records/s and MB/s of record
payload); ratios are against kafka-python. Every batch is decoded by both
kctl and kafka-python first, so only correct output is timed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kafka.record.default_records import DefaultRecordBatchBuilder  # noqa: E402
from kafka.record.memory_records import MemoryRecords  # noqa: E402

from kctl.protocol.batch_builder import BatchTemplate  # noqa: E402
from kctl.protocol.compression import Compression  # noqa: E402
from kctl.protocol.records import Record, build_batch, decode_batches  # noqa: E402

BATCH_BYTES = 16 * 1024


def best_rate(fn, records: int, budget_s: float) -> float:
    """Records per second of ``fn`` (which handles ``records`` records), best of runs."""
    fn()
    loops = 1
    while True:  # size a run to ~budget/5
        t = time.perf_counter()
        for _ in range(loops):
            fn()
        dt = time.perf_counter() - t
        if dt > budget_s / 5:
            break
        loops *= 2
    best = dt
    for _ in range(4):
        t = time.perf_counter()
        for _ in range(loops):
            fn()
        best = min(best, time.perf_counter() - t)
    return records * loops / best


def kp_build(values, ts, codec, pid, epoch, seq):
    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=0,
                                  producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                  batch_size=1 << 22)
    for i, v in enumerate(values):
        b.append(i, ts, None, v, [])
    return bytes(b.build())


def kp_decode(data):
    n = 0
    for r in MemoryRecords(data).next_batch():
        n += 1
        r.value  # noqa: B018  (touch it, as a consumer would)
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="shorter timing runs")
    args = ap.parse_args()
    budget = 0.2 if args.quick else 0.6
    ts, pid, epoch, seq = 1_700_000_000_000, 42, 0, 0
    print(f"python {sys.version.split()[0]}, batches of ~{BATCH_BYTES // 1024} KiB "
          f"(records/s; MB/s of payload; x = ratio to kafka-python)\n")
    header = f"{'case':<28}{'encoder':<20}{'records/s':>14}{'MB/s':>9}{'x':>8}"
    for size in (100, 1024):
        n = max(1, BATCH_BYTES // (size + 10))
        pool = [os.urandom(size // 2) * 2 for _ in range(4096)]  # half-compressible
        values = pool[:n]
        records = [Record(i, ts, None, v) for i, v in enumerate(values)]
        for codec in (Compression.NONE, Compression.LZ4, Compression.ZSTD):
            case = f"{n} x {size} B, {codec.name.lower()}"
            template = BatchTemplate(compression=codec)
            ours = build_batch(records, compression=codec, producer_id=pid,
                               producer_epoch=epoch, base_sequence=seq)
            hot = template.build(values, base_timestamp=ts, producer_id=pid,
                                 producer_epoch=epoch, base_sequence=seq, value_size=size)
            theirs = kp_build(values, ts, codec, pid, epoch, seq)
            # correctness before speed
            assert hot == ours
            assert [r.value for r in decode_batches(theirs).records] == values
            assert [r.value for r in MemoryRecords(ours).next_batch()] == values
            encoders = {
                "kafka-python": lambda: kp_build(values, ts, codec, pid, epoch, seq),
                "kctl build_batch": lambda: build_batch(
                    records, compression=codec, producer_id=pid, producer_epoch=epoch,
                    base_sequence=seq),
                "kctl BatchTemplate": lambda: template.build(
                    values, base_timestamp=ts, producer_id=pid, producer_epoch=epoch,
                    base_sequence=seq, value_size=size),
            }
            decoders = {
                "kafka-python": lambda: kp_decode(ours),
                "kctl decode_batches": lambda: decode_batches(ours),
            }
            for title, table in (("encode", encoders), ("decode", decoders)):
                print(f"{title}: {case}  (batch {len(ours)} bytes)")
                print(header)
                base = None
                for name, fn in table.items():
                    rate = best_rate(fn, n, budget)
                    base = base or rate
                    mbs = rate * size / 1e6
                    print(f"{'':<28}{name:<20}{rate:>14,.0f}{mbs:>9.1f}{rate / base:>7.1f}x"
                          f"   ({1e6 / rate:.3f} us/record)")
                print()


if __name__ == "__main__":
    main()
