"""Every Kafka message as a version-independent class, with compiled codecs.

How this works:
- One class per message (``ProduceRequest``) and one per struct inside it
  (``ProduceRequest.TopicProduceData``), built at import from the tables in
  ``schema.py``. A class has the union of the fields of all versions, named in
  snake_case, with Kafka's defaults; slotted, comparable with ``==``, readable repr.
  Unknown tagged fields are kept raw in ``unknown_tagged_fields`` ({tag: bytes}) and
  written back (for the two headers the attribute is ``tagged_fields``).
- Codecs are compiled per (message, version) on first use: Python source is built
  from the field tree for that version, exec'd once and cached. Runs of fixed-width
  fields are read and written with one ``struct`` call; variable-length values go
  through ``primitives.Reader`` / ``Writer`` (bounds-checked: a length or count is
  checked against the bytes present before anything is allocated).
- Decode errors are ``DecodeError`` with the absolute offset and the dotted field
  path (``topics[0].partitions[2].records``); encode errors are ``EncodeError``,
  including a non-default value in a field the version does not have (Kafka's
  UnsupportedVersionException), unless the field is ignorable.
- ``records`` fields stay raw bytes (``None`` when null); ``records.py`` decodes them.

No I/O here (conventions rule 1).
"""

from __future__ import annotations

import base64
import struct
import uuid as _uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

from kctl.errors import DecodeError, EncodeError
from kctl.protocol import schema as _schema
from kctl.protocol.primitives import Reader, Writer, ZERO_UUID
from kctl.protocol.schema import FIXED_TYPES, FieldSpec, MessageSpec

__all__ = [
    "Message", "RequestHeader", "ResponseHeader", "Request", "Response",
    "request_class", "response_class", "message_class", "encode", "decode",
    "encode_request", "encode_response", "decode_request", "decode_response",
    "peek_correlation_id", "to_jsonable", "in_version", "present_fields",
]

_MISSING: Final = object()


# --------------------------------------------------------------------------
# classes
# --------------------------------------------------------------------------

class Message:
    """Base of every generated message and struct class."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()        # attribute names, schema order, tags attribute last
    _spec: MessageSpec | None = None     # set on top-level message classes
    _tags_attr: str = "unknown_tagged_fields"

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in self._fields)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        parts = []
        for f in self._fields:
            v = getattr(self, f)
            if f == self._tags_attr and not v:
                continue
            if isinstance(v, (bytes, bytearray, memoryview)) and len(v) > 32:
                parts.append(f"{f}=<{len(v)} bytes>")
            else:
                parts.append(f"{f}={v!r}")
        return f"{type(self).__qualname__}({', '.join(parts)})"

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable(self)


def _default_value(f: FieldSpec, struct_classes: dict[str, type]) -> tuple[bool, Any]:
    """(is_mutable, value-or-factory) for a field's default."""
    d = f.default
    if isinstance(d, bool):  # a few definitions write JSON literals, not strings
        d = "true" if d else "false"
    elif isinstance(d, (int, float)):
        d = str(d)
    if f.is_array:
        if d == "null":
            return False, None
        return True, list
    if f.struct is not None:
        if d == "null":
            return False, None
        return True, struct_classes[f.struct]
    t = f.type
    if t in ("int8", "int16", "int32", "int64", "uint16", "uint32"):
        return False, int(d, 0) if d not in (None, "") else 0
    if t == "float64":
        return False, float(d) if d not in (None, "") else 0.0
    if t == "bool":
        return False, d == "true"
    if t == "string":
        return False, None if d == "null" else (d or "")
    if t == "bytes":
        return False, None if d == "null" else b""
    if t == "uuid":
        return False, ZERO_UUID
    if t == "records":
        return False, None
    raise AssertionError(f"unknown type {t}")


def _collect_structs(fields: tuple[FieldSpec, ...], out: dict[str, dict[str, FieldSpec]]) -> None:
    for f in fields:
        if f.struct is not None and f.fields is not None:
            slot = out.setdefault(f.struct, {})
            for sub in f.fields:
                slot.setdefault(sub.py_name, sub)
            _collect_structs(f.fields, out)


