"""Where an INT8 form's error comes from, before an hour-long decision replay is spent on it.

Why: the acceptance gate (a precision must keep >= 97% of fp32's greedy actions on the agent's recorded states)
passed the bf16 form at 97.9% and rejected every INT8 form tried (W8A8 ~91%, W8A8 with the down projection in bf16
93%, INT8-weight decode 89%). Each Linear's relative output error, on the inputs a real forward gives it, split by
what is quantized (weights, activations, both) and with the usual remedies applied (group-wise weight scales,
SmoothQuant-style smoothing calibrated on other text), says which remedy could get near the bf16 form's error and
which cannot, at the cost of one forward.

Forms (each against the fp32 product `x @ W.T`):
- `bf16`: weights and rows in bf16, fp32 accumulation (the accepted form).
- `w8a8`: per-output-channel INT8 weights and per-token INT8 rows (`Int8Linear`'s prefill form).
- `w8`: the INT8 weights alone, fp32 rows; `a8`: the INT8 rows alone, fp32 weights.
- `w8g128`: INT8 weights with one scale per 128 inputs of each row, fp32 rows (what group-wise kernels hold).
- `w8a8-sq<alpha>`: SmoothQuant (Xiao et al., 2022): input channel j divided by
  `s_j = max|x_j|^alpha / max|W_:,j|^(1 - alpha)` and W's column j multiplied by it (the product is unchanged in
  exact arithmetic), the maxima from a calibration forward of other text, then `w8a8`.
"""

from __future__ import annotations

import statistics
from typing import Any

import torch

from confkv.models.precision import linear_inputs, quantize_rows

BASE_FORMS = ("bf16", "w8a8", "w8", "a8", "w8g128")
GROUP = 128


def _dequant_rows(x: torch.Tensor) -> torch.Tensor:
    q, scale = quantize_rows(x)
    return q.float() * scale


def _w8g(w: torch.Tensor) -> torch.Tensor:
    if w.shape[1] % GROUP:
        return _dequant_rows(w)  # no whole groups: per-channel is the closest group-wise form
    return _dequant_rows(w.reshape(-1, GROUP)).reshape(w.shape)


def _w8a8(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return _dequant_rows(x) @ _dequant_rows(w).t()


def form_output(form: str, x: torch.Tensor, w: torch.Tensor, calib_max: torch.Tensor | None = None) -> torch.Tensor:
    """`x @ w.T` (both fp32, x [rows, in]) as `form` computes it; `calib_max` [in] is needed by the smoothed forms."""
    if form == "bf16":
        return (x.bfloat16() @ w.bfloat16().t()).float()
    if form == "w8a8":
        return _w8a8(x, w)
    if form == "w8":
        return x @ _dequant_rows(w).t()
    if form == "a8":
        return _dequant_rows(x) @ w.t()
    if form == "w8g128":
        return x @ _w8g(w).t()
    alpha = _smoothing_alpha(form)
    if alpha is not None:
        if calib_max is None:
            raise ValueError(f"{form} needs calibration maxima (a calibration forward)")
        s = (calib_max.clamp_min(1e-5) ** alpha / w.abs().amax(0).clamp_min(1e-5) ** (1 - alpha)).clamp_min(1e-5)
        return _w8a8(x / s, w * s)
    raise _unknown(form)


def _unknown(form: str) -> ValueError:
    return ValueError(f"unknown form {form!r}; expected {', '.join(BASE_FORMS)} or w8a8-sq<alpha in [0, 1]>")


def _smoothing_alpha(form: str) -> float | None:
    """alpha of a `w8a8-sq<alpha>` form, None for any other name; ValueError when alpha is not a number in [0, 1]."""
    if not form.startswith("w8a8-sq"):
        return None
    text = form.removeprefix("w8a8-sq")
    if not text.replace(".", "", 1).isdigit() or float(text) > 1.0:
        raise _unknown(form)
    return float(text)


def check_forms(forms: tuple[str, ...]) -> None:
    """Raise ValueError on a form name `form_output` does not know (before any model is loaded)."""
    if not forms:
        raise ValueError("no forms given")
    for form in forms:
        if form not in BASE_FORMS and _smoothing_alpha(form) is None:
            raise _unknown(form)


def form_errors(model: Any, ids: torch.Tensor, forms: tuple[str, ...] = BASE_FORMS,
                calib_ids: torch.Tensor | None = None) -> dict[str, dict[str, float]]:  # fmt: skip
    """{form: {Linear name: relative error}} on the inputs a forward of `ids` gives each quantizable Linear (the
    model in fp32); the smoothed forms take their per-channel maxima from a forward of `calib_ids`."""
    check_forms(forms)
    if any(_smoothing_alpha(f) is not None for f in forms) and calib_ids is None:
        raise ValueError("smoothed forms need calib_ids (text other than the measured one)")
    calib = {n: x.abs().amax(0) for n, x in linear_inputs(model, calib_ids).items()} if calib_ids is not None else {}
    modules = dict(model.named_modules())
    out: dict[str, dict[str, float]] = {f: {} for f in forms}
    with torch.no_grad():
        for name, x in linear_inputs(model, ids).items():
            w = modules[name].weight.detach().float()
            ref = x @ w.t()
            norm = ref.norm().clamp_min(1e-12)
            for form in forms:
                out[form][name] = float((form_output(form, x, w, calib.get(name)) - ref).norm() / norm)
    return out


def summarize(errors: dict[str, dict[str, float]], worst: int = 3) -> list[dict[str, Any]]:
    """Per form: median and mean over Linears, the median per kind (`q_proj`, ..., `down_proj`) and the worst."""
    rows = []
    for form, per_layer in errors.items():
        kinds: dict[str, list[float]] = {}
        for name, e in per_layer.items():
            kinds.setdefault(name.rsplit(".", 1)[-1], []).append(e)
        ranked = sorted(per_layer.items(), key=lambda kv: -kv[1])[:worst]
        rows.append({"form": form, "median": statistics.median(per_layer.values()),
                     "mean": statistics.fmean(per_layer.values()),
                     "by_kind": {k: statistics.median(v) for k, v in kinds.items()},
                     "worst": [[n, e] for n, e in ranked]})  # fmt: skip
    return rows
