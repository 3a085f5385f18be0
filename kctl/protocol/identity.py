"""Record identity: the one ``kctl`` record header kctl's load runs put on every record.

Layout (24 bytes, big-endian), the value of the header whose key is ``kctl``:

====== ====== =========================================================
offset size   field
====== ====== =========================================================
0      4      run tag: the first 4 bytes of the run id (see ``run_tag``)
4      4      worker, unsigned
8      8      sequence within the worker, unsigned: the order in which the
              worker handed its records to its producer (dense from 0; it
              rises with the offsets in every partition)
16     8      intended send time, signed, ns since the Unix epoch: the
              record's time on the open-loop schedule (its append time in
              max-throughput mode)
====== ====== =========================================================

A run id is 12 lowercase hex characters (``run.id`` in the summary); its run tag
is the first 4 bytes of its hex decoding, i.e. ``bytes.fromhex(run_id[:8])``. A
record's header takes 30 bytes on the wire (1-byte key length, 4-byte key,
1-byte value length, 24-byte value; the 1-byte header count is there without it),
31 when it makes the record's length varint one byte longer.

One module for both sides: the load path's batch encoder lays the header out
from ``IdentityStamp`` (``protocol/batch_builder.py``), and readers (``--verify``,
a consumer computing end-to-end latency) decode it here. ``scan_records`` finds the
identities of a whole batch's records section without building a record object: it
matches the header's fixed 6-byte lead-in (key length, key, value length) and
checks the number of matches against the batch's record count, so a value that
happens to hold those bytes sends the caller to the full decoder instead of
yielding a wrong identity.

No I/O and no clock here (rule 1 of the conventions).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from kctl.protocol.compression import DEFAULT_MAX_DECOMPRESSED, decompress
from kctl.protocol.primitives import encode_varint
from kctl.protocol.records import _V2_HEADER, decode_batches

__all__ = ["HEADER_KEY", "IDENTITY", "IDENTITY_SIZE", "IdentityStamp", "RecordIdentity",
           "ScannedBatch", "find_identity", "run_tag", "scan_batches", "scan_records"]

HEADER_KEY: Final = "kctl"
#: run tag (4 bytes), worker uint32, sequence uint64, intended time int64 (ns).
IDENTITY: Final = struct.Struct(">4sIQq")
IDENTITY_SIZE: Final = IDENTITY.size  # 24
#: How the header starts inside a record: key length, key, value length (zigzag varints).
HEADER_LEAD: Final = encode_varint(len(HEADER_KEY)) + HEADER_KEY.encode() + encode_varint(IDENTITY_SIZE)
_SCAN = re.compile(re.escape(HEADER_LEAD) + rb"(.{24})", re.DOTALL)


def run_tag(run_id: str) -> bytes:
    """The run id's 4-byte tag: ``bytes.fromhex(run_id[:8])``."""
    try:
        tag = bytes.fromhex(run_id[:8])
    except ValueError:
        tag = b""
    if len(tag) != 4:
        raise ValueError(f"a run id starts with 8 hex characters, not {run_id!r}")
    return tag


@dataclass(frozen=True, slots=True)
class IdentityStamp:
    """What the identity of every record of one worker shares: run tag and worker.
    The encoder adds the sequence and the intended time per record."""

    run_tag: bytes
    worker: int

    def __post_init__(self) -> None:
        if len(self.run_tag) != 4:
            raise ValueError("a run tag is 4 bytes")
        if not 0 <= self.worker <= 0xFFFFFFFF:
            raise ValueError(f"worker {self.worker} does not fit in 32 bits")

    @property
    def prefix(self) -> bytes:
        """The header value's first 8 bytes (run tag, worker)."""
        return self.run_tag + self.worker.to_bytes(4, "big")


@dataclass(frozen=True, slots=True)
class RecordIdentity:
    run_tag: bytes
    worker: int
    sequence: int
    intended_ns: int

    def encode(self) -> bytes:
        return IDENTITY.pack(self.run_tag, self.worker, self.sequence, self.intended_ns)

    @classmethod
    def decode(cls, value: bytes | None) -> RecordIdentity | None:
        """The identity in a ``kctl`` header value; None when it is not 24 bytes."""
        if value is None or len(value) != IDENTITY_SIZE:
            return None
        return cls(*IDENTITY.unpack(value))


