"""Crafted hostile captures: one generator per row of issue 13's table, and a few more.

Each ``build_*`` returns the bytes of a capture file (pcap or pcapng) whose broker port is
``PORT``. They are shared by the tests (tests/inspect/test_adversarial.py) and by
``benchmarks/decode_adversarial.py``, which times ``kctl decode --summary`` on each.
Everything is deterministic (seeded), so a figure can be compared from run to run.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from dataclasses import dataclass

from kctl.protocol.frames import frame
from kctl.protocol.messages import encode_request, request_class
from kctl.protocol.records import Compression, Record, build_batch
from tests.inspect import capture_builder as cb
from tests.inspect.kafka_frames import produce_request

PORT = 9092
#: Largest TCP payload that fits an IPv4 packet with the builder's headers (a TSO segment).
TSO = 65_000
ProduceRequest = request_class(0)


@dataclass(frozen=True)
class Crafted:
    name: str
    what: str               # the words for it
    build: Callable[[], bytes]


def tiny_pcapng_shb() -> bytes:
    """A 12-byte pcapng whose Section Header Block says its length is 12."""
    return b"\x0a\x0d\x0d\x0a" + struct.pack("<I", 12) + b"\x4d\x3c\x2b\x1a"


def out_of_order_segments(n_segments: int = 16_000, seed: int = 13) -> bytes:
    """About 1.1 MB: one connection, one Produce request (~100 KB) cut into ``n_segments``
    small segments, delivered in a shuffled order (its handshake first)."""
    conv = cb.Conversation(bport=PORT)
    req = produce_request(1, parts={0: 256}, pad=400)
    mss = max(1, len(req) // n_segments + 1)
    segs = conv.send(req, mss=mss)
    head = conv.segs[:3]
    body = list(segs)
    random.Random(seed).shuffle(body)
    conv.close()
    tail = conv.segs[-2:]
    return cb.capture(head + body + tail)


def _nested_produce_stream(total: int, spacing: int = 1024, reach: int = 60) -> bytes:
    """Request bytes with a plausible Produce v2 header every ``spacing`` bytes, each one's
    frame reaching ``reach`` headers further and decoding through all of it (its partitions
    are the same 8-byte entries the later frames see) until its very last entry, which is
    missing. A decoder that fully decodes every candidate does ``reach`` times the work per
    byte; none of these frames is real."""
    hdr_len = 31                                  # size .. partition count, see below
    grid = (spacing - 8 - hdr_len) // 8           # 8-byte partitions between two headers
    unit = 8 + hdr_len + 8 * grid
    n = total // unit
    starts = [k * unit + 8 for k in range(n)]     # where each header (its size field) starts
    out = bytearray()
    for k in range(n):
        end = starts[k + reach] - 8 if k + reach < n else n * unit
        size = end - starts[k] - 4
        # Partitions inside this frame: its own grid, then per later unit one entry whose
        # records hold that unit's header, then its grid.
        entries = grid + (min(n, k + reach) - k - 1) * (1 + grid)
        header = (struct.pack(">ihhih", size, 0, 2, k, 0)            # Produce v2, client ""
                  + struct.pack(">hiih", 1, 1000, 1, 1) + b"t"       # acks, timeout, 1 topic "t"
                  + struct.pack(">i", entries + 1))                  # one partition too many
        out += struct.pack(">ii", -1, hdr_len) + header               # an entry holding it
        out += struct.pack(">ii", 0, -1) * grid
    return bytes(out)


def resync_storm(total: int = 2 << 20, tso: int = TSO) -> bytes:
    """About 2 MiB: a connection caught mid-stream (no SYN) whose request bytes hold a
    plausible header every KiB, each starting a frame that decodes until its last 8 bytes,
    in TSO-sized (~64 KB) segments."""
    conv = cb.Conversation(bport=PORT, handshake=False)
    conv.send(_nested_produce_stream(total), mss=tso)
    return cb.capture(conv.segs)


def _zstd_bomb_batch(decompressed: int, records: int = 7) -> bytes:
    """A zstd RecordBatch of ``records`` zero-filled values that decompresses to just under
    ``decompressed`` bytes (a few KB of zstd)."""
    value = decompressed // records - 64
    return build_batch([Record(i, 0, None, bytes(value)) for i in range(records)],
                       compression=Compression.ZSTD)


def _produce_with_sets(corr: int, sets: list[bytes], version: int = 9) -> bytes:
    pdata = [ProduceRequest.PartitionProduceData(index=i, records=r) for i, r in enumerate(sets)]
    body = ProduceRequest(acks=1, timeout_ms=1000, topic_data=[
        ProduceRequest.TopicProduceData(name="bomb", partition_data=pdata)])
    return frame(encode_request(0, version, corr, "bomber", body))


def zstd_bombs_across_frames(n: int = 30, near_cap: int = 63 << 20) -> bytes:
    """About 60 KiB: 30 Produce requests, each with one small zstd batch that decompresses
    to just under the 64 MiB per-batch cap."""
    batch = _zstd_bomb_batch(near_cap)
    conv = cb.Conversation(bport=PORT)
    for corr in range(n):
        conv.send(_produce_with_sets(corr, [batch]), mss=TSO)
    conv.close()
    return cb.capture(conv.segs)


def zstd_bombs_in_one_record_set(n: int = 4, near_cap: int = 15 << 20) -> bytes:
    """One Produce whose one record set holds ``n`` zstd batches that together decompress to
    just under the 64 MiB cap (the cap was per blob: peak memory was about twice it)."""
    batches = b"".join(_zstd_bomb_batch(near_cap) for _ in range(n))
    conv = cb.Conversation(bport=PORT)
    conv.send(_produce_with_sets(1, [batches]), mss=TSO)
    conv.close()
    return cb.capture(conv.segs)


def zstd_bombs_across_partitions(n: int = 30, near_cap: int = 63 << 20) -> bytes:
    """One Produce with 30 partitions, each one zstd batch just under the cap."""
    batch = _zstd_bomb_batch(near_cap)
    conv = cb.Conversation(bport=PORT)
    conv.send(_produce_with_sets(1, [batch] * n), mss=TSO)
    conv.close()
    return cb.capture(conv.segs)


def tiny_record_bomb(n: int = 8) -> bytes:
    """Produce requests whose zstd batches decompress to a million identical 7-byte records
    each (a few KB of input): the cost is in records, not bytes."""
    recs = [Record(0, 0, None, None)] * 1_000_000
    batch = build_batch(recs, compression=Compression.ZSTD)
    conv = cb.Conversation(bport=PORT)
    for corr in range(n):
        conv.send(_produce_with_sets(corr, [batch]), mss=TSO)
    conv.close()
    return cb.capture(conv.segs)


def tiny_struct_frame(n: int = 1_000_000) -> bytes:
    """A 2 MB Metadata v4 request of a million empty topic names (2 bytes each): the message
    object model's worst case (each element a Python object of about 130 bytes)."""
    meta = request_class(3)
    body = meta(topics=[meta.MetadataRequestTopic(name="") for _ in range(n)])
    conv = cb.Conversation(bport=PORT)
    conv.send(frame(encode_request(3, 4, 1, "c", body)), mss=TSO)
    conv.close()
    return cb.capture(conv.segs)


ROWS: tuple[Crafted, ...] = (
    Crafted("pcapng-shb-12", "a 12-byte pcapng whose Section Header Block says its length is 12",
            tiny_pcapng_shb),
    Crafted("out-of-order-16k", "a 1.1 MB pcap of one connection cut into 16,000 small segments "
            "delivered out of order", out_of_order_segments),
    Crafted("resync-storm", "a 2 MiB pcap of large (TSO-sized) segments whose payload makes the "
            "decoder resynchronise repeatedly", resync_storm),
    Crafted("zstd-30-frames", "a 60 KiB pcap holding 30 small zstd record batches, each just "
            "under the decompression cap", zstd_bombs_across_frames),
    Crafted("zstd-one-set", "a record set whose zstd batches each decompress to just under the cap",
            zstd_bombs_in_one_record_set),
    Crafted("zstd-30-partitions", "one Produce of 30 partitions, each a zstd batch just under "
            "the cap", zstd_bombs_across_partitions),
    Crafted("tiny-records", "zstd batches of a million 7-byte records each", tiny_record_bomb),
    Crafted("tiny-structs", "a 2 MB Metadata request of a million 2-byte topic entries",
            tiny_struct_frame),
)
