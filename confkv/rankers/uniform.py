"""The random ranker (not `random.py`, which would read as the standard library's module)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from confkv.params import param
from confkv.rankers.base import Ranker


@dataclass
class RandomRanker(Ranker):
    """Random eviction at a matched rate: the floor any informed ranker must beat. Seeded for repeatability."""

    seed: int = param(0)  # any integer torch.Generator takes
    uses_attention = False

    def __post_init__(self) -> None:
        self._gen: torch.Generator | None = None

    def rank(self, acc: torch.Tensor, pos: torch.Tensor, now: int, protected: torch.Tensor | None = None) -> torch.Tensor:
        if self._gen is None:
            self._gen = torch.Generator(device="cpu").manual_seed(self.seed)
        return torch.rand(acc.shape, generator=self._gen).to(acc.device)
