"""Precisions: the activation dtype, and how each Linear holds its weights for prefill rows and for decode rows.

Why per phase: a prefill chunk is a matrix product (compute-bound: it wants the CPU's matrix units, AMX-BF16 or
VNNI INT8), a decode step multiplies one row by every weight (memory-bound: it wants the fewest weight bytes). On
the 2-core AMX Xeon, one thread, the 1.5B's MLP shape ran a 512-row chunk at 145 GFLOP/s in fp32, 651 in bf16 and
309 as W8A8 (the INT8 product itself 930, its int32 epilogue eats the rest), while one decode row took 2.5 ms in
fp32, 1.9 in bf16 (`torch.mv`) and 0.8 with INT8 weights. So the fastest agent step there is bf16 for prefill and
INT8 weights for decode; on another machine it can be something else, which is why `auto` measures
(`confkv.models.precision_choice`) instead of reading CPU flags.

INT8 here is per-output-channel symmetric weights (one scale per row of W) and, in W8A8, per-token symmetric dynamic
activation scales (one per row of x): a few outlier channels no longer set one scale for the whole tensor, the
failure mode of per-tensor dynamic quantization on Qwen-family models. Per-token scales still miss one input:
the MLP's down projection reads SiLU(gate) x up, whose outlier channels give it 5.5-9% output error where the median
Linear has 1.6% (`bench precision --layer-errors`, the agent's prompt, the 1.5B); `w8a8d` keeps that one projection in
the bf16 form (DOWN_PROJ). The LM head and the embeddings are never
quantized (the confidence signal is computed from the logits); confidence and softmax math stay fp32 regardless.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from confkv.models.gemv import bf16_row

ACT_DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
PREFILL_FORMATS = ("float", "bf16", "w8a8", "w8a8d")
DOWN_PROJ = "mlp.down_proj"  # the Linear `w8a8d` leaves in the bf16 form (its name ends with this)
DECODE_FORMATS = ("float", "bf16", "int8wo", "w8a8")


@dataclass(frozen=True)
class Precision:
    """One way to run a model: `act` is the dtype of activations (the residual stream, attention) and of the KV
    cache; `prefill` and `decode` say how Linear weights are applied to several rows and to one row: `float` in
    `act`; `bf16` bf16 weights and rows, the result back in `act` (an fp32 residual stream with bf16 matrix units,
    as CPU autocast does); `w8a8` INT8 x INT8 (per-token rows; one row through fbgemm); `w8a8d` (prefill only)
    `w8a8` but the MLP's down projection in the `bf16` form; `int8wo` INT8 weights times bf16 rows (decode
    only)."""

    name: str
    act: str
    prefill: str = "float"
    decode: str = "float"

    def __post_init__(self) -> None:
        if self.act not in ACT_DTYPES or self.prefill not in PREFILL_FORMATS or self.decode not in DECODE_FORMATS:
            raise ValueError(f"bad precision {self}")

    @property
    def dtype(self) -> torch.dtype:
        return ACT_DTYPES[self.act]

    @property
    def is_float(self) -> bool:
        return self.prefill == "float" and self.decode == "float"

    @property
    def holds_float(self) -> bool:
        return "float" in (self.prefill, self.decode)

    @property
    def holds_bf16(self) -> bool:
        return "bf16" in (self.prefill, self.decode) or self.prefill == "w8a8d"

    @property
    def holds_int8(self) -> bool:
        return self.prefill in ("w8a8", "w8a8d") or self.decode == "int8wo"

    def for_layer(self, name: str) -> Precision:
        """The forms one Linear named `name` runs: `w8a8d` resolves to `bf16` for the down projection, else `w8a8`."""
        if self.prefill != "w8a8d":
            return self
        return Precision(self.name, self.act, "bf16" if name.endswith(DOWN_PROJ) else "w8a8", self.decode)

    def weight_bytes_per_param(self) -> float:
        """Bytes each quantizable weight costs resident (both copies when the phases want different forms; for
        `w8a8d`, whose down projection alone holds bf16, an upper bound: `precision_choice.weight_bytes` is
        exact)."""
        out = ACT_DTYPES[self.act].itemsize if self.holds_float else 0.0
        out += 2.0 if self.holds_bf16 else 0.0
        out += 1.0 if self.holds_int8 else 0.0
        out += 1.0 if self.decode == "w8a8" else 0.0  # fbgemm keeps its own packed copy
        return out


def _registry() -> dict[str, Precision]:
    """Every valid combination, named `act` when both phases are float, else `act-prefill-decode`
    (`bf16-float-int8wo`: bf16 prefill, INT8-weight decode). `int8` is kept as the name of `fp32-w8a8-w8a8`
    (what `--int8` means)."""
    out = {}
    for act in ACT_DTYPES:
        for prefill in PREFILL_FORMATS:
            for decode in DECODE_FORMATS:
                if act == "fp16" and (prefill, decode) != ("float", "float"):
                    continue  # fp16 is for CUDA; INT8 forms are CPU kernels
                if act != "fp32" and "bf16" in (prefill, decode):
                    continue  # in bf16 activations the `bf16` form is `float`
                name = act if prefill == decode == "float" else f"{act}-{prefill}-{decode}"
                out[name] = Precision(name, act, prefill, decode)
    out["int8"] = out["fp32-w8a8-w8a8"]
    return out


PRECISIONS: dict[str, Precision] = _registry()


def get_precision(name: str) -> Precision:
    try:
        return PRECISIONS[name]
    except KeyError:
        raise ValueError(f"unknown precision {name!r}; expected one of {', '.join(PRECISIONS)}") from None


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric INT8 per row of a 2-D tensor: (int8 values, fp32 scales [rows, 1]); x ~= q * scale."""
    xf = x.float()
    scale = xf.abs().amax(dim=1, keepdim=True).clamp_min(1e-8) / 127.0
    return torch.round(xf / scale).clamp_(-127, 127).to(torch.int8), scale