def _make_class(name: str, qualname: str, fields: list[FieldSpec], tags_attr: str,
                struct_classes: dict[str, type]) -> type:
    names = tuple(f.py_name for f in fields) + (tags_attr,)
    cls = type(name, (Message,), {"__slots__": names, "_fields": names,
                                  "_tags_attr": tags_attr, "__module__": __name__,
                                  "__qualname__": qualname})
    cls._field_specs = {f.py_name: f for f in fields}  # type: ignore[attr-defined]
    return cls


def _install_init(cls: type, struct_classes: dict[str, type]) -> None:
    specs: dict[str, FieldSpec] = cls._field_specs  # type: ignore[attr-defined]
    env: dict[str, Any] = {"_M": _MISSING}
    params, body, defaults = [], [], {}
    for i, (py, f) in enumerate(specs.items()):
        mutable, val = _default_value(f, struct_classes)
        if mutable:
            env[f"_F{i}"] = val
            params.append(f"{py}=_M")
            body.append(f"    self.{py} = _F{i}() if {py} is _M else {py}")
        else:
            env[f"_D{i}"] = val
            params.append(f"{py}=_D{i}")
            body.append(f"    self.{py} = {py}")
        defaults[py] = (mutable, val)
    tags = cls._tags_attr
    params.append(f"{tags}=None")
    body.append(f"    self.{tags} = {{}} if {tags} is None else {tags}")
    src = f"def __init__(self, {', '.join(params)}):\n" + "\n".join(body) + "\n"
    exec(src, env)  # noqa: S102 - source built from the schema tables above
    cls.__init__ = env["__init__"]
    cls._defaults = defaults


def _build_classes() -> tuple[dict[str, type], dict[tuple[str, str], type]]:
    by_name: dict[str, type] = {}
    nested: dict[tuple[str, str], type] = {}
    for spec in _schema.MESSAGES.values():
        tags_attr = "tagged_fields" if spec.type == "header" else "unknown_tagged_fields"
        structs: dict[str, dict[str, FieldSpec]] = {}
        _collect_structs(spec.fields, structs)
        struct_classes: dict[str, type] = {}
        for sname, sfields in structs.items():
            struct_classes[sname] = _make_class(sname, f"{spec.name}.{sname}",
                                                list(sfields.values()), tags_attr, struct_classes)
        cls = _make_class(spec.name, spec.name, list(spec.fields), tags_attr, struct_classes)
        cls._spec = spec
        cls._struct_classes = struct_classes  # type: ignore[attr-defined]
        for sname, scls in struct_classes.items():
            _install_init(scls, struct_classes)
            if not hasattr(cls, sname):
                setattr(cls, sname, scls)
            nested[(spec.name, sname)] = scls
        _install_init(cls, struct_classes)
        by_name[spec.name] = cls
    return by_name, nested


_CLASSES, _NESTED = _build_classes()
globals().update(_CLASSES)  # ProduceRequest, FetchResponse, RequestHeader, ...
__all__ += sorted(_CLASSES)

RequestHeader = _CLASSES["RequestHeader"]
ResponseHeader = _CLASSES["ResponseHeader"]


def message_class(name: str) -> type:
    """The class of a message by Kafka's name, e.g. ``"ProduceRequest"``."""
    try:
        return _CLASSES[name]
    except KeyError:
        for cls in _CLASSES.values():
            if name in cls._spec.older_names:
                return cls
        raise KeyError(f"no Kafka message named {name!r}") from None


def request_class(api_key: int) -> type:
    return _CLASSES[_api(api_key).request.name]


def response_class(api_key: int) -> type:
    return _CLASSES[_api(api_key).response.name]


def _api(api_key: int) -> _schema.ApiInfo:
    try:
        return _schema.API_BY_KEY[api_key]
    except KeyError:
        raise KeyError(f"unknown API key {api_key}") from None


# --------------------------------------------------------------------------
# codec compilation
# --------------------------------------------------------------------------

def _mkuuid(b: bytes) -> _uuid.UUID:
    return _uuid.UUID(bytes=b)


def _trunc(r: Reader, pos: int, layout: tuple[tuple[str, int, int], ...]) -> DecodeError:
    """A truncation error inside a run of fixed-width fields, naming the field."""
    for name, off, size in layout:
        if pos + off + size > r.end:
            return DecodeError(f"truncated: need {size} bytes, {max(0, r.end - pos - off)} left",
                               offset=r.base + pos + off, field=name)
    return DecodeError("truncated", offset=r.base + pos)


