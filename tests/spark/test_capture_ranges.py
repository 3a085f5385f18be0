"""Range readers over the fixture captures (a load run and read-back Fetches written by kctl
inspect), without Spark: what ``kctl analyze``'s tasks do, checked against ``kctl decode``.

A reader that starts mid-stream frames only frames the sequential decode has (no false frame
start in record data), and a reader set whose lookback reaches back from every response to
its request agrees with decode with no repair. What does force a repair is a response whose
request lies more than the lookback before its first packet: a kctl inspect capture holds
both legs, so a read-back Fetch response of N bytes puts about N bytes (its broker-leg copy)
between the client's request and the response's first packet.
"""

from __future__ import annotations

import io

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from kctl.inspect.pcap import CaptureReader, ReaderState, TcpSegment, tcp_segment
from kctl.inspect.reassembly import Frame, StreamNotice
from kctl.inspect.session import CaptureDecoder
from tests.inspect.test_ranges import decoded, read_in_ranges

pytestmark = pytest.mark.broker


def _frames_from(data: bytes, state: ReaderState, port: int, *, max_bytes: int | None = None,
                 ) -> tuple[list[Frame], list[StreamNotice], dict[int, int]]:
    """The frames a reader starting at ``state`` frames (each observed, as a range reader
    observes frames it does not own), its notices, and each packet's file offset."""
    f = io.BytesIO(data)
    f.seek(state.offset)
    reader = CaptureReader.resume(f, state)
    dec = CaptureDecoder({port})
    frames, notices, offsets = [], [], {}
    at = state.offset
    for pkt in reader:
        offsets[pkt.number] = at
        at = reader.state().offset
        seg = tcp_segment(pkt)
        if isinstance(seg, TcpSegment):
            for it in dec.reassembler.on_segment(seg):
                if isinstance(it, Frame):
                    dec.observe(it)
                    frames.append(it)
                else:
                    notices.append(it)
        if max_bytes is not None and at - state.offset > max_bytes:
            break
    return frames, notices, offsets


def _states(data: bytes) -> list[ReaderState]:
    r = CaptureReader(io.BytesIO(data))
    out = [r.state()]
    for _ in r:
        out.append(r.state())
    return out


def _longest_wait_bytes(frames: list[Frame], offsets: dict[int, int]) -> int:
    """The most file bytes between a request's last packet and its response's first."""
    asked: dict[tuple[object, int], int] = {}
    longest = 0
    for fr in frames:
        if fr.direction == "request" and len(fr.data) >= 8:
            asked[(fr.conn, int.from_bytes(fr.data[4:8], "big"))] = offsets[fr.packet]
        elif fr.direction == "response" and len(fr.data) >= 4:
            sent = asked.pop((fr.conn, int.from_bytes(fr.data[:4], "big")), None)
            if sent is not None:
                longest = max(longest, offsets[fr.first_packet] - sent)
    return longest


def longest_wait_bytes(path: str, port: int) -> int:
    """``_longest_wait_bytes`` of the capture at ``path``, read from its start."""
    data = open(path, "rb").read()
    frames, _, offsets = _frames_from(data, CaptureReader(io.BytesIO(data)).state(), port)
    return _longest_wait_bytes(frames, offsets)


@pytest.fixture(scope="module")
def fixture_captures(captures):
    """(data, port, sequential frames {(conn, direction, seq): size}, packet states, longest
    request-to-response wait in file bytes) of each fixture capture."""
    paths, ports = captures
    out = []
    for path, port in zip(paths, ports):
        data = open(path, "rb").read()
        states = _states(data)
        frames, notices, offsets = _frames_from(data, states[0], port)
        assert not [n for n in notices if n.kind in ("framing", "undecodable")]
        out.append((path, data, port, {(fr.conn, fr.direction, fr.seq): len(fr.data) for fr in frames},
                    states, _longest_wait_bytes(frames, offsets)))
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.integers(0, 1), at=st.floats(0.0, 1.0, exclude_max=True))
def test_a_reader_starting_at_any_packet_frames_only_decodes_frames(fixture_captures, which, at):
    """A mid-stream start (inside Produce record data, inside a 300 KB read-back Fetch
    response, on either leg) never takes bytes inside a frame for a frame start: every frame
    it cuts is one the sequential decode cuts, and its framing never breaks."""
    _, data, port, truth, states, _ = fixture_captures[which]
    start = states[1 + int(at * (len(states) - 2))]
    frames, notices, _ = _frames_from(data, start, port, max_bytes=400_000)
    false = [(str(fr.conn), fr.direction, fr.offset, len(fr.data)) for fr in frames
             if truth.get((fr.conn, fr.direction, fr.seq)) != len(fr.data)]
    assert not false, (start.packets, false[:3])
    # A start between a Fetch request and its large response: false candidates in its data
    # complete first and spend the resync budget; the true start must still be taken.
    assert not [n.message for n in notices if n.kind in ("framing", "undecodable")]


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.integers(0, 1), range_bytes=st.integers(16 << 10, 64 << 10))
def test_ranges_with_a_lookback_past_every_wait_need_no_repair(fixture_captures, which, range_bytes):
    """Readers of 16-64 KiB ranges whose lookback reaches from every response back to its
    request: no connection repaired, and the frames (every field) are decode's."""
    path, _, port, _, _, wait = fixture_captures[which]
    lookback = max(256 << 10, wait + (64 << 10))
    got, repaired, n = read_in_ranges(_path(path), range_bytes=range_bytes,
                                      lookback_bytes=lookback, ports=(port,))
    assert n > 10 and not repaired, (wait, lookback, repaired)
    assert got == decoded(_path(path), (port,))


def test_a_response_further_than_the_lookback_from_its_request_is_repaired(fixture_captures):
    """The one cause of repairs in these captures: a lookback shorter than the file bytes
    between a request and its response (here the read-back Fetch response's broker-leg copy).
    The check finds it and the repaired frames are still decode's."""
    path, _, port, _, _, wait = fixture_captures[1]
    got, repaired, _ = read_in_ranges(_path(path), range_bytes=16 << 10,
                                      lookback_bytes=max(16 << 10, wait // 2), ports=(port,))
    assert repaired
    assert got == decoded(_path(path), (port,))


def _path(p: str):
    from pathlib import Path
    return Path(p)
