"""Triton split-K (flash-decoding) attention over the segmented cache, with the attention mass from the same pass.

Launches (all Triton):
1. `_split_kernel`, grid (B*Hkv, row blocks, splits). A program owns one KV head and a block of its query rows: the
   G query heads of that group times the L queries (row `g*L + l`), so K/V are read once per group, never repeated.
   It walks the keys of its split (INT8 part, then model-dtype part), loads int8 K/V with their per-token scales and
   dequantizes in registers (scores * k_scale; p * v_scale before the PV product), runs an fp32 online softmax
   (running max + sum, base-2 exponentials) and writes its partial output and log-sum-exp. With `return_mass` it also
   stores every raw (scaled, masked) logit: 4 bytes per query row per key.
2. `_merge_kernel`, grid (B*Hkv, row blocks): merges the splits by LSE, writes the output in q's dtype and the final
   per-row LSE.
3. (mass only) `_mass_kernel`, grid (B*Hq, key blocks): mass = mean over the L queries of exp(logit - LSE).
For decode (L=1) a row block holds the G heads of a group; appended chunks (L>1) use the same kernels with more rows
(correct, and each row block re-reads K/V, so it is not a tuned prefill kernel).

Numerics: softmax state and accumulators are fp32. On a GPU the QK^T and PV products run in the model dtype with
fp32 accumulation (fp16/bf16 hold int8 values exactly); fp32 inputs, and everything under TRITON_INTERPRET=1 (where
bf16 tl.dot is wrong), use fp32 products. For the PV product of an INT8 block, p * v_scale is renormalized by the
block's largest scale before the cast, so small probabilities do not underflow in fp16.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from confkv.kernels.segments import SegmentedKV

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"


@triton.jit
def _segment_pass(
    q, row_pos, rows, rmask, m_i, l_i, acc,
    K, V, KS, VS, P, LOGITS,
    stride_kb, stride_kh, stride_kt, stride_vb, stride_vh, stride_vt, stride_sb, stride_sh, stride_wb, stride_wh,
    stride_pb, stride_ph,
    b, h, lo, hi, key_offset, n_keys, qk_scale, logit_row_base, D,
    IS_INT8: tl.constexpr, HAS_QPOS: tl.constexpr, WRITE_LOGITS: tl.constexpr, DOT_FP32: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """Online softmax of the query rows over keys [lo, hi) of one segment; returns the updated (m, l, acc)."""
    d = tl.arange(0, BLOCK_D)
    dmask = d < D
    k_base = K + b * stride_kb + h * stride_kh
    v_base = V + b * stride_vb + h * stride_vh
    for start in range(lo, hi, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        nmask = n < hi
        kv_mask = nmask[:, None] & dmask[None, :]
        k = tl.load(k_base + n[:, None] * stride_kt + d[None, :], mask=kv_mask, other=0.0)
        if DOT_FP32:
            s = tl.dot(q, tl.trans(k.to(tl.float32)), input_precision="ieee")
        else:
            s = tl.dot(q, tl.trans(k.to(q.dtype)))
        if IS_INT8:
            ks = tl.load(KS + b * stride_sb + h * stride_sh + n, mask=nmask, other=0.0)
            s = s * (ks * qk_scale)[None, :]
        else:
            s = s * qk_scale
        visible = rmask[:, None] & nmask[None, :]
        if HAS_QPOS:
            kpos = tl.load(P + b * stride_pb + h * stride_ph + n, mask=nmask, other=0)
            visible = visible & (kpos[None, :] <= row_pos[:, None])
        s = tl.where(visible, s, float("-inf"))
        if WRITE_LOGITS:
            lptr = LOGITS + (logit_row_base + rows).to(tl.int64)[:, None] * n_keys + (key_offset + n)[None, :]
            tl.store(lptr, s, mask=rmask[:, None] & nmask[None, :])
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_i - m_safe)
        p = tl.exp2(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = tl.load(v_base + n[:, None] * stride_vt + d[None, :], mask=kv_mask, other=0.0)
        if IS_INT8:
            vs = tl.load(VS + b * stride_wb + h * stride_wh + n, mask=nmask, other=0.0)
            vmax = tl.max(vs, 0)
            vmax = tl.where(vmax > 0, vmax, 1.0)
            p = p * (vs / vmax)[None, :]
        if DOT_FP32:
            pv = tl.dot(p, v.to(tl.float32), input_precision="ieee")
        else:
            pv = tl.dot(p.to(q.dtype), v.to(q.dtype))
        if IS_INT8:
            pv = pv * vmax
        acc = acc + pv
        m_i = m_new
    return m_i, l_i, acc


# Lengths and split counts change every decode step: Triton would otherwise specialise on each integer's value
# (== 1, divisibility by 16) and recompile as they cross those classes.
@triton.jit(do_not_specialize=["L", "R", "Tq", "Tf", "keys_per_split", "n_splits"])
def _split_kernel(
    Q, QC, KQ, VQ, KS, VS, PQ, KF, VF, PF, QPOS, OUT_PART, LSE_PART, LOGITS,
    stride_qb, stride_qh, stride_ql,
    s_kqb, s_kqh, s_kqt, s_vqb, s_vqh, s_vqt, s_sb, s_sh, s_wb, s_wh, s_pqb, s_pqh,
    s_kfb, s_kfh, s_kft, s_vfb, s_vfh, s_vft, s_pfb, s_pfh,
    Hkv, G, L, R, Tq, Tf, D, keys_per_split, n_splits, qk_scale,
    HAS_QPOS: tl.constexpr, WRITE_LOGITS: tl.constexpr, DOT_FP32: tl.constexpr,
    BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    bh = tl.program_id(0)
    rb = tl.program_id(1)
    split = tl.program_id(2)
    b = (bh // Hkv).to(tl.int64)  # b * stride in int64: a large cache overflows int32 offsets
    h = (bh % Hkv).to(tl.int64)
    rows = rb * BLOCK_R + tl.arange(0, BLOCK_R)
    rmask = rows < R
    qhead = h * G + rows // L
    ql = rows % L
    d = tl.arange(0, BLOCK_D)
    qptr = Q + b * stride_qb + qhead[:, None] * stride_qh + ql[:, None] * stride_ql + d[None, :]
    q = tl.load(qptr, mask=rmask[:, None] & (d < D)[None, :], other=0.0)
    # QC: the queries times the INT8 keys' channel scales (same layout as Q; Q itself when there are none)
    qcptr = QC + b * stride_qb + qhead[:, None] * stride_qh + ql[:, None] * stride_ql + d[None, :]
    q8 = tl.load(qcptr, mask=rmask[:, None] & (d < D)[None, :], other=0.0)
    if DOT_FP32:
        q = q.to(tl.float32)
        q8 = q8.to(tl.float32)
    row_pos = tl.zeros([BLOCK_R], dtype=tl.int64)
    if HAS_QPOS:
        row_pos = tl.load(QPOS + b * L + ql, mask=rmask, other=0)

    m_i = tl.full([BLOCK_R], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_R], dtype=tl.float32)
    acc = tl.zeros([BLOCK_R, BLOCK_D], dtype=tl.float32)
    lo = split * keys_per_split
    hi = tl.minimum(lo + keys_per_split, Tq + Tf)
    logit_row_base = bh * R
    m_i, l_i, acc = _segment_pass(
        q8, row_pos, rows, rmask, m_i, l_i, acc, KQ, VQ, KS, VS, PQ, LOGITS,
        s_kqb, s_kqh, s_kqt, s_vqb, s_vqh, s_vqt, s_sb, s_sh, s_wb, s_wh, s_pqb, s_pqh,
        b, h, lo, tl.minimum(hi, Tq), 0, Tq + Tf, qk_scale, logit_row_base, D,
        True, HAS_QPOS, WRITE_LOGITS, DOT_FP32, BLOCK_N, BLOCK_D,
    )
    m_i, l_i, acc = _segment_pass(
        q, row_pos, rows, rmask, m_i, l_i, acc, KF, VF, KS, VS, PF, LOGITS,
        s_kfb, s_kfh, s_kft, s_vfb, s_vfh, s_vft, s_sb, s_sh, s_wb, s_wh, s_pfb, s_pfh,
        b, h, tl.maximum(lo, Tq) - Tq, hi - Tq, Tq, Tq + Tf, qk_scale, logit_row_base, D,
        False, HAS_QPOS, WRITE_LOGITS, DOT_FP32, BLOCK_N, BLOCK_D,
    )
    seen = l_i > 0
    out = acc / tl.where(seen, l_i, 1.0)[:, None]
    lse = tl.where(seen, m_i + tl.log2(tl.where(seen, l_i, 1.0)), float("-inf"))
    part_row = (bh * n_splits + split) * R + rows
    tl.store(OUT_PART + part_row[:, None] * BLOCK_D + d[None, :], out, mask=rmask[:, None])
    tl.store(LSE_PART + part_row, lse, mask=rmask)


@triton.jit(do_not_specialize=["L", "R", "n_splits"])
def _merge_kernel(
    OUT_PART, LSE_PART, OUT, LSE,
    stride_ob, stride_oh, stride_ol,
    Hkv, G, L, R, D, n_splits,
    BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr,
):
    bh = tl.program_id(0)
    rb = tl.program_id(1)
    b = (bh // Hkv).to(tl.int64)  # b * stride in int64: a large cache overflows int32 offsets
    h = (bh % Hkv).to(tl.int64)
    rows = rb * BLOCK_R + tl.arange(0, BLOCK_R)
    rmask = rows < R
    d = tl.arange(0, BLOCK_D)
    m = tl.full([BLOCK_R], float("-inf"), dtype=tl.float32)
    den = tl.zeros([BLOCK_R], dtype=tl.float32)
    acc = tl.zeros([BLOCK_R, BLOCK_D], dtype=tl.float32)
    for split in range(0, n_splits):
        part_row = (bh * n_splits + split) * R + rows
        lse = tl.load(LSE_PART + part_row, mask=rmask, other=float("-inf"))
        o = tl.load(OUT_PART + part_row[:, None] * BLOCK_D + d[None, :], mask=rmask[:, None], other=0.0)
        m_new = tl.maximum(m, lse)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        w_old = tl.exp2(m - m_safe)
        w = tl.exp2(lse - m_safe)
        acc = acc * w_old[:, None] + o * w[:, None]
        den = den * w_old + w
        m = m_new
    seen = den > 0
    out = acc / tl.where(seen, den, 1.0)[:, None]
    qhead = h * G + rows // L
    ql = rows % L
    optr = OUT + b * stride_ob + qhead[:, None] * stride_oh + ql[:, None] * stride_ol + d[None, :]
    tl.store(optr, out.to(OUT.dtype.element_ty), mask=rmask[:, None] & (d < D)[None, :])
    # +inf for rows that saw nothing: their mass exp2(logit - lse) is then exactly 0.
    lse_final = tl.where(seen, m + tl.log2(tl.where(seen, den, 1.0)), float("inf"))
    tl.store(LSE + bh * R + rows, lse_final, mask=rmask)


@triton.jit(do_not_specialize=["L", "T"])
def _mass_kernel(LOGITS, LSE, MASS, L, T, inv_l, BLOCK_T: tl.constexpr):
    """LOGITS/LSE rows are laid out [B, Hq, L] (row g*L + l of KV head h is query head h*G + g), so row = bq*L + l."""
    bq = tl.program_id(0)
    t = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)
    tmask = t < T
    acc = tl.zeros([BLOCK_T], dtype=tl.float32)
    for ql in range(0, L):
        row = bq * L + ql
        lse = tl.load(LSE + row)
        s = tl.load(LOGITS + row.to(tl.int64) * T + t, mask=tmask, other=float("-inf"))
        acc += tl.exp2(s - lse)
    tl.store(MASS + bq.to(tl.int64) * T + t, acc * inv_l, mask=tmask)


def _pow2(n: int, floor: int = 16) -> int:
    return max(floor, triton.next_power_of_2(max(1, n)))


def _kv_strides(t: torch.Tensor) -> tuple[int, int, int]:
    if t.stride(-1) != 1:
        raise ValueError(f"K/V tensors need a contiguous last dim (stride 1), got strides {t.stride()}")
    return t.stride(0), t.stride(1), t.stride(2)


def _vec_strides(t: torch.Tensor) -> tuple[int, int]:
    if t.stride(-1) != 1:
        raise ValueError(f"scale/position tensors need a contiguous last dim, got strides {t.stride()}")
    return t.stride(0), t.stride(1)


def _num_splits(q: torch.Tensor, work_items: int, n_keys: int, block_n: int) -> int:
    """Enough splits to give every SM ~4 programs, but never a split shorter than two key blocks."""
    if not q.is_cuda:
        return max(1, min(4, triton.cdiv(n_keys, 2 * block_n)))
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    want = triton.cdiv(4 * sms, max(1, work_items))
    return max(1, min(want, triton.cdiv(n_keys, 2 * block_n)))


_DUMMIES: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}


def _dummy(device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """A 1-element placeholder for an absent segment's pointer (never read), made once per device and dtype: an
    allocation per call would be a launch-sized cost on every decode step."""
    key = (device, dtype)
    if key not in _DUMMIES:
        _DUMMIES[key] = torch.zeros((1, 1, 1), dtype=dtype, device=device)
    return _DUMMIES[key]


def triton_attention(
    q: torch.Tensor,
    kv: SegmentedKV,
    q_pos: torch.Tensor | None = None,
    scaling: float | None = None,
    return_mass: bool = False,
    *,
    num_splits: int | None = None,
    block_n: int | None = None,
    num_warps: int = 4,
    num_stages: int = 2,
    check: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Same contract as `confkv.kernels.segmented_attention`; runs the Triton kernels (CUDA or the interpreter).

    `num_splits` / `block_n` override the heuristics (tests use them to force several splits and partial blocks);
    `num_warps` / `num_stages` are the launch options of the main kernel. Defaults were picked from sm_90 builds done
    without a GPU (no register spills: ~212 registers/thread for fp16 D=128 with 32-key blocks); not tuned on a GPU.
    """
    if check:
        kv.validate(q, q_pos)
    b, hq, n_q, d = q.shape
    ref = kv.reference_tensor()
    hkv = ref.shape[1]
    g = hq // hkv
    rows = g * n_q
    tq, tf = kv.n_int8, kv.n_fp
    n_keys = tq + tf
    scale = d**-0.5 if scaling is None else float(scaling)
    dev = q.device
    if q.stride(-1) != 1 or kv.k_channel is not None:
        q = q.contiguous()
    qc = q
    if kv.k_channel is not None and tq:
        qc = (q.float() * kv.k_channel.repeat_interleave(g, dim=1).unsqueeze(2)).to(q.dtype).contiguous()

    block_d = _pow2(d)
    block_r = _pow2(min(rows, 64))
    block_n = block_n or (32 if block_d <= 128 and q.dtype != torch.float32 else 16)
    if block_n < 16 or block_n & (block_n - 1):
        raise ValueError(f"block_n must be a power of two >= 16, got {block_n}")
    row_blocks = triton.cdiv(rows, block_r)
    splits = num_splits or _num_splits(q, b * hkv * row_blocks, n_keys, block_n)
    keys_per_split = triton.cdiv(triton.cdiv(n_keys, splits), block_n) * block_n
    splits = triton.cdiv(n_keys, keys_per_split)

    # Empty segments: point at the other segment's tensors; their loops run zero iterations.
    kq, vq = (kv.k_q, kv.v_q) if tq else (kv.k_fp, kv.v_fp)
    dummy_scale = _dummy(dev, torch.float32)
    ks, vs = (kv.k_scale, kv.v_scale) if tq else (dummy_scale, dummy_scale)
    kf, vf = (kv.k_fp, kv.v_fp) if tf else (kv.k_q, kv.v_q)
    has_pos = q_pos is not None
    dummy_pos = _dummy(dev, torch.int64)
    pq = kv.pos_q if has_pos and tq else dummy_pos
    pf = kv.pos_fp if has_pos and tf else dummy_pos
    qpos = q_pos.to(device=dev, dtype=torch.int64).contiguous() if has_pos else dummy_pos

    out_part = torch.empty((b * hkv * splits * rows, block_d), dtype=torch.float32, device=dev)
    lse_part = torch.empty((b * hkv * splits * rows,), dtype=torch.float32, device=dev)
    logits = torch.empty((b * hkv * rows, n_keys) if return_mass else (1,), dtype=torch.float32, device=dev)
    dot_fp32 = _INTERPRET or q.dtype == torch.float32

    _split_kernel[(b * hkv, row_blocks, splits)](
        q, qc, kq, vq, ks, vs, pq, kf, vf, pf, qpos, out_part, lse_part, logits,
        q.stride(0), q.stride(1), q.stride(2),
        *_kv_strides(kq), *_kv_strides(vq), *_vec_strides(ks), *_vec_strides(vs), *_vec_strides(pq),
        *_kv_strides(kf), *_kv_strides(vf), *_vec_strides(pf),
        hkv, g, n_q, rows, tq, tf, d, keys_per_split, splits, scale * LOG2E,
        HAS_QPOS=has_pos, WRITE_LOGITS=return_mass, DOT_FP32=dot_fp32,
        BLOCK_R=block_r, BLOCK_N=block_n, BLOCK_D=block_d, num_warps=num_warps, num_stages=num_stages,
    )
    out = torch.empty((b, hq, n_q, d), dtype=q.dtype, device=dev)
    lse = torch.empty((b * hkv * rows,), dtype=torch.float32, device=dev)
    _merge_kernel[(b * hkv, row_blocks)](
        out_part, lse_part, out, lse, out.stride(0), out.stride(1), out.stride(2),
        hkv, g, n_q, rows, d, splits, BLOCK_R=block_r, BLOCK_D=block_d,
    )
    if not return_mass:
        return out, None
    mass = torch.empty((b, hq, n_keys), dtype=torch.float32, device=dev)
    block_t = 1024
    _mass_kernel[(b * hq, triton.cdiv(n_keys, block_t))](logits, lse, mass, n_q, n_keys, 1.0 / n_q, BLOCK_T=block_t)
    return out, mass
