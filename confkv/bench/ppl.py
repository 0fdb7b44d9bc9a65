"""`bench ppl`: StreamingLLM's long-text perplexity protocol for every policy at a matched footprint.

Protocol: the text is fed to one `ConfKVSession` token by token (`session.step`); the cache evicts after every step;
the NLL of the next token is read from that step's logits; ppl = exp(mean NLL) over all predicted tokens. With
`stride > 1` the text is fed `stride` tokens per call (eviction after every call; the tokens of one call see each
other fully, so the cache peak is budget + stride). Stride 1 is the paper's protocol; the CPU quick grid uses a
stride because a 135M model takes ~0.5-1 s per call on 2 shared cores whatever the call's length.

Matched footprint:
- `confkv` runs first; its mean resident KV bytes per call (INT8 and slot bookkeeping counted) is the target.
  `sliding`, `h2o` and `confkv-fixed` (the same ranker and INT8 with the gate off) each get the fixed budget whose
  mean resident bytes over the same call ends is nearest (`common.byte_matched_budget`), with H2O's recent window =
  half its budget (H2O's own heavy/recent split). Bytes, not tokens: a model-dtype baseline matched in tokens would
  hold ~1.7x confkv's bytes. `confkv-pyramid` uses the same gate.
- Matched-rate ablation: `confkv` with INT8 off runs, and its budget trajectory (the budget in force for every call)
  is replayed (`ReplayBudget`) by `random`, `recency` and `attention`, so all four evict exactly the same number of
  tokens at exactly the same calls; only the ranking differs.
"""

from __future__ import annotations

import math
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from confkv.bench.common import (
    CORPUS_NAME,
    EXACT_BUDGETS,
    FIXED_BASELINES,
    PAPER,
    byte_matched_budget,
    fixed_policy,
    footprint,
)
from confkv.bench.protocol import Benchmark, names, option, resolve_dtype
from confkv.budget import ReplayBudget
from confkv.policies import get_policy, policy_names
from confkv.policy import KVPolicy
from confkv.session import ConfKVSession

# Overrides of the gated presets for the CPU quick grid: ~1K tokens with an ~8x compression like the paper's
# 4K text at a 512 window. The protected/FP window shrinks to 32 so the pyramid's smallest layer still evicts.
QUICK_OVERRIDES = {"n_low": "96", "n_high": "192", "protect": "32", "int8_after": "32"}
ABLATION = policy_names("ablation")
MAIN = policy_names("main")
NOINT8 = "confkv-noint8"  # policy_names("ablation-reference"): INT8 off, the trajectory the ablation replays

Progress = Callable[[str], None]


@dataclass
class PplConfig:
    n_tokens: int = 4096
    stride: int = 1
    overrides: dict[str, str] = field(default_factory=dict)  # applied to the gated policies (confkv & ablation)
    policies: tuple[str, ...] = MAIN + (NOINT8,) + ABLATION

    def validate(self) -> PplConfig:
        if self.n_tokens < 2 * self.stride or self.n_tokens < 8:
            raise ValueError(f"n_tokens ({self.n_tokens}) must be >= 8 and >= 2 x stride ({self.stride})")
        if self.stride < 1:
            raise ValueError("stride must be >= 1")
        unknown = set(self.policies) - set(MAIN + (NOINT8,) + ABLATION)
        if unknown:
            raise ValueError(f"unknown policies {sorted(unknown)}")
        if set(self.policies) & set(FIXED_BASELINES) and "confkv" not in self.policies:
            raise ValueError(f"{'/'.join(FIXED_BASELINES)} are matched to confkv's footprint: include confkv")
        if set(self.policies) & set(ABLATION) and NOINT8 not in self.policies:
            raise ValueError(f"the ablation replays {NOINT8}'s budget trajectory: include {NOINT8}")
        return self


def stream_nll(
    model: torch.nn.Module, ids: list[int], policy: KVPolicy, stride: int = 1, replay: list[int] | None = None
) -> tuple[list[float], ConfKVSession]:
    """Feed `ids` through one session `stride` tokens per call; NLL (nats) of every next token, and the session.

    `replay`: a budget trajectory (one entry per call) that replaces the policy's schedule."""
    session = ConfKVSession(model, policy)
    if replay is not None:
        session.cache.schedule = ReplayBudget(list(replay))
    target = torch.tensor(ids)
    nlls: list[float] = []
    for lo in range(0, len(ids), stride):
        hi = min(lo + stride, len(ids))
        if stride == 1:
            logits = session.step(ids[lo])  # [1, V]
        else:
            logits = _chunk(session, ids[lo:hi])  # [n, V]
        n_pred = min(hi, len(ids) - 1) - lo
        if n_pred > 0:
            logp = torch.log_softmax(logits[:n_pred].float(), dim=-1)
            nlls.extend((-logp.gather(1, target[lo + 1 : lo + 1 + n_pred, None].to(logp.device))).squeeze(1).tolist())
    return nlls, session


