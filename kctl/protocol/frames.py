"""Size-prefixed Kafka frames, sans-IO.

How this works: every Kafka request and response travels as a 4-byte big-endian
size followed by that many bytes. ``FrameDecoder`` is fed whatever bytes a
socket (or a reassembled TCP stream) produced, in any split, and hands back
whole frames in order; ``next_frame()`` returns ``None`` while more input is
needed (h11's NEED_DATA), never raising for short input. A size prefix larger
than ``max_frame_bytes`` or negative is a protocol violation: it raises
``DecodeError`` naming the stream offset, and the decoder stays broken (the
stream has lost its framing; the caller decides whether to resynchronise).

Memory: buffered bytes never exceed what was fed; a frame's bytes are only
collected once all of them are present.
"""

from __future__ import annotations

import struct
from typing import Final

from kctl.errors import DecodeError

_SIZE: Final = struct.Struct(">i")

#: Kafka's default socket.request.max.bytes is 100 MiB; a peer may be configured higher.
DEFAULT_MAX_FRAME_BYTES: Final = 100 * 1024 * 1024


def frame(payload: bytes | bytearray | memoryview) -> bytes:
    """``payload`` with its 4-byte size prefix."""
    return _SIZE.pack(len(payload)) + bytes(payload)


class FrameDecoder:
    """Splits a byte stream into Kafka frames (payloads without the size prefix)."""

    __slots__ = ("_buf", "_start", "_consumed", "max_frame_bytes", "_error")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._buf = bytearray()
        self._start = 0          # index in _buf of the next unread byte
        self._consumed = 0       # stream offset of _buf[0]
        self.max_frame_bytes = max_frame_bytes
        self._error: DecodeError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as a frame."""
        return len(self._buf) - self._start

    @property
    def stream_offset(self) -> int:
        """Stream offset of the next frame's size prefix."""
        return self._consumed + self._start

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        self._buf += data

    def next_frame(self) -> bytes | None:
        """The next whole frame, or ``None`` until more bytes are fed."""
        if self._error is not None:
            raise self._error
        buf = self._buf
        start = self._start
        if len(buf) - start < 4:
            self._compact()
            return None
        (size,) = _SIZE.unpack_from(buf, start)
        if size < 0 or size > self.max_frame_bytes:
            self._error = DecodeError(
                f"frame size {size} outside 0..{self.max_frame_bytes}",
                offset=self.stream_offset, field="size")
            raise self._error
        end = start + 4 + size
        if len(buf) < end:
            self._compact()
            return None
        payload = bytes(buf[start + 4:end])
        self._start = end
        return payload

    def frames(self) -> list[bytes]:
        """Every whole frame buffered now."""
        out = []
        while (f := self.next_frame()) is not None:
            out.append(f)
        return out

    def _compact(self) -> None:
        # Drop returned bytes once they dominate the buffer, so the buffer is
        # bounded by one partial frame plus what the caller fed at once.
        if self._start and self._start >= len(self._buf) // 2:
            del self._buf[:self._start]
            self._consumed += self._start
            self._start = 0
