"""Attention over one layer's segmented cache (INT8 slots + model-dtype slots), with optional attention mass.

`segmented_attention` is the single entry point the cache calls. It picks the backend:
- the Triton kernel (`confkv.kernels.triton_decode`) when q is on CUDA and Triton imports;
- a one-query call on CPU (a decode step) runs the compiled C++ kernel (`confkv.kernels.cpu_decode`) when it
  builds (`CONFKV_CPU_KERNEL=0` turns it off);
- a CPU prefill chunk (`causal_tail` = its L > 1 queries) runs torch's fused flash attention for the output and
  `confkv.kernels.cpu_prefill` for the mass (the compiled kernel on AVX-512, blocked BLAS elsewhere), under the
  same switch;
- otherwise the PyTorch reference (`confkv.kernels.reference`): general `q_pos`, and the oracle of the kernels.
`CONFKV_ATTENTION=reference|triton` overrides the choice (`triton` on CPU tensors needs `TRITON_INTERPRET=1`;
`reference` also skips the C++ decode kernel).
Triton is imported lazily, so this package imports and runs on machines without it.
"""

from __future__ import annotations

import torch

from confkv.kernels.backend import BACKEND_ENV, select_backend, triton_available
from confkv.kernels.reference import reference_attention
from confkv.kernels.segments import (
    SegmentedKV,
    channel_scales,
    dequantize,
    kv_head_mean,
    quantize_int8,
    quantize_keys,
)

__all__ = [
    "BACKEND_ENV",
    "SegmentedKV",
    "channel_scales",
    "dequantize",
    "quantize_int8",
    "quantize_keys",
    "reference_attention",
    "segmented_attention",
    "select_backend",
    "triton_available",
]


def segmented_attention(
    q: torch.Tensor,
    kv: SegmentedKV,
    q_pos: torch.Tensor | None = None,
    scaling: float | None = None,
    return_mass: bool = False,
    check: bool = True,
    causal_tail: int = 0,
    kv_head_mass: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Attention of `q [B,Hq,L,D]` over `kv`; returns `(out [B,Hq,L,D] in q.dtype, mass fp32 | None)`, the mass
    `[B,Hq,Tq+Tf]` (or `[B,Hkv,Tq+Tf]` with `kv_head_mass`).

    Contract (docs/ARCHITECTURE.md): keys are the INT8 slots then the model-dtype slots; with `q_pos [B,L]` a key is
    visible iff its position <= the query's; `mass` is the softmax probability averaged over the L queries and sums
    to 1 per query head. `scaling` defaults to D**-0.5. `check=False` skips `SegmentedKV.validate` and the CPU kernel's
    layout checks (the cache builds its segments itself; the Python checks cost about as much as a small tensor op
    per layer and step). A one-query CPU call without `q_pos` (every kept key visible) runs the C++ decode kernel.
    `causal_tail=L` instead of `q_pos`: the last L model-dtype keys are the queries' own tokens in order, every other
    key older than all of them (a cache layer's prefill chunk); the reference then skips the position compare.
    `kv_head_mass=True`: the mass is the mean over each KV head's GQA group, `[B,Hkv,Tq+Tf]` (what the policy
    ranks by; the CPU decode kernel reduces it in the same call).
    """
    out, mass = _attention(q, kv, q_pos, scaling, return_mass, check, causal_tail, kv_head_mass)
    if mass is not None and kv_head_mass:  # the C++ kernel reduced it already; the other paths did not
        mass = kv_head_mean(mass, kv.reference_tensor().shape[1])
    return out, mass


def _attention(q, kv, q_pos, scaling, return_mass, check, causal_tail, kv_head_mass):
    """The backend choice of `segmented_attention` (same arguments)."""
    if select_backend(q) == "triton":
        from confkv.kernels.triton_decode import triton_attention

        if causal_tail:
            q_pos = kv.pos_fp[:, 0, -causal_tail:]
        return triton_attention(q, kv, q_pos, scaling, return_mass, check=check)
    if q_pos is None:  # the compiled CPU paths: a decode step, or a prefill chunk (its causal tail)
        from confkv.kernels import cpu_decode, cpu_prefill

        trusted = not check  # the cache's own segments: no layout checks either
        if check:
            kv.validate(q, q_pos)
            check = False  # done once: the reference need not repeat it
        scale = q.shape[-1] ** -0.5 if scaling is None else scaling
        if causal_tail <= 1:
            if cpu_decode.usable(q, kv, trusted=trusted):
                return cpu_decode.decode_attention(q, kv, scale, return_mass, kv_head_mass)
        elif cpu_prefill.usable(q, kv, causal_tail):
            done = cpu_prefill.prefill_attention(q, kv, scale, return_mass, kv_head_mass)
            if done is not None:
                return done
    return reference_attention(q, kv, q_pos, scaling, return_mass, check=check, causal_tail=causal_tail)
