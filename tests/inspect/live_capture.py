"""Helpers for tests that capture real client traffic with tcpdump and decode it.

``tcpdump_on_lo`` starts tcpdump on the loopback interface for one port (skipping the
test when tcpdump is missing or may not capture here) and stops it on exit;
``decode_keeping_bytes`` decodes a capture like ``kctl decode`` does but keeps each
frame's bytes next to its decoded form, for oracles that read the same bytes.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kctl.inspect.pcap import TcpSegment, read_segments
from kctl.inspect.reassembly import Frame
from kctl.inspect.session import CaptureDecoder, CaptureNotice, DecodedFrame

#: Notice kinds that mean bytes were lost or not understood.
BAD_NOTICES = ("error", "gap", "framing", "skipped", "malformed", "truncated")


@contextlib.contextmanager
def tcpdump_on_lo(path: Path, port: int, *, settle_s: float = 0.3) -> Iterator[None]:
    # --immediate-mode: without it libpcap hands packets over in blocks (up to a second
    # late), and the last block before SIGINT is lost: a short run captured nothing.
    exe = shutil.which("tcpdump")
    if exe is None:
        pytest.skip("tcpdump is not installed (tools/setup.sh installs it)")
    proc = subprocess.Popen([exe, "-i", "lo", "-U", "--immediate-mode", "-n", "-B", "16384", "-w", str(path),
                             f"tcp port {port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    line = proc.stderr.readline().decode(errors="replace")
    if "listening on" not in line:
        proc.kill()
        rest = proc.communicate(timeout=5)[1].decode(errors="replace")
        pytest.skip(f"tcpdump cannot capture on lo here: {line.strip()} {rest.strip()}")
    try:
        yield
        time.sleep(settle_s)   # let the last segments reach tcpdump
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            err = proc.communicate(timeout=10)[1].decode(errors="replace")
        except subprocess.TimeoutExpired:
            proc.kill()
            err = proc.communicate()[1].decode(errors="replace")
    dropped = [ln for ln in err.splitlines() if "dropped by kernel" in ln]
    assert not dropped or dropped[0].startswith("0 "), f"tcpdump lost packets: {dropped}"


@dataclass
class Decoded:
    frames: list[DecodedFrame]
    data: list[bytes]               # data[i]: frames[i]'s bytes after the size prefix
    notices: list[CaptureNotice]


class _KeepingDecoder(CaptureDecoder):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.data: dict[int, bytes] = {}

    def decode(self, fr: Frame) -> DecodedFrame:
        df = super().decode(fr)
        self.data[id(df)] = bytes(fr.data)
        return df


def decode_keeping_bytes(path: Path, port: int) -> Decoded:
    dec = _KeepingDecoder({port}, file=str(path))
    items: list = []
    with open(path, "rb") as f:
        for seg in read_segments(f, name=str(path)):
            if isinstance(seg, TcpSegment):
                items += dec.on_segment(seg)
    items += dec.finish()
    frames = [x for x in items if isinstance(x, DecodedFrame)]
    return Decoded(frames, [dec.data[id(f)] for f in frames],
                   [x for x in items if isinstance(x, CaptureNotice)])


def assert_every_frame_decodes(d: Decoded) -> None:
    assert d.frames, "nothing captured"
    assert not [n for n in d.notices if n.kind in BAD_NOTICES], d.notices
    bad = [f"{f.api_name} v{f.api_version} {f.direction} corr {f.correlation_id}: "
           f"{f.marks} {f.error}" for f in d.frames
           if f.error is not None or f.marks or f.body is None]
    assert not bad, bad
    assert not [rs for f in d.frames for rs in f.record_sets if rs.error is not None]


def cli_summary(path: Path, port: int) -> dict:
    run = subprocess.run([sys.executable, "-m", "kctl", "decode", str(path), "--port", str(port),
                          "--summary", "--json"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def produced_counts(summary: dict, topics: set[str]) -> Counter:
    return Counter({(p["topic"], p["partition"]): p["records"] for p in summary["produced"]
                    if p["topic"] in topics})
