"""Pairing, decoding, marks, port guessing, views and the ``kctl decode`` command."""

from __future__ import annotations

import json
import struct

import pytest
from typer.testing import CliRunner

from kctl.cli import app
from kctl.errors import ConfigError
from kctl.inspect import report
from kctl.inspect.session import (
    CaptureNotice, DecodedFrame, decode_files, decode_frame_bytes, decode_hex_frame,
    guess_broker_ports,
)
from kctl.inspect.summary import CaptureSummary
from kctl.protocol.frames import frame
from kctl.protocol.records import Compression
from tests.inspect import capture_builder as cb
from tests.inspect.kafka_frames import (
    metadata_request, metadata_response, produce_request, produce_response,
)


def write(tmp_path, segs, name="c.pcapng", **kw):
    p = tmp_path / name
    p.write_bytes(cb.capture(segs, fmt="pcapng" if name.endswith("ng") else "pcap", **kw))
    return p


def frames(path, ports=(9092,)):
    return [f for f in decode_files([path], ports) if isinstance(f, DecodedFrame)]


def basic(tmp_path, **conv):
    c = cb.Conversation(**conv)
    c.send(produce_request(1, "orders", {0: 4, 2: 1}, codec=Compression.ZSTD))
    c.reply(produce_response(1, "orders", (0, 2), error_code=6, throttle_ms=25))
    c.send(metadata_request(2, ("orders",)))
    c.reply(metadata_response(2))
    c.close()
    return write(tmp_path, c.segs)


def test_requests_and_responses_are_paired_and_decoded(tmp_path):
    fs = frames(basic(tmp_path))
    assert [(f.direction, f.api_name, f.api_version, f.correlation_id) for f in fs] == [
        ("request", "Produce", 9, 1), ("response", "Produce", 9, 1),
        ("request", "Metadata", 12, 2), ("response", "Metadata", 12, 2)]
    req, resp = fs[0], fs[1]
    assert req.client_id == "cli" and resp.latency_ns == 1000
    assert [(rs.topic, rs.partition, rs.batch_count, rs.record_count, rs.codecs)
            for rs in req.record_sets] == [("orders", 0, 1, 4, ["zstd"]), ("orders", 2, 1, 1, ["zstd"])]
    assert resp.body.throttle_time_ms == 25
    assert all(f.marks == () and f.error is None for f in fs)


def test_unknown_api_unmatched_response_and_decode_error_are_kept_and_marked(tmp_path):
    c = cb.Conversation()
    unknown = frame(struct.pack(">hhih", 999, 0, 5, 3) + b"abc" + b"\x01\x02\x03")
    bad_version = frame(struct.pack(">hhih", 0, 99, 6, 0) + b"zz")
    broken = bytearray(produce_request(7))
    broken[-30:] = b"\xff" * 30      # records and trailing bytes are garbage
    c.send(unknown + bad_version + bytes(broken) + metadata_request(8))
    c.reply(frame(struct.pack(">i", 5) + b"resp") + frame(struct.pack(">i", 42) + b"stray")
            + metadata_response(8))
    fs = frames(write(tmp_path, c.segs))
    by = {(f.direction, f.correlation_id): f for f in fs}
    u = by[("request", 5)]
    assert u.marks == ("unknown_api",) and u.client_id == "abc" and u.raw_body == b"\x01\x02\x03"
    assert by[("request", 6)].marks == ("unknown_api",)
    assert by[("response", 5)].marks == ("unknown_api",) and by[("response", 5)].api_key == 999
    stray = by[("response", 42)]
    assert stray.marks == ("unmatched",) and stray.raw_body == b"stray" and stray.api_key is None
    b = by[("request", 7)]
    assert b.marks == ("decode_error",) and b.error is not None and b.client_id == "cli"
    # Decoding went on after the broken frame.
    assert by[("request", 8)].body is not None and by[("response", 8)].body is not None


def test_broken_record_batch_stays_on_its_record_set(tmp_path):
    req = bytearray(produce_request(1, parts={0: 3}))
    req[-5] ^= 0xFF      # inside the batch: CRC mismatch
    c = cb.Conversation()
    c.send(bytes(req))
    (f,) = frames(write(tmp_path, c.segs))
    assert f.error is None and f.record_sets[0].error is not None
    assert report.has_errors(f)
    assert report.frame_json(f)["produce"][0]["decode_error"]["reason"]


