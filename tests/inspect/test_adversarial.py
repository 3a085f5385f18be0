"""Issue 13's crafted captures through the whole ``kctl decode`` path: each row gives kctl's
own errors and notices (never another exception), its work stays linear (a generous time
guard, not a speed measurement: benchmarks/decode_adversarial.py prints the figures), and
``kctl decode --summary`` stays within the memory bound of docs/DESIGN.md (peak RSS of a
real subprocess)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kctl.inspect.session import CaptureNotice, DecodedFrame, decode_files
from kctl.inspect.summary import CaptureSummary
from kctl.protocol.compression import DecompressionBudget
from tests.inspect import adversarial as adv
from tests.inspect import capture_builder as cb
from tests.inspect.kafka_frames import produce_request

ROWS = {r.name: r for r in adv.ROWS}
#: Far above what any row takes (< 1 s here), far below what the quadratic code took.
GUARD_S = 6.0


def decode(tmp_path: Path, name: str, budget: DecompressionBudget | None = None,
           ) -> tuple[list[DecodedFrame], list[CaptureNotice], dict]:
    path = tmp_path / f"{name}.pcap"
    if not path.exists():
        path.write_bytes(ROWS[name].build())
    summary = CaptureSummary()
    frames, notices = [], []
    t0 = time.perf_counter()
    for item in decode_files([path], {adv.PORT}, budget=budget):
        summary.add(item)
        (frames if isinstance(item, DecodedFrame) else notices).append(item)
    assert time.perf_counter() - t0 < GUARD_S
    return frames, notices, summary.to_dict()


def test_twelve_byte_pcapng_is_an_error_at_its_offset(tmp_path):
    frames, notices, _ = decode(tmp_path, "pcapng-shb-12")
    assert frames == [] and [(n.kind, n.offset) for n in notices] == [("error", 4)]
    assert "minimum of 28" in notices[0].message


def test_sixteen_thousand_shuffled_segments(tmp_path):
    frames, notices, s = decode(tmp_path, "out-of-order-16k")
    assert [(f.api_name, f.error) for f in frames] == [("Produce", None)]
    assert s["produced"][0]["records"] == 256 and notices == []


def test_resync_storm_is_skipped_as_undecodable(tmp_path):
    frames, notices, s = decode(tmp_path, "resync-storm")
    assert frames == []
    assert s["notices"]["undecodable"] == 1
    skipped = [int(re.search(r"\d+", n.message).group()) for n in notices if n.kind == "skipped"]
    assert sum(skipped) > 2_000_000


@pytest.mark.parametrize("name", ["zstd-30-frames", "zstd-30-partitions"])
def test_bombs_are_refused_by_the_budget(tmp_path, name):
    """30 batches of 63 MiB of zeros in 60 KiB: the default budget (16 MiB + 256 per captured
    byte) refuses them all, says so once, and counts each refused record set."""
    frames, notices, s = decode(tmp_path, name)
    assert len(frames) == (30 if name == "zstd-30-frames" else 1)
    assert sum(p["records"] for p in s["produced"]) == 0
    assert s["errors"] == {"RECORDS_OVER_BUDGET": 30}
    assert [n.kind for n in notices] == ["budget"]
    assert "--max-decompress-ratio" in notices[0].message


def test_the_run_budget_stops_what_a_frame_cap_alone_lets_through(tmp_path):
    # A per-frame cap alone (the old per-blob cap) lets all 30 frames decompress 63 MiB each.
    _, _, s = decode(tmp_path, "zstd-30-frames", DecompressionBudget(
        frame_floor=64 << 20, run_floor=1 << 40, ratio=0))
    assert sum(p["records"] for p in s["produced"]) == 30 * 7 and not s["errors"]
    # A run budget of 64 MiB: the first frame fits, the other 29 are refused.
    _, notices, s = decode(tmp_path, "zstd-30-frames", DecompressionBudget(
        frame_floor=1 << 40, run_floor=64 << 20, ratio=0))
    assert s["produced"][0]["records"] == 7 and s["errors"] == {"RECORDS_OVER_BUDGET": 29}
    assert "this run's decompression budget is spent" in notices[0].message
    # A frame limit below one batch: every frame is refused by its own limit.
    _, notices, s = decode(tmp_path, "zstd-30-frames", DecompressionBudget(
        frame_floor=32 << 20, run_floor=1 << 40, ratio=0))
    assert s["errors"] == {"RECORDS_OVER_BUDGET": 30}
    assert "this frame's decompression limit is reached" in notices[0].message


def test_batches_of_one_set_share_the_frame_budget(tmp_path):
    _, notices, s = decode(tmp_path, "zstd-one-set")
    assert [(p["records"], p["batches"]) for p in s["produced"]] == [(7, 1)]   # 15 of 60 MiB
    assert s["errors"] == {"RECORDS_OVER_BUDGET": 1} and [n.kind for n in notices] == ["budget"]


def test_a_million_tiny_records_cost_their_record_charge(tmp_path):
    _, notices, s = decode(tmp_path, "tiny-records")
    assert s["errors"] == {"RECORDS_OVER_BUDGET": 8} and [n.kind for n in notices] == ["budget"]


# -- memory: kctl decode --summary in a subprocess, its own peak RSS ---------------------

_PEAK = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True);"
         "print(json.dumps({'rc': r.returncode, 'err': r.stderr.decode(errors='replace')[-400:],"
         "'kib': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))")


def peak_rss_mib(path: Path) -> tuple[int, str, float]:
    """Exit status, stderr tail and peak RSS (MiB) of ``kctl decode PATH --summary --json``
    (a wrapper process whose only child is kctl, so RUSAGE_CHILDREN is kctl's own)."""
    run = subprocess.run([sys.executable, "-c", "import json;" + _PEAK, sys.executable, "-m",
                          "kctl", "decode", str(path), "--port", str(adv.PORT), "--summary",
                          "--json"], capture_output=True, text=True, timeout=120)
    out = json.loads(run.stdout)
    return out["rc"], out["err"], out["kib"] / 1024


@pytest.mark.slow
def test_peak_memory_of_every_row_and_of_a_large_frame(tmp_path):
    """The bound of docs/DESIGN.md: start-up (about 55 MiB) plus a small multiple of the
    largest frame. Every crafted row stays under the issue's 150 MB; a capture holding one
    30 MiB Produce request stays under start-up + 3 x 30 MiB (about 2 x is held: the frame
    and the body's copy of its records)."""
    base = tmp_path / "empty.pcap"
    base.write_bytes(cb.capture([]))
    rc, err, start_mib = peak_rss_mib(base)
    assert rc == 1 and "no TCP traffic at all" in err, err   # an empty capture: exit 1 (issue 14)
    peaks = {}
    for name in ("zstd-30-frames", "zstd-30-partitions", "zstd-one-set", "tiny-records",
                 "resync-storm", "out-of-order-16k"):
        path = tmp_path / f"{name}.pcap"
        path.write_bytes(ROWS[name].build())
        rc, err, peaks[name] = peak_rss_mib(path)
        assert "Traceback" not in err and rc in (0, 2), err
    assert max(peaks.values()) < 150 * 1e6 / 2**20, peaks
    conv = cb.Conversation(bport=adv.PORT)
    conv.send(produce_request(1, parts={0: 30_000}, pad=1000), mss=adv.TSO)
    big = tmp_path / "big.pcap"
    big.write_bytes(cb.capture(conv.segs))
    rc, err, big_mib = peak_rss_mib(big)
    assert rc == 0, err
    assert big_mib < start_mib + 3 * 30, (start_mib, big_mib)
    print(f"peak RSS MiB: start-up {start_mib:.0f}, 30 MiB frame {big_mib:.0f}, {peaks}")


def test_no_row_leaves_a_traceback_through_the_cli(tmp_path):
    """The CLI itself, on the row that used to crash: one line, exit status 2."""
    path = tmp_path / "shb.pcapng"
    path.write_bytes(adv.tiny_pcapng_shb())
    run = subprocess.run([sys.executable, "-m", "kctl", "decode", str(path), "--summary"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1] == (
        f"kctl: error: {path}, file offset 4: pcapng section header block length 12 is below "
        "its minimum of 28 (field block_total_length)")


def test_max_decompress_ratio_raises_the_budget(tmp_path):
    path = tmp_path / "one-set.pcap"
    path.write_bytes(ROWS["zstd-one-set"].build())
    out = []
    for ratio in ("256", "100000"):
        run = subprocess.run([sys.executable, "-m", "kctl", "decode", str(path), "--summary",
                              "--json", "--max-decompress-ratio", ratio],
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        s = json.loads(run.stdout)
        out.append((s["produced"][0]["records"], s["errors"]))
    assert out == [(7, {"RECORDS_OVER_BUDGET": 1}), (28, {})]
