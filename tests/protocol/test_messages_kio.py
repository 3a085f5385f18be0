"""Cross-check against kio 0.6.5, an independently generated model of Kafka's messages.

For every (API, version, request/response) both define: a random kctl message is
encoded by kctl and decoded by kio, and the kio object is compared field by field
with the kctl one; then kio re-encodes its object and kctl decodes it back.

Known representation differences, converted here rather than hidden:
- kio turns ``*Ms`` duration/timestamp fields into timedelta/datetime and drops the
  ``_ms`` suffix (``throttle_time_ms`` -> ``throttle_time``);
- kio uses tuples for arrays and ``None`` for the all-zero UUID.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import uuid

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

kio_index = pytest.importorskip("kio.index")
from kio.schema.index import api_key_map, schema_name_map  # noqa: E402
from kio.serial import entity_reader, entity_writer  # noqa: E402
from kio.static.constants import EntityType  # noqa: E402
from kio.schema.errors import ErrorCode  # noqa: E402

from kctl.protocol import messages, schema  # noqa: E402
from tests.protocol.message_strategies import message_strategy  # noqa: E402

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _pairs() -> list[tuple[int, str]]:
    out = []
    for key, name in sorted(api_key_map.items()):
        if key in schema.API_BY_KEY:
            out += [(key, "request"), (key, "response")]
    return out


def _kio_versions(key: int) -> list[int]:
    return sorted(schema_name_map[api_key_map[key]])


def _kio_to_plain(value, kctl_value):
    """kio value -> the value kctl would hold."""
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return round((value - _EPOCH).total_seconds() * 1000)
    if value is None and isinstance(kctl_value, uuid.UUID):
        return uuid.UUID(int=0)
    return value


def compare(kio_obj, kctl_obj, path: str, tolerate=None) -> None:
    """Field-by-field equality; ``tolerate(kio, kctl, path)`` may accept a known
    representation difference at a leaf."""
    if dataclasses.is_dataclass(kio_obj):
        for f in dataclasses.fields(kio_obj):
            kv = getattr(kio_obj, f.name)
            name = f.name
            if not hasattr(kctl_obj, name) and hasattr(kctl_obj, name + "_ms"):
                name = name + "_ms"
            elif not hasattr(kctl_obj, name) and name.endswith("_"):
                name = name[:-1]  # kio escapes builtins: id -> id_
            assert hasattr(kctl_obj, name), f"{path}.{f.name}: kctl has no such field"
            compare(kv, getattr(kctl_obj, name), f"{path}.{name}", tolerate)
        return
    if isinstance(kio_obj, tuple):
        assert kctl_obj is not None and len(kio_obj) == len(kctl_obj), path
        for i, (a, b) in enumerate(zip(kio_obj, kctl_obj)):
            compare(a, b, f"{path}[{i}]", tolerate)
        return
    if tolerate is not None and tolerate(kio_obj, kctl_obj, path):
        return
    got = _kio_to_plain(kio_obj, kctl_obj)
    if isinstance(got, float) and isinstance(kctl_obj, float):
        assert got == kctl_obj or (got != got and kctl_obj != kctl_obj), path
        return
    assert got == kctl_obj, f"{path}: kio {kio_obj!r} vs kctl {kctl_obj!r}"


def _no_unknown_tags(msg) -> None:
    """kio drops unknown tagged fields; clear them so re-encoding can be compared."""
    if isinstance(msg, messages.Message):
        setattr(msg, msg._tags_attr, {})
        for f in msg._fields:
            _no_unknown_tags(getattr(msg, f))
    elif isinstance(msg, list):
        for x in msg:
            _no_unknown_tags(x)


_ERROR_CODES = st.sampled_from(sorted(e.value for e in ErrorCode))


def _kio_override(f):
    """kio models error codes as an enum and *Ms / timestamps as timedelta/datetime."""
    if f.py_name == "error_code" or f.py_name.endswith("_error_code"):
        return _ERROR_CODES
    if f.type in ("int32", "int64") and (f.py_name.endswith("_ms") or "timestamp" in f.py_name):
        return st.integers(0, (1 << 31) - 1)  # kio rejects negative timestamps
    return None


def _kio_entity(key: int, version: int, kind: str):
    mod = kio_index.load_payload_module(key, version, EntityType[kind])
    cls_name = schema.API_BY_KEY[key].request.name if kind == "request" \
        else schema.API_BY_KEY[key].response.name
    if hasattr(mod, cls_name):
        return getattr(mod, cls_name)
    # kio names a few classes after older names of the API.
    for obj in vars(mod).values():
        if isinstance(obj, type) and getattr(obj, "__type__", None) == EntityType[kind]:
            return obj
    raise AssertionError(f"no kio {kind} entity for API {key} v{version}")


@pytest.mark.parametrize(("key", "kind"), _pairs())
@settings(max_examples=3, deadline=None, derandomize=True, phases=[Phase.generate],
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_kctl_and_kio_agree(key: int, kind: str, data: st.DataObject) -> None:
    api = schema.API_BY_KEY[key]
    cls = messages.message_class(api.request.name if kind == "request" else api.response.name)
    for version in _kio_versions(key):
        assert version in cls._spec.valid_versions, f"kctl lacks {cls.__name__} v{version}"
        kio_cls = _kio_entity(key, version, kind)
        msg = data.draw(message_strategy(cls, version, _kio_override), label=f"v{version}")
        _no_unknown_tags(msg)
        wire = messages.encode(msg, version)
        kio_obj, used = entity_reader(kio_cls)(memoryview(wire), 0)
        assert used == len(wire), f"{cls.__name__} v{version}: kio read {used} of {len(wire)}"
        compare(kio_obj, msg, f"{cls.__name__}v{version}")
        buf = io.BytesIO()
        entity_writer(kio_cls)(buf, kio_obj)
        back = messages.decode(cls, version, buf.getvalue())
        assert back == msg, f"{cls.__name__} v{version}: kio re-encoding decodes differently"