class Int8Linear(torch.nn.Module):
    """A Linear with per-channel INT8 weights (and, where a phase wants it, its float weight too).

    Rows are told apart by count: one row is a decode step (`decode` form), several a prefill chunk (`prefill`
    form). The float weight and bias are the original parameters, so nothing else in the model changes."""

    def __init__(self, linear: torch.nn.Linear, precision: Precision, name: str = "") -> None:
        super().__init__()
        precision = precision.for_layer(name)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.prefill, self.decode = precision.prefill, precision.decode
        self.act = precision.dtype
        w = linear.weight.detach()
        self.weight = linear.weight if precision.holds_float else None
        self.bias = linear.bias
        if precision.holds_bf16:
            self.register_buffer("weight_bf16", w.to(torch.bfloat16), persistent=False)
        self._packed = None
        if not (precision.holds_int8 or self.decode == "w8a8"):
            return  # a float or bf16 form: quantizing the 196 weights took 16 s of a profiled load (two cores shared)
        q, scale = quantize_rows(w)
        scale = scale[:, 0]
        if precision.holds_int8:
            self.register_buffer("qweight", q, persistent=False)  # [out, in] int8
            self.register_buffer("scale", scale, persistent=False)  # [out] fp32
            self.register_buffer("scale_bf16", scale.to(torch.bfloat16), persistent=False)
        if self.decode == "w8a8":  # fbgemm's dynamic linear: per-channel weights; one row = a per-token scale
            qw = torch.quantize_per_channel(w.float(), scale.double(), torch.zeros_like(scale, dtype=torch.long), 0,
                                            torch.qint8)  # fmt: skip
            self._packed = torch.ops.quantized.linear_prepack(qw, None)

    def extra_repr(self) -> str:
        return f"{self.in_features}, {self.out_features}, prefill={self.prefill}, decode={self.decode}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        rows = x.reshape(-1, self.in_features)
        y = self._decode(rows) if rows.shape[0] == 1 else self._prefill(rows)
        return y.reshape(*shape[:-1], self.out_features)

    def _float(self, rows: torch.Tensor) -> torch.Tensor:
        if rows.shape[0] == 1 and rows.dtype == torch.bfloat16:  # the measured bf16 row kernel (gemv.py)
            y = bf16_row(self.weight, rows[0])
            return (y if self.bias is None else y + self.bias)[None]
        return F.linear(rows, self.weight, self.bias)

    def _bf16(self, rows: torch.Tensor) -> torch.Tensor:
        x = rows.to(torch.bfloat16)
        y = bf16_row(self.weight_bf16, x[0])[None] if rows.shape[0] == 1 else F.linear(x, self.weight_bf16)
        y = y.to(rows.dtype)
        return y if self.bias is None else y + self.bias

    def _prefill(self, rows: torch.Tensor) -> torch.Tensor:
        if self.prefill == "float":
            return self._float(rows)
        if self.prefill == "bf16":
            return self._bf16(rows)
        q, sx = quantize_rows(rows)
        y = torch._int_mm(q, self.qweight.t()).float()
        y.mul_(sx).mul_(self.scale)
        y = y.to(rows.dtype)
        return y if self.bias is None else y + self.bias

    def _decode(self, rows: torch.Tensor) -> torch.Tensor:
        if self.decode == "float":
            return self._float(rows)
        if self.decode == "bf16":
            return self._bf16(rows)
        if self.decode == "int8wo":  # its kernel is fast with bf16 rows (0.8 ms for one MLP row; fp32 rows 10 ms)
            y = torch.ops.aten._weight_int8pack_mm(rows.to(torch.bfloat16), self.qweight, self.scale_bf16)
            y = y.to(rows.dtype)
        else:
            y = torch.ops.quantized.linear_dynamic(rows.float(), self._packed, True).to(rows.dtype)
        return y if self.bias is None else y + self.bias


