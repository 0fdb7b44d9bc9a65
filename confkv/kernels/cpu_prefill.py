"""A prefill chunk's attention on CPU: the output from torch's fused flash attention, the mass from `cpu_prefill.cpp`
or blocked BLAS.

Why: the reference computes a chunk's attention and mass from one materialized fp32 softmax (two fp32 matmuls, a
softmax, a sum over queries), about twice what the plain cache's fused SDPA costs for the same keys, and the
agent's steps are mostly prefill (issue 13: `confkv` prefill at 0.70x of `full` in bf16). Here the output comes
from `_scaled_dot_product_flash_attention_for_cpu`, the same fused kernel the plain cache's SDPA runs (bf16 on the
CPU's bf16 units), which also returns each query row's log-sum-exp; the compiled kernel then recomputes the scores
tile by tile in fp32 and sums `exp(s - lse)` over the queries without materializing them.

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


@functools.lru_cache(maxsize=2)
def _tail_bias(n_keys: int, q_len: int, dtype: torch.dtype) -> torch.Tensor:
    """Additive `[L, T]` mask (0 or -inf, in the query dtype, as the fused op wants): the last L keys are the L
    queries in order, causal; the rest are visible to all. Cached: every layer of a chunk asks for the same one;
    the next chunk has another T, so two entries (33 MB each in fp32 at 16K keys) are all it keeps."""
    bias = torch.zeros(q_len, n_keys, dtype=dtype)
    bias[:, n_keys - q_len :] = torch.full((q_len, q_len), float("-inf"), dtype=dtype).triu(1)
    return bias


def prefill_attention(
    q: torch.Tensor, kv: SegmentedKV, scale: float, return_mass: bool, kv_head_mass: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """`q [B,Hq,L,D]` of a prefill chunk over `kv` (see `usable`): (out in q's dtype, mass fp32 | None), or None if
    the fused op refuses the shapes (the caller runs the reference)."""
    b, hq, n_q, d = q.shape
    keys, values = joined_kv(kv, q.dtype)
    hkv, n = keys.shape[1], keys.shape[2]
    g = hq // hkv
    rep_k = keys if g == 1 else keys.repeat_interleave(g, dim=1)
    rep_v = values if g == 1 else values.repeat_interleave(g, dim=1)
    try:
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, rep_k, rep_v, 0.0, False, attn_mask=_tail_bias(n, n_q, q.dtype), scale=float(scale)
        )[:2]
    except (RuntimeError, AttributeError):  # shapes the fused op refuses, or a torch without this (private) op
        return None
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
    register block fits; otherwise `blocked_mass` (see the module docstring)."""
    return "avx512f" in cpu_decode.cpu_flags().split()


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
