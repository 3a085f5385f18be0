"""Captures where a cluster keeps them: a plain path or any URI ``pyarrow.fs`` opens
(``file://``, ``s3://``, ``gs://``, ``hdfs://`` where the cluster has the libraries and
credentials), opened by byte range inside Spark tasks; nothing but the name is shipped.

A plain path is made absolute on the driver, so a task opens the same file whatever its
working directory (on a cluster: a file system every executor mounts at that path).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, BinaryIO

from kctl.errors import ConfigError

#: Bytes read ahead per call from the store (one request per buffer on object stores).
READ_BUFFER_BYTES = 4 << 20


@dataclass(frozen=True, slots=True)
class CaptureFile:
    """``name``: as the user gave it (rows and messages say it); ``location``: what tasks open."""

    name: str
    location: str
    size: int


def _fs(location: str) -> tuple[Any, str]:
    from pyarrow import fs
    if "://" in location:
        try:
            return fs.FileSystem.from_uri(location)
        except Exception as e:  # noqa: BLE001 - pyarrow's errors vary by store; one line each
            raise ConfigError(f"{location}: cannot open: {_one_line(e)}") from None
    return fs.LocalFileSystem(), location


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text[:300] or type(e).__name__


def locate(name: str) -> CaptureFile:
    """The capture ``name`` (path or URI), checked on the driver: it exists and is a file."""
    from pyarrow import fs
    location = name if "://" in name else os.path.abspath(name)
    filesystem, path = _fs(location)
    try:
        info = filesystem.get_file_info(path)
    except Exception as e:  # noqa: BLE001
        raise ConfigError(f"{name}: cannot open: {_one_line(e)}") from None
    if info.type == fs.FileType.NotFound:
        raise ConfigError(f"no such capture: {name}")
    if info.type != fs.FileType.File:
        raise ConfigError(f"{name}: not a file")
    return CaptureFile(name, location, int(info.size or 0))


def existing_tables(out: str, names: tuple[str, ...]) -> list[str] | None:
    """Which of ``names`` already exist under the output directory ``out`` (path or URI);
    None when the driver cannot look (a store only the cluster reaches: Spark's own save
    mode still refuses to replace them)."""
    from pyarrow import fs
    location = out if "://" in out else os.path.abspath(out)
    try:
        filesystem, path = _fs(location)
        infos = filesystem.get_file_info([f"{path.rstrip('/')}/{n}" for n in names])
    except Exception:  # noqa: BLE001 - pyarrow's errors vary by store
        return None
    return [n for n, i in zip(names, infos, strict=True) if i.type != fs.FileType.NotFound]


def open_at(location: str, offset: int = 0) -> BinaryIO:
    """A buffered reader of ``location`` from byte ``offset`` (a context manager)."""
    import pyarrow as pa
    filesystem, path = _fs(location)
    try:
        raw = filesystem.open_input_file(path)
        if offset:
            raw.seek(offset)
    except Exception as e:  # noqa: BLE001
        raise ConfigError(f"{location}: cannot open: {_one_line(e)}") from None
    return pa.BufferedInputStream(raw, READ_BUFFER_BYTES)    # type: ignore[return-value]
