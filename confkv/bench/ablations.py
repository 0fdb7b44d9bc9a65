"""Three small ablations over the benchmark text, token by token (stride 1), each one question of issue 12:

- `gate_open_rates`: how often does the confidence gate open with the paper's fixed tau = 0.5 against the running
  quantile `tau=auto:q`? A prefix is prefilled, the rest teacher-forced one token at a time through `confkv`.
- `gate_vs_fixed`: does the gate beat the same EMA ranker with the gate off at equal mean resident bytes? The gated
  runs go first; the fixed budget whose mean resident bytes match each is then found by bisection (INT8 on both
  sides, exact budgets: slack 0). One text, deterministic: there is no run-to-run spread to estimate.
- `int8_key_scales`: what INT8 costs at a fixed 256-token budget, with keys scaled per token or per channel.

Why stride 1: the gate decides per forward, so chunked scoring (`bench ppl`'s stride) would judge 16 tokens by one
confidence. These are `confkv-agent bench gate-rate | gate-vs-fixed | int8-keys`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from confkv.bench.ppl import stream_nll
from confkv.bench.protocol import Benchmark, Progress, option, resolve_dtype
from confkv.policies import get_policy
from confkv.session import ConfKVSession

GATED_BASE = {"n_low": "128", "n_high": "256", "int8_after": "64", "slack": "0"}


def gate_open_rates(model: Any, ids: Sequence[int], q: float = 0.2, prefill: int | None = None) -> dict[str, Any]:
    """Per tau (0.5 and `auto:q`): the gate-open rate over all judged forwards (warm-up included), the share of
    decode steps whose budget was `n_high`, and the mean decode confidence. `prefill` defaults to half of `ids`."""
    prefill = len(ids) // 2 if prefill is None else prefill
    if not 0 < prefill < len(ids):
        raise ValueError(f"prefill must leave tokens to decode: {prefill} of {len(ids)}")
    out: dict[str, Any] = {}
    for tau in ("0.5", f"auto:{q}"):
        policy = get_policy("confkv", {"tau": tau})
        session = ConfKVSession(model, policy)
        session.append(list(ids[:prefill]))
        for token in ids[prefill:]:
            session.step(int(token))
        decode = [r for r in session.stats.steps if r.kind == "decode"]
        out[tau] = {
            "gate_open_rate_all_forwards": session.cache.gate_open_rate,
            "decode_steps_open": sum(r.budget == policy.n_high for r in decode) / len(decode),
            "mean_confidence": sum(r.confidence for r in decode) / len(decode),
        }
    return {"protocol": f"{prefill} tokens prefilled, {len(ids) - prefill} teacher-forced one by one", "gate": out}


def _stride1(model: Any, ids: Sequence[int], overrides: dict[str, str]) -> dict[str, Any]:
    nlls, session = stream_nll(model, list(ids), get_policy("confkv", {**GATED_BASE, **overrides}), stride=1)
    return {"ppl": math.exp(sum(nlls) / len(nlls)),
            "mean_kv_bytes": statistics.mean(r.kv_bytes for r in session.stats.steps),
            "gate_open_rate": session.cache.gate_open_rate, "overrides": overrides}  # fmt: skip


def bisect_budget(run: Callable[[int], dict[str, Any]], target: float, lo: int, hi: int) -> dict[str, Any]:
    """The run whose mean resident bytes are closest to `target` (they grow with the budget), within 1% or the
    closest seen once the interval is empty."""
    best = None
    while lo <= hi:
        mid = (lo + hi) // 2
        row = run(mid)
        if best is None or abs(row["mean_kv_bytes"] - target) < abs(best["mean_kv_bytes"] - target):
            best = row
        if abs(row["mean_kv_bytes"] - target) / target < 0.01:
            break
        lo, hi = (mid + 1, hi) if row["mean_kv_bytes"] < target else (lo, mid - 1)
    if best is None:
        raise ValueError(f"empty budget interval [{lo}, {hi}]")
    return best


def gate_vs_fixed(model: Any, ids: Sequence[int], tau: str = "auto:0.2") -> dict[str, Any]:
    """PPL and mean resident bytes: the gated policy (with and without `shrink=16`), then the gate-off ranker at
    the fixed budget matching each in bytes (searched between n_low and n_high)."""
    lo, hi = int(GATED_BASE["n_low"]), int(GATED_BASE["n_high"])
    rows = {"gated": _stride1(model, ids, {"tau": tau}),
            "gated+shrink16": _stride1(model, ids, {"tau": tau, "shrink": "16"})}  # fmt: skip
    for name in list(rows):
        fixed = bisect_budget(lambda b: _stride1(model, ids, {"gated": "false", "budget": str(b)}),
                              rows[name]["mean_kv_bytes"], lo, hi)  # fmt: skip
        rows[f"fixed matched to {name}"] = fixed
    return {"tokens": len(ids), "stride": 1, "rows": rows}


def int8_key_scales(
    model: Any, ids: Sequence[int], budget: int = 256, int8_after: int = 64, overrides: dict[str, str] | None = None
) -> dict[str, Any]:
    """PPL of `full`, and of the gate-off EMA ranker at `budget` tokens: model dtype, INT8 keys scaled per token,
    INT8 keys with per-channel pre-scaling (all but the newest `int8_after` tokens INT8)."""
    base = {"gated": "false", "budget": str(budget), "slack": "0", **(overrides or {})}
    q8 = {**base, "int8_after": str(int8_after)}
    variants = {
        "full": get_policy("full"),
        f"ema{budget}-fp": get_policy("confkv", {**base, "int8_after": "none"}),
        f"ema{budget}-int8-token": get_policy("confkv", {**q8, "key_scales": "token"}),
        f"ema{budget}-int8-channel": get_policy("confkv", {**q8, "key_scales": "channel"}),
    }
    ppl = {}
    for name, policy in variants.items():
        nlls, _ = stream_nll(model, list(ids), policy, stride=1)
        ppl[name] = math.exp(sum(nlls) / len(nlls))
    return {"tokens": len(ids), "stride": 1, "budget": budget, "ppl": ppl}


MODEL_HELP = "registry name or HF directory"


def _on_text(model_name: str, tokens: int, dtype: str, progress: Progress,
             job: Callable[[Any, list[int]], dict[str, Any]]) -> dict[str, Any]:
    """Load the model, read the first `tokens` tokens of the benchmark text, run `job` on them."""
    from confkv.bench.common import corpus_ids
    from confkv.models import load_for_inference

    name = resolve_dtype(dtype, model_name, progress)
    model, tokenizer = load_for_inference(model_name, dtype=name)
    return {"model": model_name, "dtype": name, **job(model, corpus_ids(tokenizer, tokens))}


@dataclass
class GateRateOptions:
    model: str = option("smollm2-135m", MODEL_HELP)
    tokens: int = option(512, "tokens of the text: the first half prefilled", low=4)
    q: float = option(0.2, "the running quantile of tau=auto:q", low=0.0, high=1.0)
    dtype: str = option("auto", kind="dtype")


@dataclass
class GateVsFixedOptions:
    model: str = option("smollm2-135m", MODEL_HELP)
    tokens: int = option(600, low=4)
    tau: str = option("auto:0.2", "the gated runs' tau")
    dtype: str = option("auto", kind="dtype")


@dataclass
class Int8KeysOptions:
    model: str = option("smollm2-135m", MODEL_HELP)
    tokens: int = option(600, low=4)
    budget: int = option(256, "the fixed budget of the ranker variants", low=8)
    dtype: str = option("auto", kind="dtype")


GATE_RATE = Benchmark(
    "gate-rate", GateRateOptions, stem="gate-open",
    run=lambda o, say: _on_text(o.model, o.tokens, o.dtype, say, lambda m, ids: gate_open_rates(m, ids, o.q)),
    table=lambda r: [f"tau {tau:10s} " + "  ".join(f"{k} {v:.4f}" for k, v in row.items())
                     for tau, row in r["gate"].items()],
    help="How often the confidence gate opens: fixed tau = 0.5 against tau=auto:q, teacher-forced token by token.",
)
GATE_VS_FIXED = Benchmark(
    "gate-vs-fixed", GateVsFixedOptions,
    run=lambda o, say: _on_text(o.model, o.tokens, o.dtype, say, lambda m, ids: gate_vs_fixed(m, ids, o.tau)),
    table=lambda r: [f"{name:28s} ppl {row['ppl']:.3f}  mean KV {row['mean_kv_bytes'] / 2**20:.2f} MiB  gate open "
                     f"{row['gate_open_rate']}  {row['overrides']}" for name, row in r["rows"].items()],
    help="The gate against the same ranker with the gate off, at equal mean resident bytes (PPL, stride 1).",
)
INT8_KEYS = Benchmark(
    "int8-keys", Int8KeysOptions,
    run=lambda o, say: _on_text(o.model, o.tokens, o.dtype, say, lambda m, ids: int8_key_scales(m, ids, o.budget)),
    table=lambda r: [f"{name:24s} ppl {ppl:.3f}" for name, ppl in r["ppl"].items()],
    help="What INT8 costs in PPL at a fixed budget: model dtype, INT8 keys per token, INT8 keys per channel.",
)
