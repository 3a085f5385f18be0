"""The pcapng writer: block layout, TCP sequence numbers, splitting, and tshark/capinfos reading it."""

import shutil
import struct
import subprocess

import pytest

from kctl.inspect.capture_writer import ACK, FIN, MAX_SEGMENT_PAYLOAD, PSH, RST, SYN, CaptureWriter
from kctl.protocol import messages
from kctl.protocol.frames import frame

CLIENT = ("127.0.0.1", 40001)
SERVER = ("127.0.0.1", 9092)


def _blocks(data: bytes):
    """(type, body) of every pcapng block, checking both length fields."""
    out, pos = [], 0
    while pos < len(data):
        btype, total = struct.unpack_from("<II", data, pos)
        assert total % 4 == 0 and total >= 12
        assert struct.unpack_from("<I", data, pos + total - 4)[0] == total
        out.append((btype, data[pos + 8:pos + total - 4]))
        pos += total
    assert pos == len(data)
    return out


def _options(body: bytes, pos: int) -> dict[int, bytes]:
    opts = {}
    while pos + 4 <= len(body):
        code, length = struct.unpack_from("<HH", body, pos)
        if code == 0:
            break
        opts[code] = body[pos + 4:pos + 4 + length]
        pos += 4 + length + (-length % 4)
    return opts


def _packets(path, leg=0):
    """(ts_ns, src_port, dst_port, seq, ack, flags, payload) of every packet on ``leg``."""
    blocks = _blocks(path.read_bytes())
    assert blocks[0][0] == 0x0A0D0D0A and blocks[1][0] == 1 and blocks[2][0] == 1
    shb = blocks[0][1]
    assert struct.unpack_from("<IHHq", shb) == (0x1A2B3C4D, 1, 0, -1)
    for idb, name in ((blocks[1][1], b"kctl client leg"), (blocks[2][1], b"kctl upstream leg")):
        assert struct.unpack_from("<HH", idb)[0] == 1                      # Ethernet
        opts = _options(idb, 8)
        assert opts[9] == bytes([9]) and opts[2] == name                   # if_tsresol = 10^-9
    out = []
    for btype, body in blocks[3:]:
        assert btype == 6
        iface, hi, lo, caplen, origlen = struct.unpack_from("<IIIII", body)
        assert caplen == origlen
        if iface != leg:
            continue
        pkt = body[20:20 + caplen]
        assert pkt[12:14] == b"\x08\x00"
        ip = pkt[14:34]
        assert struct.unpack_from(">H", ip, 2)[0] == len(pkt) - 14 <= 65535
        sport, dport, seq, ack, _, flags = struct.unpack_from(">HHIIBB", pkt, 34)
        out.append(((hi << 32) | lo, sport, dport, seq, ack, flags, pkt[54:]))
    return out


def _request(corr: int) -> bytes:
    body = messages.message_class("MetadataRequest")(topics=None, allow_auto_topic_creation=False)
    return frame(messages.encode_request(3, 4, corr, "test", body))


def _response(corr: int, pad: int = 0) -> bytes:
    cls = messages.message_class("MetadataResponse")
    brokers = [cls.MetadataResponseBroker(node_id=n, host="h" * pad or "h", port=9092) for n in range(3)]
    body = cls(brokers=brokers,
               cluster_id="c", controller_id=1, topics=[])
    return frame(messages.encode_response(3, 4, corr, body))


def _write(path, responses_pad=0, n=3):
    with CaptureWriter(path) as w:
        flow = w.open_flow(CLIENT, SERVER, 1_700_000_000_000_000_001)
        for i in range(n):
            flow.data(1_700_000_000_000_000_100 + i, True, _request(i))
            flow.data(1_700_000_000_000_000_200 + i, False, _response(i, responses_pad))
        flow.close(1_700_000_000_000_001_000)
    return path


def test_handshake_data_and_fin_with_consistent_sequence_numbers(tmp_path):
    pkts = _packets(_write(tmp_path / "a.pcapng"))
    flags = [p[5] for p in pkts]
    assert flags[:3] == [SYN, SYN | ACK, ACK]
    assert flags[-3:] == [FIN | ACK, FIN | ACK, ACK]
    assert pkts[0][0] == 1_700_000_000_000_000_001   # nanosecond timestamps kept exactly
    next_seq = {}
    sent = {CLIENT[1]: b"", SERVER[1]: b""}
    for ts, sport, dport, seq, ack, fl, payload in pkts:
        if sport in next_seq:
            assert seq == next_seq[sport]
        if fl & ACK:
            assert ack == next_seq[dport]
        next_seq[sport] = (seq + len(payload) + (1 if fl & (SYN | FIN) else 0)) & 0xFFFFFFFF
        sent[sport] += payload
    assert sent[CLIENT[1]] == b"".join(_request(i) for i in range(3))
    assert sent[SERVER[1]] == b"".join(_response(i) for i in range(3))


def test_large_writes_split_at_the_ipv4_limit(tmp_path):
    path = tmp_path / "big.pcapng"
    payload = bytes(range(256)) * 800   # 204800 bytes
    with CaptureWriter(path) as w:
        flow = w.open_flow(CLIENT, SERVER, 1)
        flow.data(2, False, payload)
        flow.close(3, from_client=False, reset=True)
    pkts = _packets(path)
    data = [p for p in pkts if p[6]]
    assert [len(p[6]) for p in data] == [MAX_SEGMENT_PAYLOAD] * 3 + [len(payload) - 3 * MAX_SEGMENT_PAYLOAD]
    assert all(p[5] == PSH | ACK for p in data)
    assert b"".join(p[6] for p in data) == payload
    assert pkts[-1][5] == RST | ACK and pkts[-1][1] == SERVER[1]


