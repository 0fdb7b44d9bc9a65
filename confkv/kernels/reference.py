"""PyTorch reference of segmented attention: the CPU prefill path, and the oracle both kernels are tested against
(Triton on CUDA; the C++ CPU decode kernel, `confkv.kernels.cpu_decode`, which runs one-query CPU calls).

Two paths, and why:
- **Row blocks** (`_row_blocks`: no `q_pos`, or the cache's `causal_tail`, and at most 4 x `max_block` keys): every
  key is visible to every query except the causal tail of the call's own tokens, so each block of queries gets one
  fp32 softmax over all keys, and the mass comes from the same probabilities. INT8 keys/values are dequantized once
  per call (`k_q * k_scale [* k_channel]`) and joined with the model-dtype ones: two matmuls per block. This is what
  the cache runs for every prefill chunk, and for decode steps where the C++ kernel is off or cannot build.
- **Blockwise over keys** with an online (running max + sum) softmax, for general per-key positions (`q_pos`) or
  very long caches: the transient memory is bounded: per block we materialize the fp32 scores `[B,Hkv,G*L,n]` and
  the fp32 copies of that block's K and V `[B,Hkv,n,D]`, n chosen so the scores stay under `score_budget` elements
  and n <= `max_block`. INT8 is folded into the math there: scores = ((q * k_channel) @ k_q^T) * k_scale, and the V
  product is (p * v_scale) @ v_q. Mass: when all blocks' scores fit the budget they are kept and normalized with the
  final log-sum-exp; otherwise they are recomputed block by block (second pass).
- GQA without repeating K/V: q `[B,Hq,L,D]` is viewed as `[B,Hkv,G*L,D]` (query head `h*G + g` uses KV head `h`,
  like `repeat_kv`), so one matmul per KV head serves its whole group.
- Scores, softmax and accumulation are fp32 whatever the input dtype; the output is cast back to q's dtype. Mass is
  the softmax probability averaged over the L queries.
- A query that sees no key at all (all masked) gets output 0 and mass 0 rather than NaN.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from confkv.kernels.segments import SegmentedKV

DEFAULT_SCORE_BUDGET = 1 << 22  # fp32 score elements per block (16 MiB)
DEFAULT_MAX_BLOCK = 4096  # keys per block: bounds the fp32 copy of an int8 K/V block
ROW_PATH_BLOCKS = 4  # the row-blocked path (every key in each block) up to this many max_block of keys


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
    q_rows: tuple[torch.Tensor, torch.Tensor], kv: SegmentedKV, blk: _Block, row_pos: torch.Tensor | None
) -> torch.Tensor:
    """fp32 scaled scores `[B,Hkv,R,n]` of the query rows against one key block, -inf where not visible.
    `q_rows` = (rows for model-dtype keys, rows for INT8 keys: times `k_channel` when the keys have one)."""
    sl = slice(blk.start, blk.stop)
    if blk.quantized:
        s = q_rows[1] @ kv.k_q[:, :, sl].float().transpose(-1, -2)
        s = s * kv.k_scale[:, :, None, sl].float()
        pos = kv.pos_q
    else:
        s = q_rows[0] @ kv.k_fp[:, :, sl].float().transpose(-1, -2)
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
    causal_tail: int = 0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Attention of `q [B,Hq,L,D]` over the segmented cache; returns `(out [B,Hq,L,D] in q.dtype, mass|None)`.

    `mass` is fp32 `[B,Hq,Tq+Tf]` (INT8 slots then model-dtype slots), the softmax probabilities averaged over the L
    queries. `scaling` defaults to D**-0.5. `q_pos [B,L]` enables causal visibility (key visible iff pos <= q_pos).
    `causal_tail=L` (instead of `q_pos`) says the last L model-dtype keys are the queries' own tokens in order and
    every other key is older than all of them: what a cache layer's prefill chunk is; it takes the row-blocked
    softmax (`_row_blocks`) instead of comparing positions.
    """
    if check:
        kv.validate(q, q_pos)
    b, hq, n_q, d = q.shape
    hkv = kv.reference_tensor().shape[1]
    g = hq // hkv
    rows = g * n_q
    scale = d**-0.5 if scaling is None else float(scaling)
    if causal_tail:
        if q_pos is not None or causal_tail != n_q or kv.n_fp < n_q:
            raise ValueError(f"causal_tail={causal_tail} needs q_pos=None, L={n_q} queries and >= L model-dtype keys")
    # Row blocks hold every key, and fp32 copies of the whole INT8 segment: up to ROW_PATH_BLOCKS x max_block keys.
    block_rows = score_budget // max(1, b * hkv * kv.n_keys)
    if q_pos is None and block_rows >= g and kv.n_keys <= ROW_PATH_BLOCKS * max_block:
        return _row_blocks(q, kv, hkv, scale, return_mass, causal_tail, block_rows)
    if causal_tail:  # too many keys for a row block: the tail's own positions give the same visibility
        q_pos = kv.pos_fp[:, 0, -causal_tail:]
    q_rows = q.float().reshape(b, hkv, rows, d) * scale
    both_rows = (q_rows, q_rows if kv.k_channel is None else q_rows * kv.k_channel.unsqueeze(2))  # once, not per block
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
        s = _block_scores(both_rows, kv, blk, row_pos)
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
    score_blocks = kept if keep_scores else (_block_scores(both_rows, kv, blk, row_pos) for blk in _blocks(kv, block))
    mass = [
        torch.exp(s - lse.unsqueeze(-1)).reshape(b, hkv, g, n_q, -1).mean(dim=3).reshape(b, hq, -1)
        for s in score_blocks
    ]
    return out, torch.cat(mass, dim=-1)


