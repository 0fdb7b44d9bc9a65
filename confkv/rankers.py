"""Rankers: which evictable tokens are worth keeping.

The cache owns the slots; a ranker only does arithmetic on per-slot tensors of shape `[B, H_kv, T]`:
- `acc`: the ranker's accumulator (EMA or cumulative attention mass), updated after every attention call;
- `pos`: absolute positions of the kept tokens.
`rank` returns a score per slot: higher = keep. Eviction granularity is the KV head: each KV head keeps its own
top tokens (the same count for every head), and a KV head's attention mass is the mean over the query heads of its
GQA group and over the queries of the call (H2O scales it back by the call's query count: a sum over queries).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch


def recency(pos: torch.Tensor, now: int, protected: torch.Tensor | None = None) -> torch.Tensor:
    """1 for the newest kept token, falling linearly to 0 for the oldest evictable one of each head (`protected`
    slots, e.g. the sinks at positions 0..3, do not stretch the scale)."""
    if protected is not None:
        oldest = pos.masked_fill(protected, now).amin(dim=-1, keepdim=True).float()
    else:
        oldest = pos.amin(dim=-1, keepdim=True).float()
    span = (now - oldest).clamp_min(1.0)
    return (pos.float() - oldest) / span


class Ranker(ABC):
    """Scores slots; subclasses are small dataclasses so presets and `--set` overrides stay data."""

    uses_attention: bool = True

    def seed_new(self, old: torch.Tensor | None, fresh: torch.Tensor) -> None:
        """Set the accumulator of a chunk's new tokens in place (`fresh [B, H, n_new]`, zeros on arrival) to
        `seed_value(old)` (None: leave 0). `old` is the accumulator of the tokens kept before them (None if none)."""
        value = self.seed_value(old)
        if value is not None:
            fresh.copy_(value.expand_as(fresh))

    def seed_value(self, acc: torch.Tensor | None) -> torch.Tensor | None:
        """What a decoded token's accumulator starts at, `[B, H, 1]` from the kept tokens' `acc` (None: 0). Asked
        once per eviction pass and prefill chunk, not per decode step (see `KVPolicy.apply_all`)."""
        return None

    def accumulate(self, acc: torch.Tensor, mass: torch.Tensor, queries: int = 1) -> torch.Tensor:
        """Fold one attention call's mass `[B, H, T]` into the accumulator in place (default: unused). `mass` is
        the mean over the call's `queries` queries (and over the KV head's GQA group)."""
        return acc

    def accumulate_all(self, pairs: list[tuple[torch.Tensor, torch.Tensor]], queries: int = 1) -> None:
        """`accumulate` over many (acc, mass) pairs, e.g. every store of every layer after one forward; rankers with
        an elementwise update override it with one `torch._foreach_*` call (per-op dispatch is the decode cost)."""
        for acc, mass in pairs:
            self.accumulate(acc, mass, queries)

    @abstractmethod
    def rank(self, acc: torch.Tensor, pos: torch.Tensor, now: int, protected: torch.Tensor | None = None) -> torch.Tensor:
        """Scores `[B, H, T]`; `protected` marks slots that are never evicted (their scores are ignored), so
        normalisations run over the evictable slots only."""


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

    alpha: float = 0.5
    decay: float = 0.9

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


@dataclass
class AttentionRanker(EMARanker):
    """Attention-only ablation: the EMA term alone (alpha = 1)."""

    alpha: float = 1.0


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


@dataclass
class RecencyRanker(Ranker):
    """Keep the newest tokens (with sinks this is StreamingLLM's sliding window)."""

    uses_attention = False

    def rank(self, acc: torch.Tensor, pos: torch.Tensor, now: int, protected: torch.Tensor | None = None) -> torch.Tensor:
        return pos.float()


@dataclass
class RandomRanker(Ranker):
    """Random eviction at a matched rate: the floor any informed ranker must beat. Seeded for repeatability."""

    seed: int = 0
    uses_attention = False

    def __post_init__(self) -> None:
        self._gen: torch.Generator | None = None

    def rank(self, acc: torch.Tensor, pos: torch.Tensor, now: int, protected: torch.Tensor | None = None) -> torch.Tensor:
        if self._gen is None:
            self._gen = torch.Generator(device="cpu").manual_seed(self.seed)
        return torch.rand(acc.shape, generator=self._gen).to(acc.device)


RANKERS: dict[str, type[Ranker]] = {
    "ema": EMARanker,
    "attention": AttentionRanker,
    "h2o": H2ORanker,
    "recency": RecencyRanker,
    "random": RandomRanker,
}
