"""One layer's cache as the attention kernels see it: an INT8 segment followed by a model-dtype segment.

Why a dedicated container: the cache keeps old tokens quantized (per-token-per-head scales) and the recent window in
the model dtype, and both the PyTorch reference and the Triton kernel must read the two segments without ever
concatenating or dequantizing the whole cache. Validation lives here so both backends reject bad input the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

INT8_MAX = 127.0


def quantize_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-token-per-head INT8: scale = absmax over the last dim / 127 (fp32).

    Returns `(int8 tensor like x, fp32 scale of shape x.shape[:-1])`. An all-zero row gets scale 0 and quantizes to
    zeros (no division by zero), so `dequantize` gives it back exactly.
    """
    if x.dim() < 1 or x.shape[-1] == 0:
        raise ValueError(f"quantize_int8 needs a non-empty last dimension, got shape {tuple(x.shape)}")
    xf = x.float()
    scale = xf.abs().amax(dim=-1) / INT8_MAX
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(xf / safe.unsqueeze(-1)).clamp_(-INT8_MAX, INT8_MAX).to(torch.int8)
    return q, scale


def channel_scales(k: torch.Tensor) -> torch.Tensor:
    """Per-channel key scales `[B, H, D]` from a sample of keys `[B, H, T, D]`: each channel's absmax over the sample,
    floored at half the head's mean, so a channel that was quiet in the sample is amplified at most 2x later (a 5%
    floor calibrated on one token took SmolLM2's PPL from 4.11 to 8.37). Why (KIVI): a few key
    channels carry outliers in every token, so a per-token scale set by them leaves the other channels a handful of
    levels; dividing the channels by their typical size first evens the grid. Any positive vector is exact to use:
    the per-token scale adapts, nothing is clipped."""
    c = k.float().abs().amax(dim=2)
    return torch.maximum(c, 0.5 * c.mean(dim=-1, keepdim=True)).clamp_min(1e-12)


