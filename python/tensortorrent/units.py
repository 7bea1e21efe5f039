"""Human-readable quantities for reports."""

from __future__ import annotations


def format_bytes(count: int) -> str:
    """1536 -> '1.5 KiB'."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
