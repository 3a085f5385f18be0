"""The AppCDS archive of the driver's classes (session.class_archive_options): one per
Java and pyspark install, so a second virtualenv does not find one dumped with another
class path (the JVM would silently run without it), and a dump that lost the race to
become the archive is removed."""

from __future__ import annotations

import os
import re
import shutil
import time

import pytest

from kctl.spark import session

pyspark = pytest.importorskip("pyspark")
pytestmark = pytest.mark.skipif(shutil.which("java") is None and not os.environ.get("JAVA_HOME"),
                                reason="no java")


def _archive(options: str) -> str:
    m = re.search(r"-XX:(?:ArchiveClassesAtExit|SharedArchiveFile)=(\S+)", options)
    assert m, options
    return m.group(1)


def test_each_pyspark_install_has_its_own_archive(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("KCTL_SPARK_CDS", raising=False)
    first = _archive(session.class_archive_options())
    monkeypatch.setattr(pyspark, "__file__", str(tmp_path / "other-venv" / "pyspark" / "__init__.py"))
    other = _archive(session.class_archive_options())
    assert first.endswith(f".dump-{os.getpid()}")
    assert first.split(".jsa")[0] != other.split(".jsa")[0]


def test_a_dump_that_lost_the_race_is_removed(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("KCTL_SPARK_CDS", raising=False)
    final = _archive(session.class_archive_options()).split(".dump-")[0]
    old = time.time() - session._ARCHIVE_SETTLE_S - 5
    for name in (f"{final}.dump-1", f"{final}.dump-2"):
        with open(name, "wb") as f:
            f.write(b"x")
        os.utime(name, (old, old))
    options = session.class_archive_options()        # the first settled dump becomes the archive
    assert _archive(options) == final and "SharedArchiveFile" in options
    assert os.path.exists(final)
    assert not [p for p in os.listdir(os.path.dirname(final)) if ".dump-" in p]