def quantize_keys(k: torch.Tensor, channel: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys `[B, H, T, D]` as INT8 of `k / channel` (per-token scales); `channel [B, H, D]` None = plain per token.
    Dequantized: `q * scale * channel`."""
    if channel is None:
        return quantize_int8(k)
    return quantize_int8(k.float() / channel.unsqueeze(2))


def dequantize(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """`q * scale` (scale broadcast over the last dim), in `dtype`."""
    if q.dtype != torch.int8:
        raise ValueError(f"dequantize expects an int8 tensor, got {q.dtype}")
    if scale.shape != q.shape[:-1]:
        raise ValueError(f"scale shape {tuple(scale.shape)} does not match int8 shape {tuple(q.shape)}[:-1]")
    return (q.float() * scale.float().unsqueeze(-1)).to(dtype)


def kv_head_mean(mass: torch.Tensor, h_kv: int) -> torch.Tensor:
    """A KV head's mass `[B, H_kv, T]` from per-query-head mass `[B, H_q, T]`: the mean over its GQA group (mass that
    is per KV head already passes through)."""
    b, hq, t = mass.shape
    return mass if hq == h_kv else mass.view(b, h_kv, hq // h_kv, t).mean(dim=2)


def _length(t: torch.Tensor | None) -> int:
    return 0 if t is None else int(t.shape[2])


@dataclass
class SegmentedKV:
    """One layer's keys/values: INT8 slots first, then model-dtype slots (see docs/ARCHITECTURE.md).

    Either segment may be None or have length 0. Positions are absolute token positions, used for causal visibility
    when the query positions are given. Tensors may be views with any strides except the last dim of K/V (stride 1
    expected by the Triton kernel; the reference does not care).
    """

    k_q: torch.Tensor | None  # int8 [B, Hkv, Tq, D]
    v_q: torch.Tensor | None  # int8 [B, Hkv, Tq, D]
    k_scale: torch.Tensor | None  # fp32 [B, Hkv, Tq]
    v_scale: torch.Tensor | None  # fp32 [B, Hkv, Tq]
    k_fp: torch.Tensor | None  # model dtype [B, Hkv, Tf, D]
    v_fp: torch.Tensor | None  # model dtype [B, Hkv, Tf, D]
    pos_q: torch.Tensor | None = None  # int64 [B, Hkv, Tq]
    pos_fp: torch.Tensor | None = None  # int64 [B, Hkv, Tf]
    k_channel: torch.Tensor | None = None  # fp32 [B, Hkv, D]: INT8 keys are q * k_scale * k_channel (None: ones)

    @property
    def n_int8(self) -> int:
        """Number of INT8 slots (Tq)."""
        return _length(self.k_q)

    @property
    def n_fp(self) -> int:
        """Number of model-dtype slots (Tf)."""
        return _length(self.k_fp)

    @property
    def n_keys(self) -> int:
        """Tq + Tf: the length of the mass output."""
        return self.n_int8 + self.n_fp

    def reference_tensor(self) -> torch.Tensor:
        """A K tensor of the non-empty segment, to read B, Hkv, D and the device from."""
        t = self.k_q if self.n_int8 else self.k_fp
        if t is None:
            raise ValueError("SegmentedKV has no keys: both segments are empty")
        return t

    @classmethod
    def from_dense(
        cls,
        k: torch.Tensor,
        v: torch.Tensor,
        n_int8: int,
        positions: torch.Tensor | None = None,
        channel_keys: bool = False,
    ) -> SegmentedKV:
        """Quantize the first `n_int8` tokens of dense `k, v [B,Hkv,T,D]`, keep the rest in their dtype.

        `positions [B,Hkv,T]` defaults to 0..T-1. Used by tests and the benchmark to build a cache like the real one.
        """
        if k.shape != v.shape or k.dim() != 4:
            raise ValueError(f"k and v must both be [B,Hkv,T,D], got {tuple(k.shape)} and {tuple(v.shape)}")
        b, h, t, _ = k.shape
        if not 0 <= n_int8 <= t:
            raise ValueError(f"n_int8={n_int8} must be within [0, {t}]")
        if positions is None:
            positions = torch.arange(t, device=k.device).expand(b, h, t)
        channel = channel_scales(k[:, :, :n_int8]) if channel_keys and n_int8 else None
        k_q, k_scale = quantize_keys(k[:, :, :n_int8], channel)
        v_q, v_scale = quantize_int8(v[:, :, :n_int8])
        return cls(
            k_q=k_q,
            v_q=v_q,
            k_scale=k_scale,
            v_scale=v_scale,
            k_fp=k[:, :, n_int8:],
            v_fp=v[:, :, n_int8:],
            pos_q=positions[:, :, :n_int8],
            pos_fp=positions[:, :, n_int8:],
            k_channel=channel,
        )

    def validate(self, q: torch.Tensor, q_pos: torch.Tensor | None) -> None:
        """Raise ValueError with a clear message if `q`, `q_pos` and the segments do not fit together."""
        if q.dim() != 4:
            raise ValueError(f"q must be [B,Hq,L,D], got shape {tuple(q.shape)}")
        if not q.is_floating_point():
            raise ValueError(f"q must be floating point, got {q.dtype}")
        b, hq, n_q, d = q.shape
        ref = self.reference_tensor()
        if ref.dim() != 4:
            raise ValueError(f"keys must be [B,Hkv,T,D], got shape {tuple(ref.shape)}")
        hkv = ref.shape[1]
        if ref.shape[0] != b or ref.shape[3] != d:
            raise ValueError(f"q {tuple(q.shape)} and keys {tuple(ref.shape)} disagree on batch or head dim")
        if hq % hkv:
            raise ValueError(f"query heads ({hq}) must be a multiple of KV heads ({hkv})")
        need_pos = q_pos is not None
        if need_pos and tuple(q_pos.shape) != (b, n_q):
            raise ValueError(f"q_pos must be [B,L]=({b},{n_q}), got {tuple(q_pos.shape)}")
        if self.n_int8:
            self._check_segment("INT8", self.k_q, self.v_q, (b, hkv, d), self.pos_q, need_pos)
            for name, s in (("k_scale", self.k_scale), ("v_scale", self.v_scale)):
                if s is None or tuple(s.shape) != tuple(self.k_q.shape[:3]):
                    got = None if s is None else tuple(s.shape)
                    raise ValueError(f"{name} must be [B,Hkv,Tq]={tuple(self.k_q.shape[:3])}, got {got}")
            if self.k_channel is not None and tuple(self.k_channel.shape) != (b, hkv, d):
                raise ValueError(f"k_channel must be [B,Hkv,D]={(b, hkv, d)}, got {tuple(self.k_channel.shape)}")
            if self.k_q.dtype != torch.int8 or self.v_q.dtype != torch.int8:
                raise ValueError(f"k_q/v_q must be int8, got {self.k_q.dtype}/{self.v_q.dtype}")
        if self.n_fp:
            self._check_segment("model-dtype", self.k_fp, self.v_fp, (b, hkv, d), self.pos_fp, need_pos)
            if not self.k_fp.is_floating_point():
                raise ValueError(f"k_fp/v_fp must be floating point, got {self.k_fp.dtype}")

    @staticmethod
    def _check_segment(
        name: str,
        k: torch.Tensor,
        v: torch.Tensor | None,
        bhd: tuple[int, int, int],
        pos: torch.Tensor | None,
        need_pos: bool,
    ) -> None:
        b, h, d = bhd
        if v is None or k.shape != v.shape:
            raise ValueError(f"{name} segment: K and V shapes differ ({tuple(k.shape)} vs {None if v is None else tuple(v.shape)})")
        if k.dim() != 4 or (k.shape[0], k.shape[1], k.shape[3]) != (b, h, d):
            raise ValueError(f"{name} segment: expected [B,Hkv,T,D] with B,Hkv,D={bhd}, got {tuple(k.shape)}")
        if need_pos and (pos is None or tuple(pos.shape) != tuple(k.shape[:3])):
            got = None if pos is None else tuple(pos.shape)
            raise ValueError(f"{name} segment: positions must be [B,Hkv,T]={tuple(k.shape[:3])} when q_pos is given, got {got}")
