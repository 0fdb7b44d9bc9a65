"""Human formatting shared by the ls table, the replay header and the eval summary table."""

from __future__ import annotations


def format_bytes(n: float | None) -> str:
    """Binary units with three significant digits ("1.50 MiB"); "-" for unknown."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.3g} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def format_ratio(x: float | None, *, percent: bool = False) -> str:
    """A ratio as "0.42" or "42%"; "-" when it is undefined (no baseline)."""
    if x is None:
        return "-"
    return f"{100 * x:.0f}%" if percent else f"{x:.2f}"


def truncate(text: str | None, limit: int) -> str:
    """One-line preview of a long string, marking the cut."""
    if not text:
        return ""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: max(limit - 1, 0)] + "…"
