"""The hot-path RecordBatch v2 encoder used by the load generator.

How this works: in a load run every record of a batch has the same shape (a
key or none, one payload size, the same headers, the batch's timestamp), so
everything around the key and payload bytes depends only on the record's
offset delta and on the lengths of key and payload. ``BatchTemplate`` encodes
those pieces once per (lengths, offset delta) and caches them; building a
batch is then one ``bytes.join`` of cached pieces interleaved with the keys
and payloads (C-level slice assignments), one CRC-32C and two small
``struct.pack`` calls: no Python object per record, no per-record varint
encoding.

A record is ``prefix, middle, value, headers``: the prefix (length,
attributes, timestamp delta 0, offset delta) depends on the offset delta and
on how long the rest is; the middle is the key (length and bytes) and the
value's length. Without a key the middle is fixed and lives in the prefix.
The constant headers of record i are glued to the front of record i+1's
prefix, so a keyless batch is prefix, value, prefix, value, ..., headers.

Record identity (``protocol/identity.py``): a template built with an
``IdentityStamp`` ends every record with the one ``kctl`` header, after the
constant headers. Its run tag and worker are constant and its sequence and
intended time are fixed width, so each record's header block is one
``struct.pack`` of (constant head, sequence, intended time), done for a whole
batch by one ``map`` over ``ids`` runs (see ``build``).

A null value (Kafka's tombstone: value length -1 on the wire, no bytes) is a
``None`` among the values of a template built with ``null_values=True``; such a
template lays every batch out record by record with the null's length -1
(``_null_value_parts``). Pools without nulls get templates without the flag,
so the common path never looks for them.

Every record gets timestamp delta 0 (its timestamp is ``base_timestamp``), as
a batch built at one instant from one schedule slice would; records with
their own timestamps go through ``records.build_batch``.

The output is byte-for-byte what ``records.build_batch`` writes for the same
records; tests check that (rule 7 of the conventions).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from bisect import bisect_right
from itertools import repeat
from typing import Final

from crc32c import crc32c

from kctl.errors import EncodeError
from kctl.protocol.compression import Compression, compress
from kctl.protocol.identity import HEADER_LEAD, IdentityStamp
from kctl.protocol.primitives import encode_varint
from kctl.protocol.records import (
    _V2_POST_CRC,
    _V2_PRE_CRC,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    Header,
    Record,
    _encode_records,
    batch_attributes,
)

__all__ = ["BatchTemplate", "GeneralBatchBuilder", "IdRun"]

_NULL: Final = b"\x01"  # zigzag varint of -1: a null key or value

#: One run of identities: (count, first_seq, first_ts_ns, ts_step_ns, positions).
#: Record j of the run (j < count) has sequence ``first_seq + j`` and intended time
#: ``first_ts_ns + k * ts_step_ns`` where k is ``positions[j]``, or j when
#: ``positions`` is None (positions let a run hold records that were not
#: consecutive on the schedule, e.g. one partition's share of a keyed slice).
IdRun = tuple[int, int, int, int, "Sequence[int] | None"]


class BatchTemplate:
    """Builds RecordBatch v2 bytes from payloads (and keys), reusing pre-encoded pieces.

    ``headers`` go on every record; ``identity`` adds the ``kctl`` header after
    them. ``compression`` is applied to the records section as usual (its cost
    then dominates). ``null_values``: the values may hold None, a null value
    (built without ``value_size``). A template caches pieces per lengths it has seen, up to the
    largest batch it has built; it is not thread-safe (one per producer).
    """

    __slots__ = ("headers", "identity", "compression", "compression_level", "xerial", "null_values",
                 "_headers_raw", "_headers_len", "_pieces", "_piece_total", "_kpieces",
                 "_key_parts", "_middles", "_attributes", "_id_struct", "_id_head",
                 "records_size")

    def __init__(self, *, headers: Sequence[Header] = (),
                 compression: int = Compression.NONE, compression_level: int | None = None,
                 xerial: bool = True, identity: IdentityStamp | None = None,
                 null_values: bool = False) -> None:
        self.headers = tuple(headers)
        self.null_values = null_values
        self.identity = identity
        self.compression = Compression(compression)
        self.compression_level = compression_level
        self.xerial = xerial
        parts = [encode_varint(len(self.headers) + (1 if identity else 0))]
        for h in self.headers:
            k = h.key.encode()
            parts.append(encode_varint(len(k)) + k)
            parts.append(_NULL if h.value is None else encode_varint(len(h.value)) + h.value)
        self._id_struct: struct.Struct | None = None
        self._id_head = b""
        if identity is None:
            # Headers end every record; they are glued to the front of the next
            # record's prefix so a batch is prefix, value, prefix, value, ..., tail.
            self._headers_raw = b"".join(parts)
            self._headers_len = len(self._headers_raw)
        else:
            # Per record: prefix, [middle,] value, chunk = head + sequence + time.
            self._id_head = b"".join(parts) + HEADER_LEAD + identity.prefix
            self._id_struct = struct.Struct(f">{len(self._id_head)}sQq")
            self._headers_raw = b""
            self._headers_len = self._id_struct.size
        # Keyless: value length -> [piece for offset delta 0, 1, 2, ...] and running totals.
        self._pieces: dict[int, list[bytes]] = {}
        self._piece_total: dict[int, list[int]] = {}
        # Keyed: length of what follows the offset delta -> [piece for delta 0, 1, ...].
        self._kpieces: dict[int, list[bytes]] = {}
        self._key_parts: dict[bytes | None, bytes] = {None: _NULL}
        # value length -> {key: key part + value length}
        self._middles: dict[int, dict[bytes | None, bytes]] = {}
        self._attributes = (batch_attributes(self.compression, 0, False),
                            batch_attributes(self.compression, 0, True))
        # The records section's bytes before compression of the last batch built
        # (the producer's compression ratio: compressed / this).
        self.records_size = 0

    # -- sizes ----------------------------------------------------------------------------
    def record_size(self, value_len: int, key: bytes | None = None) -> int:
        """Bytes one record takes in a batch (an upper bound for offset deltas below
        16384, i.e. any batch up to 16383 records)."""
        if key is None:
            return len(self._record_prefix(16383, value_len)) + value_len + self._headers_len
        rest = len(self._middle(key, value_len)) + value_len + self._headers_len
        return len(self._keyed_prefix(16383, rest)) + rest

    @property
    def writes_ids(self) -> bool:
        return self._id_struct is not None

    # -- cached pieces --------------------------------------------------------------------
    def _record_prefix(self, delta: int, value_len: int) -> bytes:
        """Everything of a keyless record before its value: length, attributes,
        timestamp delta 0, offset delta, null key, value length (-1: a null value)."""
        tail = b"\x00\x00" + encode_varint(delta) + _NULL + encode_varint(value_len)
        length = len(tail) + max(value_len, 0) + self._headers_len
        return encode_varint(length) + tail

    def _keyed_prefix(self, delta: int, rest: int) -> bytes:
        """Length, attributes, timestamp delta 0 and offset delta of a record whose
        bytes after the offset delta (key, value, headers) number ``rest``."""
        tail = b"\x00\x00" + encode_varint(delta)
        return encode_varint(len(tail) + rest) + tail

    def _pieces_for(self, value_len: int, count: int) -> list[bytes]:
        pieces = self._pieces.get(value_len)
        if pieces is None:
            pieces = self._pieces[value_len] = []
            self._piece_total[value_len] = [0]
        if len(pieces) < count:
            glue = self._headers_raw
            total = self._piece_total[value_len]
            for delta in range(len(pieces), count):
                prefix = self._record_prefix(delta, value_len)
                pieces.append(prefix if delta == 0 else glue + prefix)
                total.append(total[-1] + len(pieces[-1]))
        return pieces

    def _kpieces_for(self, rest: int, count: int) -> list[bytes]:
        pieces = self._kpieces.get(rest)
        if pieces is None:
            pieces = self._kpieces[rest] = []
        if len(pieces) < count:
            glue = self._headers_raw
            for delta in range(len(pieces), count):
                prefix = self._keyed_prefix(delta, rest)
                pieces.append(prefix if delta == 0 else glue + prefix)
        return pieces

    def _key_part(self, key: bytes | None) -> bytes:
        part = self._key_parts.get(key)
        if part is None:
            part = encode_varint(len(key)) + bytes(key)  # type: ignore[arg-type]
            if type(key) is bytes and len(self._key_parts) < 1 << 16:
                self._key_parts[key] = part
        return part

    def _middle(self, key: bytes | None, value_len: int) -> bytes:
        table = self._middles.get(value_len)
        if table is None:
            table = self._middles[value_len] = {}
        mid = table.get(key)  # type: ignore[arg-type]
        if mid is None:
            mid = self._key_part(key) + encode_varint(value_len)
            if (key is None or type(key) is bytes) and len(table) < 1 << 16:
                table[key] = mid
        return mid

    # -- building -------------------------------------------------------------------------
    def build(self, values: Sequence[bytes | None], *, base_timestamp: int,
              producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
              base_sequence: int = NO_SEQUENCE, base_offset: int = 0,
              is_transactional: bool = False,
              partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
              keys: Sequence[bytes | None] | None = None,
              value_size: int | None = None,
              ids: Sequence[IdRun] | None = None) -> bytes:
        """A whole batch holding ``values`` (offset deltas 0..n-1), with
        ``keys`` if given (same length as ``values``; None entries are null
        keys), else null keys. A template with an identity needs ``ids``: runs
        (``IdRun``) covering the values in order.

        ``value_size``: the caller vouches that every value has this length
        (they come from a fixed-size payload pool), which skips checking each
        length (~0.02 us per record); the total is still checked, and a
        mismatch raises ``EncodeError``. None values (a template with
        ``null_values``) are null values.
        """
        n = len(values)
        if n == 0:
            raise EncodeError("a batch needs at least one record")
        if keys is not None and len(keys) != n:
            raise EncodeError(f"{len(keys)} keys for {n} values")
        per = 2 if keys is None else 3
        if self._id_struct is not None:
            per += 1
        parts: list[bytes] = [b""] * (per * n + (0 if self._id_struct is not None else 1))
        if self.null_values and value_size is None:
            self._null_value_parts(values, keys, parts, per, n)
            expected = -1
        elif keys is None:
            if value_size is None:
                lengths = set(map(len, values))  # type: ignore[arg-type]
                uniform = len(lengths) == 1
                value_len = len(values[0])
            else:
                uniform = True
                value_len = value_size
            if uniform:
                # The load generator's case: one payload length for the batch.
                parts[0:per * n:per] = self._pieces_for(value_len, n)[:n]
            else:
                parts[0:per * n:per] = [self._pieces_for(len(v), i + 1)[i]
                                        for i, v in enumerate(values)]
            parts[1:per * n:per] = values
            expected = (self._piece_total[value_size][n] + n * value_size
                        if value_size is not None else -1)
        else:
            hl = self._headers_len
            if value_size is not None:
                middles = self._middles.get(value_size)
                try:
                    mids = list(map(middles.__getitem__, keys))  # type: ignore[union-attr]
                except (KeyError, AttributeError, TypeError):
                    mids = [self._middle(k, value_size) for k in keys]
                mid_lens = set(map(len, mids))
                if len(mid_lens) == 1:
                    rest = mid_lens.pop() + value_size + hl
                    parts[0:per * n:per] = self._kpieces_for(rest, n)[:n]
                else:
                    parts[0:per * n:per] = [self._kpieces_for(len(m) + value_size + hl, i + 1)[i]
                                            for i, m in enumerate(mids)]
            else:
                mids = [self._middle(k, len(v)) for k, v in zip(keys, values)]
                parts[0:per * n:per] = [self._kpieces_for(len(m) + len(v) + hl, i + 1)[i]
                                        for i, (m, v) in enumerate(zip(mids, values))]
            parts[1:per * n:per] = mids
            parts[2:per * n:per] = values
            expected = -1
        if self._id_struct is not None:
            parts[per - 1::per] = self._id_chunks(n, ids)
        else:
            parts[-1] = self._headers_raw
        body = b"".join(parts)
        if expected >= 0:
            expected += len(self._headers_raw) + (n * self._headers_len if self._id_struct else 0)
            if len(body) != expected:
                raise EncodeError(f"values are not all {value_size} bytes long")
        return self._finish(body, n, base_timestamp, producer_id, producer_epoch, base_sequence,
                            base_offset, is_transactional, partition_leader_epoch)

    def _null_value_parts(self, values: Sequence[bytes | None], keys: Sequence[bytes | None] | None,
                          parts: list[bytes], per: int, n: int) -> None:
        """Lays out records whose values may be None (length -1, no bytes), one
        record at a time."""
        lens = [-1 if v is None else len(v) for v in values]
        parts[1 if keys is None else 2:per * n:per] = [b"" if v is None else v for v in values]
        if keys is None:
            parts[0:per * n:per] = [self._pieces_for(ln, i + 1)[i] for i, ln in enumerate(lens)]
            return
        hl = self._headers_len
        mids = [self._middle(k, ln) for k, ln in zip(keys, lens)]
        parts[0:per * n:per] = [self._kpieces_for(len(m) + max(ln, 0) + hl, i + 1)[i]
                                for i, (m, ln) in enumerate(zip(mids, lens))]
        parts[1:per * n:per] = mids

    def _id_chunks(self, n: int, ids: Sequence[IdRun] | None) -> list[bytes]:
        if ids is None:
            raise EncodeError("this template writes the identity header: build() needs ids")
        pack = self._id_struct.pack  # type: ignore[union-attr]
        head = self._id_head
        chunks: list[bytes] = []
        for count, first_seq, first_ts, step, positions in ids:
            if step == 0:
                tss = repeat(first_ts, count)
            elif positions is None:
                tss = range(first_ts, first_ts + count * step, step)
            elif type(positions) is range:
                tss = range(first_ts + positions.start * step, first_ts + positions.stop * step,
                            positions.step * step)
            else:
                tss = map(first_ts.__add__, map(step.__mul__, positions))
            chunks.extend(map(pack, repeat(head, count), range(first_seq, first_seq + count), tss))
        if len(chunks) != n:
            raise EncodeError(f"ids cover {len(chunks)} records, the batch has {n}")
        return chunks

    def _finish(self, body: bytes, n: int, base_timestamp: int, producer_id: int,
                producer_epoch: int, base_sequence: int, base_offset: int,
                is_transactional: bool, partition_leader_epoch: int) -> bytes:
        self.records_size = len(body)
        if self.compression:
            body = compress(self.compression, body, level=self.compression_level,
                            xerial=self.xerial)
        try:
            post = _V2_POST_CRC.pack(self._attributes[1 if is_transactional else 0], n - 1,
                                     base_timestamp, base_timestamp, producer_id,
                                     producer_epoch, base_sequence, n)
            crc = crc32c(body, crc32c(post))
            pre = _V2_PRE_CRC.pack(base_offset, len(post) + len(body) + 9,
                                   partition_leader_epoch, 2)
        except Exception as e:  # struct.error: a field out of range
            raise EncodeError(f"batch header field out of range: {e}") from None
        return b"".join((pre, crc.to_bytes(4, "big"), post, body))


# -- the general send() path -----------------------------------------------------------------

_ZZ: Final = tuple(encode_varint(v) for v in range(1 << 13))   # zigzag varints of 0 .. 8191
_ZZ_MAX: Final = len(_ZZ) - 1


class GeneralBatchBuilder:
    """Encodes the batches of the general ``send()`` path: records with their own
    timestamps, keys and headers (Kafka's CreateTime per record).

    The common record (no headers, a timestamp within 8 s of the batch's first,
    a value under 8 KiB) is laid out from cached pieces, as ``BatchTemplate``
    does: its prefix (length, attributes, timestamp delta, offset delta, key
    length) depends only on those small numbers, so a piece is encoded once per
    (timestamp delta, key length, value length, offset delta) and reused. Other
    records are encoded field by field. The output is byte-for-byte what
    ``records.build_batch`` writes (tests check it).
    """

    __slots__ = ("compression", "compression_level", "xerial", "_pieces", "_glued_pieces",
                 "_attributes", "records_size")

    def __init__(self, *, compression: int = Compression.NONE,
                 compression_level: int | None = None, xerial: bool = True) -> None:
        self.compression = Compression(compression)
        self.compression_level = compression_level
        self.xerial = xerial
        self._pieces: dict[tuple[int, int, int], list[bytes]] = {}
        self._glued_pieces: dict[tuple[int, int], list[bytes]] = {}
        self._attributes = (batch_attributes(self.compression, 0, False),
                            batch_attributes(self.compression, 0, True))
        self.records_size = 0         # as BatchTemplate's: the last batch's, uncompressed

    def _piece(self, td: int, klen: int, vlen: int, od: int) -> bytes:
        key = (td, klen, vlen)
        pieces = self._pieces.get(key)
        if pieces is None:
            if len(self._pieces) >= 4096:
                self._pieces.clear()
                self._glued_pieces.clear()
            pieces = self._pieces[key] = []
        while len(pieces) <= od:
            d = len(pieces)
            k = _NULL if klen < 0 else _ZZ[klen]
            tail = b"\x00" + _ZZ[td] + _ZZ[d] + k
            # length covers attributes .. header count: tail, key, value length, value, 0x00
            length = len(tail) + max(klen, 0) + len(_ZZ[vlen]) + vlen + 1
            pieces.append(encode_varint(length) + tail)
        return pieces[od]

    def build(self, timestamps: Sequence[int], keys: Sequence[bytes | None],
              values: Sequence[bytes | None], headers: Sequence[Sequence[Header]] | None, *,
              producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
              base_sequence: int = NO_SEQUENCE, base_offset: int = 0,
              is_transactional: bool = False,
              partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH) -> bytes:
        """A batch of ``len(values)`` records (offset deltas 0..n-1); ``headers`` None
        means no record has headers. The base timestamp is the first record's and
        the max timestamp the largest, as Java's ``MemoryRecordsBuilder`` writes."""
        n = len(values)
        if n == 0:
            raise EncodeError("a batch needs at least one record")
        base_ts = timestamps[0]
        body = self._uniform_body(timestamps, keys, values, headers, n, base_ts)
        if body is None:
            body = self._record_by_record(timestamps, keys, values, headers, n, base_ts, base_offset)
        return self._finish(body, n, timestamps, base_ts, producer_id, producer_epoch, base_sequence,
                            base_offset, is_transactional, partition_leader_epoch)

    def _uniform_body(self, timestamps: Sequence[int], keys: Sequence[bytes | None],
                      values: Sequence[bytes | None], headers: Sequence[Sequence[Header]] | None,
                      n: int, base_ts: int) -> bytes | None:
        """The common batch: no keys, no headers, one value length, timestamps that do
        not go back. Records with the same timestamp delta take consecutive pieces of
        one cached list (a C-level slice per run of equal timestamps, not a step per
        record); None for any other batch."""
        if headers is not None or keys.count(None) != n or None in values:
            return None
        lengths = set(map(len, values))  # type: ignore[arg-type]
        if len(lengths) != 1:
            return None
        vlen = lengths.pop()
        last_ts = timestamps[-1]
        if not 0 <= last_ts - base_ts <= _ZZ_MAX or vlen > _ZZ_MAX or n > _ZZ_MAX:
            return None
        if timestamps != sorted(timestamps):
            return None             # a clock that went back: record by record
        parts: list[bytes] = [b""] * (2 * n + 1)
        parts[1:2 * n:2] = values  # type: ignore[assignment]
        piece = self._piece
        i = 0
        while i < n:
            ts = timestamps[i]
            j = bisect_right(timestamps, ts, i) if ts != last_ts else n
            td = ts - base_ts
            piece(td, -1, vlen, j - 1)  # fills the cached list up to j
            pieces = self._pieces[(td, -1, vlen)]
            parts[2 * i:2 * j:2] = self._glued(td, vlen, pieces, i, j)
            i = j
        parts[-1] = b"\x00"
        return b"".join(parts)

    def _glued(self, td: int, vlen: int, pieces: list[bytes], i: int, j: int) -> list[bytes]:
        """Everything before the value of the records at offset deltas i..j-1 (prefix and
        value length), each but the batch's first led by the previous record's header
        count (0x00), as ``BatchTemplate`` glues headers."""
        key = (td, vlen)
        glued = self._glued_pieces.get(key)
        if glued is None:
            glued = self._glued_pieces[key] = []
        tail = _ZZ[vlen]
        while len(glued) < j:
            d = len(glued)
            glued.append(pieces[d] + tail if d == 0 else b"\x00" + pieces[d] + tail)
        return glued[i:j]

    def _record_by_record(self, timestamps: Sequence[int], keys: Sequence[bytes | None],
                          values: Sequence[bytes | None], headers: Sequence[Sequence[Header]] | None,
                          n: int, base_ts: int, base_offset: int) -> bytes:
        parts: list[bytes] = []
        append = parts.append
        piece = self._piece
        for od in range(n):
            td = timestamps[od] - base_ts
            k = keys[od]
            v = values[od]
            h = headers[od] if headers is not None else ()
            vlen = -1 if v is None else len(v)
            klen = -1 if k is None else len(k)
            if not h and 0 <= td <= _ZZ_MAX and 0 <= vlen <= _ZZ_MAX and klen <= _ZZ_MAX \
                    and od <= _ZZ_MAX:
                append(piece(td, klen, vlen, od))
                if k:
                    append(k)
                append(_ZZ[vlen])
                append(v)  # type: ignore[arg-type]
                append(b"\x00")
            else:
                append(_encode_records((Record(base_offset + od, timestamps[od], k, v, tuple(h)),),
                                       base_offset, base_ts))
        return b"".join(parts)

    def _finish(self, body: bytes, n: int, timestamps: Sequence[int], base_ts: int,
                producer_id: int, producer_epoch: int, base_sequence: int, base_offset: int,
                is_transactional: bool, partition_leader_epoch: int) -> bytes:
        self.records_size = len(body)
        if self.compression:
            body = compress(self.compression, body, level=self.compression_level,
                            xerial=self.xerial)
        try:
            post = _V2_POST_CRC.pack(self._attributes[1 if is_transactional else 0], n - 1,
                                     base_ts, max(timestamps), producer_id, producer_epoch,
                                     base_sequence, n)
            crc = crc32c(body, crc32c(post))
            pre = _V2_PRE_CRC.pack(base_offset, len(post) + len(body) + 9,
                                   partition_leader_epoch, 2)
        except Exception as e:  # struct.error: a field out of range
            raise EncodeError(f"batch header field out of range: {e}") from None
        return b"".join((pre, crc.to_bytes(4, "big"), post, body))