def find_identity(headers: Iterable) -> RecordIdentity | None:
    """The identity among a record's headers (objects with ``key`` and ``value``)."""
    for h in headers:
        if h.key == HEADER_KEY:
            return RecordIdentity.decode(h.value)
    return None


def scan_records(records_section: bytes, record_count: int) -> bytes | None:
    """The identities of a v2 batch's (uncompressed) records section, concatenated
    in record order (24 bytes each, ``IDENTITY`` layout: ``IDENTITY.iter_unpack``
    reads them), or None when the section does not hold exactly one identity per
    record (records without one, or a value that contains the header's lead-in):
    the caller decodes such a batch record by record."""
    found = _SCAN.findall(records_section)
    if len(found) != record_count:
        return None
    return b"".join(found)


@dataclass(frozen=True, slots=True)
class ScannedBatch:
    """One batch of a records blob, as identities.

    Fast path: ``identities`` holds one ``IDENTITY``-packed value per record, the
    records at offsets ``base_offset`` .. ``next_offset - 1`` in order. Otherwise
    (a record without an identity, compacted offsets, a legacy message set, a
    control batch) ``identities`` is None and ``records`` lists ``(offset,
    identity or None)`` from the full decoder.

    ``producer_id`` and ``transactional`` come from the v2 header; ``control`` is a
    control batch's marker type (``CONTROL_ABORT`` / ``CONTROL_COMMIT``), None for data
    (what a read_committed reader needs to drop aborted transactions)."""

    base_offset: int
    next_offset: int
    identities: bytes | None
    records: tuple[tuple[int, RecordIdentity | None], ...] = ()
    producer_id: int = -1
    transactional: bool = False
    control: int | None = None


#: A control batch's marker types (the control record's key).
CONTROL_ABORT: Final = 0
CONTROL_COMMIT: Final = 1


_CONTROL_BIT: Final = 0x20
_TRANSACTIONAL_BIT: Final = 0x10
_COMPRESSION_MASK: Final = 0x07


def scan_batches(data: bytes, *, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED
                 ) -> tuple[list[ScannedBatch], int]:
    """The identities of every whole batch in a Fetch's records blob, reading only
    batch headers and each record's ``kctl`` header (``scan_records``); a batch the
    scan cannot vouch for is decoded in full. Returns the batches and how many
    bytes they took (a trailing partial batch is left out, as Fetch may cut one).
    The CRC is not checked here: the broker checked it when the batch was written."""
    out: list[ScannedBatch] = []
    pos = 0
    n = len(data)
    hsize = _V2_HEADER.size
    while pos + 17 <= n:
        base_offset, length = int.from_bytes(data[pos:pos + 8], "big", signed=True), \
            int.from_bytes(data[pos + 8:pos + 12], "big", signed=True)
        end = pos + 12 + length
        if length < 0 or end > n:
            break
        magic = data[pos + 16]
        if magic == 2 and length + 12 >= hsize:
            (_, _, _, _, _, attributes, last_delta, _, _, producer_id, _, _,
             count) = _V2_HEADER.unpack_from(data, pos)
            transactional = bool(attributes & _TRANSACTIONAL_BIT)
            if attributes & _CONTROL_BIT:
                control = decode_batches(data[pos:end]).batches[0].control_type
                out.append(ScannedBatch(base_offset, base_offset + last_delta + 1, None, (),
                                        producer_id, transactional, control))
                pos = end
                continue
            section = data[pos + hsize:end]
            codec = attributes & _COMPRESSION_MASK
            if codec:
                section = decompress(codec, section, max_size=max_decompressed)
            found = scan_records(section, count) if last_delta + 1 == count else None
            if found is not None:
                out.append(ScannedBatch(base_offset, base_offset + count, found, (),
                                        producer_id, transactional))
                pos = end
                continue
        out.append(_decoded(data[pos:end], base_offset))
        pos = end
    return out, pos


def _decoded(entry: bytes, base_offset: int) -> ScannedBatch:
    batches = decode_batches(entry).batches
    records = tuple((r.offset, find_identity(r.headers)) for b in batches for r in b.records)
    nxt = max((b.next_offset for b in batches), default=base_offset)
    first = batches[0] if batches else None
    return ScannedBatch(base_offset, nxt, None, records,
                        first.producer_id if first is not None else -1,
                        bool(first is not None and first.is_transactional))
