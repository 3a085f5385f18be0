"""The one way kctl reads durations and rates, for every command, option and file.

Durations: ``500ms``, ``5s``, ``1m30s``, ``2h``, ``1h2m3.5s``, ``250us``, or a bare
number of seconds (``90``, ``0.25``). Units may be combined, largest first, each at
most once. Rates: records (or bytes) per second as a number with an optional SI
suffix (``5000``, ``5k``, ``1.5M``, ``2G``) and an optional ``/s``, or ``max`` (as
fast as possible, also written ``0``). Byte rates also take binary suffixes
(``10MiB``, ``512KiB``) and decimal byte suffixes (``10MB``, ``100kB``).

Every bad value raises ``ConfigError`` naming the option and showing what is allowed,
so the command prints one line.
"""

from __future__ import annotations

import re

from kctl.errors import ConfigError

__all__ = ["MAX_RATE", "parse_byte_rate", "parse_duration", "parse_rate", "parse_warmup"]

#: What ``parse_rate`` returns for ``max``: no schedule, as fast as possible.
MAX_RATE = 0.0

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(h|ms|us|µs|m|s)")
_NUMBER = re.compile(r"[+]?(\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6}
_ORDER = ("h", "m", "s", "ms", "us")
_DURATION_HELP = "a duration such as 500ms, 5s, 1m30s, 2h or a number of seconds"


def parse_duration(text: str | float | int, what: str) -> float:
    """``"1m30s"`` -> 90.0 seconds. A bare number is seconds. Never negative."""
    if isinstance(text, bool):
        raise ConfigError(f"{what} must be {_DURATION_HELP}, not {text!r}")
    if isinstance(text, int | float):
        seconds = float(text)
    else:
        t = text.strip().replace(" ", "")
        if _NUMBER.fullmatch(t):
            seconds = float(t)
        else:
            seconds = 0.0
            pos = 0
            last = -1
            for m in _DURATION_PART.finditer(t):
                unit = "us" if m.group(2) == "µs" else m.group(2)
                rank = _ORDER.index(unit)
                if m.start() != pos or rank <= last:
                    break
                seconds += float(m.group(1)) * _UNIT_S[unit]
                pos, last = m.end(), rank
            if not t or pos != len(t):
                raise ConfigError(f"{what} must be {_DURATION_HELP}, not {text!r}")
    if seconds < 0 or seconds != seconds or seconds == float("inf"):
        raise ConfigError(f"{what} must be {_DURATION_HELP}, not {text!r}")
    return seconds


def parse_warmup(text: str | None, what: str = "--warmup") -> tuple[int, float]:
    """``--warmup``: a bare whole number is records, anything with a unit is time.
    Returns ``(records, seconds)``; one of them is 0."""
    if text is None or str(text).strip() == "":
        return 0, 0.0
    t = str(text).strip()
    if t.isdigit():
        return int(t), 0.0
    return 0, parse_duration(t, what)


def check_warmup_within(warmup_s: float, duration_s: float | None, warmup: str | None,
                        duration: str | None) -> None:
    """``--duration`` includes the warm-up (produce, consume): a warm-up as long as the
    run would leave nothing measured, so it is refused."""
    if duration_s is not None and warmup_s > 0 and warmup_s >= duration_s:
        given = duration if duration is not None else f"{duration_s:g}s (the default)"
        raise ConfigError(f"--warmup {warmup} is not shorter than --duration {given}: --duration "
                          "includes the warm-up, so nothing would be measured")

_SI = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9}
_RATE = re.compile(r"(?P<num>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(?P<si>[kKMG]?)\s*(?:/s)?")
_BYTE_UNITS = {"": 1, "B": 1, "kB": 1000, "KB": 1000, "MB": 1000**2, "GB": 1000**3,
               "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "k": 1000, "K": 1000, "M": 1000**2,
               "G": 1000**3}
_BYTE_RATE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([kKMG]i?B|[kKMG]B|B|[kKMG])?\s*(?:/s)?")


def parse_rate(text: str | float | int | None, what: str, *, unit: str = "records") -> float:
    """Records/s: ``"5000"``, ``"5k"``, ``"1.5M/s"``; ``"max"`` or ``0`` -> ``MAX_RATE``."""
    if text is None:
        return MAX_RATE
    allowed = (f"{unit}/s such as 5000, 5k or 1.5M, or max (as fast as possible)")
    if isinstance(text, bool):
        raise ConfigError(f"{what} must be {allowed}, not {text!r}")
    if isinstance(text, int | float):
        value = float(text)
    else:
        t = text.strip()
        if t.lower() == "max":
            return MAX_RATE
        m = _RATE.fullmatch(t)
        if not m:
            raise ConfigError(f"{what} must be {allowed}, not {text!r}")
        value = float(m.group("num")) * _SI[m.group("si")]
    if value < 0 or value != value or value == float("inf"):
        raise ConfigError(f"{what} must be {allowed}, not {text!r}")
    return value


def parse_byte_rate(text: str | float | int | None, what: str) -> float:
    """Bytes/s: ``"200000"``, ``"10MB"`` (10^7), ``"10MiB"`` (10 x 2^20), ``"5k/s"``; 0: not set."""
    if text is None:
        return 0.0
    allowed = "bytes/s such as 200000, 100kB, 10MB or 10MiB"
    if isinstance(text, bool):
        raise ConfigError(f"{what} must be {allowed}, not {text!r}")
    if isinstance(text, int | float):
        value = float(text)
    else:
        m = _BYTE_RATE.fullmatch(text.strip())
        if not m:
            raise ConfigError(f"{what} must be {allowed}, not {text!r}")
        value = float(m.group(1)) * _BYTE_UNITS[m.group(2) or ""]
    if value < 0 or value != value or value == float("inf"):
        raise ConfigError(f"{what} must be {allowed}, not {text!r}")
    return value
