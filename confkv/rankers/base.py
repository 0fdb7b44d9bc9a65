"""The ranker interface: which evictable tokens are worth keeping.

The cache owns the slots; a ranker only does arithmetic on per-slot tensors of shape `[B, H_kv, T]`:
- `acc`: the ranker's accumulator (EMA or cumulative attention mass), updated after every attention call;
- `pos`: absolute positions of the kept tokens.
`rank` returns a score per slot: higher = keep. Eviction granularity is the KV head: each KV head keeps its own
top tokens (the same count for every head), and a KV head's attention mass is the mean over the query heads of its
GQA group and over the queries of the call (H2O scales it back by the call's query count: a sum over queries).

A ranker is a dataclass whose `param` fields (`confkv.params`) are its parameters: each field's `--set` key, default
and range come from the ranker's own file, so `RankerSpec` needs no per-ranker code (see `confkv.rankers`).
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from typing import Any

import torch

from confkv.params import Range, declared


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


def ranker_params(cls: type[Ranker]) -> dict[str, tuple[dataclasses.Field, Range]]:
    """A ranker class's parameters: `--set` key -> (field, range). A dataclass field without `param` is not one
    (e.g. `AttentionRanker.alpha`, fixed at 1)."""
    return declared(cls) if dataclasses.is_dataclass(cls) else {}


def build_ranker(cls: type[Ranker], values: dict[str, Any]) -> Ranker:
    """An instance from `--set` key -> value (keys the class does not declare are ignored: the flat namespace holds
    every registered ranker's keys, and a policy keeps e.g. `alpha` while it ranks with h2o)."""
    return cls(**{f.name: values[key] for key, (f, _rng) in ranker_params(cls).items() if key in values})