def _chunk(session: ConfKVSession, part: list[int]) -> torch.Tensor:
    """One multi-token call with the logits of every position `[n, V]` (its confidence: the session's chunk rule)."""
    return session.append(torch.tensor([part]), all_logits=True)[0]


def _policy(name: str, overrides: dict[str, str], budget: int | None = None) -> KVPolicy:
    overrides = {**EXACT_BUDGETS, **overrides}
    if name == "full":
        return get_policy("full")
    if name in FIXED_BASELINES:
        return fixed_policy(name, budget, overrides)
    if name == NOINT8 or name in ABLATION:  # the ablation compares rankers only: INT8 off, like its reference
        return get_policy(name, {**overrides, "int8_after": "none"})
    return get_policy(name, overrides)


def run_ppl(model: torch.nn.Module, ids: list[int], cfg: PplConfig, progress: Progress | None = None) -> dict:
    """Every policy of `cfg` over `ids`; returns the results dict (see the module docstring)."""
    cfg.validate()
    ids = list(ids[: cfg.n_tokens])
    say = progress or (lambda _msg: None)
    ends = [min(lo + cfg.stride, len(ids)) for lo in range(0, len(ids), cfg.stride)]
    # References first (the fixed baselines are matched to confkv, the ablation replays confkv-noint8).
    order = [p for p in policy_names() if p in cfg.policies and p not in ABLATION + FIXED_BASELINES]
    order += [p for p in ABLATION + FIXED_BASELINES if p in cfg.policies]
    rows: dict[str, dict] = {}
    trajectories: dict[str, list[int]] = {}
    matched: dict[str, int] = {}
    for name in order:
        replay = trajectories.get(NOINT8) if name in ABLATION else None
        if name in FIXED_BASELINES:
            matched[name] = byte_matched_budget(model, name, ends, rows["confkv"]["mean_kv_bytes"],
                                                {**EXACT_BUDGETS, **cfg.overrides})
        policy = _policy(name, cfg.overrides, matched.get(name))
        t0 = time.perf_counter()
        nlls, session = stream_nll(model, ids, policy, cfg.stride, replay)
        fp = footprint(session)
        trajectories[name] = [s.budget for s in session.stats.steps]
        rows[name] = {
            "ppl": math.exp(sum(nlls) / len(nlls)),
            "mean_nll": sum(nlls) / len(nlls),
            "mean_kv_tokens": fp.mean_kv_tokens,
            "peak_kv_tokens": fp.peak_kv_tokens,
            "mean_kv_bytes": fp.mean_kv_bytes,
            "peak_kv_bytes": fp.peak_kv_bytes,
            "full_kv_bytes": fp.full_kv_bytes,
            "budget": policy.budget if not policy.gated else None,
            "gate": [policy.n_low, policy.n_high, policy.tau] if policy.gated else None,
            "replayed": replay is not None,
            "gate_open_rate": session.cache.gate_open_rate,
            "seconds": time.perf_counter() - t0,
        }
        say(f"{name}: ppl {rows[name]['ppl']:.3f}, mean kept {fp.mean_kv_tokens:.1f} tok, "
            f"peak {fp.peak_kv_bytes / 2**20:.2f} MiB ({rows[name]['seconds']:.0f}s)")
    return summarize(rows, cfg, len(ids), matched, trajectories.get("confkv"))


def gap_closed(ppl_policy: float, ppl_sliding: float, ppl_full: float) -> float | None:
    """Share of the sliding -> full perplexity gap that a policy closes (None when sliding is not worse than full)."""
    gap = ppl_sliding - ppl_full
    if gap <= 0:
        return None
    return (ppl_sliding - ppl_policy) / gap


def summarize(
    rows: dict[str, dict], cfg: PplConfig, n_tokens: int, matched: dict[str, int], trajectory: list[int] | None
) -> dict:
    full = rows.get("full", {}).get("ppl")
    out: dict = {
        "bench": "ppl",
        "text": CORPUS_NAME,
        "n_tokens": n_tokens,
        "stride": cfg.stride,
        "overrides": cfg.overrides,
        "matched_fixed_budget": matched,  # per baseline: its budget at confkv's mean resident bytes
        "policies": rows,
        "machine": f"{platform.machine()} {platform.processor() or ''} torch {torch.__version__}".strip(),
        "paper": {k: PAPER[k] for k in ("ppl_gap_to_full", "ablation_ppl", "pyramid_gap_closed")},
        "confkv_budget_trajectory": trajectory,
    }
    if full is not None and "confkv" in rows:
        out["confkv_gap_to_full"] = rows["confkv"]["ppl"] - full
    if full is not None and "sliding" in rows:
        for name in ("confkv", "confkv-pyramid", "h2o"):
            if name in rows:
                out.setdefault("gap_closed", {})[name] = gap_closed(rows[name]["ppl"], rows["sliding"]["ppl"], full)
        out["pyramid_gap_closed"] = out.get("gap_closed", {}).get("confkv-pyramid")
    if NOINT8 in rows:
        out["ablation"] = {n: rows[n]["ppl"] for n in (*ABLATION, NOINT8) if n in rows}
    return out


