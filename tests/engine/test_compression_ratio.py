"""CompressionRatioEstimator (Java's CompressionRatioEstimatorTest): the estimate moves
as the Java client's does, in the same float steps, per topic and codec."""

import struct

from kctl.engine.compression_ratio import (
    COMPRESSION_RATIO_DETERIORATE_STEP,
    COMPRESSION_RATIO_IMPROVING_STEP,
    CompressionRatioEstimator,
)
from kctl.protocol.compression import Compression


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def test_update_estimation():
    # Java's four cases: the updated estimate is never below the observed ratio.
    est = CompressionRatioEstimator()
    for current, observed in [(0.8, 0.84), (0.6, 0.7), (0.6, 0.4), (0.004, 0.001)]:
        est.set_estimation("tp", Compression.ZSTD, current)
        updated = est.update_estimation("tp", Compression.ZSTD, observed)
        assert updated >= f32(observed)


def test_steps_are_javas():
    est = CompressionRatioEstimator()
    assert est.estimation("t", Compression.LZ4) == 1.0          # every codec starts at 1.0
    # Better than estimated: down by 0.005 (float arithmetic) per batch.
    assert est.update_estimation("t", Compression.LZ4, 0.5) == f32(1.0 - COMPRESSION_RATIO_IMPROVING_STEP)
    for _ in range(98):
        est.update_estimation("t", Compression.LZ4, 0.5)
    assert abs(est.estimation("t", Compression.LZ4) - 0.505) < 1e-4
    # ... never below what was observed.
    for _ in range(10):
        est.update_estimation("t", Compression.LZ4, 0.5)
    assert est.estimation("t", Compression.LZ4) == 0.5
    # Worse: up by at least 0.05, or to the observed ratio.
    assert est.update_estimation("t", Compression.LZ4, 0.51) == f32(0.5 + COMPRESSION_RATIO_DETERIORATE_STEP)
    assert est.update_estimation("t", Compression.LZ4, 0.9) == f32(0.9)
    # Equal: unchanged.
    assert est.update_estimation("t", Compression.LZ4, 0.9) == f32(0.9)


def test_per_topic_and_codec():
    est = CompressionRatioEstimator()
    est.update_estimation("a", Compression.GZIP, 0.3)
    assert est.estimation("a", Compression.GZIP) < 1.0
    assert est.estimation("a", Compression.ZSTD) == 1.0
    assert est.estimation("b", Compression.GZIP) == 1.0
