"""What every trace plot shares: one colour per policy across plots, a readable byte unit, and saving a figure.

Public and apart from `traces.report` because `traces.forced` draws its frontier with them too, and `report` imports
`forced`: here, below both, the helpers make no import cycle. Light to import (matplotlib is only a type here).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from traces.summary import BASELINE_POLICY

if TYPE_CHECKING:
    from matplotlib.figure import Figure

_PALETTE = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive")


def policy_colors(policies: Iterable[str]) -> dict[str, str]:
    """The same colour for a policy in every plot: baseline first, then alphabetical."""
    order = sorted(set(policies), key=lambda p: (p != BASELINE_POLICY, p))
    return {p: _PALETTE[i % len(_PALETTE)] for i, p in enumerate(order)}


def byte_scale(values: Iterable[float]) -> tuple[float, str]:
    """Divisor and unit so the largest value reads naturally."""
    top = max(values, default=0)
    for divisor, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if top >= divisor:
            return float(divisor), unit
    return 1.0, "B"


def save_figure(fig: Figure, path: Path) -> Path:
    """Lay out and write `fig` as a PNG at `path` (parent folders created); returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path