def test_guess_broker_ports(tmp_path):
    a = cb.Conversation(bport=19092)
    a.send(metadata_request(1))
    a.reply(metadata_response(1))
    b = cb.Conversation(cport=40000, bport=29092, ts_ns=a.ts, handshake=False)
    b.send(metadata_request(1))
    p = write(tmp_path, a.segs + b.segs)
    assert guess_broker_ports([p]) == {19092, 29092}
    empty = write(tmp_path, [], name="e.pcap")
    assert guess_broker_ports([empty]) == {9092}


def test_not_a_capture_and_truncated_files_are_notices(tmp_path):
    junk = tmp_path / "junk.pcap"
    junk.write_bytes(b"hello, not a capture")
    (n,) = list(decode_files([junk], {9092}))
    assert isinstance(n, CaptureNotice) and n.kind == "error" and n.offset == 0
    good = basic(tmp_path)
    cut = tmp_path / "cut.pcapng"
    cut.write_bytes(good.read_bytes()[:-10])
    items = list(decode_files([cut, good], {9092}))
    kinds = [getattr(i, "kind", None) for i in items if isinstance(i, CaptureNotice)]
    assert "truncated" in kinds
    assert sum(isinstance(i, DecodedFrame) for i in items) == 4 + 4   # the cut block is the last FIN


def test_decode_frame_bytes_with_and_without_the_size_prefix():
    req = produce_request(3)
    f = decode_frame_bytes(req, size_prefix=True)
    assert f.api_name == "Produce" and f.correlation_id == 3
    assert decode_frame_bytes(req[4:], size_prefix=False).body == f.body
    r = decode_frame_bytes(metadata_response(9), size_prefix=True, api_key=3, api_version=12)
    assert r.api_name == "Metadata" and r.body.topics[0].error_code == 3
    with pytest.raises(ValueError, match="size prefix says"):
        decode_frame_bytes(req[:-1], size_prefix=True)


def _response_with_corr_its_length_minus_4(version=11):
    """A Produce response (no size prefix) whose correlation id equals its length
    minus 4: its first int32 reads as a size prefix too (audit 6d, ``kctl inspect
    --show frames``)."""
    n = len(produce_response(1, version=version)) - 4
    data = produce_response(n - 4, version=version)[4:]
    assert struct.unpack_from(">i", data)[0] == len(data) - 4
    return data


def test_a_frame_without_its_prefix_is_not_cut_when_its_corr_looks_like_one():
    data = _response_with_corr_its_length_minus_4()
    f = decode_frame_bytes(data, size_prefix=False, api_key=0, api_version=11)
    assert f.error is None and f.correlation_id == len(data) - 4
    assert report.gist(f) == "t/0@10"


def test_hex_reading_takes_the_reading_that_decodes_wholly():
    data = _response_with_corr_its_length_minus_4()
    bare = decode_hex_frame(data, api_key=0, api_version=11)
    assert not bare.size_prefix and bare.frame.error is None and not bare.both_decode
    framed = decode_hex_frame(struct.pack(">i", len(data)) + data, api_key=0, api_version=11)
    assert framed.size_prefix and framed.frame.error is None
    assert framed.frame.correlation_id == bare.frame.correlation_id
    # Bytes whose first int32 is not the rest's length have no prefix.
    req = produce_request(3)[4:]
    assert not decode_hex_frame(req).size_prefix
    # The user's word wins: read as prefixed, these bytes do not decode wholly.
    forced = decode_hex_frame(data, size_prefix=True, api_key=0, api_version=11)
    assert forced.size_prefix and forced.frame.error is not None


def test_json_view_has_the_documented_keys(tmp_path):
    fs = frames(basic(tmp_path))
    req, resp = report.frame_json(fs[0]), report.frame_json(fs[1])
    assert set(req) <= set(report.JSON_KEYS) and set(resp) <= set(report.JSON_KEYS)
    assert req["src"] == "10.0.0.1:50000" and req["dst"] == "10.0.0.2:9092"
    assert (req["src_port"], req["dst_port"], req["direction"]) == (50000, 9092, "request")
    assert req["client_id"] == "cli" and req["api_key"] == 0 and req["api_name"] == "Produce"
    assert req["produce"] == [
        {"topic": "orders", "partition": 0, "bytes": req["produce"][0]["bytes"], "batches": 1,
         "records": 4, "codec": "zstd"},
        {"topic": "orders", "partition": 2, "bytes": req["produce"][1]["bytes"], "batches": 1,
         "records": 1, "codec": "zstd"}]
    assert resp["throttle_time_ms"] == 25
    assert resp["error_codes"] == [{"code": 6, "name": "NOT_LEADER_OR_FOLLOWER"}] * 2
    assert "client_id" not in resp and resp["body"]["responses"][0]["name"] == "orders"
    json.dumps(req), json.dumps(resp)
    assert req["ts"].endswith("Z") and req["ts_ns"] == fs[0].ts_ns


