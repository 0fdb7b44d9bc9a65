"""One-row bf16 Linear products on CPU, through the row kernel this machine measured faster.

Why: a decode step multiplies a single activation row by every weight matrix, so it is a stream over the weights,
and which of torch's two paths streams bf16 weights faster depends on the machine. On the 2-core AMX Xeon
`torch.mv` streamed them at ~27 GB/s and `F.linear` (oneDNN) at ~18; on an AMD EPYC with AVX512-BF16 (Zen 4), one
thread, `F.linear` took 2.12 ms on the 1.5B's gate shape where `mv` took 2.74 (and 1.05 against 1.49 at two
threads). So the kernel is measured with the precision timings (`confkv.models.precision_choice`, cached per CPU
model and thread count) and set process-wide with `set_row_kernel`; without a measurement it is `mv`. Both kernels
compute the same form (bf16 weights and row, fp32 accumulation, a bf16 result), in a different summation order, as
oneDNN's own per-ISA kernels already do from machine to machine. fp32 is left alone (`mv` and `linear` measured the
same), and so is fp16 (its CPU `addmv` measured 5.6x slower than `F.linear`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

SWAPPED_DTYPES = (torch.bfloat16,)
ROW_KERNELS = ("mv", "linear")
_kernel = {"bf16": "mv"}


def row_kernel() -> str:
    """The kernel one-row bf16 products run through in this process."""
    return _kernel["bf16"]


def set_row_kernel(name: str) -> None:
    if name not in ROW_KERNELS:
        raise ValueError(f"unknown row kernel {name!r}; expected one of {', '.join(ROW_KERNELS)}")
    _kernel["bf16"] = name


def bf16_row(weight: torch.Tensor, row: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`weight @ row (+ bias)` for one row [in] -> [out], through `row_kernel()`."""
    if _kernel["bf16"] == "linear":
        return F.linear(row[None], weight, bias)[0]
    return torch.mv(weight, row) if bias is None else torch.addmv(bias, weight, row)


def time_row_kernels(shapes: Sequence[tuple[int, int]], reps: int = 5) -> dict[str, float]:
    """ms for one bf16 row through every (in, out) Linear of `shapes` per kernel: the minimum of `reps` passes,
    kernels interleaved so that load on the machine hits them alike."""
    gen = torch.Generator().manual_seed(0)
    weights = [(torch.randn(o, i, generator=gen) * 0.02).to(torch.bfloat16) for i, o in shapes]
    rows = [torch.randn(i, generator=gen).to(torch.bfloat16) for i, _ in shapes]
    was, best = row_kernel(), dict.fromkeys(ROW_KERNELS, float("inf"))
    try:
        with torch.no_grad():
            for rep in range(reps + 1):
                for kernel in ROW_KERNELS:
                    set_row_kernel(kernel)
                    t0 = time.perf_counter()
                    for w, x in zip(weights, rows, strict=True):
                        bf16_row(w, x)
                    if rep:  # the first pass warms up
                        best[kernel] = min(best[kernel], (time.perf_counter() - t0) * 1000)
    finally:
        set_row_kernel(was)
    return best


class RowGemvLinear(torch.nn.Linear):
    """`nn.Linear` whose single-row CPU calls run through `bf16_row`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.numel() != self.in_features or x.shape[-1] != self.in_features or x.device.type != "cpu":
            return F.linear(x, self.weight, self.bias)
        return bf16_row(self.weight, x.reshape(-1), self.bias).reshape(*x.shape[:-1], self.out_features)


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
