"""Independent decoders of captured frames, to check what kctl decoded.

- kio (generated from Kafka's message definitions): reads the header and body of a
  frame from the same bytes; ``kio_check`` compares every field with kctl's
  decoded header and body (reusing the converters of tests/protocol/test_messages_kio.py).
- kafka-python's record code: ``kafka_python_records`` reads a record set
  (RecordBatch v2 or older message sets, any codec) for comparing with kctl's batches.
"""

from __future__ import annotations

import pytest

kio_index = pytest.importorskip("kio.index")
from kio.schema.index import api_key_map, schema_name_map  # noqa: E402
from kio.serial import entity_reader  # noqa: E402
from kio.static.constants import EntityType  # noqa: E402

from kctl.inspect.session import DecodedFrame  # noqa: E402
from tests.protocol.test_messages_kio import _kio_entity, compare as _compare  # noqa: E402


def _minus_one_timestamp(kio_obj, kctl_obj, path: str) -> bool:
    """A representation difference real traffic shows and random messages did not:
    kio reads a -1 timestamp (``log_append_time_ms`` when the broker did not assign
    one) as None."""
    return kio_obj is None and kctl_obj == -1 and path.endswith(("_ms", "timestamp"))


def compare(kio_obj, kctl_obj, path: str) -> None:
    """tests/protocol/test_messages_kio.py's comparison, tolerating kio's None for -1."""
    _compare(kio_obj, kctl_obj, path, _minus_one_timestamp)


def kio_knows(f: DecodedFrame) -> bool:
    return (f.api_key in api_key_map
            and f.api_version in schema_name_map[api_key_map[f.api_key]])


def kio_check(f: DecodedFrame, data: bytes) -> None:
    """kio reads ``data`` (a frame without its size prefix) to its last byte and
    agrees with kctl on every header and body field."""
    kio_cls = _kio_entity(f.api_key, f.api_version, f.direction)
    where = f"{f.api_name} v{f.api_version} {f.direction} corr {f.correlation_id}"
    view = memoryview(data)
    header, pos = entity_reader(kio_cls.__header_schema__)(view, 0)
    compare(header, f.header, f"{where} header")
    body, used = entity_reader(kio_cls)(view, pos)     # kio returns bytes used, not an offset
    assert pos + used == len(data), f"{where}: kio read {pos + used} of {len(data)} bytes"
    compare(body, f.body, where)


def kafka_python_records(data: bytes) -> list[dict]:
    """Every record of a record set, as kafka-python reads it, batch attributes included."""
    from kafka.record import MemoryRecords
    out = []
    mr = MemoryRecords(data)
    while mr.has_next():
        batch = mr.next_batch()
        for r in batch:
            out.append({"offset": r.offset, "timestamp": r.timestamp, "key": r.key,
                        "value": r.value,
                        "headers": [(k, v) for k, v in getattr(r, "headers", ())],
                        "producer_id": getattr(batch, "producer_id", -1),
                        "base_sequence": getattr(batch, "base_sequence", -1),
                        "is_transactional": getattr(batch, "is_transactional", False)})
    return out


def kctl_records(rs) -> list[dict]:
    out = []
    for b, r in rs.iter_records():
        out.append({"offset": r.offset, "timestamp": r.timestamp, "key": r.key,
                    "value": r.value, "headers": [(h.key, h.value) for h in r.headers],
                    "producer_id": b.producer_id, "base_sequence": b.base_sequence,
                    "is_transactional": b.is_transactional})
    return out

