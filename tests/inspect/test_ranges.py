"""Capture ranges: many readers of one capture decode exactly the frames ``kctl decode``
decodes, once each, whatever the cuts (inside frames, across reordered segments and
retransmissions, in captures that begin inside a connection).

The halves are paired here by the rule kctl/spark/analyze.py's join implements (a response
takes the latest earlier request of its connection and correlation id, a request at most one
response), so this file is also the reference for that rule.
"""

from __future__ import annotations

import io
import random
from collections import Counter

import pytest

from kctl.inspect.pcap import CaptureReader
from kctl.inspect.ranges import (
    FramePair, RequestHalf, ResponseHalf, RangeDecoder, check_coverage, connection_key,
    decode_response_half, index_capture,
)
from kctl.inspect.session import DecodedFrame, decode_files
from kctl.protocol.records import Compression
from tests.inspect import capture_builder as cb
from tests.inspect.kafka_frames import (
    metadata_request, metadata_response, produce_request, produce_response,
)


def signature(f: DecodedFrame) -> tuple:
    return (str(f.conn), f.direction, f.api_key, f.api_version, f.correlation_id, f.size, f.ts_ns,
            f.latency_ns, tuple(sorted(f.marks)), str(f.error), f.client_id, repr(f.body),
            f.raw_body, tuple((rs.topic, rs.partition, rs.batch_count, rs.record_count)
                              for rs in f.record_sets))


def decoded(path, ports=(9092,)) -> Counter:
    return Counter(signature(f) for f in decode_files([path], ports) if isinstance(f, DecodedFrame))


def read_in_ranges(path, *, range_bytes: int, lookback_bytes: int, ports=(9092,)):
    """(frame signatures, repaired connections, number of ranges), as kctl analyze gets them."""
    data = path.read_bytes()
    idx = index_capture(io.BytesIO(data), file=str(path), range_bytes=range_bytes,
                        lookback_bytes=lookback_bytes)
    items, coverage = [], []
    for rng in idx.ranges:
        f = io.BytesIO(data)
        f.seek(rng.window.offset)
        reader = RangeDecoder(rng, ports)
        items += list(reader.run(f))
        coverage += reader.coverage.values()
    verdict = check_coverage(coverage)
    repaired = {c for _, c in verdict.repair}
    if repaired:
        whole = idx.ranges[0]
        whole = type(whole)(whole.file, 0, whole.window, whole.start, None)
        reader = RangeDecoder(whole, ports, connections=repaired)
        redone = list(reader.run(_at(data, whole.window.offset)))
        assert all(isinstance(it, FramePair) for it in redone)
        items = [it for it in items if _conn(it) not in repaired] + redone
    frames = []
    requests = sorted((it for it in items if isinstance(it, RequestHalf)),
                      key=lambda h: h.request.packet)
    taken: set[int] = set()
    for it in items:
        if isinstance(it, FramePair):
            frames += [x for x in (it.request, it.response) if x is not None]
            for side, seq, unmarked in ((it.request, it.request_seq, it.request_unmarked),
                                        (it.response, it.response_seq, it.response_unmarked)):
                _restore(side, seq if unmarked else None, verdict)
    for it in sorted((it for it in items if isinstance(it, ResponseHalf)),
                     key=lambda h: h.response.packet):
        resp = it.response
        _restore(resp, it.seq if it.unmarked else None, verdict)
        before = [i for i, r in enumerate(requests)
                  if r.request.conn == resp.conn and r.request.correlation_id == resp.correlation_id
                  and r.request.packet < resp.packet]
        if before and before[-1] not in taken:
            taken.add(before[-1])
            req = requests[before[-1]].request
            if "unmatched" in resp.marks:
                resp = decode_response_half(resp, req.api_key, req.api_version, req.ts_ns)
        frames.append(resp)
    for r in requests:
        _restore(r.request, r.seq if r.unmarked else None, verdict)
        frames.append(r.request)
    return Counter(signature(f) for f in frames), repaired, len(idx.ranges)


