"""One check of every command's output paths, before any work is done.

A file a run writes at its end (``--json-out``, ``--hdr-out``, ``--junit-xml``, a
capture) must not be lost to a typo after minutes of load: each is checked up front,
and a path that cannot be written is refused with one line naming the option (exit 2,
as every ConfigError). A file: its parent directory exists, the path is not a
directory, and the file can really be opened for writing there (it is opened for
append and, when it did not exist, removed again: a permission check alone passes
paths such as ``/proc/x.json`` that no file can be created at). A directory kctl creates (``--out``): the path is a
writable directory, or does not exist yet and its nearest existing parent is one.
URIs (``s3://``, ``hdfs://``) are the cluster's to open and are not checked here.
"""

from __future__ import annotations

import os
from pathlib import Path

from kctl.errors import ConfigError


def _is_uri(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def _local(path: str | os.PathLike) -> Path:
    text = os.fspath(path)
    return Path(text[len("file://"):] if text.startswith("file://") else text)


def check_output_file(option: str, path: str | os.PathLike | None) -> None:
    """Refuses ``path`` (given as ``option``) when a file cannot be written there."""
    if path is None or _is_uri(os.fspath(path)):
        return
    p = _local(path)
    if p.is_dir():
        raise ConfigError(f"{option} {p}: is a directory (give a file name)")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise ConfigError(f"{option} {p}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise ConfigError(f"{option} {p}: not writable")
    existed = p.exists()
    if existed and not p.is_file():
        return          # /dev/stdout, a FIFO: opening one here could block or consume it
    try:
        with open(p, "ab"):
            pass
    except OSError as e:
        raise ConfigError(f"{option} {p}: cannot be written ({e.strerror or e})") from None
    if not existed:
        try:
            p.unlink()
        except OSError:
            pass


def check_output_dir(option: str, path: str | os.PathLike | None) -> None:
    """Refuses ``path`` (given as ``option``) when kctl cannot create or write that directory."""
    if path is None or _is_uri(os.fspath(path)):
        return
    p = _local(path)
    if p.exists() and not p.is_dir():
        raise ConfigError(f"{option} {p}: exists and is not a directory")
    existing = p
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"{option} {p}: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{option} {p}: {existing} is not writable")


def check_outputs(*, files: dict[str, str | os.PathLike | None] | None = None,
                  dirs: dict[str, str | os.PathLike | None] | None = None) -> None:
    """Every output of a command at once: ``{option: path}`` for files and for directories."""
    for option, path in (files or {}).items():
        check_output_file(option, path)
    for option, path in (dirs or {}).items():
        check_output_dir(option, path)