def test_line_view_and_records():
    f = decode_frame_bytes(produce_request(1, "orders", {0: 2}, codec=Compression.GZIP), size_prefix=True)
    line = report.frame_line(f)
    assert "Produce v9 #1 [cli]" in line and "orders/0: 1b 2r gzip" in line
    views = list(report.iter_records(f))
    assert [report.format_record("%t %p %o %k %s", v) for v in views] == [
        "orders 0 0 k0 value-0", "orders 0 1 k1 value-1"]
    assert report.format_record(r"%K|%S|%T\t%%", views[0]) == "2|7|1700000000000\t%"
    assert report.binary_json(b"\xff\x00") == {"$base64": "/wA="}
    assert report.record_json(views[0])["value"] == "value-0"


def test_summary_totals(tmp_path):
    s = CaptureSummary()
    for item in decode_files([basic(tmp_path)], {9092}):
        s.add(item)
    d = s.to_dict()
    assert d["frames"] == 4 and d["connections"] == 1
    assert d["apis"]["Produce"]["requests"] == 1 and d["apis"]["Produce"]["latency_ms"]["p50"] > 0
    assert d["produced"] == [
        {"topic": "orders", "partition": 0, "records": 4, "bytes": d["produced"][0]["bytes"],
         "batches": 1, "codecs": {"zstd": 1}},
        {"topic": "orders", "partition": 2, "records": 1, "bytes": d["produced"][1]["bytes"],
         "batches": 1, "codecs": {"zstd": 1}}]
    assert d["errors"] == {"NOT_LEADER_OR_FOLLOWER": 2, "UNKNOWN_TOPIC_OR_PARTITION": 1}
    assert d["errors_by_api"] == {"Metadata": {"UNKNOWN_TOPIC_OR_PARTITION": 1},
                                  "Produce": {"NOT_LEADER_OR_FOLLOWER": 2}}
    assert d["throttle"] == {"responses": 1, "total_ms": 25}


def test_summary_counts_errors_per_api_beside_the_totals_by_name(tmp_path):
    """UNKNOWN_TOPIC_OR_PARTITION answering Produce is not the one answering Metadata: counted
    apart in --json's errors_by_api and the table's rows (API/ERROR, as kctl inspect's plain
    lines), while errors keeps the total by name for its readers."""
    c = cb.Conversation()
    c.send(produce_request(1, "orders", {0: 1, 1: 1}))
    c.reply(produce_response(1, "orders", (0, 1), error_code=3))
    c.send(metadata_request(2, ("orders",)))
    c.reply(metadata_response(2))                   # its topic: UNKNOWN_TOPIC_OR_PARTITION
    c.send(produce_request(3, "orders", {0: 1}))
    c.reply(produce_response(3, "orders", (0,), error_code=6))
    c.close()
    p = write(tmp_path, c.segs)
    r = runner.invoke(app, ["decode", str(p), "--summary", "--json"])
    d = json.loads(r.stdout)
    assert d["errors_by_api"] == {"Metadata": {"UNKNOWN_TOPIC_OR_PARTITION": 1},
                                  "Produce": {"UNKNOWN_TOPIC_OR_PARTITION": 2,
                                              "NOT_LEADER_OR_FOLLOWER": 1}}
    assert d["errors"] == {"UNKNOWN_TOPIC_OR_PARTITION": 3, "NOT_LEADER_OR_FOLLOWER": 1}
    r = runner.invoke(app, ["decode", str(p), "--summary"])
    rows = [[x.strip() for x in line.split("│")[1:-1]] for line in r.stdout.splitlines()
            if "_" in line and line.count("│") == 3]
    assert rows == [["Produce/UNKNOWN_TOPIC_OR_PARTITION", "2"],
                    ["Metadata/UNKNOWN_TOPIC_OR_PARTITION", "1"],
                    ["Produce/NOT_LEADER_OR_FOLLOWER", "1"]], r.stdout