def _at(data: bytes, offset: int) -> io.BytesIO:
    f = io.BytesIO(data)
    f.seek(offset)
    return f


def _conn(it) -> str:
    f = it.request if isinstance(it, RequestHalf) else it.response if isinstance(it, ResponseHalf) \
        else (it.request or it.response)
    return connection_key(f.conn)


def _restore(f: DecodedFrame | None, seq: int | None, verdict) -> None:
    if f is not None and seq is not None and \
            (f.file, connection_key(f.conn), f.direction, seq) in verdict.resynced:
        f.marks += ("resynced",)


# -- captures --------------------------------------------------------------------------------------

def _traffic(c: cb.Conversation, n: int, rng: random.Random, *, mss: int, first_corr: int = 1) -> None:
    for i in range(first_corr, first_corr + n):
        kind = rng.random()
        if kind < 0.6:
            c.send(produce_request(i, "orders", {0: rng.randint(1, 9), 1: 2}, pad=rng.choice((0, 300)),
                                   codec=rng.choice((Compression.NONE, Compression.GZIP))), mss=mss)
            if rng.random() < 0.9:          # some requests stay unanswered
                c.reply(produce_response(i, "orders", (0, 1)), mss=mss)
        else:
            c.send(metadata_request(i, ("orders",)), mss=mss)
            c.reply(metadata_response(i), mss=mss)


def _messy(segs: list[cb.Seg], rng: random.Random, *, swap: float, dup: float) -> list[cb.Seg]:
    """Neighbours swapped, and some segments sent again a few packets later."""
    out = list(segs)
    for i in range(len(out) - 1):
        if rng.random() < swap:
            out[i], out[i + 1] = out[i + 1], out[i]
    for i in range(len(out) - 1, 0, -1):
        if out[i].payload and rng.random() < dup:
            out.insert(min(len(out), i + rng.randint(2, 12)), out[i])
    return out


def load_capture(tmp_path, seed: int, *, swap: float = 0.0, dup: float = 0.0,
                 cut_first: int = 0) -> object:
    """Three interleaved connections (one begun before the capture when ``cut_first``)."""
    rng = random.Random(seed)
    convs = []
    for k in range(3):
        c = cb.Conversation(cport=50000 + k, ts_ns=10**18 + k * 333)
        _traffic(c, 12, rng, mss=rng.choice((90, 400, 1500)))
        c.close()
        convs.append(c.segs)
    if cut_first:
        convs[0] = convs[0][cut_first:]        # the capture begins inside this connection
    segs = sorted((s for c in convs for s in c), key=lambda s: s.ts_ns)
    segs = _messy(segs, rng, swap=swap, dup=dup)
    path = tmp_path / f"load-{seed}.pcapng"
    path.write_bytes(cb.capture(segs, fmt="pcapng"))
    return path


