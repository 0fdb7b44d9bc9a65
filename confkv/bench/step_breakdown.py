"""Where a decode step's time goes: the decoder's Linear layers, the LM head, attention, the rest.

Why: `bench cpu-peer` shows our decode several times slower than llama.cpp's on the same machine while prefill is
not; a memory-bound decode step reads every weight once, so the breakdown tells whether the gap is the weights'
bytes (the Linears and the LM head, in the precision `auto` chose) or something of ours (attention over the cache,
the cache's bookkeeping). Timed with forward hooks around modules, wall clock, on a plain `DynamicCache`, so the
figures are the model's and not a policy's.
"""

from __future__ import annotations

import time
from typing import Any

import torch

PARTS = ("decoder Linears", "LM head", "attention (less its projections)", "MLP activation", "rest")


def _timed(module: torch.nn.Module, key: str, totals: dict[str, float]) -> list[Any]:
    start: list[float] = []

    def pre(*_: Any) -> None:
        start.append(time.perf_counter())

    def post(*_: Any) -> None:
        totals[key] = totals.get(key, 0.0) + time.perf_counter() - start.pop()

    return [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]


def decode_breakdown(model: Any, context: int, steps: int = 8, seed: int = 0) -> dict[str, Any]:
    """ms per decode step in each of PARTS after `context` random tokens; the shares add up to the step."""
    from transformers import DynamicCache

    from confkv.cache import cache_kwarg

    vocab = int(model.config.vocab_size)
    ids = torch.randint(10, vocab - 10, (1, context + steps), generator=torch.Generator().manual_seed(seed))
    head = model.get_output_embeddings()
    layers = model.model.layers
    totals: dict[str, float] = {}
    cache = DynamicCache(config=model.config)
    kw = {cache_kwarg(model): cache, "use_cache": True}
    with torch.no_grad():
        model(ids[:, :context], **kw, logits_to_keep=1)
        hooks = _timed(head, "head", totals)
        for i, layer in enumerate(layers):
            hooks += _timed(layer.self_attn, f"attn{i}", totals) + _timed(layer.mlp, f"mlp{i}", totals)
            for name, mod in layer.named_modules():
                if name.endswith("_proj"):
                    hooks += _timed(mod, f"lin{i}.{name}", totals)
        try:
            t0 = time.perf_counter()
            for k in range(context, context + steps):
                model(ids[:, k : k + 1], **kw)
            total = time.perf_counter() - t0
        finally:
            for h in hooks:
                h.remove()

    def share(prefix: str) -> float:
        return sum(v for k, v in totals.items() if k.startswith(prefix))

    attn_lin = sum(v for k, v in totals.items() if k.startswith("lin") and ".self_attn." in k)
    mlp_lin = sum(v for k, v in totals.items() if k.startswith("lin") and ".mlp." in k)
    parts = {"decoder Linears": attn_lin + mlp_lin, "LM head": totals.get("head", 0.0),
             "attention (less its projections)": share("attn") - attn_lin, "MLP activation": share("mlp") - mlp_lin}
    parts["rest"] = max(0.0, total - sum(parts.values()))  # norms, embeddings, residual adds, the Python around them
    ms = {k: 1000 * v / steps for k, v in parts.items()}
    return {"context": context, "steps": steps, "step_ms": 1000 * total / steps, "ms": ms,
            "weights_bytes": _weight_bytes(model, head)}  # fmt: skip


def _weight_bytes(model: Any, head: Any) -> dict[str, int]:
    """Bytes held per part: every parameter and buffer of the decoder's Linears, and the head's (what a decode step
    streams when both phases use one weight form, as `fp32`, `bf16` and `fp32-bf16-bf16` do)."""

    def nbytes(mod: torch.nn.Module) -> int:
        seen = {id(t): t for t in [*mod.parameters(recurse=False), *mod.buffers(recurse=False)] if t is not None}
        return sum(t.numel() * t.element_size() for t in seen.values())

    linears = sum(nbytes(m) for n, m in model.model.layers.named_modules() if n.endswith("_proj"))
    return {"decoder Linears": linears, "LM head": nbytes(head)}


def format_breakdown(b: dict[str, Any]) -> list[str]:
    """One line per part: ms per step, its share, and for the weight-streaming parts the bandwidth it implies."""
    lines = [f"decode step after {b['context']} tokens: {b['step_ms']:.1f} ms (mean of {b['steps']} steps)"]
    for part, ms in b["ms"].items():
        nbytes = b["weights_bytes"].get(part)
        rate = f"  {nbytes / 1e9:.2f} GB of weights, {nbytes / 1e6 / ms:.1f} GB/s" if nbytes and ms > 0 else ""
        lines.append(f"  {part:<34} {ms:8.1f} ms {ms / b['step_ms']:6.1%}{rate}")
    return lines