# -- the command ----------------------------------------------------------------

runner = CliRunner()


def test_cli_default_json_and_filters(tmp_path):
    p = basic(tmp_path)
    r = runner.invoke(app, ["decode", str(p)])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert len(lines) == 4 and "Produce v9 #1" in lines[0] and "NOT_LEADER_OR_FOLLOWER" in lines[1]
    r = runner.invoke(app, ["decode", str(p), "--json", "--api", "metadata"])
    objs = [json.loads(x) for x in r.stdout.splitlines()]
    assert [o["api_name"] for o in objs] == ["Metadata", "Metadata"]
    r = runner.invoke(app, ["decode", str(p), "--json", "--errors-only"])
    assert [json.loads(x)["correlation_id"] for x in r.stdout.splitlines()] == [1, 2]
    r = runner.invoke(app, ["decode", str(p), "--json", "--topic", "nope"])
    assert r.stdout == ""
    r = runner.invoke(app, ["decode", str(p), "--json", "--conn", "10.0.0.1:50000", "--client-id", "cli"])
    assert len(r.stdout.splitlines()) == 2
    r = runner.invoke(app, ["decode", str(p), "--port", "1234"])
    assert r.stdout == ""


def test_cli_records_summary_verbose_and_hex(tmp_path):
    p = basic(tmp_path)
    r = runner.invoke(app, ["decode", str(p), "--records", "--format", "%t/%p@%o %k=%s"])
    assert r.stdout.splitlines()[:2] == ["orders/0@0 k0=value-0", "orders/0@1 k1=value-1"]
    r = runner.invoke(app, ["decode", str(p), "--records", "--json"])
    assert json.loads(r.stdout.splitlines()[0])["key"] == "k0"
    r = runner.invoke(app, ["decode", str(p), "--summary", "--json"])
    assert json.loads(r.stdout)["frames"] == 4
    r = runner.invoke(app, ["decode", str(p), "--summary"])
    assert r.exit_code == 0 and "Produce" in r.stdout and "orders" in r.stdout
    r = runner.invoke(app, ["decode", str(p), "--verbose"])
    assert r.exit_code == 0 and "topic_data" in r.stdout
    r = runner.invoke(app, ["decode", "--hex", "--json"], input=produce_request(4).hex())
    assert json.loads(r.stdout)["correlation_id"] == 4
    r = runner.invoke(app, ["decode", "--hex", "--json", "--api", "Metadata", "--api-version", "12"],
                      input=metadata_response(9).hex())
    assert json.loads(r.stdout)["api_name"] == "Metadata"


def test_cli_hex_reads_a_response_whose_corr_looks_like_a_size_prefix():
    data = _response_with_corr_its_length_minus_4()
    args = ["decode", "--hex", "--json", "--api", "Produce", "--api-version", "11"]
    for extra, given in (([], data), (["--no-size-prefix"], data),
                         (["--size-prefix"], struct.pack(">i", len(data)) + data)):
        r = runner.invoke(app, args + extra, input=given.hex())
        out = json.loads(r.stdout)
        assert r.exit_code == 0 and "decode_error" not in out, extra
        assert out["correlation_id"] == len(data) - 4 and out["size"] == len(data)
    r = runner.invoke(app, args + ["--size-prefix"], input=data.hex())   # the user's word: cut short
    assert r.exit_code != 0 and "decode_error" in json.loads(r.stdout)
    r = runner.invoke(app, args + ["--size-prefix"], input=data[:-1].hex())
    assert isinstance(r.exception, ConfigError) and "size prefix says" in str(r.exception)
    r = runner.invoke(app, ["decode", "x.pcap", "--no-size-prefix"])
    assert isinstance(r.exception, ConfigError) and "go with --hex" in str(r.exception)
    r = runner.invoke(app, ["decode", "x.pcap", "--api-version", "3"])
    assert isinstance(r.exception, ConfigError) and "goes with --hex" in str(r.exception)


