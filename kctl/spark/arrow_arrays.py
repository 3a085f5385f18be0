"""Python values -> Arrow arrays, laid out buffer by buffer (``pa.Array.from_buffers``).

Why not ``pa.array``: on a Python list it asks whether the list is "array like", and that
question imports pandas (pyarrow's pandas shim) when pandas is installed, as it is beside
PySpark: 0.15-0.2 s in every Python worker's first ``kctl analyze`` task, on a machine
whose cores are already busy starting Spark. Building the buffers here imports nothing
but pyarrow and ``array``.

Supported types are the ones the analyze stage schema uses: signed integers, float32/64,
bool, string, binary, list and struct. A value that does not fit its type raises
(``TypeError``, ``OverflowError``), as ``pa.array`` would; a struct takes a mapping whose
missing keys are null.
"""

from __future__ import annotations

from array import array as _array
from collections.abc import Mapping, Sequence
from typing import Any

#: ``array`` type codes of the fixed-width Arrow types (by the type's name), checked below.
_TYPECODES = {"int8": "b", "int16": "h", "int32": "i", "int64": "q", "float": "f", "double": "d"}
_WIDTHS = {"int8": 1, "int16": 2, "int32": 4, "int64": 8, "float": 4, "double": 8}
assert all(_array(c).itemsize == _WIDTHS[t] for t, c in _TYPECODES.items()), "array type code widths"


def _bitmap(flags: Sequence[bool]) -> bytes:
    """Arrow's bit-packed booleans, least significant bit first."""
    bits = bytearray((len(flags) + 7) // 8)
    for i, on in enumerate(flags):
        if on:
            bits[i >> 3] |= 1 << (i & 7)
    return bytes(bits)


def _offsets(lengths: Sequence[int]) -> bytes:
    out = _array("i", [0]) * (len(lengths) + 1)
    at = 0
    for i, n in enumerate(lengths):
        at += n
        out[i + 1] = at
    return out.tobytes()


def build_array(values: Sequence[Any], type: Any) -> Any:
    """An Arrow array of ``type`` holding ``values`` (``None`` is null)."""
    import pyarrow as pa
    n = len(values)
    present = [v is not None for v in values]
    null_count = n - sum(present)
    validity = pa.py_buffer(_bitmap(present)) if null_count else None
    name = str(type)
    if pa.types.is_struct(type):
        children = [build_array([None if v is None else _field(v, f.name) for v in values], f.type)
                    for f in type]
        return pa.Array.from_buffers(type, n, [validity], null_count, children=children)
    if pa.types.is_list(type):
        lengths = [0 if v is None else len(v) for v in values]
        flat = [x for v in values if v is not None for x in v]
        child = build_array(flat, type.value_type)
        return pa.Array.from_buffers(type, n, [validity, pa.py_buffer(_offsets(lengths))],
                                     null_count, children=[child])
    if pa.types.is_string(type) or pa.types.is_binary(type):
        text = pa.types.is_string(type)
        data = [b"" if v is None else _bytes(v, text) for v in values]
        return pa.Array.from_buffers(type, n, [validity, pa.py_buffer(_offsets([len(d) for d in data])),
                                               pa.py_buffer(b"".join(data))], null_count)
    if pa.types.is_boolean(type):
        bits = _bitmap([_bool(v) for v in values])
        return pa.Array.from_buffers(type, n, [validity, pa.py_buffer(bits)], null_count)
    if name in _TYPECODES:
        zero = 0.0 if name in ("float", "double") else 0
        data = _array(_TYPECODES[name], [zero if v is None else v for v in values])
        return pa.Array.from_buffers(type, n, [validity, pa.py_buffer(data.tobytes())], null_count)
    raise TypeError(f"Arrow type {type} is not built here")


def _field(value: Any, name: str) -> Any:
    if not isinstance(value, Mapping):
        raise TypeError(f"a struct value must be a mapping, not {type(value).__name__}")
    return value.get(name)


def _bytes(value: Any, text: bool) -> bytes:
    if text:
        if not isinstance(value, str):
            raise TypeError(f"expected str, not {type(value).__name__}")
        return value.encode("utf-8")
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError(f"expected bytes, not {type(value).__name__}")
    return bytes(value)


def _bool(value: Any) -> bool:
    if value is not None and not isinstance(value, bool):
        raise TypeError(f"expected bool, not {type(value).__name__}")
    return bool(value)


def record_batch(rows: Sequence[Mapping[str, Any]], schema: Any) -> Any:
    """Rows (mappings; missing keys are null) as one record batch of ``schema``."""
    import pyarrow as pa
    columns = [build_array([r.get(f.name) for r in rows], f.type) for f in schema]
    return pa.RecordBatch.from_arrays(columns, schema=schema)
