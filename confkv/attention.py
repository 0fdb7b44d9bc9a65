"""The `confkv` attention implementation, registered with `transformers.AttentionInterface`.

Why our own attention function: eviction needs per-key attention mass, and only `eager` attention returns weights
(1.5-1.8x slower than sdpa at 8K). This function computes the same attention as sdpa over the layer's INT8 + model
dtype segments (Triton on CUDA; on CPU the C++ decode kernel for one-query calls, the PyTorch reference otherwise), and gets the mass from the same pass.
It decides nothing and stores nothing: `attend` returns the output, the mass (per KV head: the mean over its GQA
group) and the last query (recall scores the cold tier against it) to its caller; `confkv_attention`, the adapter
transformers calls, hands the two to the layer (`ConfKVLayer.keep_attention`), which stores them for the policy's
step after the forward (a transformers attention function can return only the output upward).
No model code is patched: `with confkv.attach(model, cache)` selects it for a scope, and because "confkv" has no
mask function registered, `transformers` builds no mask. Causality needs no per-key positions either: during a
forward the call's own tokens are the last `q_len` model-dtype slots and every other kept key is older than all of
them, so one head-independent `[L, T]` mask (or the kernels' `causal_tail`) is exact whatever was evicted.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch
import torch.nn.functional as F
from transformers import AttentionInterface

from confkv.kernels import segmented_attention
from confkv.kernels.cpu_prefill import causal_tail_attention
from confkv.layer import LayerView

ATTN_NAME = "confkv"


class Attended(NamedTuple):
    """One attention call's results: `out [B, Hq, L, D]`, `mass [B, H_kv, Tq+Tf]` fp32 (None when the layer's
    policy ranks without it) and the call's last query `[B, Hq, D]` (None without a cold tier)."""

    out: torch.Tensor
    mass: torch.Tensor | None
    last_query: torch.Tensor | None


def attend(query: torch.Tensor, view: LayerView, scaling: float) -> Attended:
    """Attention of `query [B, Hq, L, D]` over the layer `view` was cut from (its last `q_len` model-dtype slots are
    the call's own tokens); reads the layer, writes nothing."""
    layer = view.layer
    last_query = query[:, :, -1] if layer.cold_capacity else None
    if not layer.wants_mass and layer.q8.n == 0:
        # Nothing to rank and nothing quantized (e.g. `full`, or `sliding` without INT8): torch's fused sdpa. The
        # mask needs no positions: every kept key is older than the call's tokens, the last q_len slots.
        return Attended(dense_attention(query, layer.fp.view("k"), layer.fp.view("v"), scaling), None, last_query)
    # The call's own tokens are the last q_len model-dtype slots and every kept key is older: `causal_tail`.
    out, mass = segmented_attention(
        query, layer.segments(), None, scaling, layer.wants_mass, check=False, causal_tail=view.q_len,
        kv_head_mass=True,
    )
    return Attended(out, mass, last_query)


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
    result = attend(query, key, float(query.shape[-1] ** -0.5 if scaling is None else scaling))
    key.layer.keep_attention(result.mass, result.last_query)
    return result.out.transpose(1, 2).contiguous(), None


def dense_attention(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scaling: float) -> torch.Tensor:
    """torch's fused sdpa of `query` `[B, H, L, D]` (the last L of the T keys) over dense `k`, `v` `[B, H_kv, T, D]`.

    Why not `enable_gqa=True`: on CPU it copies K/V once per query head; folding each KV head's G query heads into
    the query axis (`[B, H_kv, G*L, D]`, rows ordered head-major as `repeat_kv` pairs them) reads each key once.
    Same math, float sums within ~3e-7: decode over 16K keys took 45 ms per layer with `enable_gqa` and 15 ms
    folded, a 512-token prefill chunk over 4K keys 447 against 382 ms (one thread, H=12, H_kv=2, D=128).
    A CPU prefill chunk goes to `cpu_prefill.causal_tail_attention` (the compiled kernel in fp32 on AVX-512, else
    torch's fused op without the tail mask: 1.65-2.2x and 1.3-1.5x faster for a 512-token chunk over 4K-16K keys,
    `bench prefill-attention`); the masked call stays for other devices and for a torch without the fused CPU op.
    """
    b, h, q_len, d = query.shape
    if q_len > 1 and query.device.type == "cpu":  # a prefill chunk: two mask-free fused calls (their docstring)
        done = causal_tail_attention(query, k, v, scaling)
        if done is not None:
            return done[0]
    group = h // k.shape[1]
    mask = None if q_len == 1 else _tail_mask(k.shape[2], q_len, group, k.device)
    out = F.scaled_dot_product_attention(query.reshape(b, h // group, group * q_len, d), k, v, attn_mask=mask,
                                         scale=scaling)  # fmt: skip
    return out.view(b, h, q_len, d)


@functools.lru_cache(maxsize=2)
def _tail_mask(n_keys: int, q_len: int, group: int, device: torch.device) -> torch.Tensor:
    """`[G*L, T]` visibility when the last L of T keys are the L queries in order and the rest are older, repeated
    for the G query heads folded per KV head. Cached: every layer of a prefill chunk asks for the same one; the
    next chunk has another T, so two entries (G*L*T bytes each: 50 MB at 16K keys for the 1.5B) are all it keeps."""
    mask = torch.ones(q_len, n_keys, dtype=torch.bool, device=device)
    mask[:, n_keys - q_len :] = torch.ones(q_len, q_len, dtype=torch.bool, device=device).tril()
    return mask.repeat(group, 1)


def register() -> None:
    """Make `attn_implementation="confkv"` known to transformers (idempotent)."""
    AttentionInterface.register(ATTN_NAME, confkv_attention)


register()