def test_cli_hex_says_when_both_readings_decode(monkeypatch):
    """When the bytes decode wholly with and without the size prefix (decode_hex_frame's
    ``both_decode``), the prefixed reading is shown and stderr says how to get the other."""
    import kctl.commands.decode as decode_cmd
    from kctl.inspect.session import HexReading
    req = produce_request(4)
    reading = HexReading(decode_frame_bytes(req, size_prefix=True), True, both_decode=True)
    monkeypatch.setattr(decode_cmd, "decode_hex_frame", lambda data, **kw: reading)
    r = runner.invoke(app, ["decode", "--hex", "--json"], input=req.hex())
    assert r.exit_code == 0 and json.loads(r.stdout)["correlation_id"] == 4
    assert "read as its size prefix (--no-size-prefix" in " ".join(r.stderr.split())


def test_cli_errors_are_one_line(tmp_path):
    junk = tmp_path / "junk.pcap"
    junk.write_bytes(b"not a capture at all")
    import subprocess
    import sys
    run = subprocess.run([sys.executable, "-m", "kctl", "decode", str(junk)], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 2
    assert "not a pcap or pcapng file" in run.stderr and "Traceback" not in run.stderr
    run = subprocess.run([sys.executable, "-m", "kctl", "decode", "--hex"], input="zz",
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "not hex" in run.stderr


# -- fuzz -----------------------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_VALID = [produce_request(1, parts={0: 3, 1: 2}, codec=c) for c in
          (Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD)]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(_VALID), st.integers(0, 400), st.binary(min_size=1, max_size=6),
       st.integers(0, 50))
def test_fuzz_damaged_frames_decode_or_report(valid, at, patch, cut):
    data = bytearray(valid[4:])
    at = min(at, len(data))
    data[at:at + len(patch)] = patch
    f = decode_frame_bytes(bytes(data[:len(data) - cut]), size_prefix=False)
    assert isinstance(f, DecodedFrame)
    report.frame_json(f), report.frame_line(f)
    r = decode_frame_bytes(bytes(data), size_prefix=False, api_key=1, api_version=12)
    report.frame_json(r), report.frame_line(r)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.integers(0, 70), st.integers(0, 20))
def test_fuzz_arbitrary_frames(data, api_key, version):
    for f in (decode_hex_frame(data).frame,
              decode_hex_frame(data, api_key=api_key, api_version=version).frame):
        json.dumps(report.frame_json(f)), report.frame_line(f)


def test_observed_frames_leave_the_state_decoding_would():
    """A decoder that only observes a request (another reader decodes it) still decodes,
    pairs and times its response exactly as a decoder that decoded both."""
    from kctl.inspect.pcap import read_segments as segments_of
    from kctl.inspect.reassembly import Frame
    from kctl.inspect.session import CaptureDecoder
    import io
    c = cb.Conversation()
    c.send(produce_request(1, "orders", {0: 4}))
    c.reply(produce_response(1, "orders", (0,), error_code=6))
    c.send(metadata_request(2, ("orders",)))
    c.reply(metadata_response(2))
    segs = list(segments_of(io.BytesIO(cb.capture(c.segs))))
    full, half = CaptureDecoder((9092,)), CaptureDecoder((9092,))
    want, got = [], []
    for s in segs:
        want += [f for f in full.on_segment(s) if isinstance(f, DecodedFrame)]
        for fr in half.reassembler.on_segment(s):
            if isinstance(fr, Frame):
                if fr.direction == "request":
                    half.observe(fr)
                else:
                    got.append(half.decode(fr))
    resp = [f for f in want if f.direction == "response"]
    assert [(f.api_name, f.api_version, f.correlation_id, f.latency_ns, f.marks) for f in got] == [
        (f.api_name, f.api_version, f.correlation_id, f.latency_ns, f.marks) for f in resp]
    assert [f.body for f in got] == [f.body for f in resp]
    assert half._outstanding == full._outstanding


def test_summary_tables_show_captured_names_as_text_not_markup():
    """A topic name from a capture such as "[/]x" is data: Rich must not parse it (it raised
    MarkupError, a traceback, before)."""
    import io as _io

    from rich.console import Console

    from kctl.inspect.summary import CaptureSummary
    from kctl.ui.decode_view import summary_tables
    s = CaptureSummary()
    for item in decode_frame_bytes(produce_request(1, topic="[/]x[bold"), size_prefix=True), :
        s.add(item)
    out = _io.StringIO()
    for t in summary_tables(s.to_dict()):
        Console(file=out, width=120, color_system=None).print(t)
    assert "[/]x[bold" in out.getvalue()
