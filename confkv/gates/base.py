"""The gate interface: how many tokens each layer may keep after a forward, decided from that forward's confidence.

A gate is a small frozen dataclass whose `param` fields are its `--set` keys with their ranges (`confkv.params`),
like a ranker, so adding one is its file plus one line in `confkv.gates.GATES`. It holds settings only:
`schedule()` builds the object that answers each forward's budget, fresh for every cache. Why two objects: a policy
is a value (compared, hashed, stored in traces), while a schedule may remember the forwards it has seen (the running
quantile, hysteresis), and two caches must not share that memory.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from confkv.budget import Hysteresis
from confkv.params import PolicyError, Range, declared, param


class Schedule(Protocol):
    """What a cache asks once per forward (`confkv.budget` holds the stock ones)."""

    def budget(self, confidence: float | None) -> int:
        """Tokens each layer keeps (before the per-layer split); `None` before any logits exist."""
        ...

    @property
    def max_budget(self) -> int: ...


class BudgetGate(ABC):
    """A gate: the settings a budget schedule is built from. Subclasses are frozen dataclasses."""

    # Whether the schedule's answer depends on each forward's own confidence. A gate that does not read it (a fixed
    # budget, the turn gate) lets a session skip the prefill chunk's confidence rows where nothing records them.
    reads_forward_confidence: ClassVar[bool] = True

    @abstractmethod
    def schedule(self) -> Schedule | None:
        """A fresh schedule for one cache; None keeps every token (nothing is ever evicted)."""

    def budgets(self) -> tuple[int, ...]:
        """Every budget the schedule may answer: each must leave room to evict after sinks and the protected window
        (`KVPolicy.validate`), so a bad size is refused before a model is loaded, not mid-run."""
        return ()

    @property
    def evicts(self) -> bool:
        return self.schedule() is not None

    def check(self) -> None:  # noqa: B027 (optional: most gates have no checks between fields)
        """Checks between this gate's own fields (each field's range is checked from its `param`)."""


@dataclass(frozen=True)
class TwoLevelGate(BudgetGate):
    """`n_high` tokens while the model is unsure, `n_low` when it is sure; a subclass says when (`inner`).

    `shrink` is hysteresis, a parameter of every two-level gate rather than a gate of its own because it changes how
    a decision is applied, not what is decided: the gate opens at once but closes by at most `shrink` tokens per
    forward (`confkv.budget.Hysteresis`), so one confident step cannot throw away everything an opening kept."""

    n_low: int = param(256, 1)
    n_high: int = param(512, 1)
    shrink: int | None = param(None, 1)

    @abstractmethod
    def inner(self) -> Schedule:
        """The open/close decision: a schedule answering `n_low` or `n_high` (with `n_low`/`n_high` attributes, which
        hysteresis reads)."""

    def schedule(self) -> Schedule:
        gate = self.inner()
        return gate if self.shrink is None else Hysteresis(gate, self.shrink)  # type: ignore[arg-type]

    def budgets(self) -> tuple[int, ...]:
        return (self.n_low, self.n_high)

    @property
    def evicts(self) -> bool:
        return True

    def check(self) -> None:
        if self.n_low > self.n_high:
            raise PolicyError(f"n_low must be <= n_high, got n_low={self.n_low} > n_high={self.n_high}")


def gate_params(cls: type[BudgetGate]) -> dict[str, tuple[dataclasses.Field, Range]]:
    """A gate class's parameters: `--set` key -> (field, range)."""
    return declared(cls) if dataclasses.is_dataclass(cls) else {}


def build_gate(cls: type[BudgetGate], values: dict[str, Any]) -> BudgetGate:
    """An instance from `--set` key -> value (keys the class does not declare are ignored: the flat namespace holds
    every registered gate's keys, and a fixed-budget policy keeps e.g. `n_low`)."""
    return cls(**{f.name: values[key] for key, (f, _rng) in gate_params(cls).items() if key in values})
