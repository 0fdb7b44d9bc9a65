"""`bench prefill-attention`: a CPU prefill chunk's attention three ways: one fused call with the causal tail as a
mask; `cpu_prefill.split_attention` (torch's fused op twice: the older keys unmasked, the chunk's own block
`is_causal`); and the compiled kernel `cpu_prefill.causal_tail_attention` runs in fp32 on AVX-512.

Why a benchmark of its own: attention is half of a forced episode's time on the agent's model (a sampling profile
of the frontier's processes: 58% of `full`'s, 51% of a budgeted label's), and both replacements are justified by
speed alone; their outputs are the masked call's up to fp32 rounding, which the report checks. The variants are
timed in one run, alternately, so a busy machine slows them alike and the ratios hold; shapes default to the agent's
model (qwen2.5-coder-1.5b: 12 query heads, 2 KV heads, 128 dims) and to chunks over a budgeted cache (180 kept
keys) and over `full`'s long histories.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from confkv.bench.protocol import Benchmark, OptionError, Progress, ints, option
from confkv.kernels.cpu_prefill import causal_tail_attention, compiled_attention, split_attention


def masked_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: float) -> torch.Tensor:
    """The one-call form the split replaced: GQA folded into the query axis, the causal tail as a boolean mask."""
    b, hq, n_q, d = q.shape
    hkv, n = keys.shape[1], keys.shape[2]
    g = hq // hkv
    visible = torch.ones(n_q, n, dtype=torch.bool)
    visible[:, n - n_q :] = torch.ones(n_q, n_q, dtype=torch.bool).tril()
    out = torch.nn.functional.scaled_dot_product_attention(
        q.reshape(b, hkv, g * n_q, d), keys, values, attn_mask=visible.repeat(g, 1), scale=scale
    )
    return out.view(b, hq, n_q, d)


def _time_one(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: float, repeats: int,
              compiled: bool) -> dict:
    """Each form on one shape, alternately, best of `repeats` each; and how far each is from the masked call."""
    variants = {"masked": lambda: masked_attention(q, keys, values, scale),
                "split": lambda: split_attention(q, keys, values, scale)[0]}  # fmt: skip
    if compiled:
        variants["kernel"] = lambda: causal_tail_attention(q, keys, values, scale)[0]
    outs = {name: fn() for name, fn in variants.items()}  # also the warm-up
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, fn in variants.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    ms = {name: 1000 * min(ts) for name, ts in times.items()}
    row = {f"{name}_ms": t for name, t in ms.items()}
    for name in variants:
        if name != "masked":
            row[f"{name}_speedup"] = ms["masked"] / ms[name]
            row[f"{name}_max_abs_diff"] = float((outs["masked"].float() - outs[name].float()).abs().max())
    return row


@dataclass
class PrefillAttentionOptions:
    chunks: str = option("512,2000", "prefill chunk lengths (queries), comma-separated")
    older: str = option("180,4000,16000", "older kept keys before the chunk, comma-separated")
    heads: int = option(12, "query heads", low=1)
    kv_heads: int = option(2, low=1)
    head_dim: int = option(128, low=1)
    dtype: str = option("fp32", "dtype of q, K and V", choices=("fp32", "bf16"))
    repeats: int = option(3, "timed calls per variant (alternating)", low=1)


def run(opts: PrefillAttentionOptions, progress: Progress) -> dict:
    if opts.heads % opts.kv_heads:
        raise OptionError("kv_heads", f"--heads {opts.heads} is not a multiple of --kv-heads {opts.kv_heads}")
    dtype = torch.float32 if opts.dtype == "fp32" else torch.bfloat16
    gen = torch.Generator().manual_seed(0)
    scale = opts.head_dim**-0.5
    compiled = compiled_attention(dtype, opts.head_dim)  # where `causal_tail_attention` runs the kernel
    rows = []
    for n_q in ints(opts.chunks, "chunks"):
        for older in ints(opts.older, "older"):
            n = older + n_q
            # the query as transformers hands it to attention: [B, Hq, L, D], a transposed view
            q = torch.randn(1, n_q, opts.heads, opts.head_dim, generator=gen).transpose(1, 2).to(dtype)
            keys, values = (torch.randn(1, opts.kv_heads, n, opts.head_dim, generator=gen).to(dtype) for _ in range(2))
            row = _time_one(q, keys, values, scale, opts.repeats, compiled)
            rows.append({"chunk": n_q, "older": older, **row})
            progress(f"chunk {n_q} over {older} older keys: " + ", ".join(
                f"{k.removesuffix('_ms')} {v:.0f} ms" for k, v in row.items() if k.endswith("_ms")))
    shape = {"heads": opts.heads, "kv_heads": opts.kv_heads, "head_dim": opts.head_dim}
    return {"threads": torch.get_num_threads(), "dtype": opts.dtype, "shape": shape, "rows": rows}


def format_report(report: dict) -> list[str]:
    shape = report["shape"]
    names = [k.removesuffix("_ms") for k in report["rows"][0] if k.endswith("_ms")] if report["rows"] else []
    lines = [f"prefill attention on CPU, {report['dtype']}, {report['threads']} thread(s), heads {shape['heads']} / "
             f"KV heads {shape['kv_heads']} / dim {shape['head_dim']}; ms, best of the timed calls; x: vs masked",
             f"{'chunk':>6} {'older':>7} " + " ".join(f"{n:>9}" for n in names)
             + "".join(f" {n + ' x':>9} {n + ' diff':>11}" for n in names[1:])]  # fmt: skip
    for r in report["rows"]:
        lines.append(f"{r['chunk']:>6} {r['older']:>7} " + " ".join(f"{r[n + '_ms']:>9.1f}" for n in names)
                     + "".join(f" {r[n + '_speedup']:>8.2f}x {r[n + '_max_abs_diff']:>11.1e}" for n in names[1:]))
    return lines


BENCHMARK = Benchmark(
    "prefill-attention", PrefillAttentionOptions, run, format_report, out=None,
    help="A CPU prefill chunk's attention: one masked fused call vs the split (older keys unmasked + causal block) "
         "and the compiled kernel (fp32, AVX-512).",
)