CASES = {
    "in order": dict(),
    "reordered": dict(swap=0.3),
    "retransmitted": dict(dup=0.15),
    "reordered and retransmitted": dict(swap=0.2, dup=0.1),
    "capture begins inside a connection": dict(cut_first=7, swap=0.1),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("range_bytes", [200, 1500, 7000])
def test_ranges_decode_the_frames_decode_does(tmp_path, case, range_bytes):
    """Ranges far smaller than frames (cut inside them, across reordered and retransmitted
    segments): the same frames, decoded the same, each once; with a lookback, no repair."""
    for seed in range(3):
        path = load_capture(tmp_path, seed, **CASES[case])
        want = decoded(path)
        got, repaired, n = read_in_ranges(path, range_bytes=range_bytes, lookback_bytes=16000)
        assert n >= 3
        assert got == want, (case, seed)
        assert not repaired, (case, seed)


@pytest.mark.parametrize("lookback", [0, 300])
def test_a_lookback_too_short_is_found_and_repaired(tmp_path, lookback):
    """Readers that start with no (or too little) lookback miss frames or frame wrongly; the
    check finds the connections and reading them again gives decode's frames."""
    saw_repair = False
    for seed in range(4):
        path = load_capture(tmp_path, seed, swap=0.1, dup=0.05, cut_first=5)
        got, repaired, _ = read_in_ranges(path, range_bytes=400, lookback_bytes=lookback)
        assert got == decoded(path), seed
        saw_repair |= bool(repaired)
    assert saw_repair


def test_packets_the_capture_lost_are_gaps_repaired_as_decode_resyncs(tmp_path):
    """A real gap (packets never captured): decode resynchronises after it, which a reader
    that began later cannot repeat; the check finds the hole and the connection is decoded
    from the start of the file."""
    for seed in range(3):
        rng = random.Random(seed)
        c = cb.Conversation()
        _traffic(c, 20, rng, mss=300)
        c.close()
        segs = [s for i, s in enumerate(c.segs) if not (i > 10 and s.payload and rng.random() < 0.05)]
        path = tmp_path / f"lost-{seed}.pcapng"
        path.write_bytes(cb.capture(segs, fmt="pcapng"))
        got, repaired, _ = read_in_ranges(path, range_bytes=700, lookback_bytes=3000)
        assert got == decoded(path), seed
        if len(segs) < len(c.segs):
            assert repaired


def test_ownership_each_frame_once_by_the_packet_of_its_first_byte(tmp_path):
    """Every owned frame's first byte came in a packet of the reader's own range."""
    path = load_capture(tmp_path, 5, swap=0.2, dup=0.1)
    data = path.read_bytes()
    idx = index_capture(io.BytesIO(data), file=str(path), range_bytes=300, lookback_bytes=16000)
    owners: Counter = Counter()
    for rng in idx.ranges:
        reader = RangeDecoder(rng, (9092,))
        for it in reader.run(_at(data, rng.window.offset)):
            for f in ([it.request, it.response] if isinstance(it, FramePair)
                      else [it.request] if isinstance(it, RequestHalf) else [it.response]):
                if f is not None:
                    owners[(str(f.conn), f.direction, f.ts_ns, f.size)] += 1
    assert set(owners.values()) == {1}
    assert sum(owners.values()) == sum(decoded(path).values())


def test_index_cuts_at_packet_boundaries_with_windows_before_them(tmp_path):
    path = load_capture(tmp_path, 1)
    data = path.read_bytes()
    offsets = {p.offset for p in CaptureReader(io.BytesIO(data))}
    idx = index_capture(io.BytesIO(data), file=str(path), range_bytes=2000, lookback_bytes=3000)
    assert idx.damage is None and len(idx.ranges) > 5
    assert idx.ranges[0].start.offset < min(offsets) and idx.ranges[-1].end is None
    for a, b in zip(idx.ranges, idx.ranges[1:]):
        assert a.end == b.start and b.start.offset in offsets
        assert b.window.offset <= max(idx.ranges[0].start.offset, b.start.offset - 3000)
        assert b.start.offset - a.start.offset >= 2000
    assert sum(r.next_packet - r.first_packet for r in idx.ranges[:-1]) + \
        (idx.packets + 1 - idx.ranges[-1].first_packet) == len(offsets)


def test_a_response_half_whose_corr_is_its_length_minus_4_decodes_whole():
    """The join's late decode of an unmatched response rebuilds the frame without its size
    prefix: a correlation id equal to the frame's length minus 4 is not read as one."""
    from kctl.inspect.reassembly import ConnectionId, Endpoint
    n = len(produce_response(1, version=11)) - 4
    data = produce_response(n - 4, version=11)[4:]
    half = DecodedFrame("f", 5, ConnectionId(Endpoint("a", 1), Endpoint("b", 9092)), "response",
                        0, len(data), None, None, n - 4, raw_body=data[4:], marks=("unmatched",))
    df = decode_response_half(half, 0, 11, 2)
    assert df.error is None and df.correlation_id == n - 4 and df.latency_ns == 3
    assert df.body.responses[0].name == "t"


def test_the_join_decodes_a_late_response_whose_corr_is_its_length_minus_4():
    """kctl analyze's join (``merge_halves``) decodes an unmatched response half from its
    correlation id and raw body, without a size prefix: not cut 4 bytes short."""
    pytest.importorskip("pyarrow")
    import struct

    from kctl.inspect.reassembly import ConnectionId, Endpoint
    from kctl.inspect.session import decode_frame_bytes
    from kctl.spark.capture_rows import merge_halves, pair_row
    n = len(produce_response(1, version=11)) - 4
    data = produce_response(n - 4, version=11)[4:]
    conn = ConnectionId(Endpoint("a", 1), Endpoint("b", 9092))
    req = decode_frame_bytes(produce_request(n - 4, version=11), size_prefix=True)
    req.file, req.conn = "f", conn
    half = DecodedFrame("f", 5, conn, "response", 0, len(data), None, None, n - 4,
                        raw_body=data[4:], marks=("unmatched",))
    s = dict(pair_row(None, half), resp_seq=1, resp_unmarked_seq=1,
             raw=struct.pack(">i", n - 4) + data[4:])
    row = merge_halves(pair_row(req, None), s)
    assert row["decode_error"] is None and row["errors"] == [] and "unmatched" not in row["marks"]


def test_analyze_throttle_is_null_for_a_version_without_the_field():
    """kctl analyze's ``throttle_time_ms`` is decode's: null for a response version that has
    no throttle field (Produce v0), not the unset field's 0."""
    pytest.importorskip("pyarrow")
    from kctl.inspect.reassembly import ConnectionId, Endpoint
    from kctl.inspect.session import decode_frame_bytes
    from kctl.spark.capture_rows import pair_row
    conn = ConnectionId(Endpoint("a", 1), Endpoint("b", 9092))
    got = {}
    for v in (0, 1):
        req = decode_frame_bytes(produce_request(7, version=v), size_prefix=True)
        resp = decode_frame_bytes(produce_response(7, version=v), size_prefix=True,
                                  api_key=0, api_version=v)
        req.file = resp.file = "f"
        req.conn = resp.conn = conn
        got[v] = pair_row(req, resp)["throttle_time_ms"]
    assert got == {0: None, 1: 0}


@pytest.mark.parametrize("range_bytes", [200, 1500])
def test_a_capture_that_begins_and_ends_inside_frames_passes_with_decode_s_notices(tmp_path, range_bytes):
    """The frame the capture ends inside is seen by every reader that reads to the end: it is
    the tail of the reader owning its first byte's packet alone, so the stream passes the
    check (no repair), and the check gives the notices decode gives it: the bytes skipped
    before each direction's first frame and the cut-off frame, once each."""
    rng = random.Random(3)
    c = cb.Conversation()
    _traffic(c, 8, rng, mss=90)
    c.send(produce_request(99, "orders", {0: 6}, pad=300), mss=90)
    path = tmp_path / "cut.pcap"
    path.write_bytes(cb.capture(c.segs[5:-1]))
    want = Counter(n.kind for n in decode_files([path], {9092}) if not isinstance(n, DecodedFrame))
    assert want["incomplete"] == 1 and want["skipped"] and set(want) == {"skipped", "incomplete"}
    got, repaired, n = read_in_ranges(path, range_bytes=range_bytes, lookback_bytes=16000)
    assert n >= 3 and not repaired and got == decoded(path)
    data = path.read_bytes()
    idx = index_capture(io.BytesIO(data), file=str(path), range_bytes=range_bytes, lookback_bytes=16000)
    coverage = []
    for r in idx.ranges:
        reader = RangeDecoder(r, (9092,))
        list(reader.run(_at(data, r.window.offset)))
        coverage += reader.coverage.values()
    assert Counter(kind for _, kind in check_coverage(coverage).notices) == want
