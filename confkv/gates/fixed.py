"""The fixed budget: the same number of tokens at every step (sliding window, H2O, `confkv-fixed`), or all of them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from confkv.budget import FixedBudget
from confkv.gates.base import BudgetGate
from confkv.params import param


@dataclass(frozen=True)
class FixedGate(BudgetGate):
    """`budget` tokens per layer whatever the confidence; None keeps every token (`full`), so one gate covers both
    ends of "no gate" and a policy without eviction needs no special case."""

    budget: int | None = param(None, 1, note=" (or None to keep every token)")
    reads_forward_confidence: ClassVar[bool] = False

    def schedule(self) -> FixedBudget | None:
        return None if self.budget is None else FixedBudget(self.budget)

    def budgets(self) -> tuple[int, ...]:
        return () if self.budget is None else (self.budget,)

    @property
    def evicts(self) -> bool:
        return self.budget is not None
