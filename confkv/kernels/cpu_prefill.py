"""A prefill chunk's attention on CPU: the output from the compiled kernel (`cpu_attention.cpp`, fp32 on AVX-512) or
torch's fused flash attention, the mass from `cpu_prefill.cpp` or blocked BLAS.

Why: the reference computes a chunk's attention and mass from one materialized fp32 softmax (two fp32 matmuls, a
softmax, a sum over queries), about twice what the plain cache's fused SDPA costs for the same keys, and the
agent's steps are mostly prefill (issue 13: `confkv` prefill at 0.70x of `full` in bf16). Here the output comes
from `_scaled_dot_product_flash_attention_for_cpu`, the same fused kernel the plain cache's SDPA runs (bf16 on the
CPU's bf16 units), which also returns each query row's log-sum-exp; the compiled kernel then recomputes the scores
tile by tile in fp32 and sums `exp(s - lse)` over the queries without materializing them. In fp32 on AVX-512 the
output comes from a compiled kernel with the mass kernel's register block instead (`causal_tail_attention`), which
outran the fused op there.

Two ways to the mass, the same sums: the compiled kernel where the CPU has AVX-512 (measured there: `confkv`
prefill at 0.95x of `full`), BLAS matmuls over blocks of query rows elsewhere (`blocked_mass`). The kernel keeps a
4 x 64 block of scores in registers, which AVX-512's 32 vector registers hold and AVX2's 16 do not: on an AVX2
EPYC it ran at 2 GFLOP/s, 8x the fused attention's time for the same chunk, and that made the agent's `confkv`
prefill 2.7x slower than `full`'s; the blocked matmuls take about the fused attention's time there.

Same contract as the reference's causal-tail path: keys are the INT8 slots (dequantized to the model dtype here:
the fused kernel takes one dtype) then the model-dtype slots, the last L of which are the chunk's own tokens.
Mass is fp32, per query head or (`kv_head_mass`) per KV head; the output has the model dtype's rounding of the
probabilities, as `full`'s SDPA does. The compiled kernel is the one `cpu_decode` builds; without it, or when the
fused op refuses the call, the reference runs.
"""

from __future__ import annotations

import functools

import torch

from confkv.kernels import cpu_decode
from confkv.kernels.segments import SegmentedKV, dequantize


def usable(q: torch.Tensor, kv: SegmentedKV, causal_tail: int) -> bool:
    """A CPU prefill chunk over the cache's own segments (`causal_tail` = its L > 1 queries), kernel built."""
    if q.dim() != 4 or q.device.type != "cpu" or causal_tail < 2 or causal_tail != q.shape[2]:
        return False
    if q.requires_grad and torch.is_grad_enabled():
        return False
    return kv.n_fp >= causal_tail and cpu_decode.active()