def test_non_ipv4_addresses_fall_back_to_loopback(tmp_path):
    path = tmp_path / "v6.pcapng"
    with CaptureWriter(path) as w:
        w.open_flow(("::1", 5), ("broker.example", 9092), 1).close(2)
    raw = path.read_bytes()
    assert raw.count(bytes([127, 0, 0, 1])) >= 12


needs_tshark = pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed")


@needs_tshark
def test_tshark_reads_the_kafka_frames(tmp_path):
    path = _write(tmp_path / "k.pcapng", responses_pad=30000, n=4)   # responses span segments
    run = subprocess.run(
        ["tshark", "-r", str(path), "-d", f"tcp.port=={SERVER[1]},kafka",
         "-o", "tcp.check_checksum:TRUE", "-o", "ip.check_checksum:TRUE",
         "-T", "fields", "-e", "kafka.request_key", "-e", "kafka.correlation_id",
         "-e", "kafka.response_key", "-e", "tcp.checksum.status",
         "-Y", "kafka"],
        capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    rows = [line.split("\t") for line in run.stdout.splitlines() if line.strip()]
    assert len(rows) == 8
    assert sorted(int(r[1]) for r in rows) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert sorted(r[0] or "resp" for r in rows) == ["3"] * 4 + ["resp"] * 4
    assert [r[2] for r in rows if not r[0]] == ["3"] * 4       # tshark matched responses to requests
    assert all(r[3] == "1" for r in rows)   # TCP checksum good
    assert "error" not in run.stdout.lower()


@pytest.mark.skipif(shutil.which("capinfos") is None, reason="capinfos not installed")
def test_capinfos_accepts_the_file(tmp_path):
    path = _write(tmp_path / "c.pcapng")
    run = subprocess.run(["capinfos", "-t", "-E", "-c", "-T", str(path)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    name, file_type, encapsulation, packets = run.stdout.strip().splitlines()[-1].split("\t")
    assert (file_type, encapsulation, packets) == ("pcapng", "ether", "12")   # 3 + 6 + 3 packets


def test_payload_sum_is_rfc1071s_sum():
    import os

    from kctl.inspect.capture_writer import payload_sum

    def reference(data: bytes) -> int:
        data += b"\x00" * (len(data) % 2)
        total = sum((data[i] << 8) | data[i + 1] for i in range(0, len(data), 2))
        while total >> 16:
            total = (total & 0xFFFF) + (total >> 16)
        return total

    for n in [*range(40), 255, 256, 257, 4097, MAX_SEGMENT_PAYLOAD]:
        for _ in range(5):
            data = os.urandom(n)
            assert payload_sum(data) == reference(data), n
    assert payload_sum(b"\xff\xff" * 9) == 0xFFFF and payload_sum(b"\x00" * 10) == 0


def test_each_leg_is_an_interface_naming_its_broker_ports(tmp_path):
    from kctl.inspect.legs import Leg, read_legs
    path = tmp_path / "legs.pcapng"
    with CaptureWriter(path) as w:
        client = w.open_flow(CLIENT, ("127.0.0.1", 19092), 1, Leg.CLIENT)
        upstream = w.open_flow(("127.0.0.1", 40002), SERVER, 2, Leg.UPSTREAM)
        client.data(3, True, _request(1))
        upstream.data(4, True, _request(1))
        w.add_broker_ports(Leg.CLIENT, [19092, 19093])
        w.add_broker_ports(Leg.UPSTREAM, [SERVER[1]])
    legs = read_legs(path)
    assert legs is not None
    assert legs.interfaces == {Leg.CLIENT: 0, Leg.UPSTREAM: 1}
    assert legs.broker_ports == {0: frozenset({19092, 19093}), 1: frozenset({SERVER[1]})}
    assert [p[6] for p in _packets(path, 0) if p[6]] == [p[6] for p in _packets(path, 1) if p[6]]
    assert read_legs(tmp_path / "missing.pcapng") is None


def test_parts_merge_in_time_order_each_packet_once(tmp_path):
    from kctl.inspect.capture_writer import merge_captures
    from kctl.inspect.legs import Leg, read_legs
    parts = []
    for k in range(3):
        part = tmp_path / f"p{k}.pcapng"
        with CaptureWriter(part) as w:
            flow = w.open_flow(("127.0.0.1", 41000 + k), SERVER, 10 + k)
            for i in range(4):
                flow.data(100 + 10 * i + k, True, _request(i))
                flow.data(105 + 10 * i + k, False, _response(i))
            flow.close(1000 + k)
        parts.append(part)
    # A processor killed mid-write leaves a part that ends inside a block.
    cut = tmp_path / "cut.pcapng"
    cut.write_bytes(parts[2].read_bytes()[:-7])
    out = tmp_path / "merged.pcapng"
    result = merge_captures([parts[0], parts[1], cut], out, {Leg.CLIENT: [SERVER[1]]})
    pkts = _packets(out)
    assert result.packets == len(pkts) == 3 * 14 - 1     # handshake 3, data 8, close 3
    assert len(result.damaged) == 1 and "cut.pcapng" in result.damaged[0]
    assert [p[0] for p in pkts] == sorted(p[0] for p in pkts)
    for k in range(2):
        mine = [p for p in pkts if p[1] == 41000 + k or p[2] == 41000 + k]
        assert [p[0] for p in _packets(parts[k])] == [p[0] for p in mine]
    assert read_legs(out).broker_ports[0] == frozenset({SERVER[1]})
