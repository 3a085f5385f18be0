"""pcap/pcapng reader: every file flavour, link type and IP version, damaged files, fuzz."""

from __future__ import annotations

import io
import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kctl.errors import DecodeError
from kctl.inspect.pcap import CaptureReader, PacketSkip, TcpSegment, read_segments, tcp_segment
from tests.inspect import capture_builder as cb

V4 = cb.Seg("10.1.2.3", "10.9.8.7", 40000, 9092, 123456, b"hello kafka", cb.ACK | cb.PSH, 42,
            1_700_000_000_123_456_000)
V6 = cb.Seg("2001:db8::1", "2001:db8::2", 40001, 9093, 2**32 - 5, b"six", cb.ACK, 7,
            1_700_000_001_000_001_000)
LINK_TYPES = [0, 1, 101, 108, 113, 228, 229, 276]


def segments(data: bytes) -> list[TcpSegment]:
    return list(read_segments(io.BytesIO(data)))


def check(seg: TcpSegment, want: cb.Seg, ts_ns: int | None = None) -> None:
    assert (seg.src, seg.dst, seg.src_port, seg.dst_port) == (want.src, want.dst, want.sport, want.dport)
    assert (seg.seq, seg.ack, seg.flags, seg.payload) == (want.seq, want.ack, want.flags, want.payload)
    assert seg.ts_ns == (want.ts_ns if ts_ns is None else ts_ns)
    assert seg.missing == 0


@pytest.mark.parametrize("link_type,want", [
    pytest.param(lt, w, id=f"{lt}-{name}") for lt in LINK_TYPES for name, w in (("ipv4", V4), ("ipv6", V6))
    if not (lt == 228 and w is V6) and not (lt == 229 and w is V4)])
@pytest.mark.parametrize("flavour", ["pcap-le-us", "pcap-be-ns", "pcapng-le", "pcapng-be"])
def test_every_link_type_and_ip_version(link_type, want, flavour):
    pkt = cb.link(link_type, cb.ip(want))
    if flavour == "pcap-le-us":
        data = cb.pcap([(want.ts_ns, pkt)], link_type=link_type)
    elif flavour == "pcap-be-ns":
        data = cb.pcap([(want.ts_ns, pkt)], link_type=link_type, big_endian=True, nano=True)
    else:
        data = cb.pcapng([(want.ts_ns, pkt)], link_type=link_type, big_endian=flavour.endswith("be"))
    (seg,) = segments(data)
    check(seg, want)


def test_ethernet_vlan_tags_ipv4_options_and_tcp_options():
    pkt = cb.link(1, cb.ipv4(V4, options=b"\x01\x01\x01\x00"), vlan=2)
    (seg,) = segments(cb.pcap([(V4.ts_ns, pkt)]))
    check(seg, V4)
    body = cb.tcp(V4, options=b"\x02\x04\x05\xb4" + b"\x01\x01\x04\x02")
    (seg,) = segments(cb.pcap([(V4.ts_ns, cb.link(1, cb.ipv4(V4, body=body)))]))
    check(seg, V4)


def test_ipv6_extension_headers():
    ext = [(0, b"\x01\x04\0\0\0\0"), (60, b"\x01\x04\0\0\0\0" + b"\0" * 8)]
    (seg,) = segments(cb.pcap([(V6.ts_ns, cb.link(1, cb.ipv6(V6, ext=ext)))]))
    check(seg, V6)


def test_fragments_and_other_protocols_are_skipped_with_a_reason():
    pkts = [cb.link(1, cb.ipv4(V4, frag=0x2000)),                     # MF
            cb.link(1, cb.ipv4(V4, frag=0x0010)),                     # offset
            cb.link(1, cb.ipv6(V6, ext=[(44, b"\0" * 6)])),           # IPv6 fragment
            cb.link(1, cb.ipv4(V4, proto=17, body=b"\0" * 8)),        # UDP
            b"\xff" * 12 + b"\x08\x06" + b"\0" * 28,                  # ARP
            cb.link(1, cb.ip(V4))]
    data = cb.pcap([(V4.ts_ns, p) for p in pkts])
    out = [tcp_segment(p) for p in CaptureReader(io.BytesIO(data))]
    assert [type(o) for o in out] == [PacketSkip] * 5 + [TcpSegment]
    assert "fragment" in out[0].reason and "fragment" in out[1].reason and "fragment" in out[2].reason
    assert "not TCP" in out[3].reason and "not IP" in out[4].reason
    assert not any(o.malformed for o in out[:5])