def _bad_pack(obj: Any, names: tuple[str, ...], fmts: tuple[str, ...], version: int) -> EncodeError:
    for name, fmt in zip(names, fmts):
        v = getattr(obj, name)
        try:
            struct.pack(fmt, v.bytes if fmt == ">16s" and v is not None else v)
        except (struct.error, AttributeError, TypeError) as e:
            return EncodeError(f"{type(obj).__qualname__}.{name} = {v!r} does not fit "
                               f"(v{version}): {e}")
    return EncodeError(f"{type(obj).__qualname__}: cannot encode fixed fields {names}")


def _read_tags(r: Reader, readers: dict[int, Any]) -> tuple[dict[int, Any], dict[int, bytes]]:
    """A tagged-field section: known tags decoded by ``readers[tag](r)``, others raw."""
    start = r.pos
    count = r.uvarint("tagged fields")
    if count > r.end - r.pos:
        raise r.fail(f"tagged field count {count} exceeds the bytes left", "tagged fields", at=start)
    known: dict[int, Any] = {}
    unknown: dict[int, bytes] = {}
    last = -1
    for _ in range(count):
        tag_at = r.pos
        tag = r.uvarint("tagged fields")
        if tag <= last:
            raise r.fail(f"tag {tag} out of order or repeated", "tagged fields", at=tag_at)
        last = tag
        size = r.uvarint(f"tagged fields[{tag}]")
        if size > r.end - r.pos:
            raise r.fail(f"tagged field {tag} size {size} exceeds the bytes left",
                         f"tagged fields[{tag}]", at=tag_at)
        fn = readers.get(tag)
        if fn is None:
            unknown[tag] = r.raw(size)
            continue
        outer_end = r.end
        r.end = r.pos + size
        try:
            name, value = fn(r)
            if r.pos != r.end:
                raise r.fail(f"tagged field {tag} has {r.end - r.pos} bytes left over", name)
        finally:
            r.end = outer_end
        known[tag] = value
    return known, unknown


def _write_tags(w: Writer, known: dict[int, bytes], unknown: dict[int, bytes]) -> None:
    if unknown:
        merged = dict(unknown)
        for tag in known:
            if tag in merged:
                raise EncodeError(f"tag {tag} is both a known field and an unknown tagged field")
        merged.update(known)
        w.tagged_fields(merged)
    else:
        w.tagged_fields(known)


def _read_int_array(r: Reader, fmt: str, size: int, n: int, field: str) -> list:
    need = n * size
    if need > r.end - r.pos:
        raise r.fail(f"truncated: array of {n} needs {need} bytes, {r.end - r.pos} left", field)
    pos = r.pos
    r.pos = pos + need
    return list(struct.unpack_from(f">{n}{fmt}", r.data, pos))


