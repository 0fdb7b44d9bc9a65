"""The compiled CPU decode step (`cpu_decode.cpp`): one op per layer instead of the reference's ~17.

Why: on CPU a decode step of a small model is dispatch-bound. The reference's decode path (dequantize the INT8
segment, join it with the model-dtype one, cast, two matmuls, a softmax) cost ~350 µs per layer on SmolLM2 with
266 kept tokens, against ~50 µs for the plain cache's SDPA over all 1K tokens, and that difference was the 1K
decode gap (`bench decode`). The kernel does the same fp32 math in one pass per query head.

This module also builds and owns the one extension every compiled CPU op lives in: this decode step, the prefill
mass (`cpu_prefill.cpp`, used by `confkv.kernels.cpu_prefill`) and the per-step confidence (`cpu_confidence.cpp`,
used by `confkv.confidence`). It is built on first use with the machine's C++ compiler
(`torch.utils.cpp_extension.load`, ~1 min once, cached under torch's extensions directory, the name keyed by the
sources and the CPU's flags since it is built with `-march=native`). Without a compiler, or if the build fails,
`kernel()` returns None once with the reason in `build_error()` and the reference paths run. `CONFKV_CPU_KERNEL=0`
turns all of them off.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch

from confkv.cpu import cpu_flags
from confkv.kernels.backend import BACKEND_ENV
from confkv.kernels.segments import SegmentedKV

ENV = "CONFKV_CPU_KERNEL"
SOURCES = [Path(__file__).with_name(n) for n in ("cpu_decode.cpp", "cpu_prefill.cpp", "cpu_attention.cpp",
                                                 "cpu_confidence.cpp")]
HEADERS = [Path(__file__).with_name("cpu_simd.h")]  # part of the build's identity, not compiled on their own
FLAGS = ["-O3", "-march=native", "-fno-math-errno", "-fno-trapping-math", "-fassociative-math", "-fno-signed-zeros"]
STALE_LOCK_S = 600  # a real build takes about a minute
_ERROR: list[str] = []


def enabled() -> bool:
    """Not turned off: neither `CONFKV_CPU_KERNEL=0` nor `CONFKV_ATTENTION=reference` (which means the reference only)."""
    if os.environ.get(BACKEND_ENV, "").strip().lower() == "reference":
        return False
    return os.environ.get(ENV, "1").strip() not in ("0", "false", "no", "off")


def active() -> bool:
    """Whether one-query CPU calls run the kernel in this process: enabled, and built (the build happens here, so a
    benchmark calls this before its clocks start)."""
    return enabled() and kernel() is not None


_BUILD_LOCK = threading.Lock()  # functools.cache alone lets two threads' first calls both build and load


def kernel() -> Any | None:
    """The compiled extension module, or None (no compiler, build failure): built at most once per process, also
    when several threads ask first at once (`tests` and a server thread, say)."""
    if _built.cache_info().currsize:
        return _built()
    with _BUILD_LOCK:
        return _built()


@functools.cache
def _built() -> Any | None:
    if shutil.which(os.environ.get("CXX", "c++")) is None:
        _ERROR.append("no C++ compiler on PATH")
        return None
    from torch.utils.cpp_extension import load

    try:  # the `ninja` wheel (a dependency) puts its binary in the venv, which may not be on PATH
        import ninja

        if ninja.BIN_DIR:  # an empty entry would put the current directory on PATH
            os.environ["PATH"] = f"{ninja.BIN_DIR}{os.pathsep}{os.environ.get('PATH', '')}"
    except ImportError:
        pass
    from torch.utils.cpp_extension import _get_build_directory

    # The checkout's path is part of the name: ninja's build file names the sources by path, so two checkouts (a
    # worktree running an eval beside the main one running tests) sharing one build directory rebuilt it in turn
    # and each waited on the other's build lock.
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in SOURCES + HEADERS) + cpu_flags().encode()
                            + " ".join(FLAGS).encode() + str(SOURCES[0].resolve().parent).encode()).hexdigest()[:12]
    name = f"confkv_cpu_decode_{digest}"
    try:
        build = Path(_get_build_directory(name, verbose=False))
        lock = build / "lock"  # torch's build baton; a build killed with SIGKILL leaves it and later loads wait forever
        if lock.exists() and time.time() - lock.stat().st_mtime > STALE_LOCK_S:
            print(f"confkv: removing a stale build lock {lock}", file=sys.stderr)
            lock.unlink(missing_ok=True)
        if not (build / f"{name}.so").exists():
            print(f"confkv: building the CPU decode kernel once (about a minute; {ENV}=0 skips it)", file=sys.stderr)
        return load(name=name, sources=[str(p) for p in SOURCES], extra_cflags=FLAGS, verbose=False)
    except Exception as exc:  # a broken toolchain must not break decoding: the reference path runs instead
        _ERROR.append(f"{type(exc).__name__}: {exc}")
        return None


def build_error() -> str | None:
    return _ERROR[0] if _ERROR else None


def usable(q: torch.Tensor, kv: SegmentedKV, trusted: bool = False) -> bool:
    """A one-query CPU call whose K/V rows are contiguous and dtypes as the cache stores them. `trusted`: the
    segments come from the cache itself (always laid out so): only the call's shape and the build are checked,
    since these checks cost about as much as the kernel call on a small model."""
    if q.dim() != 4 or q.device.type != "cpu" or q.shape[2] != 1 or not active():
        return False
    if q.requires_grad and torch.is_grad_enabled():  # the kernel has no backward
        return False
    if trusted:
        return True
    tensors = [t for t in (kv.k_q, kv.v_q, kv.k_fp, kv.v_fp) if t is not None and t.shape[2]]
    tensors += [kv.k_channel] if kv.k_channel is not None else []
    if any(t.stride(-1) != 1 for t in tensors) or (kv.n_fp and not kv.k_fp.dtype == kv.v_fp.dtype == q.dtype):
        return False
    if kv.n_int8 and not (kv.k_q.dtype == kv.v_q.dtype == torch.int8
                          and kv.k_scale.dtype == kv.v_scale.dtype == torch.float32
                          and (kv.k_channel is None or kv.k_channel.dtype == torch.float32)):
        return False
    return True


def decode_attention(
    q: torch.Tensor, kv: SegmentedKV, scale: float, return_mass: bool, kv_head_mass: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`q [B,Hq,1,D]` over `kv`: (out in q's dtype, mass fp32 | None); see `usable`. The mass is the probabilities
    `[B,Hq,Tq+Tf]`, or with `kv_head_mass` their mean over each KV head's query group `[B,Hkv,Tq+Tf]`."""
    b, hq, _, d = q.shape
    n8, nf = kv.n_int8, kv.n_fp
    hkv = kv.reference_tensor().shape[1]
    empty = q.new_empty(0)
    out, p = kernel().decode_attention(
        q.reshape(b, hq, d).contiguous(),
        kv.k_q if n8 else empty, kv.v_q if n8 else empty,
        kv.k_scale if n8 else empty, kv.v_scale if n8 else empty,
        kv.k_channel if (n8 and kv.k_channel is not None) else empty,
        kv.k_fp if nf else empty, kv.v_fp if nf else empty,
        n8, nf, hkv, float(scale), bool(return_mass and kv_head_mass),
    )  # fmt: skip
    return out.view(b, hq, 1, d).to(q.dtype), (p if return_mass else None)
