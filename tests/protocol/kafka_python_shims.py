"""Fixtures that give kafka-python the optional codec modules it lacks here.

kafka-python reads snappy through python-snappy and magic-0 LZ4 through
xxhash, neither installed; these shims back them with cramjam and kctl's own
XXH32 (itself checked against the spec's reference values), so kafka-python's
record code can cross-check kctl for every codec.
"""

from __future__ import annotations

import types

import cramjam
import pytest
from kafka import codec as kcodec

from kctl.protocol.compression import xxh32


@pytest.fixture
def snappy_shim(monkeypatch):
    shim = types.SimpleNamespace(
        compress=lambda b: bytes(cramjam.snappy.compress_raw(bytes(b))),
        decompress=lambda b: bytes(cramjam.snappy.decompress_raw(bytes(b))),
    )
    monkeypatch.setattr(kcodec, "snappy", shim)
    return shim


class _Xxh32:
    def __init__(self, data: bytes) -> None:
        self._h = xxh32(bytes(data))

    def digest(self) -> bytes:
        return self._h.to_bytes(4, "big")


@pytest.fixture
def xxhash_shim(monkeypatch):
    shim = types.SimpleNamespace(xxh32=_Xxh32)
    monkeypatch.setattr(kcodec, "xxhash", shim)
    return shim


@pytest.fixture
def all_codecs(snappy_shim, xxhash_shim):
    return None