class _Compiler:
    """Builds the Python source of one message version's decoder and encoder."""

    def __init__(self, spec: MessageSpec, version: int) -> None:
        self.spec = spec
        self.version = version
        self.flexible = version in spec.flexible_versions
        self.cls = _CLASSES[spec.name]
        self.env: dict[str, Any] = {
            "DecodeError": DecodeError, "EncodeError": EncodeError, "_trunc": _trunc,
            "_bad_pack": _bad_pack, "_read_tags": _read_tags, "_write_tags": _write_tags,
            "_mkuuid": _mkuuid, "_read_int_array": _read_int_array, "Writer": Writer,
            "struct": struct, "_new": object.__new__,
        }
        self.lines: list[str] = []
        self.counter = 0

    def name(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def const(self, value: Any) -> str:
        n = self.name("_C")
        self.env[n] = value
        return n

    # -- helpers about a field in this version -------------------------
    def _compact(self, f: FieldSpec) -> bool:
        if f.flexible_versions is not None:
            return self.version in f.flexible_versions
        return self.flexible

    def _nullable(self, f: FieldSpec) -> bool:
        return self.version in f.nullable_versions

    def _segments(self, present: list[FieldSpec]) -> list[tuple[list[FieldSpec], FieldSpec | None]]:
        """The fields in wire order as ``(run, None)`` for each run of consecutive
        non-nullable fixed-width fields (one ``struct`` call) and ``([], field)`` for
        every other field."""
        out: list[tuple[list[FieldSpec], FieldSpec | None]] = []
        run: list[FieldSpec] = []
        for f in present:
            if f.type in FIXED_TYPES and not self._nullable(f):
                run.append(f)
                continue
            if run:
                out.append((run, None))
                run = []
            out.append(([], f))
        if run:
            out.append((run, None))
        return out

    @staticmethod
    def _run_struct(run: list[FieldSpec]) -> struct.Struct:
        return struct.Struct(">" + "".join(FIXED_TYPES[g.type][0][1:] for g in run))

    # -- decode ----------------------------------------------------------
    def decoder(self, fields: tuple[FieldSpec, ...], cls: type) -> str:
        """Emits ``def dN(r)`` decoding one struct; returns its name."""
        v = self.version
        fname = self.name("d")
        present = [f for f in fields if v in f.versions and v not in f.tagged_versions]
        tagged = [f for f in fields if v in f.tagged_versions]
        body: list[str] = [f"def {fname}(r):"]
        # values: py_name -> local variable name
        for run, f in self._segments(present):
            if run:
                st = self._run_struct(run)
                layout, off = [], 0
                for g in run:
                    layout.append((g.py_name, off, FIXED_TYPES[g.type][1]))
                    off += FIXED_TYPES[g.type][1]
                sn = self.const(st)
                ln = self.const(tuple(layout))
                names = ", ".join(f"v_{g.py_name}" for g in run)
                body += [
                    "    p = r.pos",
                    f"    if p + {st.size} > r.end: raise _trunc(r, p, {ln})",
                    f"    {names}{',' if len(run) == 1 else ''} = {sn}.unpack_from(r.data, p)",
                    f"    r.pos = p + {st.size}",
                ]
                for g in run:
                    if g.type == "uuid":
                        body.append(f"    v_{g.py_name} = _mkuuid(v_{g.py_name})")
                continue
            body += ["    " + line for line in self.read_field(f, f"v_{f.py_name}")]
        if self.flexible:
            if tagged:
                readers = {}
                for f in tagged:
                    rn = self.name("t")
                    sub = [f"def {rn}(r):"] + ["    " + ln for ln in self.read_field(f, "x")]
                    sub.append(f"    return {f.py_name!r}, x")
                    self.lines += sub
                    readers[f.tag] = rn
                rmap = "{" + ", ".join(f"{t}: {n}" for t, n in readers.items()) + "}"
                body.append(f"    known, unknown = _read_tags(r, {rmap})")
            else:
                body += [
                    "    if r.pos < r.end and r.data[r.pos] == 0:",
                    "        r.pos += 1",
                    "        unknown = {}",
                    "    else:",
                    "        known, unknown = _read_tags(r, {})",
                ]
        cn = self.const(cls)
        body.append(f"    o = _new({cn})")
        defaults = cls._defaults
        tag_by_name = {f.py_name: f for f in tagged}
        present_names = {f.py_name for f in present}
        for py in cls._fields:
            if py == cls._tags_attr:
                body.append(f"    o.{py} = unknown" if self.flexible else f"    o.{py} = {{}}")
                continue
            if py in present_names:
                body.append(f"    o.{py} = v_{py}")
                continue
            mutable, val = defaults[py]
            dflt = f"{self.const(val)}()" if mutable else self.const(val)
            if py in tag_by_name:
                t = tag_by_name[py].tag
                body.append(f"    o.{py} = known[{t}] if {t} in known else {dflt}")
            else:
                body.append(f"    o.{py} = {dflt}")
        body.append("    return o")
        self.lines += body
        return fname

    def read_field(self, f: FieldSpec, var: str) -> list[str]:
        """Lines (unindented) reading field ``f`` into ``var``."""
        compact = self._compact(f)
        nullable = self._nullable(f)
        name = f.py_name
        t = f.type
        if f.is_array:
            et = f.element_type
            out = [f"n = r.array_length({name!r}, compact={compact}, nullable={nullable})"]
            out.append("if n is None:")
            out.append(f"    {var} = None")
            out.append("else:")
            if et in FIXED_TYPES and et not in ("uuid", "bool"):
                fmt, size = FIXED_TYPES[et]
                out.append(f"    {var} = _read_int_array(r, {fmt[1:]!r}, {size}, n, {name!r})")
                return out
            if f.struct is not None:
                sub_cls = self.cls._struct_classes[f.struct]
                dn = self.decoder(f.fields, sub_cls)
                elem = f"{dn}(r)"
            else:
                elem_f = FieldSpec(name=f.name, py_name=f.py_name, type=et, versions=f.versions,
                                   nullable_versions=frozenset(), tagged_versions=frozenset(),
                                   tag=None, default=None, ignorable=False,
                                   flexible_versions=f.flexible_versions, struct=None, fields=None)
                rn = self.name("e")
                self.lines += [f"def {rn}(r):"] + ["    " + ln for ln in self.read_field(elem_f, "x")]
                self.lines.append("    return x")
                elem = f"{rn}(r)"
            out += [
                f"    {var} = []",
                "    i = 0",
                "    try:",
                "        for i in range(n):",
                f"            {var}.append({elem})",
                "    except DecodeError as e:",
                f"        raise e.within(f'{name}[{{i}}]') from None",
            ]
            return out
        if f.struct is not None:
            sub_cls = self.cls._struct_classes[f.struct]
            dn = self.decoder(f.fields, sub_cls)
            out = []
            if nullable:
                out += [f"if r.int8({name!r}) < 0:", f"    {var} = None", "else:"]
                ind = "    "
            else:
                ind = ""
            out += [f"{ind}try:", f"{ind}    {var} = {dn}(r)",
                    f"{ind}except DecodeError as e:", f"{ind}    raise e.within({name!r}) from None"]
            return out
        if t in FIXED_TYPES:
            meth = {"int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
                    "uint16": "uint16", "uint32": "uint32", "float64": "float64",
                    "bool": "boolean", "uuid": "uuid"}[t]
            return [f"{var} = r.{meth}({name!r})"]
        if t == "string":
            meth = ("compact_" if compact else "") + ("nullable_" if nullable else "") + "string"
            return [f"{var} = r.{meth}({name!r})"]
        if t in ("bytes", "records"):
            if compact:
                meth = "compact_nullable_bytes" if nullable else "compact_bytes"
            else:
                meth = "nullable_bytes" if nullable else "bytes_"
            return [f"{var} = r.{meth}({name!r})"]
        raise AssertionError(f"unknown type {t}")

    # -- encode ----------------------------------------------------------
    def encoder(self, fields: tuple[FieldSpec, ...], cls: type) -> str:
        v = self.version
        fname = self.name("w")
        body = [f"def {fname}(o, w):", "    out = w.out"]
        present = [f for f in fields if v in f.versions and v not in f.tagged_versions]
        tagged = [f for f in fields if v in f.tagged_versions]
        present_names = {f.py_name for f in present} | {f.py_name for f in tagged}
        # Fields this version cannot carry must hold their default.
        for py, f in cls._field_specs.items():
            if py in present_names or f.ignorable:
                continue
            mutable, val = cls._defaults[py]
            dflt = f"{self.const(val)}()" if mutable else self.const(val)
            msg = (f"{cls.__qualname__}.{py} is not supported in version {v} "
                   f"(it exists in versions {_fmt_versions(f.versions)}); leave it at its default")
            body.append(f"    if o.{py} != {dflt}: raise EncodeError({msg!r})")
        for run, f in self._segments(present):
            if run:
                sn = self.const(self._run_struct(run))
                args = ", ".join(f"o.{g.py_name}.bytes" if g.type == "uuid" else f"o.{g.py_name}"
                                 for g in run)
                names = self.const(tuple(g.py_name for g in run))
                fmts = self.const(tuple(FIXED_TYPES[g.type][0] for g in run))
                body += [
                    "    try:",
                    f"        out += {sn}.pack({args})",
                    "    except (struct.error, AttributeError, TypeError):",
                    f"        raise _bad_pack(o, {names}, {fmts}, {v}) from None",
                ]
                continue
            body += ["    " + ln for ln in self.write_field(f, f"o.{f.py_name}", cls)]
        if self.flexible:
            tags = cls._tags_attr
            if tagged:
                body.append("    known = {}")
                for f in sorted(tagged, key=lambda g: g.tag):
                    mutable, val = cls._defaults[f.py_name]
                    dflt = f"{self.const(val)}()" if mutable else self.const(val)
                    body += [
                        f"    if o.{f.py_name} != {dflt}:",
                        "        w2 = Writer()",
                        "        _save, w = w, w2",
                        "        out = w.out",
                    ]
                    body += ["        " + ln for ln in self.write_field(f, f"o.{f.py_name}", cls)]
                    body += [
                        "        w = _save",
                        "        out = w.out",
                        f"        known[{f.tag}] = bytes(w2.out)",
                    ]
                body.append(f"    _write_tags(w, known, o.{tags})")
            else:
                body += [f"    if o.{tags}:", f"        _write_tags(w, {{}}, o.{tags})",
                         "    else:", "        out.append(0)"]
        self.lines += body
        return fname

    def write_field(self, f: FieldSpec, expr: str, cls: type) -> list[str]:
        compact = self._compact(f)
        nullable = self._nullable(f)
        t = f.type
        out: list[str] = []
        where = f"{cls.__qualname__}.{f.py_name}"
        null_msg = f"{where} is null, but version {self.version} does not allow null"
        if nullable:
            pass
        elif (f.is_array or f.struct is not None or t in ("string", "bytes", "records")):
            out.append(f"if {expr} is None: raise EncodeError({null_msg!r})")
        if f.is_array:
            et = f.element_type
            out.append(f"x = {expr}")
            if nullable:
                out += ["if x is None:", f"    w.array_length(None, compact={compact})", "else:"]
            else:
                out.append("if True:")
            out.append(f"    w.array_length(len(x), compact={compact})")
            if f.struct is not None:
                wn = self.encoder(f.fields, self.cls._struct_classes[f.struct])
                out += ["    for y in x:", f"        {wn}(y, w)"]
            elif et in FIXED_TYPES:
                fmt, _ = FIXED_TYPES[et]
                if et == "uuid":
                    out += ["    for y in x:", "        out += y.bytes"]
                else:
                    out += ["    try:",
                            f"        out += struct.pack('>%d{fmt[1:]}' % len(x), *x)",
                            "    except struct.error as e:",
                            f"        raise EncodeError({where!r} + ': ' + str(e)) from None"]
            else:
                elem_f = FieldSpec(name=f.name, py_name=f.py_name, type=et, versions=f.versions,
                                   nullable_versions=frozenset(), tagged_versions=frozenset(),
                                   tag=None, default=None, ignorable=False,
                                   flexible_versions=f.flexible_versions, struct=None, fields=None)
                out += ["    for y in x:"] + ["        " + ln for ln in
                                              self.write_field(elem_f, "y", cls)]
            return out
        if f.struct is not None:
            wn = self.encoder(f.fields, self.cls._struct_classes[f.struct])
            if nullable:
                out += [f"if {expr} is None:", "    out.append(0xff)", "else:",
                        "    out.append(1)", f"    {wn}({expr}, w)"]
            else:
                out.append(f"{wn}({expr}, w)")
            return out
        if t in FIXED_TYPES:
            meth = {"int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
                    "uint16": "uint16", "uint32": "uint32", "float64": "float64",
                    "bool": "boolean", "uuid": "uuid"}[t]
            return out + [f"w.{meth}({expr})"]
        if t == "string":
            meth = ("compact_" if compact else "") + ("nullable_" if nullable else "") + "string"
            if not compact:
                return out + [f"w.{meth}({expr})"]
            return out + [f"w.{meth}({expr})"]
        if t in ("bytes", "records"):
            if compact:
                meth = "compact_nullable_bytes" if nullable else "compact_bytes"
            else:
                meth = "nullable_bytes" if nullable else "bytes_"
            return out + [f"w.{meth}({expr})"]
        raise AssertionError(f"unknown type {t}")

    def build(self) -> tuple[Any, Any]:
        dn = self.decoder(self.spec.fields, self.cls)
        wn = self.encoder(self.spec.fields, self.cls)
        src = "\n".join(self.lines) + "\n"
        exec(compile(src, f"<kctl codec {self.spec.name} v{self.version}>", "exec"), self.env)  # noqa: S102
        self.source = src
        return self.env[dn], self.env[wn]


def _fmt_versions(vs: frozenset[int]) -> str:
    s = sorted(vs)
    parts, lo, prev = [], s[0], s[0]
    for x in s[1:]:
        if x == prev + 1:
            prev = x
            continue
        parts.append(f"{lo}-{prev}" if lo != prev else str(lo))
        lo = prev = x
    parts.append(f"{lo}-{prev}" if lo != prev else str(lo))
    return ",".join(parts)


_CODECS: dict[tuple[type, int], tuple[Any, Any]] = {}


def _codec(cls: type, version: int) -> tuple[Any, Any]:
    key = (cls, version)
    c = _CODECS.get(key)
    if c is None:
        spec = cls._spec
        if spec is None:
            raise TypeError(f"{cls.__qualname__} is a struct, not a message")
        if version not in spec.valid_versions:
            raise EncodeError(f"{spec.name} has no version {version} "
                              f"(valid: {_fmt_versions(spec.valid_versions)})")
        c = _CODECS[key] = _Compiler(spec, version).build()
    return c


def codec_source(cls: type, version: int) -> str:
    """The generated Python source of a codec (for debugging and docs)."""
    c = _Compiler(cls._spec, version)
    c.build()
    return c.source


# --------------------------------------------------------------------------
# public codec API
# --------------------------------------------------------------------------

def encode_into(w: Writer, msg: Message, version: int) -> None:
    """Appends the body of ``msg`` at ``version`` to ``w``."""
    _, enc = _codec(type(msg), version)
    try:
        enc(msg, w)
    except EncodeError:
        raise
    except (AttributeError, TypeError, ValueError, struct.error, OverflowError) as e:
        raise EncodeError(f"cannot encode {type(msg).__qualname__} v{version}: {e}") from None


def encode(msg: Message, version: int) -> bytes:
    """The body of ``msg`` at ``version`` (no header, no size prefix)."""
    w = Writer()
    encode_into(w, msg, version)
    return bytes(w.out)


def decode_from(r: Reader, cls: type, version: int) -> Message:
    """Decodes one ``cls`` at ``version`` from ``r``, advancing it; trailing bytes allowed."""
    try:
        dec, _ = _codec(cls, version)
    except EncodeError as e:
        raise DecodeError(str(e), offset=r.offset()) from None
    try:
        return dec(r)
    except DecodeError:
        raise
    except (struct.error, ValueError, IndexError, OverflowError, UnicodeDecodeError) as e:
        raise DecodeError(f"malformed {cls.__qualname__} v{version}: {e}",
                          offset=r.offset()) from None


def decode(cls: type, version: int, data: bytes | bytearray | memoryview, offset: int = 0) -> Message:
    """Decodes the body in ``data[offset:]``; it must use every byte."""
    r = Reader(data, offset)
    msg = decode_from(r, cls, version)
    if r.pos != r.end:
        raise DecodeError(f"{r.end - r.pos} trailing bytes after {cls.__qualname__} v{version}",
                          offset=r.offset())
    return msg


@dataclass(frozen=True, slots=True)
class Request:
    header: Message   # RequestHeader
    body: Message


@dataclass(frozen=True, slots=True)
class Response:
    header: Message   # ResponseHeader
    body: Message


def encode_request(api_key: int, api_version: int, correlation_id: int,
                   client_id: str | None, body: Message) -> bytes:
    """Header + body of a request (no 4-byte size prefix)."""
    api = _api(api_key)
    if type(body) is not _CLASSES[api.request.name]:
        raise EncodeError(f"body is {type(body).__qualname__}, API {api_key} needs {api.request.name}")
    hv = _schema.request_header_version(api_key, api_version)
    header = RequestHeader(request_api_key=api_key, request_api_version=api_version,
                           correlation_id=correlation_id)
    if hv >= 1:  # header v0 (ControlledShutdown v0) has no client id
        header.client_id = client_id
    w = Writer()
    encode_into(w, header, hv)
    encode_into(w, body, api_version)
    return bytes(w.out)


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Message) -> bytes:
    """Header + body of a response (no 4-byte size prefix)."""
    header = ResponseHeader(correlation_id=correlation_id)
    w = Writer()
    encode_into(w, header, _schema.response_header_version(api_key, api_version))
    encode_into(w, body, api_version)
    return bytes(w.out)