def test_malformed_ip_is_a_malformed_skip_not_an_exception():
    good = cb.link(1, cb.ip(V4))
    bad = [good[:14 + 10], good[:14] + b"\x45" + good[15:16] + b"\x00\x05" + good[18:],
           good[:14] + b"\x43" + good[15:]]
    data = cb.pcap([(0, p) for p in bad])
    out = [tcp_segment(p) for p in CaptureReader(io.BytesIO(data))]
    assert all(isinstance(o, PacketSkip) and o.malformed for o in out)


def test_snap_length_cut_reports_missing_payload_bytes():
    full = cb.link(1, cb.ip(V4))
    data = cb.pcap([(V4.ts_ns, full[:-4])], orig_lens={0: len(full)})
    (seg,) = segments(data)
    assert seg.payload == V4.payload[:-4] and seg.missing == 4


def test_pcapng_interfaces_with_their_own_link_types_and_resolutions():
    a = cb.link(1, cb.ip(V4))
    b = cb.link(113, cb.ip(V6))
    data = (cb.pcapng_shb()
            + cb.pcapng_idb(1)                                   # default: microseconds
            + cb.pcapng_unknown()
            + cb.pcapng_idb(113, tsresol=0x80 | 20)               # 2^-20 s
            + cb.pcapng_idb(276, tsresol=3)                       # milliseconds
            + cb.pcapng_epb(0, 1_700_000_000_123_456, a)
            + cb.pcapng_epb(1, 3 << 20 | 1 << 19, b)
            + cb.pcapng_epb(2, 5, cb.link(276, cb.ip(V4)))
            + cb.pcapng_unknown(0x0BADBAD0))
    segs = segments(data)
    assert [s.ts_ns for s in segs] == [1_700_000_000_123_456_000, 3_500_000_000, 5_000_000]
    check(segs[0], V4, segs[0].ts_ns)
    check(segs[1], V6, segs[1].ts_ns)
    check(segs[2], V4, segs[2].ts_ns)


def test_pcapng_sections_of_both_byte_orders_and_simple_packet_blocks():
    pkt = cb.link(1, cb.ip(V4))
    data = (cb.pcapng([(1, pkt)], big_endian=True)
            + cb.pcapng_shb() + cb.pcapng_idb(1) + cb.pcapng_spb(pkt)
            + cb.pcapng([(2, pkt)]))
    segs = segments(data)
    assert [s.ts_ns for s in segs] == [1, 0, 2]
    assert all(s.payload == V4.payload for s in segs)


def test_packet_numbers_and_offsets_match_file_positions():
    pkt = cb.link(1, cb.ip(V4))
    data = cb.pcap([(0, pkt)] * 3)
    pkts = list(CaptureReader(io.BytesIO(data)))
    assert [p.number for p in pkts] == [1, 2, 3]
    assert [p.offset for p in pkts] == [24 + i * (16 + len(pkt)) for i in range(3)]


def _resume_everywhere(data: bytes) -> None:
    """A reader resumed from the state after every packet (and before the first) reads
    on exactly as the first reader did: same packets, numbers, offsets and times."""
    import pickle
    reader = CaptureReader(io.BytesIO(data))
    states = [reader.state()]
    pkts = []
    for p in reader:
        pkts.append(p)
        states.append(reader.state())
    assert len(pkts) >= 3
    for i, st_ in enumerate(states):
        st_ = pickle.loads(pickle.dumps(st_))          # it crosses process boundaries
        f = io.BytesIO(data)
        f.seek(st_.offset)
        assert list(CaptureReader.resume(f, st_)) == pkts[i:]


@pytest.mark.parametrize("big_endian,nano", [(False, False), (True, True)])
def test_pcap_reader_resumes_from_any_packet_boundary(big_endian, nano):
    pkt = cb.link(113, cb.ip(V4))
    _resume_everywhere(cb.pcap([(i * 1_000_000_007, pkt) for i in range(4)], link_type=113,
                               big_endian=big_endian, nano=nano))


def test_pcapng_reader_resumes_with_its_sections_and_interfaces():
    a = cb.link(1, cb.ip(V4))
    b = cb.link(113, cb.ip(V6))
    data = (cb.pcapng_shb() + cb.pcapng_idb(1) + cb.pcapng_idb(113, tsresol=0x80 | 20)
            + cb.pcapng_epb(0, 1_700_000_000_123_456, a) + cb.pcapng_unknown()
            + cb.pcapng_epb(1, 3 << 20, b) + cb.pcapng_spb(a)
            + cb.pcapng([(7, b)], big_endian=True, link_type=113)
            + cb.pcapng_epb(0, 9, b, big_endian=True))
    _resume_everywhere(data)


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_truncated_last_packet_is_reported(fmt):
    pkt = cb.link(1, cb.ip(V4))
    data = cb.pcap([(0, pkt)] * 2) if fmt == "pcap" else cb.pcapng([(0, pkt)] * 2)
    for cut in (1, 5, 17, len(pkt)):
        r = CaptureReader(io.BytesIO(data[:-cut]))
        assert len(list(r)) == 1
        assert r.truncated is not None and r.truncated.present < r.truncated.needed
        assert "ends inside" in str(r.truncated)


