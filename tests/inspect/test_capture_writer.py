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


def _packets(path):
    """(ts_ns, src_port, dst_port, seq, ack, flags, payload) of every packet."""
    blocks = _blocks(path.read_bytes())
    assert blocks[0][0] == 0x0A0D0D0A and blocks[1][0] == 1
    shb = blocks[0][1]
    assert struct.unpack_from("<IHHq", shb) == (0x1A2B3C4D, 1, 0, -1)
    idb = blocks[1][1]
    assert struct.unpack_from("<HH", idb)[0] == 1                      # Ethernet
    assert struct.unpack_from("<HHB", idb, 8) == (9, 1, 9)             # if_tsresol = 10^-9
    out = []
    for btype, body in blocks[2:]:
        assert btype == 6
        _, hi, lo, caplen, origlen = struct.unpack_from("<IIIII", body)
        assert caplen == origlen
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
