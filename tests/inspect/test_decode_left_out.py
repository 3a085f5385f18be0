"""What ``kctl decode`` cannot show is said, once (the s6 audit): record sets ``--records``
cannot print, a file that is not a capture, frames cut by the snap length."""

from __future__ import annotations

import json

import pytest
from crc32c import crc32c
from typer.testing import CliRunner

from kctl import cli
from kctl.cli import app
from kctl.protocol.frames import frame
from kctl.protocol.messages import encode_request
from kctl.protocol.records import build_batch
from kctl.inspect.session import DecodedFrame, decode_files
from tests.inspect import capture_builder as cb
from tests.inspect.kafka_frames import ProduceRequest, produce_request, produce_response, records

runner = CliRunner()


def _with_codec(batch: bytes, codec: int) -> bytes:
    """The batch with its compression bits set to ``codec``, its CRC-32C made right."""
    b = bytearray(batch)
    b[22] = (b[22] & ~7) | codec
    b[17:21] = crc32c(bytes(b[21:])).to_bytes(4, "big")
    return bytes(b)


def _bad_sets_capture(tmp_path):
    """One Produce request: t/0 whole, t/1 a good batch then one failing its CRC-32C,
    t/2 a batch of an unknown codec (5), u/0 an unknown codec too."""
    bad_crc = bytearray(build_batch(records(3, 10)))
    bad_crc[-1] ^= 1
    parts = {"t": {0: build_batch(records(2)), 1: build_batch(records(2, 5)) + bytes(bad_crc),
                   2: _with_codec(build_batch(records(2)), 5)},
             "u": {0: _with_codec(build_batch(records(1)), 5)}}
    body = ProduceRequest(acks=-1, timeout_ms=1000, topic_data=[
        ProduceRequest.TopicProduceData(name=t, partition_data=[
            ProduceRequest.PartitionProduceData(index=p, records=r) for p, r in ps.items()])
        for t, ps in parts.items()])
    c = cb.Conversation()
    c.send(frame(encode_request(0, 9, 7, "cli", body)))
    c.close()
    p = tmp_path / "bad-sets.pcap"
    p.write_bytes(cb.capture(c.segs))
    return p


def _notices(stderr: str) -> list[str]:
    return [x for x in stderr.splitlines() if x.startswith("# ")]


def test_records_says_which_record_sets_it_leaves_out(tmp_path):
    p = _bad_sets_capture(tmp_path)
    r = runner.invoke(app, ["decode", str(p), "--records", "-t", "t"])
    assert r.exit_code == 0, r.output
    # The records before the damage are printed; the rest is said on stderr, per set.
    assert r.stdout.splitlines() == ["t 0 0 k0 value-0", "t 0 1 k1 value-1",
                                     "t 1 0 k5 value-5", "t 1 1 k6 value-6"]
    where = f"# {p}, 10.0.0.1:50000<->10.0.0.2:9092 request, stream offset 0: records: "
    crc, codec = _notices(r.stderr)
    assert crc.startswith(where + "Produce v9 #7 (packet 4) t/1: left out after its first 1 "
                          "batch, they do not decode (CRC-32C mismatch: batch says ")
    assert crc.endswith(" at offset 110 in field 'records.batch[1].crc')")
    assert codec == where + ("Produce v9 #7 (packet 4) t/2: left out, they do not decode "
                             "(unknown compression codec 5 at offset 21 in field "
                             "'records.batch[0].attributes')")
    # --json: the same records as objects, the same notices; u/0 is said once not filtered.
    r = runner.invoke(app, ["decode", str(p), "--records", "--json"])
    assert r.exit_code == 0, r.output
    assert [(o["topic"], o["partition"]) for o in map(json.loads, r.stdout.splitlines())] == [
        ("t", 0), ("t", 0), ("t", 1), ("t", 1)]
    assert [n.split(" (packet 4) ")[1].split(":")[0] for n in _notices(r.stderr)] == [
        "t/1", "t/2", "u/0"]


