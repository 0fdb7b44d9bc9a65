"""Which precision to run a model in: `--dtype auto|fp32|bf16|fp16|bf16-int8|bf16-w8a8|fp32-int8|int8` on every
command that loads one (the names are `confkv.models.precision.PRECISIONS`).

`auto` on CUDA is bf16 (fp16 where bf16 is unsupported). On a CPU it is measured, not read from CPU flags: the
model's own Linear shapes are timed in every weight form the first time, per machine (`precision_choice`), and the
fastest precision this model is allowed wins (INT8 forms only where a decision-agreement record says they keep
fp32's actions). Three CPU kinds each proved a flag rule wrong, hence the clock. The weights cache keeps one fp32
copy per model; the precision is applied on load. Confidence, softmax and the attention-mass accumulators stay fp32
whatever this says.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from confkv.models.precision import PRECISIONS, Precision

DTYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32"}
CHOICES = ("auto", *PRECISIONS)


class DtypeError(ValueError):
    """An unknown dtype or precision name."""


def resolve_precision(
    name: str | torch.dtype | None,
    device: str | None = None,
    config: Any = None,
    model_name: str | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> tuple[Precision, list[str]]:
    """`name` -> (precision, lines saying why). None means fp32 (the library default: exact, comparable). `auto` on
    a CPU needs the model's `config` (its shapes are what gets timed); without one it stays fp32 and says so.
    `device` defaults to CUDA when there is one (where the benchmarks and the agent put the model)."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if isinstance(name, torch.dtype):
        return _float(name), [f"{name} (given)"]
    key = "fp32" if name is None else ALIASES.get(name.lower(), name.lower())
    if key == "auto":
        if device.startswith("cuda"):
            if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
                return PRECISIONS["bf16"], ["auto: bf16 (CUDA device with bf16 support)"]
            return PRECISIONS["fp16"], ["auto: fp16 (CUDA device without bf16)"]
        if config is None:
            return PRECISIONS["fp32"], ["auto: fp32 (no model shapes to time)"]
        from confkv.models.precision_choice import auto_precision

        choice = auto_precision(config, model_name, progress)
        return choice.precision, choice.lines
    if key not in PRECISIONS:
        raise DtypeError(f"unknown dtype {name!r}; expected one of {', '.join(CHOICES)}")
    return PRECISIONS[key], [f"{key} (asked for)"]


def resolve_dtype(name: str | torch.dtype | None, device: str | None = None) -> tuple[torch.dtype, str]:
    """The activation dtype of `name` and a short reason (`auto` without a model's shapes: see resolve_precision)."""
    precision, lines = resolve_precision(name, device)
    return precision.dtype, lines[0]


def _float(dtype: torch.dtype) -> Precision:
    return PRECISIONS[dtype_name(dtype)]


def dtype_name(dtype: torch.dtype) -> str:
    """torch.bfloat16 -> 'bf16' (the name the CLI and the trace store use)."""
    for key, value in DTYPES.items():
        if value == dtype:
            return key
    return str(dtype).removeprefix("torch.")