def test_not_a_capture_names_offset_zero():
    with pytest.raises(DecodeError) as e:
        CaptureReader(io.BytesIO(b"GET / HTTP/1.1\r\n"))
    assert e.value.offset == 0 and "not a pcap" in str(e.value)
    with pytest.raises(DecodeError):
        CaptureReader(io.BytesIO(b"\xd4\xc3"))


def test_structural_damage_names_the_file_offset():
    pkt = cb.link(1, cb.ip(V4))
    good = cb.pcapng([(0, pkt)])
    epb_at = len(cb.pcapng_shb()) + len(cb.pcapng_idb(1, tsresol=9))
    bad_len = good[:epb_at + 4] + struct.pack("<I", 13) + good[epb_at + 8:]
    with pytest.raises(DecodeError) as e:
        list(CaptureReader(io.BytesIO(bad_len)))
    assert e.value.offset == epb_at + 4
    bad_trailer = good[:-4] + struct.pack("<I", 8)
    with pytest.raises(DecodeError) as e:
        list(CaptureReader(io.BytesIO(bad_trailer)))
    assert "trailer" in str(e.value)
    no_idb = cb.pcapng_shb() + cb.pcapng_epb(0, 0, pkt)
    with pytest.raises(DecodeError, match="interface 0"):
        list(CaptureReader(io.BytesIO(no_idb)))


def _pcapng_block_cases():
    """(id, bytes, file offset the DecodeError must name, words in its reason): every pcapng
    block-length rule broken once, in both byte orders."""
    pkt = cb.link(1, cb.ip(V4))
    for be in (False, True):
        o = ">" if be else "<"
        shb = cb.pcapng_shb(big_endian=be)
        idb = cb.pcapng_idb(1, big_endian=be)
        epb = cb.pcapng_epb(0, 0, pkt, big_endian=be)
        head = shb + idb
        at = len(head)

        def with_len(block: bytes, n: int, both: bool = True) -> bytes:
            b = block[:4] + struct.pack(o + "I", n) + block[8:]
            return b[:-4] + struct.pack(o + "I", n) if both else b
        bo = "be" if be else "le"
        # The 12-byte file: an SHB that claims 12 bytes (its minimum is 28).
        yield f"shb-12-{bo}", (b"\x0a\x0d\x0d\x0a" + struct.pack(o + "I", 12)
                               + (b"\x1a\x2b\x3c\x4d" if be else b"\x4d\x3c\x2b\x1a")), 4, "minimum of 28"
        yield f"shb-24-{bo}", with_len(shb, 24)[:24], 4, "minimum of 28"
        yield f"idb-16-{bo}", shb + with_len(idb, 16)[:16], len(shb) + 4, "minimum of 20"
        yield f"epb-28-{bo}", head + with_len(epb, 28)[:28], at + 4, "minimum of 32"
        yield f"spb-12-{bo}", head + with_len(cb.pcapng_spb(pkt, big_endian=be), 12)[:12], at + 4, \
            "minimum of 16"
        yield f"unknown-8-{bo}", head + with_len(cb.pcapng_unknown(big_endian=be), 8)[:8], at + 4, \
            "minimum of 12"
        yield f"not-multiple-of-4-{bo}", head + with_len(epb, len(epb) + 2), at + 4, "multiple of 4"
        yield f"trailer-{bo}", head + epb[:-4] + struct.pack(o + "I", len(epb) + 4), \
            at + len(epb) - 4, "trailer"
        yield f"interface-{bo}", head + cb.pcapng_epb(3, 0, pkt, big_endian=be), at + 8, "interface 3"
        yield f"epb-caplen-{bo}", head + epb[:20] + struct.pack(o + "I", 4000) + epb[24:], at + 20, \
            "captured bytes"
        yield f"bad-bom-{bo}", shb[:8] + b"\x01\x02\x03\x04" + shb[12:], 8, "byte-order"
        yield f"major-{bo}", shb[:12] + struct.pack(o + "H", 2) + shb[14:], 12, "major version"


@pytest.mark.parametrize("data,offset,words",
                         [pytest.param(d, off, w, id=i) for i, d, off, w in _pcapng_block_cases()])
def test_every_pcapng_block_length_rule_is_a_decode_error_at_its_file_offset(data, offset, words):
    r = CaptureReader(io.BytesIO(data))
    with pytest.raises(DecodeError) as e:
        list(r)
    assert e.value.offset == offset and words in str(e.value)