def test_records_says_which_frames_it_could_not_read_records_from(tmp_path):
    c = cb.Conversation()
    bad = bytearray(produce_request(1))
    bad[-30:] = b"\xff" * 30
    c.send(bytes(bad))
    c.reply(produce_response(1))
    c.reply(produce_response(9))        # its request never captured: any API
    c.close()
    p = tmp_path / "undecoded.pcap"
    p.write_bytes(cb.capture(c.segs))
    r = runner.invoke(app, ["decode", str(p), "--records"])
    assert r.exit_code == 0 and r.stdout == "", r.output
    assert [n.split(": records: ")[1] for n in _notices(r.stderr)] == [
        "Produce v9 #1 (packet 4): not decoded, any records in it left out: the frame does not "
        "decode (truncated varint at offset 139 in field "
        "'topic_data[0].partition_data[0].tagged fields')",
        "response #9 (packet 6): not decoded, any records in it left out: its request was not "
        "captured"]


def test_a_file_that_is_no_capture_is_said_once(tmp_path, capsys):
    p = tmp_path / "tiny.pcap"
    p.write_bytes(cb.capture([])[:10])
    with pytest.raises(SystemExit) as e:
        cli.main(["decode", str(p)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"kctl: error: {p}, file offset 10: pcap file header cut short (field header)"]
    # A second damaged file: its own line where it happened, the first ends the run.
    q = tmp_path / "tiny2.pcap"
    q.write_bytes(p.read_bytes())
    with pytest.raises(SystemExit):
        cli.main(["decode", str(p), str(q), "--port", "9092"])
    assert capsys.readouterr().err.splitlines() == [
        f"# {q}, file offset 10: error: pcap file header cut short (field header)",
        f"kctl: error: {p}, file offset 10: pcap file header cut short (field header) "
        "(and 1 more)"]


SNAP = 200      # bytes of each packet kept, as tcpdump -s 200 (54 of them the headers)


def _snap_capture(tmp_path):
    """tcpdump -s 200: Produce #4 is cut (its header captured), its response whole;
    Produce #5 whole, its response cut; Produce #6 ends the capture half sent."""
    c = cb.Conversation()
    c.send(produce_request(4, parts={0: 20}, pad=50))
    c.reply(produce_response(4))
    c.send(produce_request(5, parts={0: 1}))
    c.reply(produce_response(5, parts=tuple(range(40))))
    c.send(produce_request(6)[:30])
    c.close()
    packets, orig = [], {}
    for i, s in enumerate(c.segs):
        data = cb.link(1, cb.ip(s))
        if len(data) > SNAP:
            orig[i] = len(data)
        packets.append((s.ts_ns, data[:SNAP]))
    p = tmp_path / "snap.pcap"
    p.write_bytes(cb.pcap(packets, nano=True, snaplen=SNAP, orig_lens=orig))
    return p


def test_frames_cut_by_the_snap_length_are_named_and_answered(tmp_path):
    p = _snap_capture(tmp_path)
    r = runner.invoke(app, ["decode", str(p)])
    assert r.exit_code == 0, r.output
    cut = [x.split(": incomplete: ")[1] for x in _notices(r.stderr) if ": incomplete: " in x]
    req4, resp5 = len(produce_request(4, parts={0: 20}, pad=50)), len(
        produce_response(5, parts=tuple(range(40))))
    assert cut == [f"Produce v9 request #4 of {req4} bytes: frame cut by a gap after "
                   f"{SNAP - 54} bytes",
                   f"Produce v9 response #5 of {resp5} bytes: frame cut by a gap after "
                   f"{SNAP - 54} bytes",
                   f"Produce v9 request #6 of {len(produce_request(6))} bytes: capture ends "
                   "inside a frame (30 bytes of it present)"]
    # The cut request's response decodes as its API, marked, timed from the packet that
    # completed the request (captured, its payload cut: 1 µs before the response).
    resp4 = next(x for x in r.stdout.splitlines() if "resp" in x and "#4" in x)
    assert resp4.endswith(" resp Produce v9 #4 0.001ms t/0@10 (request_cut)"), resp4
    r = runner.invoke(app, ["decode", str(p), "--json", "--api", "Produce"])
    o = next(json.loads(x) for x in r.stdout.splitlines()
             if json.loads(x)["correlation_id"] == 4 and json.loads(x)["direction"] == "response")
    assert o["marks"] == ["request_cut"] and o["latency_ms"] == 0.001 and o["body"] is not None
    # --summary counts as docs/decode-json.md says: a cut request is a notice, not one of its
    # API's requests (#5 alone is); #4's answer is a response, timed; #5's cut answer a notice.
    r = runner.invoke(app, ["decode", str(p), "--summary", "--json"])
    s = json.loads(r.stdout)
    produce = s["apis"]["Produce"]
    assert (produce["requests"], produce["responses"], produce["latency_count"]) == (1, 1, 1)
    assert s["frames"] == 2 and s["marks"]["request_cut"] == 1 and s["notices"]["incomplete"] == 3


def _snapped(segs, path, *, lost=()):
    """``segs`` captured as ``tcpdump -s SNAP`` would, without the packets at ``lost``."""
    packets, orig = [], {}
    for s in (s for i, s in enumerate(segs) if i not in lost):
        data = cb.link(1, cb.ip(s))
        if len(data) > SNAP:
            orig[len(packets)] = len(data)
        packets.append((s.ts_ns, data[:SNAP]))
    path.write_bytes(cb.pcap(packets, nano=True, snaplen=SNAP, orig_lens=orig))
    return path


def _responses(p) -> dict[int, DecodedFrame]:
    return {f.correlation_id: f for f in decode_files([p], {9092})
            if isinstance(f, DecodedFrame) and f.direction == "response"}


def test_a_request_seen_only_while_resynchronising_is_answered_and_timed(tmp_path):
    """Every request after the first a snap length cuts is cut while the stream looks for a
    frame start again: its header is read there, so its response pairs (tshark shows the
    header) and is timed from the packet that completed the request; a response that does
    not decode as that request's API stays unmatched (the header may be record data)."""
    c = cb.Conversation()
    c.send(produce_request(1, parts={0: 20}, pad=50))
    c.reply(produce_response(1))
    sent2 = c.send(produce_request(2, parts={0: 20}, pad=50), mss=500)   # 3 packets, each cut
    c.reply(produce_response(2))
    c.send(produce_request(3, parts={0: 1}))            # whole: the stream is framed again
    c.reply(produce_response(3))
    c.send(produce_request(9, parts={0: 20}, pad=50))
    c.send(produce_request(10, parts={0: 20}, pad=50))
    c.reply(produce_response(9))
    c.reply(frame(b"\x00\x00\x00\x0a" + b"\xff" * 12))   # #10: no Produce response
    c.close()
    got = _responses(_snapped(c.segs, tmp_path / "resync.pcap"))
    assert sorted(got) == [1, 2, 3, 9, 10]
    two = got[2]
    assert (two.api_name, two.marks, two.body is not None) == ("Produce", ("request_cut",), True)
    assert two.latency_ns == two.ts_ns - sent2[-1].ts_ns == 1000     # not from its first packet
    assert got[3].marks == () and got[3].latency_ns == 1000
    assert got[9].marks == ("request_cut",) and got[9].latency_ns == 2000   # cut when framed
    assert got[10].marks == ("unmatched",) and got[10].api_key is None
    r = runner.invoke(app, ["decode", str(tmp_path / "resync.pcap"), "--summary", "--json"])
    summary = json.loads(r.stdout)
    assert summary["apis"]["Produce"]["responses"] == 4 and summary["apis"]["Produce"][
        "latency_count"] == 4, summary["apis"]
    assert summary["apis"]["unmatched"]["responses"] == 1


def test_a_capture_joined_inside_a_frame_answers_the_cut_requests_after_it(tmp_path):
    """The capture begins inside request #1 (no SYN): request #2, cut by the snap length, is
    found only by resynchronising, and so is its response, which its header lets in."""
    c = cb.Conversation()
    c.send(produce_request(1, parts={0: 20}, pad=50), mss=500)
    c.reply(produce_response(1))
    sent2 = c.send(produce_request(2, parts={0: 20}, pad=50), mss=500)
    c.reply(produce_response(2))
    c.close()
    got = _responses(_snapped(c.segs[4:], tmp_path / "joined.pcap"))
    assert list(got) == [2]
    assert got[2].marks == ("request_cut", "resynced") and got[2].api_name == "Produce"
    assert got[2].latency_ns == got[2].ts_ns - sent2[-1].ts_ns


def test_a_cut_request_whose_last_packet_was_lost_has_no_latency(tmp_path):
    """The snap length cut the request's first packet and its second was lost: the response
    still pairs, but when the request was sent whole is not in the capture."""
    c = cb.Conversation()
    sent = c.send(produce_request(4, parts={0: 20}, pad=50), mss=500)
    c.reply(produce_response(4))
    c.send(produce_request(5, parts={0: 1}))
    c.reply(produce_response(5))
    c.close()
    got = _responses(_snapped(c.segs, tmp_path / "lost.pcap", lost={c.segs.index(sent[1])}))
    assert got[4].marks == ("request_cut",) and got[4].latency_ns is None


def test_analyze_range_readers_answer_a_cut_request_as_decode_does(tmp_path):
    from tests.inspect.test_ranges import decoded, read_in_ranges
    p = _snap_capture(tmp_path)
    want = decoded(p)
    assert sum(n for sig, n in want.items() if "request_cut" in sig[8]) == 1
    for range_bytes in (700, 1 << 30):
        got, repaired, _ = read_in_ranges(p, range_bytes=range_bytes, lookback_bytes=3000)
        assert got == want and repaired, range_bytes
    # Requests seen only while resynchronising, timed: the same pairs and latencies.
    test_a_request_seen_only_while_resynchronising_is_answered_and_timed(tmp_path)
    q = tmp_path / "resync.pcap"
    want = decoded(q)
    timed = [sig for sig in want if "request_cut" in sig[8] and sig[7] is not None]
    assert len(timed) == 3, want
    for range_bytes in (400, 1 << 30):
        got, repaired, _ = read_in_ranges(q, range_bytes=range_bytes, lookback_bytes=3000)
        assert got == want and repaired, range_bytes


@pytest.mark.broker
@pytest.mark.slow
def test_a_real_snap_length_capture_pairs_and_times_every_produce_answer(broker, tmp_path):
    """A kctl produce run captured by tcpdump, and the same packets cut to 200 bytes as
    tcpdump -s 200 keeps them (editcap -s 200: the same times, each packet's length on the
    wire kept). Every Produce request is cut, so after the first of each connection they
    are cut while the stream looks for a frame start. Every Produce answer the whole
    capture pairs is paired in the cut one too (before: all but one per connection were
    unmatched), with the same latency: from the packet that carried the request's last
    byte."""
    import shutil
    import subprocess
    import sys

    from tests.inspect.live_capture import tcpdump_on_lo
    editcap = shutil.which("editcap")
    if editcap is None:
        pytest.skip("editcap (with tshark, tools/setup.sh) is not installed")
    full, snap = tmp_path / "full.pcap", tmp_path / "snap.pcap"
    with tcpdump_on_lo(full, broker.port):
        subprocess.run([sys.executable, "-m", "kctl", "produce", "-b", broker.bootstrap,
                        "-t", f"snap-{tmp_path.name}", "--num-records", "1000", "--record-size",
                        "200", "--rate", "2000", "--workers", "1", "-X", "linger.ms=5", "--quiet"],
                       check=True, timeout=60, capture_output=True)
    subprocess.run([editcap, "-s", str(SNAP), str(full), str(snap)], check=True, timeout=60,
                   capture_output=True)

    def answers(p):
        return {(str(f.conn), f.correlation_id): f for f in decode_files([p], {broker.port})
                if isinstance(f, DecodedFrame) and f.direction == "response"
                and (f.api_name == "Produce" or "unmatched" in f.marks)}
    whole, cut = answers(full), answers(snap)
    assert len(whole) >= 50 and all(f.api_name == "Produce" for f in whole.values())
    assert set(cut) == set(whole)
    assert all(f.api_name == "Produce" and "request_cut" in f.marks for f in cut.values())
    assert {k: f.latency_ns for k, f in cut.items()} == {k: f.latency_ns for k, f in whole.items()}
