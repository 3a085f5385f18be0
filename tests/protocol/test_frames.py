import struct

import pytest
from hypothesis import given, strategies as st

from kctl.errors import DecodeError
from kctl.protocol.frames import FrameDecoder, frame


@given(st.lists(st.binary(max_size=300), max_size=20), st.data())
def test_frames_survive_any_split(payloads, data):
    stream = b"".join(frame(p) for p in payloads)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=30)))
    dec = FrameDecoder()
    got = []
    prev = 0
    for cut in cuts + [len(stream)]:
        dec.feed(stream[prev:cut])
        prev = cut
        got.extend(dec.frames())
    assert got == payloads
    assert dec.buffered == 0


def test_short_input_needs_data():
    dec = FrameDecoder()
    dec.feed(b"\x00\x00")
    assert dec.next_frame() is None
    dec.feed(b"\x00\x03ab")
    assert dec.next_frame() is None
    dec.feed(b"c")
    assert dec.next_frame() == b"abc"
    assert dec.next_frame() is None


@pytest.mark.parametrize("size", [-1, 101])
def test_bad_size_names_offset_and_stays_broken(size):
    dec = FrameDecoder(max_frame_bytes=100)
    dec.feed(frame(b"ok") + struct.pack(">i", size))
    assert dec.next_frame() == b"ok"
    with pytest.raises(DecodeError) as e:
        dec.next_frame()
    assert e.value.offset == 6 and e.value.field == "size"
    with pytest.raises(DecodeError):
        dec.next_frame()


def test_huge_declared_size_allocates_nothing():
    dec = FrameDecoder()
    dec.feed(struct.pack(">i", 90 * 1024 * 1024) + b"x" * 10)
    assert dec.next_frame() is None
    assert dec.buffered == 14