def decode_request(data: bytes | bytearray | memoryview) -> Request:
    """A whole request frame (without the size prefix): header, then body."""
    r = Reader(data)
    api_key = r.int16("request_api_key")
    api_version = r.int16("request_api_version")
    api = _schema.API_BY_KEY.get(api_key)
    if api is None:
        raise DecodeError(f"unknown API key {api_key}", offset=0, field="request_api_key")
    if api_version not in api.request.valid_versions:
        raise DecodeError(f"{api.name} has no version {api_version}", offset=2,
                          field="request_api_version")
    r.pos = 0
    header = decode_from(r, RequestHeader, _schema.request_header_version(api_key, api_version))
    body = decode_from(r, _CLASSES[api.request.name], api_version)
    if r.pos != r.end:
        raise DecodeError(f"{r.end - r.pos} trailing bytes after {api.request.name} v{api_version}",
                          offset=r.offset())
    return Request(header, body)


def decode_response(data: bytes | bytearray | memoryview, api_key: int, api_version: int) -> Response:
    """A whole response frame (without the size prefix) to a request of ``api_key`` v``api_version``."""
    api = _api(api_key)
    r = Reader(data)
    header = decode_from(r, ResponseHeader, _schema.response_header_version(api_key, api_version))
    body = decode_from(r, _CLASSES[api.response.name], api_version)
    if r.pos != r.end:
        raise DecodeError(f"{r.end - r.pos} trailing bytes after {api.response.name} v{api_version}",
                          offset=r.offset())
    return Response(header, body)


