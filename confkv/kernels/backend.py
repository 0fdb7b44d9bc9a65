"""Which attention backend a call takes, and the `CONFKV_ATTENTION` override.

A module of its own because the package (`confkv.kernels.segmented_attention`) and the compiled CPU kernels
(`cpu_decode.enabled`) both read the override: kept here, below both, it makes no import cycle.
"""

from __future__ import annotations

import functools
import importlib.util
import os

import torch

BACKEND_ENV = "CONFKV_ATTENTION"
_BACKENDS = ("reference", "triton")


@functools.cache
def triton_available() -> bool:
    """True if `triton` is installed and imports (checked once; importing it is slow)."""
    if importlib.util.find_spec("triton") is None:
        return False
    try:
        import triton  # noqa: F401
    except Exception:  # a broken triton install must not break the CPU path
        return False
    return True


def select_backend(q: torch.Tensor) -> str:
    """`reference` or `triton` for this query tensor, honouring the `CONFKV_ATTENTION` override."""
    forced = os.environ.get(BACKEND_ENV, "").strip().lower()
    if forced:
        if forced not in _BACKENDS:
            raise ValueError(f"{BACKEND_ENV}={forced!r}: expected one of {', '.join(_BACKENDS)}")
        if forced == "triton" and not triton_available():
            raise RuntimeError(f"{BACKEND_ENV}=triton but triton is not importable")
        return forced
    return "triton" if q.is_cuda and triton_available() else "reference"
