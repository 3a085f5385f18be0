"""Number formatting shared by the Rich views."""

from __future__ import annotations


def human_bytes(n: float) -> str:
    """``1536`` -> ``"1.5 KiB"``; bytes below 1 KiB as a whole number."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
