"""The `confkv` attention implementation, registered with `transformers.AttentionInterface`.

Why our own attention function: eviction needs per-key attention mass, and only `eager` attention returns weights
(1.5-1.8x slower than sdpa at 8K). This function computes the same attention as sdpa over the layer's INT8 + model
dtype segments (Triton on CUDA, PyTorch reference on CPU), gets the mass from the same pass, and hands it to the
layer, which then evicts. No model code is patched: `model.set_attn_implementation("confkv")` selects it, and
because "confkv" has no mask function registered, `transformers` builds no mask: causality comes from positions.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import AttentionInterface

from confkv.kernels import segmented_attention
from confkv.layer import LayerView

ATTN_NAME = "confkv"


def confkv_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: LayerView,
    value: LayerView,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    if not isinstance(key, LayerView):
        raise TypeError(
            "the 'confkv' attention implementation needs a ConfKVCache (got dense key states); pass "
            "`cache=ConfKVCache(model, policy)` or use confkv.ConfKVSession"
        )
    layer = key.layer
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    q_pos = layer.q_pos if key.q_len > 1 else None  # a single new token sees every kept key
    want_mass = layer.wants_mass
    if not want_mass and layer.q8.n == 0 and (q_pos is None or layer.rules.budget() is None):
        # Nothing to rank, nothing quantized, and positions shared by all heads (decode, or nothing evicted yet):
        # torch's fused sdpa is the fastest exact path (e.g. `full`).
        k, v = layer.fp.view("k"), layer.fp.view("v")
        mask = None if q_pos is None else layer.fp.view("pos")[:, :1, None, :] <= q_pos[:, None, :, None]
        out = F.scaled_dot_product_attention(query, k, v, attn_mask=mask, scale=float(scaling), enable_gqa=True)
        layer.after_attention(None)
        return out.transpose(1, 2).contiguous(), None
    out, mass = segmented_attention(query, layer.segments(), q_pos, float(scaling), want_mass)
    if mass is not None:
        b, hq, t = mass.shape
        h_kv = layer.fp.bufs["k"].shape[1]
        mass = mass.view(b, h_kv, hq // h_kv, t).mean(dim=2)  # a KV head's mass: mean over its query group
    layer.after_attention(mass)
    return out.transpose(1, 2).contiguous(), None


def register() -> None:
    """Make `attn_implementation="confkv"` known to transformers (idempotent)."""
    AttentionInterface.register(ATTN_NAME, confkv_attention)


register()
