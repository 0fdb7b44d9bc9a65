"""The eviction oracle: one full forward pass in which each layer's attention hides exactly the evicted tokens.

The cache records, per layer, the positions each KV head evicted and the last query position that still saw them
(and, with a cold tier, the positions it recalled and the first query position that sees them again).
Replaying the whole sequence without a cache, with a per-layer per-head mask built from that log, must reproduce the
cache's logits (INT8 off). Registered as its own attention implementation so no model code is touched.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface

MASKS: dict[int, torch.Tensor] = {}  # layer_idx -> bool [B, H_kv, Q, K], True = visible


def oracle_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    mask = MASKS[module.layer_idx]
    b, hq, q_len, d = query.shape
    h_kv = key.shape[1]
    g = hq // h_kv
    k = key.repeat_interleave(g, dim=1).float()
    v = value.repeat_interleave(g, dim=1).float()
    scores = (query.float() @ k.transpose(-1, -2)) * (scaling if scaling is not None else d**-0.5)
    visible = mask.repeat_interleave(g, dim=1)
    scores = scores.masked_fill(~visible, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v
    return out.to(query.dtype).transpose(1, 2).contiguous(), None


AttentionInterface.register("confkv_oracle", oracle_attention)


def build_masks(cache, seq_len: int) -> dict[int, torch.Tensor]:
    """Visibility per layer from the cache's eviction log: causal, minus tokens evicted before the query."""
    masks = {}
    q = torch.arange(seq_len)
    causal = q[None, :] <= q[:, None]  # [Q, K]
    for i, layer in enumerate(cache.layers):
        b, h = layer.fp.bufs["k"].shape[:2]
        visible = causal[None, None].expand(b, h, seq_len, seq_len).clone()
        # Events in time order: an eviction at t hides its keys from queries after t; a recall (cold tier) at r
        # shows them again to queries from r on. Without recalls this is "visible until the last query that saw it".
        events = [(now, 0, positions) for positions, now in layer.evictions]
        events += [(first - 1, 1, positions) for positions, first in getattr(layer, "recalls", [])]
        for time, kind, positions in sorted(events, key=lambda e: (e[0], e[1])):
            keys = torch.zeros(b, h, seq_len, dtype=torch.bool).scatter_(2, positions, True)
            rows = (q > time)[None, None, :, None]  # queries after the event
            if kind == 0:
                visible &= ~(rows & keys[:, :, None, :])
            else:
                visible |= rows & keys[:, :, None, :] & causal[None, None]
        masks[i] = visible
    return masks


def oracle_logits(model, ids: torch.Tensor, cache) -> torch.Tensor:
    MASKS.clear()
    MASKS.update(build_masks(cache, ids.shape[1]))
    previous = model.config._attn_implementation
    model.set_attn_implementation("confkv_oracle")
    try:
        with torch.no_grad():
            return model(ids).logits
    finally:
        model.set_attn_implementation(previous)
