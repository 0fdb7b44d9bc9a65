"""Conf-KV's ranker: an EMA of attention mass blended with recency."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from confkv.params import param
from confkv.rankers.base import Ranker, recency


@dataclass
class EMARanker(Ranker):
    """Conf-KV: `alpha * EMA(attention mass) + (1 - alpha) * recency`.

    The EMA is normalised by its per-head maximum so both terms live in [0, 1]. A new token starts at the mean EMA
    of its head (not 0), so it is not the first to go before it had a chance to be attended (the H2O failure): a
    prefill chunk's tokens at the mean just before the chunk, a decoded token at the mean as of the last eviction
    pass or chunk (at most `slack + 1` steps stale). Why stale for decode: a per-step mean was about a fifth of a
    decode step's per-layer bookkeeping, and a decoded token sits in the protected window for `protect` steps, by
    which time its seed has decayed by `decay ** protect` (0.9 ** 64 = 0.001).
    """

    alpha: float = param(0.5, 0.0, 1.0)
    decay: float = param(0.9, 0.0, 1.0, key="ema_decay")

    def seed_value(self, acc: torch.Tensor | None) -> torch.Tensor | None:
        return None if acc is None or acc.shape[-1] == 0 else acc.mean(dim=-1, keepdim=True)

    def accumulate(self, acc: torch.Tensor, mass: torch.Tensor, queries: int = 1) -> torch.Tensor:
        """One EMA update per attention call (a prefill chunk's mean mass counts once, like a decode step)."""
        return acc.lerp_(mass, 1.0 - self.decay)

    def accumulate_all(self, pairs: list[tuple[torch.Tensor, torch.Tensor]], queries: int = 1) -> None:
        if pairs:
            torch._foreach_lerp_([a for a, _ in pairs], [m for _, m in pairs], 1.0 - self.decay)

    def rank(self, acc: torch.Tensor, pos: torch.Tensor, now: int, protected: torch.Tensor | None = None) -> torch.Tensor:
        # Normalised over the evictable slots: the sinks draw most of the mass, and dividing by their EMA would
        # squash every candidate's EMA term towards 0 and leave recency to decide alone.
        top = (acc if protected is None else acc.masked_fill(protected, 0.0)).amax(dim=-1, keepdim=True)
        ema = acc / top.clamp_min(1e-12)
        return self.alpha * ema + (1.0 - self.alpha) * recency(pos, now, protected)
