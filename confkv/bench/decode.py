"""`bench decode`: decode speed after long contexts for plain transformers, our `full`, and `confkv`, side by side.

Protocol: for each context length, each variant prefills the same token ids (Conf-KV prefills in chunks with eviction
in between), then decodes `steps` tokens teacher-forced from the same ids (rounded up to two or more whole
eviction cycles of the policy's `slack`, see `whole_cycles`). Variants are interleaved per repeat so
machine noise hits all of them alike; the per-step figure is the median over repeats of the mean step time.
The policy's own bookkeeping (EMA, INT8 migration, ranking, compaction, and the confidence of each step) is timed
inside the cache and session and reported as a share of the step. Attention-mass output is part of the attention
call and is not separated here (see `bench kernel` for its cost).

Prefill: `full` and `confkv` append the context in `prefill_chunk`-token chunks (the agent's shape, eviction after
every chunk for confkv); that append is timed too and reported as prefill tokens/s (plain prefills in one forward
and is not comparable, so it has none). On CUDA every variant synchronises before each clock read.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

import torch
from transformers import DynamicCache

from confkv.policies import get_policy
from confkv.session import ConfKVSession


@dataclass
class DecodeRow:
    context: int
    variant: str
    ms_per_step: float
    tokens_per_s: float
    bookkeeping_share: float | None
    kept_tokens: int
    kv_bytes: int
    prefill_tokens_per_s: float | None = None
    gate_open_rate: float | None = None  # share of the run's forwards the confidence gate opened on (gated only)


def _clock(device: torch.device) -> float:
    """perf_counter after the device finished its queued work (CUDA launches are asynchronous)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def _plain(model, ids: torch.Tensor, steps: int) -> tuple[float, int, int]:
    cache = DynamicCache(config=model.config)
    device = next(model.parameters()).device
    ids = ids.to(device)
    with torch.no_grad():
        model(ids, cache=cache, use_cache=True, logits_to_keep=1)
        start = ids.shape[1]
        t0 = _clock(device)
        for i in range(steps):
            tok = ids[:, i : i + 1]
            model(tok, cache=cache, use_cache=True, position_ids=torch.tensor([[start + i]], device=device))
        dt = _clock(device) - t0
    kv = sum(layer.keys.numel() * layer.keys.element_size() * 2 for layer in cache.layers)
    return dt / steps, cache.get_seq_length(), kv


def _ours(model, ids: torch.Tensor, steps: int, policy) -> tuple[float, float, int, int, float, float | None]:
    session = ConfKVSession(model, policy)
    device = session.device
    tokens = ids[0, :steps].tolist()
    t0 = _clock(device)
    session.append(ids)
    prefill_s = _clock(device) - t0
    session.cache.bookkeeping_s = 0.0
    t0 = _clock(device)
    for tok in tokens:
        session.step(tok)
    dt = _clock(device) - t0
    book = session.cache.bookkeeping_s
    mem = session.cache.memory()
    kept = round(sum(mem.kept_tokens) / len(mem.kept_tokens))
    return dt / steps, book / dt, kept, mem.kv_bytes, ids.shape[1] / prefill_s, session.cache.gate_open_rate


def whole_cycles(steps: int, slack: int) -> int:
    """Steps rounded up to at least two whole eviction cycles (`slack + 1` steps each): with slack, only one step
    in `slack + 1` evicts, so a shorter window would time the cheap steps only and flatter the cache."""
    cycle = slack + 1
    return max(2 * cycle, -(-steps // cycle) * cycle) if slack else steps


def run_decode_bench(
    model, vocab_size: int, contexts: list[int], steps: int = 16, repeats: int = 3, confkv_overrides: dict | None = None,
    seed: int = 0,
) -> dict:
    gen = torch.Generator().manual_seed(seed)
    policies = {"full": get_policy("full"), "confkv": get_policy("confkv", confkv_overrides or {})}
    steps = whole_cycles(steps, policies["confkv"].slack)
    rows: list[DecodeRow] = []
    for ctx in contexts:
        ids = torch.randint(10, vocab_size - 10, (1, ctx), generator=gen)
        samples: dict[str, list[float]] = {"plain": [], "full": [], "confkv": []}
        prefill: dict[str, list[float]] = {"full": [], "confkv": []}
        extra: dict[str, tuple] = {}
        for _ in range(repeats):
            step_s, kept, kv = _plain(model, ids, steps)
            samples["plain"].append(step_s)
            extra["plain"] = (None, kept, kv, None)
            for name, pol in policies.items():
                step_s, share, kept, kv, tok_s, gate = _ours(model, ids, steps, pol)
                samples[name].append(step_s)
                prefill[name].append(tok_s)
                extra[name] = (share, kept, kv, gate)
        for name, vals in samples.items():
            med = statistics.median(vals)
            share, kept, kv, gate = extra[name]
            tok_s = statistics.median(prefill[name]) if name in prefill else None
            rows.append(DecodeRow(ctx, name, med * 1000, 1.0 / med, share, kept, kv, tok_s, gate))
    return {
        "contexts": contexts,
        "steps": steps,
        "repeats": repeats,
        "threads": torch.get_num_threads(),
        "prefill_chunk": policies["confkv"].prefill_chunk,
        "confkv_policy": policies["confkv"].to_dict(),
        "rows": [asdict(r) for r in rows],
    }


def speedups(report: dict) -> dict[int, dict[str, float]]:
    """Per context: plain ms / variant ms (>1 = faster than plain transformers)."""
    by_ctx: dict[int, dict[str, float]] = {}
    for row in report["rows"]:
        by_ctx.setdefault(row["context"], {})[row["variant"]] = row["ms_per_step"]
    return {ctx: {k: v["plain"] / ms for k, ms in v.items()} for ctx, v in by_ctx.items()}


def prefill_ratios(report: dict) -> dict[int, float]:
    """Per context: confkv prefill tokens/s over full's (>= 0.9 is the target)."""
    by_ctx: dict[int, dict[str, float]] = {}
    for row in report["rows"]:
        if row.get("prefill_tokens_per_s"):
            by_ctx.setdefault(row["context"], {})[row["variant"]] = row["prefill_tokens_per_s"]
    return {ctx: v["confkv"] / v["full"] for ctx, v in by_ctx.items() if "confkv" in v and "full" in v}
