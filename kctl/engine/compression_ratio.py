"""CompressionRatioEstimator: how well each topic's batches compress, per codec
(the Java client's CompressionRatioEstimator).

How this works
--------------
With compression on, a batch's records are compressed only when it is encoded
for sending, but the accumulator has to decide while appending when the batch
is full. As the Java producer does, it estimates the bytes the batch will take
as ``header + uncompressed records bytes x estimate x 1.05`` (``ProducerBatch
.estimated_written``), where ``estimate`` is this table's ratio for the batch's
topic and codec, read when the batch is created.

The ratio starts at 1.0 (every codec's initial rate in Java). Each batch, when
first encoded for sending (Java: ``ProducerBatch.close()`` at drain), reports
its observed ratio (compressed records bytes / uncompressed records bytes):

- better than the estimate: the estimate moves down by 0.005, never below the
  observed ratio (``COMPRESSION_RATIO_IMPROVING_STEP``);
- worse: it jumps up by at least 0.05, to the observed ratio if that is higher
  (``COMPRESSION_RATIO_DETERIORATE_STEP``).

A batch the broker refused as too large (MESSAGE_TOO_LARGE, then split) sets
the estimate to the larger of 1.0 and that batch's ratio (Java's
``RecordAccumulator.splitAndReenqueue``), so splits stay rare.

Java keeps the ratios in float (32-bit); so does this table (``_f32``), so the
estimate takes the same values step by step. Java's table is static (shared by
every producer of the JVM); kctl keeps one per producer (one per worker
process), which is what a JVM running one producer has.
"""

from __future__ import annotations

import struct

from kctl.protocol.compression import Compression

__all__ = [
    "COMPRESSION_RATE_ESTIMATION_FACTOR",
    "COMPRESSION_RATIO_DETERIORATE_STEP",
    "COMPRESSION_RATIO_IMPROVING_STEP",
    "CompressionRatioEstimator",
]

_F32 = struct.Struct("<f")


def _f32(x: float) -> float:
    """``x`` rounded to the nearest 32-bit float (Java's ``float``)."""
    return _F32.unpack(_F32.pack(x))[0]


#: How fast the estimate improves when a batch compresses better than expected.
COMPRESSION_RATIO_IMPROVING_STEP = _f32(0.005)
#: The least the estimate worsens when a batch compresses worse than expected.
COMPRESSION_RATIO_DETERIORATE_STEP = _f32(0.05)
#: Safety margin on the estimate when sizing a batch (MemoryRecordsBuilder's).
COMPRESSION_RATE_ESTIMATION_FACTOR = _f32(1.05)
#: Every codec's starting ratio (Java's ``CompressionType.rate``).
INITIAL_RATIO = 1.0


class CompressionRatioEstimator:
    """Per (topic, codec) estimate of compressed / uncompressed records bytes."""

    __slots__ = ("_ratios",)

    def __init__(self) -> None:
        self._ratios: dict[tuple[str, Compression], float] = {}

    def estimation(self, topic: str, compression: Compression) -> float:
        return self._ratios.get((topic, compression), INITIAL_RATIO)

    def update_estimation(self, topic: str, compression: Compression, observed: float) -> float:
        """Moves the estimate after a batch compressed at ``observed``; returns it."""
        key = (topic, compression)
        current = self._ratios.get(key, INITIAL_RATIO)
        observed = _f32(observed)
        if observed > current:
            new = max(_f32(current + COMPRESSION_RATIO_DETERIORATE_STEP), observed)
        elif observed < current:
            new = max(_f32(current - COMPRESSION_RATIO_IMPROVING_STEP), observed)
        else:
            return current
        self._ratios[key] = new
        return new

    def set_estimation(self, topic: str, compression: Compression, ratio: float) -> None:
        self._ratios[(topic, compression)] = _f32(ratio)
