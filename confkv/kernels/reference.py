"""PyTorch reference of segmented attention: the CPU path, and the oracle the Triton kernel is tested against.

Design choices, and why:
- GQA without repeating K/V: q `[B,Hq,L,D]` is viewed as `[B,Hkv,G*L,D]` (query head `h*G + g` uses KV head `h`,
  like `repeat_kv`), so one matmul per KV head serves its whole group.
- INT8 dequantization is folded into the math instead of materializing dequantized K/V in the model dtype:
  scores = (q @ k_q^T) * k_scale, and the V product is (p * v_scale) @ v_q. The int8 block is still converted to
  fp32 for the matmul (PyTorch has no int8 x float GEMM), but only one key block at a time.
- Scores, softmax and accumulation are fp32 whatever the input dtype; the output is cast back to q's dtype.
- Blockwise over keys with an online (running max + sum) softmax, so the transient memory is bounded: per block we
  materialize the fp32 scores `[B,Hkv,G*L,n]` and the fp32 copies of that block's K and V `[B,Hkv,n,D]`, where n is
  chosen so the scores stay under `score_budget` elements and n <= `max_block`. For decode (L=1) on small models the
  whole cache is one block and this is a plain softmax.
- Attention mass: softmax probabilities averaged over the L queries. When all blocks' scores fit the budget they are
  kept and normalized with the final log-sum-exp; otherwise the scores are recomputed block by block (second pass).
- A query that sees no key at all (all masked) gets output 0 and mass 0 rather than NaN.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from confkv.kernels.segments import SegmentedKV

DEFAULT_SCORE_BUDGET = 1 << 22  # fp32 score elements per block (16 MiB)
DEFAULT_MAX_BLOCK = 4096  # keys per block: bounds the fp32 copy of an int8 K/V block


@dataclass
class _Block:
    """A slice of one segment: keys [start, stop) of the INT8 (quantized=True) or model-dtype segment."""

    quantized: bool
    start: int
    stop: int


def _blocks(kv: SegmentedKV, block: int) -> Iterator[_Block]:
    """Key blocks in mass order: INT8 slots first, then model-dtype slots; a block never straddles segments."""
    for quantized, n in ((True, kv.n_int8), (False, kv.n_fp)):
        for start in range(0, n, block):
            yield _Block(quantized, start, min(start + block, n))


def _block_scores(
    q_rows: torch.Tensor, kv: SegmentedKV, blk: _Block, row_pos: torch.Tensor | None
) -> torch.Tensor:
    """fp32 scaled scores `[B,Hkv,R,n]` of the query rows against one key block, -inf where not visible."""
    sl = slice(blk.start, blk.stop)
    if blk.quantized:
        s = q_rows @ kv.k_q[:, :, sl].float().transpose(-1, -2)
        s = s * kv.k_scale[:, :, None, sl].float()
        pos = kv.pos_q
    else:
        s = q_rows @ kv.k_fp[:, :, sl].float().transpose(-1, -2)
        pos = kv.pos_fp
    if row_pos is not None:
        visible = pos[:, :, None, sl] <= row_pos[:, None, :, None]
        s = s.masked_fill(~visible, float("-inf"))
    return s


def _block_values(p: torch.Tensor, kv: SegmentedKV, blk: _Block) -> torch.Tensor:
    """p `[B,Hkv,R,n]` times the block's values, fp32 `[B,Hkv,R,D]`; INT8 scales folded into p."""
    sl = slice(blk.start, blk.stop)
    if blk.quantized:
        return (p * kv.v_scale[:, :, None, sl].float()) @ kv.v_q[:, :, sl].float()
    return p @ kv.v_fp[:, :, sl].float()


