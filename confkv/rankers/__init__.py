"""Rankers: which evictable tokens are worth keeping. One file per ranker, and this registry.

A ranker is a dataclass (`confkv.rankers.base.Ranker`) whose `param` fields are its `--set` keys with their ranges,
so adding one is its file plus one line below; then `get_policy("confkv", {"ranker": "<name>", "<key>": "..."})`.
The keys of all registered rankers share the policy's flat namespace: one key may be declared by several rankers
(e.g. `ema_decay` by `ema` and `attention`) only with the same default, type and range.
"""

from __future__ import annotations

from confkv.rankers.attention import AttentionRanker
from confkv.rankers.base import Ranker, build_ranker, ranker_params, recency
from confkv.rankers.ema import EMARanker
from confkv.rankers.h2o import H2ORanker
from confkv.rankers.newest import RecencyRanker
from confkv.rankers.uniform import RandomRanker

RANKERS: dict[str, type[Ranker]] = {
    "ema": EMARanker,
    "attention": AttentionRanker,
    "h2o": H2ORanker,
    "recency": RecencyRanker,
    "random": RandomRanker,
}

__all__ = [
    "RANKERS",
    "AttentionRanker",
    "EMARanker",
    "H2ORanker",
    "RandomRanker",
    "Ranker",
    "RecencyRanker",
    "build_ranker",
    "ranker_params",
    "recency",
]
