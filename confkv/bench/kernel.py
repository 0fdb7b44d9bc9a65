"""`bench kernel`: decode attention speed over the segmented cache vs SDPA over an equal full-precision cache.

Why these variants: the INT8 segment only pays off if reading half the bytes makes decode attention faster, and the
ranker's attention mass only stays "free" if it costs little on top. Per context length we time
- `sdpa`: `torch.nn.functional.scaled_dot_product_attention` over the whole cache in the model dtype (GQA native);
- `ours-fp`: our backend with INT8 off (every token in the model-dtype segment), without and with the mass output;
- `ours-int8`: our backend with all but a `recent` window in INT8, without and with the mass output.
Bandwidth is computed from the bytes actually read: K/V segments, INT8 scales, q (and the output written). On a GPU
each timed call reads a different copy of the cache (rotating through enough copies to exceed the L2 cache), so
short contexts are not served from L2. On CPU the backend is the PyTorch reference (Triton needs CUDA) and the
report says so.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from confkv.bench.protocol import Benchmark, Progress, ints, option
from confkv.kernels import SegmentedKV, reference_attention, segmented_attention, select_backend

CPU_DEFAULT_LENGTHS = "512,1024,2048"
GPU_DEFAULT_LENGTHS = "1024,2048,4096,8192,16384,32768"
ROTATE_BYTES = 256 << 20  # > 2x the H200's 50 MB L2 (and any CPU LLC)
MAX_COPIES = 64


@dataclass
class KernelBenchConfig:
    lengths: tuple[int, ...]
    batch: int = 1
    heads: int = 32
    kv_heads: int = 8
    head_dim: int = 128
    recent: int = 128
    iters: int = 20
    warmup: int = 3
    dtype: torch.dtype | None = None  # default: fp16 on CUDA, fp32 on CPU (CPU fp16 matmuls are emulated)
    device: str | None = None  # default: cuda if available
    compile: bool = False  # also time `torch.compile(dynamic=True)` of the INT8+mass call (minutes to compile on CPU)


@dataclass
class BenchRow:
    length: int
    variant: str
    backend: str
    ms: float
    bytes_read: int
    gbps: float
    speedup_vs_sdpa: float
    max_abs_err: float | None  # vs the PyTorch reference on the same inputs (None for sdpa)


def _tensor_bytes(*ts: torch.Tensor | None) -> int:
    return sum(t.numel() * t.element_size() for t in ts if t is not None)


def _cache_bytes(kv: SegmentedKV) -> int:
    return _tensor_bytes(kv.k_q, kv.v_q, kv.k_scale, kv.v_scale, kv.k_fp, kv.v_fp)


def _timer(device: torch.device) -> Callable[[Callable[[int], object], int, int], float]:
    """Median milliseconds of fn(i) over `iters` calls (after `warmup`); CUDA events on GPU, perf_counter on CPU."""

    def run(fn: Callable[[int], object], iters: int, warmup: int) -> float:
        for i in range(warmup):
            fn(i)
        times = []
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            for i in range(iters):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn(i)
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
        else:
            for i in range(iters):
                t0 = time.perf_counter()
                fn(i)
                times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)

    return run


_COMPILED: list = []  # one compiled callable per process: dynamic shapes, so lengths do not recompile


def _compiled_row(q, caches, length, variant, nbytes, sdpa_ms, timer, cfg) -> BenchRow:
    """The PyTorch reference's INT8+mass call through `torch.compile` (inductor; C++ on CPU, Triton on CUDA). Why
    measure it: the decode step is many small ops, which is what fusion is for; the first call compiles (not timed).
    The reference, not `segmented_attention`: on CPU the latter runs the C++ kernel, which inductor cannot fuse."""
    if not _COMPILED:
        _COMPILED.append(torch.compile(lambda q, kv: reference_attention(q, kv, None, None, True), dynamic=True))
    fn = _COMPILED[0]
    want, want_mass = reference_attention(q, caches[0], None, None, True)
    got, got_mass = fn(q, caches[0])
    err = max((got.float() - want.float()).abs().max().item(), (got_mass - want_mass).abs().max().item())
    ms = timer(lambda i: fn(q, caches[i % len(caches)]), cfg.iters, cfg.warmup)
    return BenchRow(length, variant + "+mass compiled", "inductor", ms, nbytes, nbytes / ms / 1e6, sdpa_ms / ms, err)


def copy_bandwidth_gbps(device: torch.device, n_bytes: int = 1 << 30, iters: int = 10) -> float:
    """Device-to-device copy bandwidth (read + write bytes / time), the ceiling the kernel is compared with."""
    src = torch.empty(n_bytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    ms = _timer(device)(lambda _i: dst.copy_(src), iters, 2)
    return 2 * n_bytes / (ms * 1e-3) / 1e9


def run_kernel_bench(cfg: KernelBenchConfig) -> dict:
    """Time every variant at every length; returns {"device", "backend", "note", "copy_gbps", "rows": [...]}."""
    device = torch.device(cfg.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = cfg.dtype or (torch.float16 if device.type == "cuda" else torch.float32)
    if cfg.heads % cfg.kv_heads:
        raise ValueError(f"heads ({cfg.heads}) must be a multiple of kv_heads ({cfg.kv_heads})")
    if not cfg.lengths or min(cfg.lengths) < 1:
        raise ValueError(f"lengths must be positive integers, got {cfg.lengths}")
    timer = _timer(device)
    gen = torch.Generator(device=device).manual_seed(0)
    q = torch.randn(cfg.batch, cfg.heads, 1, cfg.head_dim, generator=gen, device=device, dtype=dtype)
    backend = select_backend(q)
    if backend == "reference" and q.device.type == "cpu":
        from confkv.kernels import cpu_decode

        if cpu_decode.active():  # built here, before any timing
            backend = "cpu-kernel"
    rows: list[BenchRow] = []
    for length in cfg.lengths:
        shape = (cfg.batch, cfg.kv_heads, length, cfg.head_dim)
        one_cache = 2 * math.prod(shape) * torch.tensor([], dtype=dtype).element_size()
        copies = 1 if device.type == "cpu" else max(1, min(MAX_COPIES, math.ceil(ROTATE_BYTES / one_cache)))
        dense = [
            (torch.randn(shape, generator=gen, device=device, dtype=dtype),
             torch.randn(shape, generator=gen, device=device, dtype=dtype))
            for _ in range(copies)
        ]
        q_bytes = 2 * _tensor_bytes(q)  # q read + out written

        sdpa_ms = timer(
            lambda i, dense=dense, copies=copies: torch.nn.functional.scaled_dot_product_attention(
                q, dense[i % copies][0], dense[i % copies][1], enable_gqa=True
            ),
            cfg.iters, cfg.warmup,
        )
        sdpa_bytes = 2 * _tensor_bytes(dense[0][0]) + q_bytes
        rows.append(BenchRow(length, "sdpa", "torch", sdpa_ms, sdpa_bytes, sdpa_bytes / sdpa_ms / 1e6, 1.0, None))

        for variant, n_int8 in (("ours-fp", 0), ("ours-int8", max(0, length - cfg.recent))):
            caches = [SegmentedKV.from_dense(k, v, n_int8) for k, v in dense]
            want, _ = reference_attention(q, caches[0])
            got, _ = segmented_attention(q, caches[0])
            err = (got.float() - want.float()).abs().max().item()
            nbytes = _cache_bytes(caches[0]) + q_bytes
            for with_mass in (False, True):
                ms = timer(
                    lambda i, caches=caches, with_mass=with_mass: segmented_attention(
                        q, caches[i % len(caches)], None, None, with_mass
                    ),
                    cfg.iters, cfg.warmup,
                )
                name = variant + ("+mass" if with_mass else "")
                rows.append(BenchRow(length, name, backend, ms, nbytes, nbytes / ms / 1e6, sdpa_ms / ms, err))
            if cfg.compile and n_int8:
                rows.append(_compiled_row(q, caches, length, variant, nbytes, sdpa_ms, timer, cfg))
            del caches
        del dense
    if backend == "cpu-kernel":
        note = "CPU: timing the compiled C++ decode kernel (confkv.kernels.cpu_decode); CONFKV_CPU_KERNEL=0 times the reference"
    elif backend == "reference":
        note = f"{device.type.upper()}: timing the PyTorch REFERENCE path (the Triton kernel needs CUDA); not kernel numbers"
    elif device.type == "cuda":
        note = f"backend: Triton kernel on {torch.cuda.get_device_name(device)}"
    else:
        note = "Triton kernel under TRITON_INTERPRET on CPU: checks correctness only; times are meaningless"
    copy = copy_bandwidth_gbps(device) if device.type == "cuda" else None
    return {
        "device": str(device),
        "dtype": str(dtype).removeprefix("torch."),
        "backend": backend,
        "note": note,
        "copy_gbps": copy,
        "shape": {"batch": cfg.batch, "heads": cfg.heads, "kv_heads": cfg.kv_heads, "head_dim": cfg.head_dim,
                  "recent_fp_tokens": cfg.recent},
        "rows": [asdict(r) for r in rows],
    }


def summarize(report: dict) -> list[str]:
    """Headline ratios per length: INT8 vs FP speedup, mass overhead, % of copy bandwidth."""
    by = {(r["length"], r["variant"]): r for r in report["rows"]}
    lines = []
    for length in sorted({r["length"] for r in report["rows"]}):
        fp, q8 = by[(length, "ours-fp")], by[(length, "ours-int8")]
        fp_m, q8_m = by[(length, "ours-fp+mass")], by[(length, "ours-int8+mass")]
        parts = [
            f"T={length}: int8 vs fp {fp['ms'] / q8['ms']:.2f}x",
            f"mass overhead fp {100 * (fp_m['ms'] / fp['ms'] - 1):+.0f}% int8 {100 * (q8_m['ms'] / q8['ms'] - 1):+.0f}%",
            f"vs sdpa fp {fp['speedup_vs_sdpa']:.2f}x int8 {q8['speedup_vs_sdpa']:.2f}x",
        ]
        compiled = by.get((length, "ours-int8+mass compiled"))
        if compiled:
            parts.append(f"torch.compile int8+mass {q8_m['ms'] / compiled['ms']:.2f}x eager")
        if report["copy_gbps"]:
            parts.append(f"fp {100 * fp['gbps'] / report['copy_gbps']:.0f}% / int8 {100 * q8['gbps'] / report['copy_gbps']:.0f}% of copy BW")
        lines.append(", ".join(parts))
    return lines


def format_report(report: dict) -> list[str]:
    """The human-readable table: the backend note first (so a CPU run cannot be mistaken for kernel numbers)."""
    copy = f"  copy bandwidth {report['copy_gbps']:.0f} GB/s" if report["copy_gbps"] else ""
    lines = [
        report["note"],
        f"device {report['device']} dtype {report['dtype']} shape {report['shape']}{copy}",
        f"{'length':>7} {'variant':<16} {'backend':<9} {'ms':>9} {'MB read':>9} {'GB/s':>8} {'vs sdpa':>8} {'max err':>9}",
    ]
    for r in report["rows"]:
        err = "" if r["max_abs_err"] is None else f"{r['max_abs_err']:.1e}"
        lines.append(
            f"{r['length']:>7} {r['variant']:<16} {r['backend']:<9} {r['ms']:>9.3f} {r['bytes_read'] / 1e6:>9.2f} "
            f"{r['gbps']:>8.1f} {r['speedup_vs_sdpa']:>7.2f}x {err:>9}"
        )
    return lines + summarize(report)


@dataclass
class KernelOptions:
    """`bench kernel`'s options (the shapes to time); `KernelBenchConfig` is what the timing loop takes."""

    lengths: str | None = option(None, f"context lengths, comma-separated [GPU: {GPU_DEFAULT_LENGTHS}; CPU: "
                                        f"{CPU_DEFAULT_LENGTHS}]")  # fmt: skip
    batch: int = option(1, low=1)
    heads: int = option(32, "query heads", low=1)
    kv_heads: int = option(8, low=1)
    head_dim: int = option(128, low=1)
    recent: int = option(128, "tokens kept in the model dtype in the INT8 variant", low=0)
    iters: int = option(20, low=1)
    compile_: bool = option(False, "also time torch.compile of the INT8+mass call (slow to build)", flag="--compile")


def run(opts: KernelOptions, progress: Progress) -> dict:
    on_gpu = torch.cuda.is_available()
    cfg = KernelBenchConfig(lengths=ints(opts.lengths or (GPU_DEFAULT_LENGTHS if on_gpu else CPU_DEFAULT_LENGTHS),
                                         "lengths"), batch=opts.batch, heads=opts.heads, kv_heads=opts.kv_heads,
                            head_dim=opts.head_dim, recent=opts.recent, iters=opts.iters, compile=opts.compile_)  # fmt: skip
    return run_kernel_bench(cfg)


BENCHMARK = Benchmark(
    "kernel", KernelOptions, run, format_report, out=None,
    help="Decode attention (q_len=1): our kernel vs SDPA over an equal full cache, INT8 on/off, mass on/off.",
)