def joined_kv(kv: SegmentedKV, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """K and V `[B, Hkv, Tq+Tf, D]` in `dtype`: INT8 slots dequantized (scales, and per-channel key scales), then
    the model-dtype slots."""
    if not kv.n_int8:
        return kv.k_fp, kv.v_fp
    k = dequantize(kv.k_q, kv.k_scale)  # fp32: the per-channel scale goes on before the cast
    if kv.k_channel is not None:
        k.mul_(kv.k_channel.float().unsqueeze(2))
    k, v = k.to(dtype), dequantize(kv.v_q, kv.v_scale, dtype)
    if not kv.n_fp:
        return k, v
    return torch.cat([k, kv.k_fp], dim=2), torch.cat([v, kv.v_fp], dim=2)


def causal_tail_attention(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Attention of a chunk's queries `q [B,Hq,L,D]` over `keys`, `values` `[B,Hkv,N,D]` whose last L are the
    queries' own tokens in order (causal among themselves) and the rest older than all of them: (out `[B,Hq,L,D]` in
    q's dtype, each query's log-sum-exp fp32 `[B,Hq,L]`), or None where torch's fused op refuses the call.

    In fp32 on a CPU with AVX-512 the compiled kernel (`cpu_attention.cpp`, one pass, the mass kernel's register
    block) computes it; elsewhere `split_attention`. `bench prefill-attention` times both against one masked call
    (docs/results/prefill-attention-zen5.json, one thread, under load): for the agent's 512-token chunks the kernel
    took 0.45-0.6x the masked call's time over 180-16K older keys, 0.7-0.8x the split's.
    """
    b, hq, n_q, d = q.shape
    if compiled_attention(q.dtype, d):
        hkv = keys.shape[1]
        rows = (q * scale).reshape(b, hkv, hq // hkv * n_q, d).contiguous()
        out, lse = cpu_decode.kernel().prefill_attention(rows, keys.float().contiguous(), values.float().contiguous(),
                                                         n_q, n_q)  # fmt: skip
        return out.view(b, hq, n_q, d), lse.view(b, hq, n_q)
    return split_attention(q, keys, values, scale)


def split_attention(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """`causal_tail_attention` from torch's fused CPU op, in two calls.

    Why two calls and not one with the causal tail as a mask: given a mask, the fused kernel computes every block,
    the chunk's masked future half included, and reads an `[L, N]` mask. Here the older keys go without a mask (each
    KV head's query heads folded into the query axis: no per-head K/V copies) and the chunk's own block with
    `is_causal` (square, so its diagonal is the right one, and the kernel skips the blocks above it); the two are
    joined by their log-sum-exps, the same sums in fp32. `bench prefill-attention` (one thread, Zen 5, two runs
    under load; docs/results/prefill-attention-zen5.json): the agent's 512-token chunks 1.2-1.5x faster over 4K-16K
    older keys (`full`'s long histories), unchanged over 180 (a budgeted cache); 2,000-token chunks 1.4-2x.
    """
    b, hq, n_q, d = q.shape
    hkv, n = keys.shape[1], keys.shape[2]
    g, older = hq // hkv, n - n_q
    op = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    if op is None:  # a torch without this (private) op
        return None
    own_k, own_v = keys[:, :, older:], values[:, :, older:]
    if g > 1:
        own_k, own_v = own_k.repeat_interleave(g, dim=1), own_v.repeat_interleave(g, dim=1)
    try:
        out_b, lse_b = op(q, own_k, own_v, 0.0, True, scale=float(scale))[:2]
        if not older:
            return out_b, lse_b
        folded = q.reshape(b, hkv, g * n_q, d)
        out_a, lse_a = op(folded, keys[:, :, :older], values[:, :, :older], 0.0, False, scale=float(scale))[:2]
    except RuntimeError:  # shapes the fused op refuses
        return None
    lse_a = lse_a.reshape(b, hq, n_q)
    lse = torch.logaddexp(lse_a, lse_b)
    w_a = (lse_a - lse).exp_().unsqueeze(-1)
    w_b = (lse_b - lse).exp_().unsqueeze(-1)
    out = out_a.reshape(b, hq, n_q, d).float().mul_(w_a).add_(out_b.float().mul_(w_b))
    return out.to(q.dtype), lse


def prefill_attention(
    q: torch.Tensor, kv: SegmentedKV, scale: float, return_mass: bool, kv_head_mass: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """`q [B,Hq,L,D]` of a prefill chunk over `kv` (see `usable`): (out in q's dtype, mass fp32 | None), or None if
    the fused op refuses the shapes (the caller runs the reference)."""
    b, hq, n_q, d = q.shape
    keys, values = joined_kv(kv, q.dtype)
    hkv, n = keys.shape[1], keys.shape[2]
    g = hq // hkv
    done = causal_tail_attention(q, keys, values, scale)
    if done is None:
        return None
    out, lse = done
    if not return_mass:
        return out, None
    rows = (q.float() * scale).reshape(b, hkv, g * n_q, d).contiguous()
    keys = keys if keys.stride(-1) == 1 else keys.contiguous()
    lse = lse.reshape(b, hkv, g * n_q).contiguous()
    if compiled_mass():
        mass = cpu_decode.kernel().prefill_mass(rows, keys, lse, n_q, n_q)
    else:
        mass = blocked_mass(rows, keys, lse, n_q)
    if kv_head_mass:
        return out, mass.sum(dim=2).div_(g * n_q)
    return out, mass.view(b, hq, n).div_(n_q)


BLOCK_FLOATS = 1 << 21  # one block of probabilities: 8 MB, in cache, and ~10 blocks for a 512-token chunk over 3K


@functools.cache
def compiled_mass() -> bool:
    """Whether the compiled mass kernel runs: built with AVX-512 (`-march=native` on a CPU that has it), where its
    register block fits; otherwise `blocked_mass` (see the module docstring). The compiled attention kernel, which
    uses the same block, runs under the same condition."""
    return "avx512f" in cpu_decode.cpu_flags().split()


def compiled_attention(dtype: torch.dtype, head_dim: int) -> bool:
    """Whether `causal_tail_attention` runs the compiled kernel for queries of this dtype and head size: fp32, a head
    size of whole 16-float vectors, on a CPU where the register block fits (`compiled_mass`), the extension built."""
    return dtype == torch.float32 and head_dim % 16 == 0 and compiled_mass() and cpu_decode.active()


def blocked_mass(rows: torch.Tensor, keys: torch.Tensor, lse: torch.Tensor, n_q: int) -> torch.Tensor:
    """`prefill_mass`'s sums from BLAS: scores of a block of query rows against all keys (one batched matmul),
    `exp(s - lse)` in place, the chunk's future tokens zeroed, summed over the block's queries.

    `rows` fp32 `[B, Hkv, G*L, D]`, scaled (row g*L + l: query head h*G + g, query l); `keys` `[B, Hkv, N, D]`
    (the last L are the chunk's own tokens in order); `lse` fp32 `[B, Hkv, G*L]`. Returns fp32 `[B, Hkv, G, N]`."""
    b, hkv, _, d = rows.shape
    n = keys.shape[2]
    g = rows.shape[2] // n_q
    heads = rows.view(b * hkv, g, n_q, d)
    keys_t = keys.float().reshape(b * hkv, n, d).transpose(1, 2)  # BLAS reads the transpose in place
    lse = lse.view(b * hkv, g, n_q, 1)
    future = _future(n_q)
    mass = torch.zeros(b * hkv, g, n)
    step = max(1, BLOCK_FLOATS // (b * hkv * g * n))
    for l0 in range(0, n_q, step):
        l1 = min(n_q, l0 + step)
        probs = torch.bmm(heads[:, :, l0:l1].reshape(b * hkv, g * (l1 - l0), d), keys_t).view(b * hkv, g, l1 - l0, n)
        probs.sub_(lse[:, :, l0:l1]).exp_()
        probs[..., n - n_q :].masked_fill_(future[l0:l1], 0.0)  # after exp: an overflow there becomes 0, not NaN
        mass += probs.sum(dim=2)
    return mass.view(b, hkv, g, n)


@functools.lru_cache(maxsize=8)
def _future(n_q: int) -> torch.Tensor:
    """`[L, L]`: True where key t of the chunk is after query l (t > l)."""
    return torch.ones(n_q, n_q, dtype=torch.bool).triu(1)
