"""Hypothesis strategies for every message and version, generated from the schema tables.

A drawn message sets only fields the version carries (every other field keeps its
default), uses null only where the version allows it, and sometimes carries unknown
tagged fields (tags far above any Kafka assigns) in flexible versions.
"""

from __future__ import annotations

import uuid

from hypothesis import strategies as st

from kctl.protocol import messages
from kctl.protocol.schema import FieldSpec, MessageSpec

UNKNOWN_TAG_BASE = 10_000

_INT = {
    "int8": (-(1 << 7), (1 << 7) - 1), "int16": (-(1 << 15), (1 << 15) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1), "int64": (-(1 << 63), (1 << 63) - 1),
    "uint16": (0, (1 << 16) - 1), "uint32": (0, (1 << 32) - 1),
}

_text = st.text(max_size=8)
_bytes = st.binary(max_size=12)
_uuids = st.builds(uuid.UUID, int=st.integers(0, (1 << 128) - 1))


def _scalar(t: str) -> st.SearchStrategy:
    if t in _INT:
        return st.integers(*_INT[t])
    if t == "float64":
        return st.floats(allow_nan=False)
    if t == "bool":
        return st.booleans()
    if t == "string":
        return _text
    if t in ("bytes", "records"):
        return _bytes
    if t == "uuid":
        return _uuids
    raise AssertionError(t)


def _unknown_tags(flexible: bool) -> st.SearchStrategy:
    if not flexible:
        return st.just({})
    return st.dictionaries(st.integers(UNKNOWN_TAG_BASE, UNKNOWN_TAG_BASE + 5), _bytes, max_size=2)


def struct_strategy(cls: type, fields: tuple[FieldSpec, ...], spec: MessageSpec,
                    version: int, depth: int = 0, override=None) -> st.SearchStrategy:
    flexible = version in spec.flexible_versions
    kwargs: dict[str, st.SearchStrategy] = {}
    for f in fields:
        if version not in f.versions:
            continue
        s = field_strategy(cls, f, spec, version, depth, override)
        if version in f.nullable_versions:
            s = st.none() | s
        kwargs[f.py_name] = s
    kwargs[cls._tags_attr] = _unknown_tags(flexible)
    return st.builds(cls, **kwargs)


def field_strategy(owner: type, f: FieldSpec, spec: MessageSpec, version: int,
                   depth: int, override=None) -> st.SearchStrategy:
    top = messages.message_class(spec.name)
    if f.struct is not None:
        sub_cls = top._struct_classes[f.struct]
        elem = struct_strategy(sub_cls, f.fields, spec, version, depth + 1, override)
    else:
        custom = override(f) if override is not None else None
        elem = custom if custom is not None else _scalar(f.element_type)
    if f.is_array:
        return st.lists(elem, max_size=2 if depth < 2 else 1)
    return elem


def message_strategy(cls: type, version: int, override=None) -> st.SearchStrategy:
    """``override(field_spec)`` may return a strategy for a scalar field (or None)."""
    spec = cls._spec
    return struct_strategy(cls, spec.fields, spec, version, 0, override)