def plot_ppl(result: dict, path) -> None:
    """Bar chart: perplexity per policy, annotated with mean kept tokens (the matched footprint made visible)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result["policies"])
    ppl = [result["policies"][n]["ppl"] for n in names]
    kept = [result["policies"][n]["mean_kv_tokens"] for n in names]
    fig, ax = plt.subplots(figsize=(9, 4))
    bars = ax.bar(names, ppl, color=["#888" if n == "full" else "#3a7" if "confkv" in n else "#48c" for n in names])
    for bar, k in zip(bars, kept, strict=True):
        ax.annotate(f"{k:.0f} tok", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom",
                    fontsize=8)
    ax.set_ylabel("perplexity")
    ax.set_title(f"{result.get('model', '')}: {result['n_tokens']} tokens, stride {result['stride']} "
                 f"(labels: mean kept KV tokens)")
    ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


@dataclass
class PplOptions:
    model: str = option("smollm2-135m", "registry name or HF directory")
    quick: bool = option(False, "CPU grid: 1K tokens, stride 16, ~8x compression")
    tokens: int | None = option(None, "text length [4096 or the model limit; quick 1024]", low=8)
    stride: int | None = option(None, "tokens per call, eviction after each [1; quick 16]", low=1)
    set_: list[str] | None = option(None, "override of the gated policies, key=value", flag="--set")
    dtype: str = option("auto", kind="dtype")
    int8: bool = option(False, "the same as --dtype int8 (W8A8 Linear layers, fp32 activations)")
    policies: str | None = option(None, "comma-separated subset [all: the policies of roles main, "
                                  "ablation-reference and ablation in `confkv-agent policies`]")  # fmt: skip


def run(opts: PplOptions, progress: Progress) -> dict:
    """Load the model and text, then every policy (`run_ppl`)."""
    from confkv.bench.common import corpus_ids
    from confkv.models import load_for_inference
    from confkv.policies import parse_overrides

    overrides = parse_overrides(opts.set_)
    dtype = resolve_dtype(opts.dtype, opts.model, progress)
    model, tokenizer = load_for_inference(opts.model, dtype, opts.int8)
    limit = getattr(model.config, "max_position_embeddings", None) or 4096
    n = opts.tokens or (1024 if opts.quick else min(4096, limit))
    chosen = names(opts.policies)
    cfg = PplConfig(
        n_tokens=n,
        stride=opts.stride or (16 if opts.quick else 1),
        overrides={**(QUICK_OVERRIDES if opts.quick else {}), **overrides},
        **({"policies": chosen} if chosen else {}),
    ).validate()
    result = run_ppl(model, corpus_ids(tokenizer, n), cfg, progress)
    result["model"] = opts.model
    result["quick"] = opts.quick
    result["weights"] = "int8 linears" if opts.int8 else dtype
    return result


def table(result: dict):
    """The rich table: every policy's ppl and footprint, then the paper's claims beside ours."""
    from rich.table import Table

    from confkv.bench.common import fmt

    t = Table(title=f"bench ppl: {result.get('model')} on {result['text']}, {result['n_tokens']} tokens, "
                    f"stride {result['stride']}")
    cols = ("policy", "ppl", "mean kept tok", "mean KV MiB", "peak KV MiB", "gate open", "paper")
    for col in cols:
        t.add_column(col, justify="left" if col == "policy" else "right")
    paper = result["paper"]
    for name, row in result["policies"].items():
        ref = paper["ablation_ppl"].get(name.replace("-noint8", ""))
        if name == "confkv":
            ref = None
        rate = row.get("gate_open_rate")
        t.add_row(name, fmt(row["ppl"], 3), fmt(row["mean_kv_tokens"], 1), fmt(row["mean_kv_bytes"] / 2**20, 3),
                  fmt(row["peak_kv_bytes"] / 2**20, 3), "-" if rate is None else f"{rate:.0%}",
                  fmt(ref, 1) + (" (GPT-2)" if ref else ""))
    blank = [""] * (len(cols) - 3)
    t.add_row("confkv - full", fmt(result.get("confkv_gap_to_full"), 3), *blank, fmt(paper["ppl_gap_to_full"], 1))
    t.add_row("pyramid gap closed", fmt(result.get("pyramid_gap_closed"), 3), *blank,
              fmt(paper["pyramid_gap_closed"], 2))
    return t


BENCHMARK = Benchmark(
    "ppl", PplOptions, run, table, plots={"ppl": plot_ppl},
    help="StreamingLLM long-text perplexity, every policy at a matched footprint, the matched-rate ablation.",
)