def peek_correlation_id(data: bytes | bytearray | memoryview, *, request: bool = False) -> int:
    """The correlation id of a response frame (offset 0), or of a request frame
    (offset 4) with ``request=True``, without decoding anything else."""
    return Reader(data, 4 if request else 0).int32("correlation_id")


# --------------------------------------------------------------------------
# JSON view
# --------------------------------------------------------------------------

def in_version(msg: Message, py_name: str, version: int) -> bool:
    """Whether field ``py_name`` of ``msg`` exists in ``version`` of its message (on the wire,
    or as a tagged field of that version)."""
    spec = type(msg)._field_specs.get(py_name)  # type: ignore[attr-defined]
    return spec is not None and version in spec.versions


#: (class, version) -> ((field, tagged default or _MISSING), ...): what ``present_fields`` checks.
_PRESENT: dict[tuple[type, int], tuple[tuple[str, Any], ...]] = {}


def _present_plan(cls: type, version: int) -> tuple[tuple[str, Any], ...]:
    plan = _PRESENT.get((cls, version))
    if plan is None:
        specs, defaults = cls._field_specs, cls._defaults  # type: ignore[attr-defined]
        out: list[tuple[str, Any]] = []
        for f in cls._fields:
            if f == cls._tags_attr:
                out.append((f, None))
                continue
            spec = specs[f]
            if version not in spec.versions:
                continue
            if version in spec.tagged_versions:
                mutable, val = defaults[f]
                out.append((f, (mutable, val)))
            else:
                out.append((f, _MISSING))
        plan = _PRESENT[(cls, version)] = tuple(out)
    return plan


