"""Which floating-point type to run a model in: `--dtype auto|bf16|fp16|fp32` on every command that loads one.

Why `auto` looks at the CPU: bf16 matrix work is only fast where the hardware has matrix units for it (CUDA;
AMX-BF16 on x86). Measured with the 1.5B default on 2 cores (`bench dtype`, docs/results/dtype-*.json): on an AMX
Xeon bf16 ran agent steps about 2x faster than fp32; on a Xeon with AVX512-BF16 but no AMX it was 1.43x slower
(PyTorch's bf16 GEMMs there reach 74 GFLOPS against 105 in fp32), and on an AVX2-only EPYC, where bf16 is emulated,
1.35x slower. So `auto` picks bf16 only with AMX-BF16 and says why; `--dtype bf16` still forces it. The weights
cache keeps one fp32 copy per model; the dtype is applied on load. Confidence, softmax and the attention-mass accumulators stay fp32 whatever this says.
"""

from __future__ import annotations

from pathlib import Path

import torch

DTYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32"}
CHOICES = ("auto", *DTYPES)
NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16")


class DtypeError(ValueError):
    """An unknown dtype name, or one this device cannot run."""


def cpu_bf16_flags(cpuinfo: str | None = None) -> list[str]:
    """The native-bf16 CPU flags this machine reports (empty where there is no native bf16 or no /proc)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return []
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[-1].split())
            break
    return [f for f in NATIVE_BF16_FLAGS if f in flags]


def resolve_dtype(name: str | torch.dtype | None, device: str | None = None, cpuinfo: str | None = None
                  ) -> tuple[torch.dtype, str]:  # fmt: skip
    """`name` -> (dtype, a short reason to print). None means fp32 (the library default: exact, comparable).
    `device` defaults to CUDA when there is one (where the benchmarks and the agent put the model)."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if isinstance(name, torch.dtype):
        return name, f"{name} (given)"
    key = "fp32" if name is None else ALIASES.get(name.lower(), name.lower())
    if key == "auto":
        if device.startswith("cuda"):
            if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
                return torch.bfloat16, "auto: bf16 (CUDA device with bf16 support)"
            return torch.float16, "auto: fp16 (CUDA device without bf16)"
        flags = cpu_bf16_flags(cpuinfo)
        if "amx_bf16" in flags:
            return torch.bfloat16, f"auto: bf16 (CPU has native bf16 matrix units: {', '.join(flags)})"
        if flags:
            return torch.float32, ("auto: fp32 (CPU has avx512_bf16 but no AMX-BF16: bf16 measured slower than fp32 "
                                   "there; --dtype bf16 forces it)")
        return torch.float32, "auto: fp32 (this CPU has no AMX-BF16/AVX512-BF16; emulated bf16 would be slower)"
    if key not in DTYPES:
        raise DtypeError(f"unknown dtype {name!r}; expected one of {', '.join(CHOICES)}")
    return DTYPES[key], f"{key} (asked for)"


def dtype_name(dtype: torch.dtype) -> str:
    """torch.bfloat16 -> 'bf16' (the name the CLI and the trace store use)."""
    for key, value in DTYPES.items():
        if value == dtype:
            return key
    return str(dtype).removeprefix("torch.")