def test_damage_part_way_keeps_the_packets_before_it(tmp_path):
    """A capture broken after two good packets: both are yielded, then the damage."""
    pkt = cb.link(1, cb.ip(V4))
    good = cb.pcapng([(1, pkt), (2, pkt)])
    r = CaptureReader(io.BytesIO(good + cb.pcapng_unknown()[:4] + struct.pack("<I", 6) + b"\0" * 8))
    got = []
    with pytest.raises(DecodeError) as e:
        for p in r:
            got.append(p)
    assert len(got) == 2 and e.value.offset == len(good) + 4
    # A block longer than the file is a cut-off file (tcpdump killed), not an error.
    r = CaptureReader(io.BytesIO(good + cb.pcapng_epb(0, 3, pkt)[:-9]))
    assert len(list(r)) == 2 and r.truncated.offset == len(good)


def test_ip_lengths_beyond_the_wire_are_malformed_skips():
    v4 = cb.link(1, cb.ip(V4))
    big_total = v4[:16] + struct.pack(">H", 1500) + v4[18:]
    v6 = cb.link(1, cb.ip(V6))
    big_plen = v6[:18] + struct.pack(">H", 9000) + v6[20:]
    bad_doff = v4[:14 + 20 + 12] + bytes([0xF0]) + v4[14 + 20 + 13:]   # 60-byte TCP header
    for pkt, words in ((big_total, "IPv4 total length"), (big_plen, "IPv6 payload length"),
                       (bad_doff, "TCP data offset")):
        (p,) = CaptureReader(io.BytesIO(cb.pcap([(0, pkt)])))
        out = tcp_segment(p)
        assert isinstance(out, PacketSkip) and out.malformed and words in out.reason, out


def test_huge_length_fields_cost_only_the_bytes_present():
    # A pcap record claiming 16 MiB in a tiny file: truncation, no 16 MiB read.
    hdr = cb.pcap([])
    data = hdr + struct.pack("<IIII", 0, 0, 16 * 1024 * 1024, 16 * 1024 * 1024) + b"x" * 10
    r = CaptureReader(io.BytesIO(data))
    assert list(r) == [] and r.truncated.present == 26
    with pytest.raises(DecodeError, match="incl_len|captured bytes"):
        list(CaptureReader(io.BytesIO(hdr + struct.pack("<IIII", 0, 0, 2**32 - 1, 0))))
    big = cb.pcapng_shb() + struct.pack("<II", 6, 2**31)
    with pytest.raises(DecodeError):
        list(CaptureReader(io.BytesIO(big)))


_PREFIXES = [cb.pcap([(0, cb.link(1, cb.ip(V4)))]), cb.pcapng([(0, cb.link(113, cb.ip(V6)))]),
             cb.pcapng([(0, cb.link(1, cb.ip(V4)))], big_endian=True)]


def _read_all(data: bytes) -> None:
    try:
        r = CaptureReader(io.BytesIO(data))
        for p in r:
            tcp_segment(p)
    except DecodeError as e:
        assert e.offset >= 0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(_PREFIXES), st.integers(0, 200), st.binary(max_size=300),
       st.integers(0, 400), st.binary(min_size=1, max_size=8))
def test_fuzz_reader_gives_packets_or_decode_error(prefix, cut, tail, at, patch):
    """Valid captures cut, extended and overwritten: packets or DecodeError, quickly."""
    data = bytearray(prefix[:max(0, len(prefix) - cut)] + tail)
    at = min(at, len(data))
    data[at:at + len(patch)] = patch
    t0 = time.perf_counter()
    _read_all(bytes(data))
    assert time.perf_counter() - t0 < 1.0


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400))
def test_fuzz_arbitrary_bytes(data):
    _read_all(data)
    _read_all(b"\xd4\xc3\xb2\xa1" + data)
    _read_all(b"\x0a\x0d\x0d\x0a" + data)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(LINK_TYPES), st.binary(max_size=120))
def test_fuzz_link_and_ip_layers(link_type, data):
    from kctl.inspect.pcap import CapturedPacket
    out = tcp_segment(CapturedPacket(1, 0, 0, link_type, data, len(data)))
    assert isinstance(out, (TcpSegment, PacketSkip))


def test_caplen_above_the_snap_length_is_accepted_as_libpcap_does():
    """A packet longer than its interface's snap length is kept (libpcap reads it too);
    a captured length beyond its own block is the error."""
    pkt = cb.link(1, cb.ip(V4))
    ng = cb.pcapng_shb() + cb.pcapng_idb(1, snaplen=20) + cb.pcapng_epb(0, 0, pkt)
    (seg,) = segments(ng)
    check(seg, V4, 0)
    (seg,) = segments(cb.pcap([(V4.ts_ns, pkt)], snaplen=20))
    check(seg, V4)