def present_fields(msg: Message, version: int) -> Iterator[str]:
    """The fields of ``msg`` a frame of ``version`` carries, in schema order: those the
    version has, a tagged one only when its value is not its default (a writer leaves a
    tagged field out when it holds its default, so the decoded object cannot tell an absent
    tag from one sent with the default value), then the unknown tagged fields when any."""
    for f, tagged in _present_plan(type(msg), version):
        if tagged is _MISSING:
            yield f
        elif tagged is None:            # the unknown tagged fields
            if getattr(msg, f):
                yield f
        else:
            mutable, val = tagged
            if getattr(msg, f) != (val() if mutable else val):
                yield f


def to_jsonable(value: Any, version: int | None = None) -> Any:
    """A JSON-friendly view: messages -> dicts, bytes -> {"$base64": ...}, UUID -> str.
    With ``version`` (the frame's API version), only the fields that version carries
    (``present_fields``); without it, every field of the class (the union of all versions)."""
    if isinstance(value, Message):
        out: dict[str, Any] = {}
        names = value._fields if version is None else present_fields(value, version)
        for f in names:
            v = getattr(value, f)
            if f == value._tags_attr:
                if v:
                    out[f] = {str(k): {"$base64": base64.b64encode(b).decode()} for k, b in v.items()}
                continue
            out[f] = to_jsonable(v, version)
        return out
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$base64": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, _uuid.UUID):
        return str(value)
    if isinstance(value, list):
        return [to_jsonable(v, version) for v in value]
    return value
