"""Human formatting shared by the ls table, the replay header and the eval summary table, and the one sanitizer
for user text on its way to a terminal (`terminal_safe`)."""

from __future__ import annotations

import re


def task_order(task_id: str) -> tuple[int, int, str]:
    """Sort key for task ids in tables: numeric ids by number first, then the others (`miniwob/...`) by name."""
    return (0, int(task_id), "") if task_id.isdigit() else (1, 0, task_id)


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


# C0 controls except tab and newline, DEL, and the C1 block (U+0080-U+009F: CSI, OSC, ... on many terminals).
_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def terminal_safe(text: str) -> str:
    """`text` with every control character except newline and tab written out as a visible `\\x1b`-style escape.

    Why: intents, answers, pages and model output are data, but an ESC in them reaches the terminal as a command
    (`ESC]0;...` retitles the window, `ESC[41m` recolours, `ESC[2J` clears the screen); Rich passes ESC through
    even in `Text`. Everything that prints such text to a terminal goes through this one function."""
    return _CONTROL_CHARS.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def markdown_cell(value: object) -> str:
    """`value` as one Markdown table cell that stays data: a `|` in a task id or an answer would end the cell and
    shift every column after it, a newline would end the row, and control characters go through `terminal_safe`
    because these tables are printed to a terminal before they are pasted into docs."""
    text = str(value).replace("\r", " ").replace("\n", " ").replace("\t", " ")
    return terminal_safe(text).replace("|", "\\|")
