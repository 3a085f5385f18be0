"""The HdrHistogram interval log (``.hlog``), one tag per clock.

Format (HdrHistogram log format 1.3, as Java's ``HistogramLogWriter`` writes it)::

    #[Logged with kctl 0.1.0]
    #[Histogram log format version 1.3]
    #[StartTime: 1700000000.000 (seconds since epoch), 2023-11-14T22:13:20+00:00]
    #[BaseTime: 1700000000.000 (seconds since epoch)]
    #[Values in microseconds; Interval_Max in milliseconds]
    "StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"
    Tag=intended,0.000,1.000,12.345,HISTFAAAA...
    Tag=send,0.000,1.000,3.210,HISTFAAAA...

Timestamps are seconds relative to BaseTime (= StartTime, the run's start). Values are
MICROseconds; ``Interval_Max`` is the interval's max divided by ``max_value_unit_ratio``
(1000: milliseconds). With Java's HistogramLogProcessor pass
``-outputValueUnitRatio 1000`` to see milliseconds.

hdrh 0.10.8's ``HistogramLogWriter`` cannot write tags and its ``output_start_time()``
crashes (``datetime.iso_format``), so the lines are written here; tests read them back
with hdrh's own ``HistogramLogReader``.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader

from kctl import __version__
from kctl.stats.latency import encode_histogram, new_histogram

__all__ = ["IntervalLogWriter", "LoggedInterval", "read_interval_log"]

LOG_FORMAT_VERSION = "1.3"


class IntervalLogWriter:
    """Writes the header at once, then ``output(tag, start, end, histogram)`` per interval."""

    def __init__(self, out: TextIO, start_wall_ns: int, *, comment: str | None = None,
                 max_value_unit_ratio: float = 1000.0, close_out: bool = False) -> None:
        self._out = out
        self._close_out = close_out
        # kctl produce --consume writes the producer's clocks and e2e from two threads.
        self._lock = threading.Lock()
        # Java's HistogramLogWriter takes its start and base times in whole milliseconds
        # (currentTimeMillis: truncated) and prints them exactly; the summary JSON's
        # start_unix_ms truncates the same start_wall_ns, so both name the same instant.
        start_ms = start_wall_ns // 1_000_000
        self.base_wall_ns = start_ms * 1_000_000
        self.max_value_unit_ratio = max_value_unit_ratio
        self.lines = 0
        secs = f"{start_ms // 1000}.{start_ms % 1000:03d}"
        iso = datetime.fromtimestamp(start_ms / 1000, UTC).isoformat(timespec="milliseconds")
        w = out.write
        w(f"#[Logged with kctl {__version__}]\n")
        w(f"#[Histogram log format version {LOG_FORMAT_VERSION}]\n")
        w(f"#[StartTime: {secs} (seconds since epoch), {iso}]\n")
        w(f"#[BaseTime: {secs} (seconds since epoch)]\n")
        w("#[Values in microseconds; Interval_Max in milliseconds]\n")
        if comment:
            self.output_comment(comment)
        w('"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"\n')

    @classmethod
    def open(cls, path: str | Path, start_wall_ns: int, **kwargs) -> IntervalLogWriter:
        return cls(open(path, "w", encoding="utf-8"), start_wall_ns,  # noqa: SIM115
                   close_out=True, **kwargs)

    def output_comment(self, comment: str) -> None:
        for line in comment.splitlines():
            self._out.write(f"#{line}\n")

    def output(self, tag: str, start_wall_ns: int, end_wall_ns: int, histogram: HdrHistogram) -> None:
        if "," in tag or any(c.isspace() for c in tag):
            raise ValueError(f"hlog tag must not contain commas or spaces: {tag!r}")
        # An interval that began a little before the log's base time (a worker whose
        # clock read came first) starts at 0: HdrHistogram readers skip negative starts.
        start_wall_ns = max(start_wall_ns, self.base_wall_ns)
        start_s = (start_wall_ns - self.base_wall_ns) / 1e9
        length_s = max(0, end_wall_ns - start_wall_ns) / 1e9
        max_v = histogram.get_max_value() / self.max_value_unit_ratio
        payload = encode_histogram(histogram).decode("ascii")
        with self._lock:
            self._out.write(f"Tag={tag},{start_s:.3f},{length_s:.3f},{max_v:.3f},{payload}\n")
            self.lines += 1

    def flush(self) -> None:
        with self._lock:
            self._out.flush()

    def close(self) -> None:
        if self._close_out:
            self._out.close()
        else:
            self._out.flush()

    def __enter__(self) -> IntervalLogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LoggedInterval:
    """One interval line read back: tag, absolute start and end (s since epoch), histogram."""

    __slots__ = ("tag", "start_s", "end_s", "histogram")

    def __init__(self, tag: str | None, start_s: float, end_s: float, histogram: HdrHistogram) -> None:
        self.tag = tag
        self.start_s = start_s
        self.end_s = end_s
        self.histogram = histogram

    def __repr__(self) -> str:
        return (f"LoggedInterval({self.tag}, {self.start_s:.3f}..{self.end_s:.3f}, "
                f"count={self.histogram.get_total_count()})")


class HlogDamaged(Exception):
    """An interval line hdrh cannot read: its line number (1-based), whether it is the file's
    last interval line (a log cut short while written), the whole intervals before it, and
    hdrh's error."""

    def __init__(self, line: int, last: bool, before: list[LoggedInterval], error: Exception) -> None:
        super().__init__(f"line {line}: {type(error).__name__}: {error}")
        self.line, self.last, self.before, self.error = line, last, before, error


def _interval_lines(path: str | Path) -> list[int]:
    """The 1-based numbers of the interval lines (not comments, the CSV header, or blank)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        return [n for n, text in enumerate(f, 1)
                if text.strip() and not text.startswith(("#", '"StartTimestamp"', "StartTimestamp"))]


def read_interval_log(path: str | Path) -> list[LoggedInterval]:
    """Every interval in an ``.hlog``, read with hdrh's own reader. A line hdrh cannot
    read raises ``HlogDamaged`` naming it (UnicodeDecodeError: the file is not text)."""
    reader = HistogramLogReader(str(path), new_histogram())
    out: list[LoggedInterval] = []
    try:
        while (h := reader.get_next_interval_histogram()) is not None:
            out.append(LoggedInterval(h.get_tag(), h.get_start_time_stamp() / 1000.0,
                                      h.get_end_time_stamp() / 1000.0, h))
    except UnicodeDecodeError:
        raise
    except Exception as e:  # hdrh raises assorted errors on damaged input
        lines = _interval_lines(path)
        if len(out) >= len(lines):
            raise
        raise HlogDamaged(lines[len(out)], len(out) == len(lines) - 1, out, e) from None
    finally:
        reader.close()
    return out
