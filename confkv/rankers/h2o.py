"""H2O's heavy-hitter ranker."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from confkv.rankers.base import Ranker


@dataclass
class H2ORanker(Ranker):
    """H2O heavy hitters: cumulative attention mass since the token arrived, summed over every query (so a
    128-token prefill chunk weighs 128 decode steps, as in H2O, not one)."""

    def accumulate(self, acc: torch.Tensor, mass: torch.Tensor, queries: int = 1) -> torch.Tensor:
        return acc.add_(mass, alpha=float(queries))

    def accumulate_all(self, pairs: list[tuple[torch.Tensor, torch.Tensor]], queries: int = 1) -> None:
        if pairs:
            torch._foreach_add_([a for a, _ in pairs], [m for _, m in pairs], alpha=float(queries))

    def rank(self, acc: torch.Tensor, pos: torch.Tensor, now: int, protected: torch.Tensor | None = None) -> torch.Tensor:
        return acc
