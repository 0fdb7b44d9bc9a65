"""One-row bf16 Linear layers on CPU through a matrix-vector product.

Why: a decode step multiplies a single activation row by every weight matrix, so it is a stream over the weights.
For a bf16 row on CPU, `F.linear` goes through oneDNN's GEMM, which on this project's 2-core AMX machine streamed
the weights at ~18 GB/s, while `torch.mv` streamed the same bf16 weights at ~27 GB/s (fp32 `F.linear`: ~31 GB/s;
fp32 `mv` and `linear` measured the same, so fp32 is left alone). Several rows (prefill) keep `F.linear`, which
uses AMX there. The swap keeps the very same weight and bias parameters, so tied embeddings stay tied and the
state dict is unchanged. fp16 is left alone too: its CPU `addmv` measured 5.6x slower than `F.linear`.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

SWAPPED_DTYPES = (torch.bfloat16,)


class RowGemvLinear(torch.nn.Linear):
    """`nn.Linear` whose single-row CPU calls run as `torch.addmv` / `torch.mv`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.numel() != self.in_features or x.shape[-1] != self.in_features or x.device.type != "cpu":
            return F.linear(x, self.weight, self.bias)
        row = x.reshape(-1)
        y = torch.mv(self.weight, row) if self.bias is None else torch.addmv(self.bias, self.weight, row)
        return y.reshape(*x.shape[:-1], self.out_features)


def row_gemv_linears(model: Any) -> int:
    """Swap every plain `nn.Linear` with bf16 weights for a `RowGemvLinear` on the same parameters; returns how
    many were swapped (0 for an fp32 or fp16 model)."""
    swaps = []
    for parent in model.modules():
        for name, child in parent.named_children():
            if type(child) is torch.nn.Linear and child.weight.dtype in SWAPPED_DTYPES:
                swaps.append((parent, name, child))
    for parent, name, child in swaps:
        new = RowGemvLinear(child.in_features, child.out_features, bias=child.bias is not None, device="meta")
        new.weight, new.bias = child.weight, child.bias
        new.train(child.training)
        setattr(parent, name, new)
    return len(swaps)
