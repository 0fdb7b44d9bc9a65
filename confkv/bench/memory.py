"""`bench memory`: KV-cache bytes of a model config after N generated tokens, full vs a Conf-KV budget trajectory.

Arithmetic (batch 1), the same layout `ConfKVLayer` stores (bytes per token: `confkv.bench.kv_bytes`, tested
exact against a real cache):
- under Conf-KV after step t: kept_t = min(kept_{t-1} + 1, budget in force), of which the newest `int8_after` stay in the
  model dtype and the rest are INT8. The transient +1 token during a step is not counted (it is < 0.2% at 512).
The trajectory is observed in a real run: the gate's state (n_high = unsure, n_low = confident) per token from a
`bench ppl` results JSON or from a short greedy generation; the states are replayed with the budgets asked for
(default: the paper's preset n_low=256, n_high=512, int8_after=64), tiled when the run was shorter than N.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from confkv.bench.common import PAPER
from confkv.bench.kv_bytes import KVConfig, kept_split
from confkv.bench.protocol import Benchmark, OptionError, Progress, label, option

# Qwen2.5-32B(-Instruct) config.json on the Hugging Face hub: num_hidden_layers 64, num_attention_heads 40,
# num_key_value_heads 8, hidden_size 5120 (head_dim = 5120 / 40 = 128), torch_dtype bfloat16.
QWEN25_32B = KVConfig("Qwen2.5-32B", 64, 8, 128, 2, "Qwen/Qwen2.5-32B config.json (GQA 40 q / 8 kv heads, bf16)")
CONFIGS = {"qwen2.5-32b": QWEN25_32B}


def trajectory_bytes(
    cfg: KVConfig, high: Sequence[bool], n_tokens: int, n_low: int, n_high: int, int8_after: int | None
) -> dict:
    """Bytes after each of `n_tokens` tokens when the gate states `high` (tiled) pick n_high/n_low budgets."""
    if not high:
        raise ValueError("the gate trajectory is empty")
    per_token = []
    budget = n_high  # before any confidence the gate is cautious (GatedBudget answers n_high)
    kept = 0
    for t in range(n_tokens):
        kept = min(kept + 1, budget)  # evicted tokens never come back: a raised budget refills one token a step
        fp, q8 = kept_split(kept, None, int8_after)
        per_token.append(cfg.cache_bytes(fp, q8))
        budget = n_high if high[t % len(high)] else n_low
    return {"final_bytes": per_token[-1], "peak_bytes": max(per_token), "mean_bytes": sum(per_token) / n_tokens,
            "share_high": sum(high) / len(high)}


def gate_from_results(path: Path) -> tuple[list[bool], dict]:
    """Per-token gate states from a `bench ppl` JSON (confkv's per-call budgets, each repeated `stride` times)."""
    data = json.loads(Path(path).read_text())
    traj = data.get("confkv_budget_trajectory")
    gate = (data.get("policies", {}).get("confkv") or {}).get("gate")
    if not traj or not gate:
        raise ValueError(f"{path} has no confkv budget trajectory (run `bench ppl` first)")
    n_high = gate[1]
    stride = int(data.get("stride", 1))
    return [b >= n_high for b in traj for _ in range(stride)], {"source": str(path), "model": data.get("model"),
                                                                 "stride": stride, "gate": gate}


def gate_from_generation(model_name: str, n_new: int) -> tuple[list[bool], dict]:
    """Per-token gate states of a short greedy generation with `confkv` after a corpus prompt."""
    from confkv.bench.common import corpus_ids
    from confkv.models import load_for_inference
    from confkv.policies import get_policy
    from confkv.session import ConfKVSession

    model, tokenizer = load_for_inference(model_name)
    policy = get_policy("confkv")
    session = ConfKVSession(model, policy)
    session.append(corpus_ids(tokenizer, 256))
    session.decode(n_new)
    steps = [s for s in session.stats.steps if s.kind == "decode"]
    return [s.budget >= policy.n_high for s in steps], {"source": f"greedy generation, {len(steps)} tokens",
                                                        "model": model_name, "gate": [policy.n_low, policy.n_high]}


def run_memory(
    cfg: KVConfig, high: Sequence[bool], n_tokens: int = 4096, n_low: int = 256, n_high: int = 512,
    int8_after: int | None = 64,
) -> dict:
    full = cfg.bytes(n_tokens)
    conf = trajectory_bytes(cfg, high, n_tokens, n_low, n_high, int8_after)
    conf_fp = trajectory_bytes(cfg, high, n_tokens, n_low, n_high, None)
    paper_full, paper_conf = (PAPER["memory_gb"][k] * 1e9 for k in ("full", "confkv"))
    mha = KVConfig(cfg.name + " if MHA", cfg.layers, 40, cfg.head_dim, cfg.dtype_bytes, "40 KV heads")
    return {
        "bench": "memory", "config": asdict(cfg), "n_tokens": n_tokens,
        "fp_token_bytes": cfg.fp_token_bytes, "int8_token_bytes": cfg.int8_token_bytes,
        "budgets": {"n_low": n_low, "n_high": n_high, "int8_after": int8_after},
        "full_bytes": full, "confkv": conf, "confkv_int8_off": conf_fp,
        "ratio_final": conf["final_bytes"] / full, "paper_ratio": paper_conf / paper_full,
        "paper_bytes": {"full": paper_full, "confkv": paper_conf},
        "discrepancy": {
            "paper_full_over_ours": paper_full / full,
            "tokens_for_paper_full": paper_full / cfg.fp_token_bytes,
            "mha40_bf16_full_bytes": mha.bytes(n_tokens),
            "mha40_fp32_full_bytes": mha.bytes(n_tokens) * 4 // cfg.dtype_bytes,
            "paper_confkv_tokens_at_our_fp_rate": paper_conf / cfg.fp_token_bytes,
        },
    }


@dataclass
class MemoryOptions:
    config: str = option("qwen2.5-32b", "KV geometry (see confkv.bench.memory.CONFIGS)")
    tokens: int = option(4096, "generated tokens N", low=1)
    trajectory: str | None = option(None, "bench ppl JSON with confkv's budget trajectory [results/ppl-<model>.json]")
    model: str = option("smollm2-135m", "model whose run gives the gate trajectory")
    quick: bool = option(False, "short generation (64 tokens) when no ppl JSON exists")
    gen_tokens: int = option(256, "generation length when no ppl JSON exists", low=1)
    n_low: int = option(256, low=1)
    n_high: int = option(512, low=1)
    int8_after: int = option(64, "model-dtype window (0 = INT8 off)", low=0)
    out: str = option("results", "results directory (and where the ppl JSON is looked for)")


def run(opts: MemoryOptions, progress: Progress) -> dict:
    """Gate states from the ppl JSON (the given one, else --out's if it exists) or a short generation."""
    from confkv.bench.common import results_path

    if opts.config.lower() not in CONFIGS:
        raise OptionError("config", f"unknown config {opts.config!r}; known: {', '.join(CONFIGS)}")
    if opts.trajectory and not Path(opts.trajectory).exists():
        raise OptionError("trajectory", f"{opts.trajectory}: no such file")
    source = Path(opts.trajectory) if opts.trajectory else results_path(opts.out, "ppl", opts.model)
    if source.exists():
        high, where = gate_from_results(source)
    else:
        high, where = gate_from_generation(opts.model, 64 if opts.quick else opts.gen_tokens)
    result = run_memory(CONFIGS[opts.config.lower()], high, opts.tokens, opts.n_low, opts.n_high,
                        opts.int8_after or None)  # fmt: skip
    result["trajectory"] = where
    return result


def table(result: dict):
    from rich.table import Table

    gb = 1e9
    t = Table(title=f"bench memory: {result['config']['name']} KV at {result['n_tokens']} tokens "
                    f"(gate from {result['trajectory'].get('source')})")
    for col in ("", "ours GB", "paper GB"):
        t.add_column(col, justify="left" if not col else "right")
    t.add_row("full (bf16)", f"{result['full_bytes'] / gb:.3f}", f"{result['paper_bytes']['full'] / gb:.1f}")
    t.add_row("confkv, final", f"{result['confkv']['final_bytes'] / gb:.4f}", f"{result['paper_bytes']['confkv'] / gb:.1f}")
    t.add_row("confkv, peak", f"{result['confkv']['peak_bytes'] / gb:.4f}", "")
    t.add_row("confkv INT8 off, final", f"{result['confkv_int8_off']['final_bytes'] / gb:.4f}", "")
    t.add_row("ratio confkv / full", f"{result['ratio_final']:.3f}", f"{result['paper_ratio']:.3f}")
    d = result["discrepancy"]
    t.add_row("full if 40 KV heads (MHA) bf16 / fp32", f"{d['mha40_bf16_full_bytes'] / gb:.2f} / "
              f"{d['mha40_fp32_full_bytes'] / gb:.2f}", "")
    t.add_row("tokens a 15.8 GB bf16 GQA cache holds", f"{d['tokens_for_paper_full']:.0f}", "")
    return t


BENCHMARK = Benchmark(
    "memory", MemoryOptions, run, table, files=lambda opts, report: {f"memory-{label(opts.config)}.json": report},
    help="KV bytes of a model config at N tokens: full vs the budget trajectory of a real run, vs 15.8 -> 2.6 GB.",
)
