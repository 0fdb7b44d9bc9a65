"""`bench klshift`: does confidence predict how much the next-token distribution depends on recent context?

Definition (per position t of the corpus, tokens x_0..x_{T-1}, A = `ablate` = 256 by default):
- p_t  = the model's next-token distribution after reading x_0..x_t with the full context (one causal forward).
- q_t  = the same model's distribution at x_t when the A tokens just before it, x_{t-A}..x_{t-1}, are removed from
         the context: the forward runs over x_0..x_{t-A-1}, x_t with their original position ids (0..t-A-1, t), so
         RoPE/learned positions are unchanged and only the ablated tokens' information is missing. x_t itself stays:
         it is the query that asks for the next token.
- KL shift_t = KL(p_t || q_t) in nats; confidence c_t = `confkv.confidence.confidence` of p_t's logits.
Positions are `n_positions` evenly spaced values of t in [A + MIN_PREFIX, T-1] (MIN_PREFIX old tokens always remain).
We report Pearson r(c, KL) with a Fisher-z 95% CI and a percentile bootstrap 95% CI (seeded), and Spearman's rho.
The paper's "ablating the last 256 tokens" does not say whether the current token is kept; removing it too would make
the prediction meaningless (it is what the model continues), so we keep it.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from confkv.bench.common import CORPUS_NAME, PAPER
from confkv.bench.protocol import Benchmark, option, resolve_dtype
from confkv.confidence import confidence

MIN_PREFIX = 32

Progress = Callable[[str], None]


@dataclass
class KLShiftConfig:
    n_tokens: int = 4096
    n_positions: int = 128
    ablate: int = 256
    bootstrap: int = 2000
    seed: int = 0

    def validate(self) -> KLShiftConfig:
        if self.ablate < 1 or self.n_positions < 4:
            raise ValueError("ablate must be >= 1 and n_positions >= 4 (a CI needs n > 3)")
        span = self.n_tokens - (self.ablate + MIN_PREFIX)
        if span < self.n_positions:
            raise ValueError(f"{self.n_tokens} tokens leave {max(span, 0)} positions after the first "
                             f"{self.ablate + MIN_PREFIX}; need >= n_positions ({self.n_positions})")
        return self


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    n = len(x)
    if n != len(y) or n < 2:
        raise ValueError("pearson needs two sequences of the same length >= 2")
    mx, my = sum(x) / n, sum(y) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True))
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    if sxx == 0 or syy == 0:
        return float("nan")
    return sxy / math.sqrt(sxx * syy)


def _ranks(x: Sequence[float]) -> list[float]:
    order = sorted(range(len(x)), key=lambda i: x[i])
    ranks = [0.0] * len(x)
    i = 0
    while i < len(order):  # average ranks over ties
        j = i
        while j + 1 < len(order) and x[order[j + 1]] == x[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2
        i = j + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    return pearson(_ranks(x), _ranks(y))


def fisher_ci(r: float, n: int, z_crit: float = 1.959964) -> tuple[float, float]:
    """95% CI of Pearson r by the Fisher z-transform (needs n > 3)."""
    if n <= 3:
        raise ValueError("a Fisher CI needs n > 3")
    if abs(r) >= 1:
        return (r, r)
    z, se = math.atanh(r), 1 / math.sqrt(n - 3)
    return (math.tanh(z - z_crit * se), math.tanh(z + z_crit * se))


def bootstrap_ci(x: Sequence[float], y: Sequence[float], n_boot: int, seed: int = 0) -> tuple[float, float]:
    """Percentile 95% CI of Pearson r over `n_boot` paired resamples (resamples with zero variance are skipped)."""
    rng = random.Random(seed)
    n = len(x)
    rs = []
    for _ in range(n_boot):
        idx = [rng.randrange(n) for _ in range(n)]
        r = pearson([x[i] for i in idx], [y[i] for i in idx])
        if not math.isnan(r):
            rs.append(r)
    if not rs:
        return (float("nan"), float("nan"))
    rs.sort()
    return (rs[int(0.025 * (len(rs) - 1))], rs[int(round(0.975 * (len(rs) - 1)))])


def positions(cfg: KLShiftConfig, n_tokens: int) -> list[int]:
    lo, hi = cfg.ablate + MIN_PREFIX, n_tokens - 1
    return sorted({round(lo + (hi - lo) * i / (cfg.n_positions - 1)) for i in range(cfg.n_positions)})


def kl_shift_points(model, ids: list[int], cfg: KLShiftConfig, progress: Progress | None = None):
    """(positions, confidence, KL shift) per sampled position; see the module docstring for the definition."""
    cfg.validate()
    device = next(model.parameters()).device
    ts = positions(cfg, len(ids))
    x = torch.tensor([ids], device=device)
    with torch.no_grad():
        full = model(input_ids=x, logits_to_keep=torch.tensor(ts, device=device)).logits[0].float()
    conf = confidence(full).tolist()
    logp = torch.log_softmax(full, dim=-1)
    kls = []
    t0 = time.perf_counter()
    for i, t in enumerate(ts):
        keep = list(range(t - cfg.ablate)) + [t]
        with torch.no_grad():
            out = model(input_ids=x[:, keep], position_ids=torch.tensor([keep], device=device), logits_to_keep=1)
        logq = torch.log_softmax(out.logits[0, -1].float(), dim=-1)
        kls.append(float((logp[i].exp() * (logp[i] - logq)).sum().clamp_min(0.0)))
        if progress and (i + 1) % 16 == 0:
            progress(f"{i + 1}/{len(ts)} positions ({time.perf_counter() - t0:.0f}s)")
    return ts, conf, kls


def run_klshift(model, ids: list[int], cfg: KLShiftConfig, progress: Progress | None = None) -> dict:
    ts, conf, kls = kl_shift_points(model, ids[: cfg.n_tokens], cfg, progress)
    r = pearson(conf, kls)
    return {
        "bench": "klshift", "text": CORPUS_NAME, "n_tokens": min(len(ids), cfg.n_tokens), "ablate": cfg.ablate,
        "n_positions": len(ts), "r": r, "ci_fisher": fisher_ci(r, len(ts)) if not math.isnan(r) else None,
        "ci_bootstrap": bootstrap_ci(conf, kls, cfg.bootstrap, cfg.seed), "spearman": spearman(conf, kls),
        "mean_kl": sum(kls) / len(kls), "mean_confidence": sum(conf) / len(conf),
        "points": [{"t": t, "confidence": c, "kl": k} for t, c, k in zip(ts, conf, kls, strict=True)],
        "paper": PAPER["klshift_r"],
    }


def plot_scatter(result: dict, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 4))
    ax.scatter([p["confidence"] for p in result["points"]], [p["kl"] for p in result["points"]], s=10, alpha=0.7)
    ax.set_xlabel("confidence c_t")
    ax.set_ylabel(f"KL(p_t || p_t without the {result['ablate']} preceding tokens)")
    lo, hi = result["ci_fisher"] or (float("nan"), float("nan"))
    ax.set_title(f"{result.get('model', '')}: r = {result['r']:.2f} [{lo:.2f}, {hi:.2f}]", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


@dataclass
class KLShiftOptions:
    model: str = option("smollm2-135m", "registry name or HF directory")
    quick: bool = option(False, "CPU: 1K tokens, 48 positions")
    positions: int | None = option(None, "sampled positions [128; quick 48]", low=4)
    ablate: int = option(256, "preceding tokens removed from the context", low=1)
    dtype: str = option("auto", kind="dtype")


def run(opts: KLShiftOptions, progress: Progress) -> dict:
    """Load the model and text, then every sampled position (`run_klshift`)."""
    from confkv.bench.common import corpus_ids
    from confkv.models import load_for_inference

    model, tokenizer = load_for_inference(opts.model, resolve_dtype(opts.dtype, opts.model, progress))
    limit = getattr(model.config, "max_position_embeddings", None) or 4096
    cfg = KLShiftConfig(n_tokens=1024 if opts.quick else min(4096, limit),
                        n_positions=opts.positions or (48 if opts.quick else 128), ablate=opts.ablate)  # fmt: skip
    result = run_klshift(model, corpus_ids(tokenizer, cfg.n_tokens), cfg, progress)
    result.update(model=opts.model, quick=opts.quick)
    return result


def table(result: dict):
    from rich.table import Table

    from confkv.bench.common import fmt

    t = Table(title=f"bench klshift: {result.get('model')}, {result['n_positions']} positions, ablate "
                    f"{result['ablate']} preceding tokens")
    for col in ("metric", "ours", "paper"):
        t.add_column(col, justify="left" if col == "metric" else "right")
    paper = result["paper"]
    t.add_row("Pearson r(confidence, KL)", fmt(result["r"]),
              f"{paper['gpt2']} (GPT-2); {fmt(paper['larger'])} (larger)")
    t.add_row("95% CI (Fisher)", fmt(tuple(result["ci_fisher"])) if result["ci_fisher"] else "-", "")
    t.add_row("95% CI (bootstrap)", fmt(tuple(result["ci_bootstrap"])), "")
    t.add_row("Spearman rho", fmt(result["spearman"]), "")
    t.add_row("mean KL (nats)", fmt(result["mean_kl"], 3), "")
    return t


BENCHMARK = Benchmark(
    "klshift", KLShiftOptions, run, table, plots={"klshift": plot_scatter},
    help="Pearson r (95% CIs) between confidence and the KL shift from ablating the preceding 256 tokens.",
)