def reference_attention(
    q: torch.Tensor,
    kv: SegmentedKV,
    q_pos: torch.Tensor | None = None,
    scaling: float | None = None,
    return_mass: bool = False,
    *,
    score_budget: int = DEFAULT_SCORE_BUDGET,
    max_block: int = DEFAULT_MAX_BLOCK,
    check: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Attention of `q [B,Hq,L,D]` over the segmented cache; returns `(out [B,Hq,L,D] in q.dtype, mass|None)`.

    `mass` is fp32 `[B,Hq,Tq+Tf]` (INT8 slots then model-dtype slots), the softmax probabilities averaged over the L
    queries. `scaling` defaults to D**-0.5. `q_pos [B,L]` enables causal visibility (key visible iff pos <= q_pos).
    """
    if check:
        kv.validate(q, q_pos)
    b, hq, n_q, d = q.shape
    hkv = kv.reference_tensor().shape[1]
    g = hq // hkv
    rows = g * n_q
    scale = d**-0.5 if scaling is None else float(scaling)
    if q_pos is None and b * hkv * rows * kv.n_keys <= min(score_budget, max_block * b * hkv * rows):
        return _one_block(q, kv, hkv, scale, return_mass)
    q_rows = q.float().reshape(b, hkv, rows, d) * scale
    row_pos = None if q_pos is None else q_pos.to(torch.int64).repeat(1, g)  # row g*L + l has q_pos[:, l]
    if score_budget < 1 or max_block < 1:
        raise ValueError("score_budget and max_block must be positive")
    block = max(1, min(max_block, score_budget // max(1, b * hkv * rows)))

    dev = q.device
    m = torch.full((b, hkv, rows), float("-inf"), device=dev)
    denom = torch.zeros((b, hkv, rows), device=dev)
    acc = torch.zeros((b, hkv, rows, d), device=dev)
    keep_scores = return_mass and b * hkv * rows * kv.n_keys <= score_budget
    kept: list[torch.Tensor] = []
    for blk in _blocks(kv, block):
        s = _block_scores(q_rows, kv, blk, row_pos)
        if keep_scores:
            kept.append(s)
        m_new = torch.maximum(m, s.amax(dim=-1))
        m_safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        alpha = torch.exp(m - m_safe)
        p = torch.exp(s - m_safe.unsqueeze(-1))
        denom = denom * alpha + p.sum(dim=-1)
        acc = acc * alpha.unsqueeze(-1) + _block_values(p, kv, blk)
        m = m_new

    seen = denom > 0
    out = torch.where(seen.unsqueeze(-1), acc / denom.clamp_min(1e-30).unsqueeze(-1), torch.zeros_like(acc))
    out = out.reshape(b, hq, n_q, d).to(q.dtype)
    if not return_mass:
        return out, None

    # +inf for unseen rows makes exp(s - lse) exactly 0 there (s is finite or -inf, never +inf).
    lse = torch.where(seen, m + torch.log(denom.clamp_min(1e-30)), torch.full_like(m, float("inf")))
    score_blocks = kept if keep_scores else (_block_scores(q_rows, kv, blk, row_pos) for blk in _blocks(kv, block))
    mass = [
        torch.exp(s - lse.unsqueeze(-1)).reshape(b, hkv, g, n_q, -1).mean(dim=3).reshape(b, hq, -1)
        for s in score_blocks
    ]
    return out, torch.cat(mass, dim=-1)


def _one_block(
    q: torch.Tensor, kv: SegmentedKV, hkv: int, scale: float, return_mass: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Every query sees every key and all scores fit one block (decode: one new token over the kept cache): a plain
    fp32 softmax over both segments' scores. Same math as the blockwise loop in about a third of the tensor ops,
    which is what a decode step on a small model pays for (per-op dispatch, not FLOPs)."""
    b, hq, n_q, d = q.shape
    q_rows = q.float().reshape(b, hkv, (hq // hkv) * n_q, d) * scale
    n_q8 = kv.n_int8
    scores = []
    if n_q8:
        scores.append((q_rows @ kv.k_q.float().transpose(-1, -2)) * kv.k_scale.float().unsqueeze(2))
    if kv.n_fp:
        scores.append(q_rows @ kv.k_fp.float().transpose(-1, -2))
    p = torch.softmax(scores[0] if len(scores) == 1 else torch.cat(scores, dim=-1), dim=-1)
    out = None
    if n_q8:
        out = (p[..., :n_q8] * kv.v_scale.float().unsqueeze(2)) @ kv.v_q.float()
    if kv.n_fp:
        fp_out = p[..., n_q8:] @ kv.v_fp.float()
        out = fp_out if out is None else out + fp_out
    out = out.reshape(b, hq, n_q, d).to(q.dtype)
    if not return_mass:
        return out, None
    if n_q == 1:
        return out, p.reshape(b, hq, -1)
    return out, p.reshape(b, hkv, hq // hkv, n_q, -1).mean(dim=3).reshape(b, hq, -1)
