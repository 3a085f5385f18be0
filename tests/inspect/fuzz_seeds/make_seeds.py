"""Makes the fuzz campaign's seed captures (committed next to this file; run again only to
refresh them): tcpdump on lo while ``kctl produce`` writes a few records with every codec to
the embedded broker and kafka-python reads them back (Fetch responses), so the seeds hold
real Produce, Fetch, Metadata, ApiVersions, InitProducerId, ... frames of two clients.

    .venv/bin/python -m tests.inspect.fuzz_seeds.make_seeds

Writes ``real.p<PORT>.pcap`` and the same packets as ``real.p<PORT>.pcapng`` (big-endian
pcapng, one interface), the broker port in the name. They are kept small (about 100 KB).
"""

from __future__ import annotations

import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

from kctl.broker import EmbeddedBroker
from tests.inspect import capture_builder as cb

HERE = Path(__file__).resolve().parent
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def _pcap_packets(data: bytes) -> tuple[int, list[tuple[int, bytes]]]:
    """(link type, [(ts_ns, frame)]) of a little-endian microsecond pcap (tcpdump's)."""
    magic, _, _, _, _, _, link = struct.unpack_from("<IHHiIII", data, 0)
    assert magic == 0xA1B2C3D4, hex(magic)
    out, pos = [], 24
    while pos + 16 <= len(data):
        sec, usec, incl, _orig = struct.unpack_from("<IIII", data, pos)
        out.append((sec * 10**9 + usec * 1000, data[pos + 16:pos + 16 + incl]))
        pos += 16 + incl
    return link, out


def main() -> None:
    import types

    import cramjam
    from kafka import KafkaConsumer, TopicPartition
    from kafka import codec as kcodec
    # kafka-python reads snappy through python-snappy, not installed: back it with cramjam
    # (as tests/protocol/kafka_python_shims.py does for the tests).
    kcodec.snappy = types.SimpleNamespace(  # type: ignore[attr-defined]
        compress=lambda b: bytes(cramjam.snappy.compress_raw(bytes(b))),
        decompress=lambda b: bytes(cramjam.snappy.decompress_raw(bytes(b))))
    tcpdump = shutil.which("tcpdump")
    if tcpdump is None:
        sys.exit("tcpdump is not installed (tools/setup.sh installs it)")
    for old in HERE.glob("real.p*.pcap*"):
        old.unlink()
    with EmbeddedBroker() as broker:
        raw = HERE / f"real.p{broker.port}.pcap"
        proc = subprocess.Popen([tcpdump, "-i", "lo", "-U", "--immediate-mode", "-n", "-s", "0",
                                 "-w", str(raw), f"tcp port {broker.port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        assert proc.stderr is not None and "listening" in proc.stderr.readline().decode()
        try:
            for codec in CODECS:
                subprocess.run([sys.executable, "-m", "kctl", "produce", "-b", broker.bootstrap,
                                "-t", f"seed-{codec}", "--partitions", "2", "--num-records", "40",
                                "--record-size", "60", "--payload", "text", "--keys", "seq",
                                "--headers", "1", "--workers", "1", "--quiet",
                                "-X", f"compression.type={codec}", "-X", "linger.ms=20"],
                               check=True, capture_output=True, timeout=120)
            consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, client_id="seed-reader",
                                     auto_offset_reset="earliest", enable_auto_commit=False,
                                     consumer_timeout_ms=1500, fetch_max_wait_ms=100)
            consumer.assign([TopicPartition(f"seed-{c}", p) for c in CODECS for p in (0, 1)])
            n = sum(1 for _ in consumer)
            consumer.close()
            time.sleep(0.3)
        finally:
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=10)
    data = raw.read_bytes()
    link, packets = _pcap_packets(data)
    ng = (cb.pcapng_shb(big_endian=True) + cb.pcapng_idb(link, tsresol=9, big_endian=True)
          + b"".join(cb.pcapng_epb(0, ts, frame, big_endian=True) for ts, frame in packets))
    raw.with_suffix(".pcapng").write_bytes(ng)
    print(f"{raw.name}: {len(data)} bytes, {len(packets)} packets, {n} records read back")


if __name__ == "__main__":
    main()
