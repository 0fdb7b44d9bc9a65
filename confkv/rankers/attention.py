"""The attention-only ablation of Conf-KV's ranker."""

from __future__ import annotations

from dataclasses import dataclass

from confkv.rankers.ema import EMARanker


@dataclass
class AttentionRanker(EMARanker):
    """Attention-only ablation: the EMA term alone. `alpha` is a plain field here, not a parameter, so
    `--set alpha=...` cannot turn the ablation back into Conf-KV (`ema_decay` still applies)."""

    alpha: float = 1.0