def quantizable_linears(model: Any, keep_float: set[str] = frozenset()) -> list[tuple[Any, str, str]]:
    """(parent module, attribute, qualified name) of every plain Linear but the LM head and those in
    `keep_float`."""
    head = model.get_output_embeddings()
    out = []
    for parent_name, parent in model.named_modules():
        for name, child in parent.named_children():
            full = f"{parent_name}.{name}" if parent_name else name
            if type(child) is torch.nn.Linear and child is not head and full not in keep_float:
                out.append((parent, name, full))
    return out


def apply_precision(model: Any, precision: Precision | str, keep_float: set[str] = frozenset()) -> int:
    """Swap the model's Linear layers for `precision`'s form (the model is already in `precision.dtype`); returns
    how many were swapped. A float precision swaps bf16 Linears for `RowGemvLinear` (decode rows via torch.mv)."""
    from confkv.models.gemv import row_gemv_linears

    precision = get_precision(precision) if isinstance(precision, str) else precision
    if precision.is_float:
        return row_gemv_linears(model)
    swaps = quantizable_linears(model, keep_float)
    for parent, name, full in swaps:
        setattr(parent, name, Int8Linear(getattr(parent, name), precision, full))
    return len(swaps)


def linear_inputs(model: Any, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """{name: the rows [tokens, in_features] each quantizable Linear reads} in one forward of `ids`."""
    inputs: dict[str, torch.Tensor] = {}
    hooks = []
    for parent, attr, name in quantizable_linears(model):
        mod = getattr(parent, attr)
        hooks.append(mod.register_forward_hook(
            lambda m, a, out, n=name: inputs.__setitem__(n, a[0].detach().reshape(-1, a[0].shape[-1]).float())))
    try:
        with torch.no_grad():
            model(ids)
    finally:
        for h in hooks:
            h.remove()
    return inputs


def layer_errors(model: Any, ids: torch.Tensor, precision: Precision | str) -> list[tuple[str, str, float]]:
    """Relative output error of each quantizable Linear in `precision`'s INT8 forms against its float product, on
    the inputs a real forward of `ids` gives it (the model in fp32): (name, phase, error), largest first. Why: a
    layer whose error stands out (outlier activations) is the one to keep float (`apply_precision(keep_float=)`).
    The decode form is measured on the last row alone, as a decode step would run it."""
    precision = get_precision(precision) if isinstance(precision, str) else precision
    inputs = linear_inputs(model, ids)
    out = []
    modules = dict(model.named_modules())
    with torch.no_grad():
        for name, x in inputs.items():
            lin = modules[name]
            quant = Int8Linear(lin, precision, name)
            rows = x.reshape(-1, lin.in_features)
            for phase, xs in (("prefill", rows), ("decode", rows[-1:])):
                if getattr(quant, phase) == "float":  # the form this layer resolved to
                    continue
                ref = F.linear(xs.float(), lin.weight.float(), None if lin.bias is None else lin.bias.float())
                got = quant(xs.to(precision.dtype)).float()
                out.append((name, phase, float((got - ref).norm() / ref.norm().clamp_min(1e-12))))
    return sorted(out, key=lambda r: -r[2])
