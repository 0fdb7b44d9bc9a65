"""`bench prefill-attention`: a CPU prefill chunk's attention, one fused call with the causal tail as a mask against
the split `cpu_prefill.causal_tail_attention` makes (the older keys unmasked, the chunk's own block `is_causal`).

Why a benchmark of its own: attention is half of a forced episode's time on the agent's model (a sampling profile
of the frontier's processes: 58% of `full`'s, 51% of a budgeted label's), and the split is justified by speed
alone; its outputs are the masked call's up to fp32 rounding, which the report checks. Both variants are timed in
one run, alternately, so a busy machine slows both alike and the ratio holds; shapes default to the agent's model
(qwen2.5-coder-1.5b: 12 query heads, 2 KV heads, 128 dims) and to chunks over a budgeted cache (180 kept keys) and
over `full`'s long histories.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from confkv.bench.protocol import Benchmark, OptionError, Progress, ints, option
from confkv.kernels.cpu_prefill import causal_tail_attention


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


def _time_one(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: float, repeats: int) -> dict:
    """Both forms on one shape, alternately, best of `repeats` each; and how far apart their outputs are."""
    variants = {"masked": lambda: masked_attention(q, keys, values, scale),
                "split": lambda: causal_tail_attention(q, keys, values, scale)[0]}  # fmt: skip
    outs = {name: fn() for name, fn in variants.items()}  # also the warm-up
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, fn in variants.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    ms = {name: 1000 * min(ts) for name, ts in times.items()}
    return {"masked_ms": ms["masked"], "split_ms": ms["split"], "speedup": ms["masked"] / ms["split"],
            "max_abs_diff": float((outs["masked"].float() - outs["split"].float()).abs().max())}  # fmt: skip


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
    rows = []
    for n_q in ints(opts.chunks, "chunks"):
        for older in ints(opts.older, "older"):
            n = older + n_q
            # the query as transformers hands it to attention: [B, Hq, L, D], a transposed view
            q = torch.randn(1, n_q, opts.heads, opts.head_dim, generator=gen).transpose(1, 2).to(dtype)
            keys, values = (torch.randn(1, opts.kv_heads, n, opts.head_dim, generator=gen).to(dtype) for _ in range(2))
            row = _time_one(q, keys, values, scale, opts.repeats)
            rows.append({"chunk": n_q, "older": older, **row})
            progress(f"chunk {n_q} over {older} older keys: masked {row['masked_ms']:.0f} ms, "
                     f"split {row['split_ms']:.0f} ms")
    return {"threads": torch.get_num_threads(), "dtype": opts.dtype,
            "shape": {"heads": opts.heads, "kv_heads": opts.kv_heads, "head_dim": opts.head_dim}, "rows": rows}  # fmt: skip


def format_report(report: dict) -> list[str]:
    shape = report["shape"]
    lines = [f"prefill attention on CPU, {report['dtype']}, {report['threads']} thread(s), heads {shape['heads']} / "
             f"KV heads {shape['kv_heads']} / dim {shape['head_dim']}; best of the timed calls",
             f"{'chunk':>6} {'older':>7} {'masked ms':>10} {'split ms':>9} {'speedup':>8} {'max diff':>9}"]  # fmt: skip
    for r in report["rows"]:
        lines.append(f"{r['chunk']:>6} {r['older']:>7} {r['masked_ms']:>10.1f} {r['split_ms']:>9.1f} "
                     f"{r['speedup']:>7.2f}x {r['max_abs_diff']:>9.1e}")  # fmt: skip
    return lines


BENCHMARK = Benchmark(
    "prefill-attention", PrefillAttentionOptions, run, format_report, out=None,
    help="A CPU prefill chunk's attention: one masked fused call vs the split (older keys unmasked + causal block).",
)