def _row_blocks(
    q: torch.Tensor, kv: SegmentedKV, hkv: int, scale: float, return_mass: bool, causal_tail: int, rows: int
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Every key is visible to every query, except that the last `causal_tail` (= L) model-dtype keys are the
    queries' own tokens, causal among themselves (a decode step, or a prefill chunk over the kept cache). Each block
    of queries gets one fp32 softmax over all keys: a third of the tensor ops of the online-softmax loop, one score
    pass instead of two for the mass, and no per-key position compare. `rows` bounds the score rows per block."""
    b, hq, n_q, d = q.shape
    g = hq // hkv
    bh = b * hkv
    n_q8, n_fp, n_keys = kv.n_int8, kv.n_fp, kv.n_keys
    # 3-D [B*Hkv, ., .] operands and `torch.bmm`: a 4-D `@` costs extra reshapes per call, and at decode sizes the
    # number of (tiny) ops is what costs. INT8 keys/values are dequantized once per call (scales applied in place on
    # the fresh fp32 copy) and joined with the model-dtype ones, so each block is one matmul for the scores and one
    # for the output (measured on SmolLM2 shapes: ~25% faster than scaling INT8 and model-dtype scores separately).
    fp_k = kv.k_fp.reshape(bh, n_fp, d).float() if n_fp else None
    fp_v = kv.v_fp.reshape(bh, n_fp, d).float() if n_fp else None
    if n_q8:
        k_deq = torch.mul(kv.k_q.reshape(bh, n_q8, d), kv.k_scale.reshape(bh, n_q8, 1))
        if kv.k_channel is not None:
            k_deq.mul_(kv.k_channel.reshape(bh, 1, d))
        v_deq = torch.mul(kv.v_q.reshape(bh, n_q8, d), kv.v_scale.reshape(bh, n_q8, 1))
        keys = torch.cat([k_deq, fp_k], dim=1) if n_fp else k_deq
        values = torch.cat([v_deq, fp_v], dim=1) if n_fp else v_deq
    else:
        keys, values = fp_k, fp_v
    keys_t = keys.transpose(1, 2)
    q4 = q.float().reshape(bh, g, n_q, d)
    step = max(1, rows // g)
    if step >= n_q and n_q == 1:  # a decode step: one row per query head
        p = torch.softmax(torch.bmm(q4.view(bh, g, d) * scale, keys_t), dim=-1)
        out = torch.bmm(p, values).view(b, hq, 1, d).to(q.dtype)
        return out, (p.view(b, hq, n_keys) if return_mass else None)
    out4 = torch.empty(bh, g, n_q, d, device=q.device)
    mass = None
    for l0 in range(0, n_q, step):
        l1 = min(n_q, l0 + step)
        n = l1 - l0
        s = torch.bmm(q4[:, :, l0:l1].reshape(bh, g * n, d) * scale, keys_t)
        if causal_tail > 1 and l0 + 1 < n_q:  # query l sees tail key j iff j <= l
            hide = torch.ones(n, causal_tail, dtype=torch.bool, device=q.device).triu(diagonal=l0 + 1)
            s.view(bh, g, n, n_keys)[..., n_keys - causal_tail :].masked_fill_(hide, float("-inf"))
        p = torch.softmax(s, dim=-1)
        out4[:, :, l0:l1] = torch.bmm(p, values).view(bh, g, n, d)
        if return_mass:
            part = p.view(bh, g, n, n_keys).sum(dim=2)
            mass = part if mass is None else mass.add_(part)
    out = out4.reshape(b, hq, n_q, d).to(q.dtype)
    if not return_mass:
        return out, None
    return out, mass.div_(n_q).reshape(b, hq, n_keys)
