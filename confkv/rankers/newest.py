"""The recency ranker (StreamingLLM's window). The module is not called `recency`: that name is the package's
`recency` helper, which a submodule of the same name would shadow."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from confkv.rankers.base import Ranker


@dataclass
class RecencyRanker(Ranker):
    """Keep the newest tokens (with sinks this is StreamingLLM's sliding window)."""

    uses_attention = False

    def rank(self, acc: torch.Tensor, pos: torch.Tensor, now: int, protected: torch.Tensor | None = None) -> torch.Tensor:
        return pos.float()
