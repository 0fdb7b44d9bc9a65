"""The paper's confidence gate: a fixed threshold `tau` on each forward's confidence."""

from __future__ import annotations

from dataclasses import dataclass

from confkv.budget import GatedBudget
from confkv.gates.base import TwoLevelGate
from confkv.params import param


@dataclass(frozen=True)
class ThresholdGate(TwoLevelGate):
    """Unsure (`confidence < tau`) keeps `n_high`, sure keeps `n_low`; before any logits, `n_high` (cautious)."""

    tau: float = param(0.5, 0.0, 1.0)

    def inner(self) -> GatedBudget:
        return GatedBudget(self.n_low, self.n_high, self.tau)
