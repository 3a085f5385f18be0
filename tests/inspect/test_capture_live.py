"""A real capture: tcpdump on lo while kafka-python (the oracle) produces with every codec
and fetches from the embedded broker; ``kctl decode`` must find every frame, count the
records the client delivered, and agree with tshark on frame boundaries."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from kctl.inspect.report import iter_records
from kctl.inspect.session import DecodedFrame, decode_files
from tests.protocol.kafka_python_shims import snappy_shim  # noqa: F401  (fixture)

pytestmark = [pytest.mark.broker, pytest.mark.slow]

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PER_PARTITION = {0: 40, 1: 25}


def _start_tcpdump(path: Path, port: int) -> subprocess.Popen:
    exe = shutil.which("tcpdump")
    if exe is None:
        pytest.skip("tcpdump is not installed (tools/setup.sh installs it)")
    proc = subprocess.Popen([exe, "-i", "lo", "-U", "--immediate-mode", "-n", "-w", str(path), f"tcp port {port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    line = proc.stderr.readline().decode(errors="replace")
    if "listening on" not in line:
        proc.kill()
        rest = proc.communicate(timeout=5)[1].decode(errors="replace")
        pytest.skip(f"tcpdump cannot capture on lo here: {line.strip()} {rest.strip()}")
    return proc


def _stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()


@pytest.fixture(scope="module")
def live_capture(broker, tmp_path_factory):
    pytest.importorskip("kafka")
    return broker, tmp_path_factory.mktemp("capture") / "kafka.pcap"


def test_decode_a_real_capture_of_every_codec(live_capture, snappy_shim):  # noqa: F811
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    broker, path = live_capture
    run = f"{os.getpid()}-{time.monotonic_ns() % 10**6}"
    topics = {codec: f"cap-{codec}-{run}" for codec in CODECS}
    proc = _start_tcpdump(path, broker.port)
    delivered: Counter = Counter()
    try:
        for codec, topic in topics.items():
            producer = KafkaProducer(bootstrap_servers=broker.bootstrap, client_id=f"prod-{codec}",
                                     compression_type=None if codec == "none" else codec,
                                     linger_ms=5, acks="all")
            futures = [producer.send(topic, key=b"key-%d" % i, value=b"value-%d-" % i * 5,
                                     partition=p)
                       for p, n in PER_PARTITION.items() for i in range(n)]
            producer.flush(timeout=20)
            for f in futures:
                md = f.get(timeout=20)
                delivered[(md.topic, md.partition)] += 1
            producer.close(timeout=5)
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, client_id="cons",
                                 auto_offset_reset="earliest", enable_auto_commit=False,
                                 consumer_timeout_ms=1500, fetch_max_wait_ms=100)
        consumer.assign([TopicPartition(t, p) for t in topics.values() for p in PER_PARTITION])
        consumed = Counter((m.topic, m.partition) for m in consumer)
        consumer.close()
        time.sleep(0.3)   # let the last segments reach tcpdump
    finally:
        _stop(proc)
    assert consumed == delivered

    items = list(decode_files([path], {broker.port}))
    frames = [f for f in items if isinstance(f, DecodedFrame)]
    problems = [n for n in items if not isinstance(n, DecodedFrame)]
    assert not [n for n in problems if n.kind in ("error", "gap", "framing", "skipped", "malformed")], problems
    assert all(f.error is None and "unknown_api" not in f.marks and "unmatched" not in f.marks
               for f in frames), [f for f in frames if f.error or f.marks]

    produced: Counter = Counter()
    codecs_seen: dict[str, set[str]] = {}
    for f in frames:
        if f.api_key == 0 and f.direction == "request":
            for rs in f.record_sets:
                assert rs.error is None
                produced[(rs.topic, rs.partition)] += rs.record_count
                codecs_seen.setdefault(rs.topic, set()).update(rs.codecs)
    assert produced == delivered
    # Each topic's batches carry its codec. kafka-python sends a batch uncompressed when
    # the codec would not make it smaller (a one-record batch under lz4's framing), so
    # "none" may be beside the codec (its DefaultRecordBatchBuilder._maybe_compress).
    for c, t in topics.items():
        assert c in codecs_seen[t] and codecs_seen[t] <= {c, "none"}, (c, codecs_seen[t])

    fetched = {(v.topic, v.partition, v.record.offset) for f in frames
               if f.api_key == 1 and f.direction == "response" for v in iter_records(f)}
    assert Counter((t, p) for t, p, _ in fetched) == delivered

    # Every request has its response (the consumer's last long-poll Fetch may be cut off).
    reqs = {(f.conn, f.correlation_id) for f in frames if f.direction == "request"}
    resps = {(f.conn, f.correlation_id) for f in frames if f.direction == "response"}
    assert resps <= reqs and len(reqs - resps) <= 2

    # The CLI sees the same thing.
    cli = subprocess.run([sys.executable, "-m", "kctl", "decode", str(path), "--port", "auto",
                          "--summary", "--json"], capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0, cli.stderr
    summary = json.loads(cli.stdout)
    assert {(p["topic"], p["partition"]): p["records"] for p in summary["produced"]} == dict(delivered)
    assert summary["frames"] == len(frames)

    _check_against_tshark(path, broker.port, frames)


def _check_against_tshark(path: Path, port: int, frames: list[DecodedFrame]) -> None:
    exe = shutil.which("tshark")
    if exe is None:
        pytest.skip("tshark is not installed (tools/setup.sh installs it)")
    run = subprocess.run([exe, "-n", "-r", str(path), "-d", f"tcp.port=={port},kafka",
                          "-o", "tcp.desegment_tcp_streams:TRUE", "-Y", "kafka",
                          "-T", "fields", "-E", "separator=/t", "-e", "frame.number",
                          "-e", "kafka.correlation_id"],
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "HOME": str(path.parent)})
    assert run.returncode == 0, run.stderr
    theirs: Counter = Counter()
    for line in run.stdout.splitlines():
        number, _, corrs = line.partition("\t")
        for c in filter(None, corrs.split(",")):
            theirs[(int(number), int(c))] += 1
    ours = Counter((f.packet, f.correlation_id) for f in frames)
    assert theirs, run.stdout + run.stderr
    assert ours == theirs
