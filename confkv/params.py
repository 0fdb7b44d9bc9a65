"""Policy parameters declared where they are used: a dataclass field carries its valid range and its `--set` key.

Why: a range written next to the default cannot drift from it, and the validator (`check_ranges`) needs no list of
keys, so a ranker or policy part that adds a parameter touches only its own file. The message names the allowed
range (`alpha must be in [0.0, 1.0], got 2.0`), which the CLI shows before anything starts.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any


class PolicyError(ValueError):
    """An unknown policy name, override key or bad value."""


@dataclass(frozen=True)
class Range:
    """Where a parameter's value may lie. None bounds are open ends; a None value is never checked (it means "off",
    e.g. `shrink=None`). `choices` replaces the numeric bounds for a string setting."""

    low: float | None = None
    high: float | None = None
    open_low: bool = False
    open_high: bool = False
    choices: tuple[str, ...] | None = None
    key: str | None = None  # the `--set` key when it differs from the field name (EMARanker.decay -> ema_decay)
    note: str = ""  # appended to the message, e.g. " (or None to disable INT8)"

    def describe(self) -> str:
        if self.choices is not None:
            return " or ".join(map(repr, self.choices))
        if self.low is None and self.high is None:
            return "a finite number"
        if self.high is None:
            return f"{'>' if self.open_low else '>='} {self.low}"
        if self.low is None:
            return f"{'<' if self.open_high else '<='} {self.high}"
        return f"in {'(' if self.open_low else '['}{self.low}, {self.high}{')' if self.open_high else ']'}"

    def contains(self, value: Any) -> bool:
        if self.choices is not None:
            return value in self.choices
        if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
            return False
        if self.low is not None and (value <= self.low if self.open_low else value < self.low):
            return False
        return self.high is None or (value < self.high if self.open_high else value <= self.high)

    def check(self, key: str, value: Any) -> None:
        if value is not None and not self.contains(value):
            raise PolicyError(f"{key} must be {self.describe()}{self.note}, got {value!r}")


def param(default: Any, low: float | None = None, high: float | None = None, *, open_low: bool = False,
          open_high: bool = False, choices: tuple[str, ...] | None = None, key: str | None = None,
          note: str = "") -> Any:
    """A dataclass field with its range: `alpha: float = param(0.5, 0.0, 1.0)`."""
    rng = Range(low, high, open_low, open_high, choices, key, note)
    return field(default=default, metadata={"range": rng})


def declared(cls_or_obj: Any) -> dict[str, tuple[dataclasses.Field, Range]]:
    """`--set` key -> (field, range) for every field declared with `param`, in declaration order."""
    out = {}
    for f in dataclasses.fields(cls_or_obj):
        rng = f.metadata.get("range")
        if rng is not None:
            out[rng.key or f.name] = (f, rng)
    return out


def check_ranges(obj: Any) -> None:
    """Every `param` field of a dataclass instance within its range."""
    for key, (f, rng) in declared(obj).items():
        rng.check(key, getattr(obj, f.name))
