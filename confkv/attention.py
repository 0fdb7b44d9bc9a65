"""The `confkv` attention implementation, registered with `transformers.AttentionInterface`.

Why our own attention function: eviction needs per-key attention mass, and only `eager` attention returns weights
(1.5-1.8x slower than sdpa at 8K). This function computes the same attention as sdpa over the layer's INT8 + model
dtype segments (Triton on CUDA, PyTorch reference on CPU), gets the mass from the same pass, and leaves it on the
layer (`layer.mass`, per query head). It decides nothing: the policy reduces and ranks the mass after the forward.
No model code is patched: `with confkv.attach(model, cache)` selects it for a scope, and because "confkv" has no
mask function registered, `transformers` builds no mask: causality comes from positions.
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
            "`cache=ConfKVCache(model, policy)` inside `with confkv.attach(model, cache)`, or use confkv.ConfKVSession"
        )
    layer = key.layer
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    q_pos = layer.q_pos if key.q_len > 1 else None  # a single new token sees every kept key
    if not layer.wants_mass and layer.q8.n == 0 and (q_pos is None or not layer.evicts):
        # Nothing to rank, nothing quantized, and positions shared by all heads (decode, or nothing evicted yet):
        # torch's fused sdpa is the fastest exact path (e.g. `full`).
        k, v = layer.fp.view("k"), layer.fp.view("v")
        mask = None if q_pos is None else layer.fp.view("pos")[:, :1, None, :] <= q_pos[:, None, :, None]
        out = F.scaled_dot_product_attention(query, k, v, attn_mask=mask, scale=float(scaling), enable_gqa=True)
        return out.transpose(1, 2).contiguous(), None
    out, layer.mass = segmented_attention(
        query, layer.segments(), q_pos, float(scaling), layer.wants_mass, check=False
    )
    return out.transpose(1, 2).contiguous(), None


def register() -> None:
    """Make `attn_implementation="confkv"` known to transformers (idempotent)."""
    AttentionInterface.register(ATTN_NAME, confkv_attention)


register()
