"""``kctl decode``'s port and leg choice: ``--port auto`` by default, the legs of a kctl
capture, and the one clear error when a capture holds no Kafka traffic."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from kctl.cli import app
from kctl.inspect.capture_writer import CaptureWriter
from kctl.inspect.legs import Leg
from kctl.protocol.frames import frame
from tests.inspect import capture_builder as cb
from tests.inspect.kafka_frames import metadata_request, metadata_response

runner = CliRunner()


def _foreign(tmp_path, bport=19093):
    c = cb.Conversation(bport=bport)
    c.send(metadata_request(1, ("orders",)))
    c.reply(metadata_response(1))
    c.close()
    other = cb.Conversation(cport=50001, bport=22)
    other.send(b"SSH-2.0-OpenSSH_9.6\r\n" * 50)
    other.reply(b"SSH-2.0-OpenSSH_9.3\r\n")
    p = tmp_path / "foreign.pcapng"
    p.write_bytes(cb.capture(c.segs + other.segs, fmt="pcapng"))
    return p


def test_default_port_is_auto(tmp_path):
    r = runner.invoke(app, ["decode", str(_foreign(tmp_path)), "--json"])
    assert r.exit_code == 0, r.output
    objs = [json.loads(x) for x in r.stdout.splitlines()]
    assert [o["api_name"] for o in objs] == ["Metadata", "Metadata"]


def test_no_kafka_traffic_lists_the_ports_seen_and_exits_1(tmp_path):
    p = _foreign(tmp_path)
    r = runner.invoke(app, ["decode", str(p), "--port", "9092"])
    assert r.exit_code == 1 and r.stdout == ""
    err = r.stderr.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith(f"kctl decode: no Kafka traffic found in {p} on port 9092; TCP ports seen")
    assert "22 (1.1 kB)" in err and "19093 (" in err and "--port" in err


def _kctl_capture(tmp_path):
    path = tmp_path / "legs.pcapng"
    with CaptureWriter(path) as w:
        client = w.open_flow(("127.0.0.1", 40001), ("127.0.0.1", 19092), 1, Leg.CLIENT)
        upstream = w.open_flow(("127.0.0.1", 40002), ("127.0.0.1", 9092), 2, Leg.UPSTREAM)
        for i, ts in enumerate((10, 20)):
            for flow in (client, upstream):
                flow.data(ts, True, frame(metadata_request(i, ("t",))))
                flow.data(ts + 5, False, frame(metadata_response(i)))
        w.add_broker_ports(Leg.CLIENT, [19092])
        w.add_broker_ports(Leg.UPSTREAM, [9092])
    return path


def test_a_kctl_capture_shows_each_frame_once_and_legs_on_request(tmp_path):
    path = _kctl_capture(tmp_path)
    runs = {leg: runner.invoke(app, ["decode", str(path), "--json"] + (["--leg", leg] if leg else []))
            for leg in (None, "client", "upstream", "both")}
    for leg, r in runs.items():
        assert r.exit_code == 0, (leg, r.output)
    rows = {leg: [json.loads(x) for x in r.stdout.splitlines()] for leg, r in runs.items()}
    assert len(rows[None]) == len(rows["client"]) == len(rows["upstream"]) == 4
    assert len(rows["both"]) == 8
    assert {o["dst_port"] for o in rows[None] if o["direction"] == "request"} == {19092}
    assert {o["dst_port"] for o in rows["upstream"] if o["direction"] == "request"} == {9092}


def test_leg_on_a_foreign_capture_is_a_one_line_error(tmp_path):
    r = runner.invoke(app, ["decode", str(_foreign(tmp_path)), "--leg", "upstream"])
    assert r.exit_code != 0 and "is not a kctl inspect capture" in str(r.exception or r.output)
