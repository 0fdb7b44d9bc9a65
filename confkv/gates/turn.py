"""The turn-level gate (issue 37): one budget decision per agent turn, from the confidence of the decision itself.

The per-forward gates read each forward's own confidence, which on an agent is mostly observation prefill: page
text the model predicts confidently, so the gate hardly ever opens where the cache grows. This gate reads what the
agent was unsure about: the caller reports each finished decision (`ConfKVCache.end_turn`, which `ModelAgent` calls
with the least confident choice of its reply), and the budget that answer sets holds until the next decision.
Without `end_turn` calls (plain generation) it is a fixed `n_high` budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from confkv.budget import TurnBudget
from confkv.gates.base import TwoLevelGate
from confkv.params import param


@dataclass(frozen=True)
class TurnGate(TwoLevelGate):
    """Unsure decision (`confidence < tau`) keeps `n_high` until the next one, sure keeps `n_low`."""

    tau: float = param(0.5, 0.0, 1.0)
    reads_forward_confidence: ClassVar[bool] = False  # it reads the decision's confidence (`end_turn`)

    def inner(self) -> TurnBudget:
        return TurnBudget(self.n_low, self.n_high, self.tau)
