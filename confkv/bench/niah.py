"""`bench niah`: needle-in-a-haystack accuracy over depths x context lengths, every policy at a matched footprint.

One cell = (context length L, depth d), tried with `needles` different needles (default 3, so every cell is a count,
not one coin flip; the summary gives k/n per cell and a Wilson 95% interval per policy): the haystack is the
corpus's first tokens, the needle sentence "The secret passcode is NNNNN." (a seeded 5-digit number per trial) is
inserted at the sentence boundary nearest
below d x haystack, and the question "What is the secret passcode ...? Answer: The secret passcode is" follows;
L counts every token. The context is appended to a `ConfKVSession` (chunked prefill with eviction between chunks, as
the session does), the question as one more call, then up to `max_new_tokens` greedy tokens are decoded; a cell is
correct iff the decoded text contains the number.

Matched footprint per trial: `confkv` (or the gated policy named by `match`) runs first; `sliding`, `h2o` and
`confkv-fixed` (the same ranker and INT8 with the gate off) each get the fixed budget whose mean resident KV bytes over the same call ends matches confkv's
(`common.byte_matched_budget`; H2O recent window = half its budget); `confkv-pyramid` shares the gate.

The trace: one extra `confkv` run at the longest length and middle depth feeds the last `TRACE_TAIL` haystack tokens
and the question token by token, so per-token confidence and the budget around the question's arrival can be plotted.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import accumulate

from confkv.bench.common import (
    CORPUS_NAME,
    EXACT_BUDGETS,
    FIXED_BASELINES,
    PAPER,
    byte_matched_budget,
    fixed_policy,
    footprint,
)
from confkv.bench.protocol import Benchmark, floats, ints, names, option, resolve_dtype
from confkv.bench.stats import wilson
from confkv.policies import get_policy, policy_names
from confkv.policy import KVPolicy
from confkv.session import ConfKVSession

POLICIES = policy_names("main")
GATED_EXTRA = policy_names("on-request")  # on request (`--policies`): the cold-tier gate, the literal one
QUICK_OVERRIDES = {"n_low": "96", "n_high": "192", "protect": "32", "int8_after": "32"}
QUESTION = "\n\nQuestion: What is the secret passcode mentioned in the text above?\nAnswer: The secret passcode is"
TRACE_TAIL = 48

Progress = Callable[[str], None]


@dataclass
class NiahConfig:
    lengths: tuple[int, ...]
    depths: tuple[float, ...]
    policies: tuple[str, ...] = POLICIES
    overrides: dict[str, str] = field(default_factory=dict)  # gated policies (confkv, confkv-pyramid)
    prefill_chunk: int = 512
    max_new_tokens: int = 10
    needles: int = 3  # trials per (length, depth) cell, each with its own passcode
    match: str = "confkv"  # the gated policy whose mean resident bytes the fixed baselines are matched to
    match_total: bool = False  # match resident + cold-tier bytes (what one device holds), not resident alone
    match_both: bool = False  # each fixed baseline twice: at resident bytes, and as `<name>@total` at resident + cold
    seed: int = 0
    trace: bool = True

    def labels(self) -> tuple[str, ...]:
        """The policies' result labels: with `match_both` each fixed baseline also as `<name>@total`."""
        extra = [f"{p}@total" for p in FIXED_BASELINES if p in self.policies] if self.match_both else []
        return (*self.policies, *extra)

    def validate(self) -> NiahConfig:
        if not self.lengths or min(self.lengths) < 32:
            raise ValueError(f"context lengths must be >= 32 tokens, got {self.lengths}")
        if not self.depths or not all(0.0 <= d <= 1.0 for d in self.depths):
            raise ValueError(f"depths must be in [0, 1], got {self.depths}")
        unknown = set(self.policies) - set(POLICIES + GATED_EXTRA)
        if unknown:
            raise ValueError(f"unknown policies {sorted(unknown)}; known: {', '.join(POLICIES + GATED_EXTRA)}")
        if set(self.policies) & set(FIXED_BASELINES) and self.match not in self.policies:
            raise ValueError(f"{'/'.join(FIXED_BASELINES)} are matched to {self.match}'s footprint: include it")
        if self.needles < 1:
            raise ValueError(f"needles must be >= 1, got {self.needles}")
        return self


@dataclass
class Cell:
    length: int
    depth: float
    code: str
    ids: list[int]  # context (haystack with the needle)
    question: list[int]
    needle_at: int  # token index of the needle's first token


def make_cell(
    tokenizer, haystack: list[int], length: int, depth: float, code: str, prefix: tuple[int, ...] = ()
) -> Cell:
    """Build one prompt of exactly `length` tokens (`prefix` such as BOS, context, question), needle at `depth`."""
    needle = tokenizer(f" The secret passcode is {code}.", add_special_tokens=False).input_ids
    question = tokenizer(QUESTION, add_special_tokens=False).input_ids
    n_fill = length - len(prefix) - len(needle) - len(question)
    if n_fill < 1:
        raise ValueError(f"context length {length} is too short for the needle and the question")
    if n_fill > len(haystack):
        raise ValueError(f"the corpus has {len(haystack)} tokens, a {length}-token context needs {n_fill}")
    filler = haystack[:n_fill]
    at = round(depth * n_fill)
    for back in range(min(at, 64)):  # nearest sentence end below the target depth, so no word is split
        if tokenizer.decode(filler[at - back - 1 : at - back]).rstrip().endswith((".", ":", ";")):
            at -= back
            break
    return Cell(length, depth, code, [*prefix, *filler[:at], *needle, *filler[at:]], question, len(prefix) + at)


def _policy(name: str, overrides: dict[str, str], chunk: int, budget: int | None) -> KVPolicy:
    base = {**EXACT_BUDGETS, "prefill_chunk": str(chunk)}
    if name == "full":
        return get_policy("full", base)
    if name in FIXED_BASELINES:
        return fixed_policy(name, budget, overrides, base)
    return get_policy(name, {**base, **overrides})


def answer(session: ConfKVSession, tokenizer, max_new_tokens: int) -> str:
    stops = {t for t in (tokenizer.eos_token_id, *tokenizer("\n", add_special_tokens=False).input_ids) if t is not None}
    return tokenizer.decode(session.decode(max_new_tokens, stop_ids=stops), skip_special_tokens=True)


def run_cell(model, tokenizer, cell: Cell, policy: KVPolicy, max_new_tokens: int) -> tuple[bool, str, dict]:
    session = ConfKVSession(model, policy)
    session.append(cell.ids)
    session.append(cell.question)
    text = answer(session, tokenizer, max_new_tokens)
    fp = footprint(session)
    ends = list(accumulate(s.tokens for s in session.stats.steps))
    return cell.code in text, text, {"mean_kv_tokens": fp.mean_kv_tokens, "peak_kv_tokens": fp.peak_kv_tokens,
                                     "mean_kv_bytes": fp.mean_kv_bytes, "peak_kv_bytes": fp.peak_kv_bytes,
                                     "mean_cold_bytes": fp.mean_cold_bytes,
                                     "gate_open_rate": session.cache.gate_open_rate, "ends": ends}


def run_trace(model, tokenizer, cell: Cell, policy: KVPolicy, max_new_tokens: int) -> dict:
    """confkv with the haystack's tail and the question fed one token per call: per-token confidence and budget."""
    session = ConfKVSession(model, policy)
    session.append(cell.ids[:-TRACE_TAIL])
    n_chunks = len(session.stats.steps)
    for tok in cell.ids[-TRACE_TAIL:] + cell.question:
        session.step(tok)
    text = answer(session, tokenizer, max_new_tokens)
    steps = session.stats.steps[n_chunks:]
    conf = [s.confidence for s in steps]
    n_q = len(cell.question)
    return {
        "length": cell.length, "depth": cell.depth, "answer": text, "correct": cell.code in text,
        "confidence": conf, "budget": [s.budget for s in steps], "kept_tokens": [s.kept_tokens for s in steps],
        "question_start": TRACE_TAIL, "question_end": TRACE_TAIL + n_q,
        "mean_confidence_haystack_tail": sum(conf[:TRACE_TAIL]) / TRACE_TAIL,
        "mean_confidence_question": sum(conf[TRACE_TAIL : TRACE_TAIL + n_q]) / n_q,
    }


def run_niah(
    model, tokenizer, haystack: list[int], cfg: NiahConfig, progress: Progress | None = None, prefix: tuple[int, ...] = ()
) -> dict:
    cfg.validate()
    say = progress or (lambda _msg: None)
    rng = random.Random(cfg.seed)
    # The gated policies first: the fixed baselines are matched to one of them.
    # (label, policy, match resident + cold bytes?): one gated run serves both matchings of a baseline.
    order = [(p, p, False) for p in policy_names() if p in cfg.policies and p not in FIXED_BASELINES]
    order += [(p, p, cfg.match_total) for p in FIXED_BASELINES if p in cfg.policies]
    if cfg.match_both:
        order += [(f"{p}@total", p, True) for p in FIXED_BASELINES if p in cfg.policies]
    cells_out: list[dict] = []
    for length, depth, needle in itertools.product(cfg.lengths, cfg.depths, range(cfg.needles)):
        cell = make_cell(tokenizer, haystack, length, depth, f"{rng.randrange(10000, 100000)}", prefix)
        ref: dict | None = None  # confkv's footprint in this trial
        for label, name, total in order:
            budget = None
            if name in FIXED_BASELINES:
                target = ref["mean_kv_bytes"] + (ref["mean_cold_bytes"] if total else 0.0)
                budget = byte_matched_budget(model, name, ref["ends"], target, {**EXACT_BUDGETS, **cfg.overrides})
            t0 = time.perf_counter()
            ok, text, fp = run_cell(model, tokenizer, cell, _policy(name, cfg.overrides, cfg.prefill_chunk, budget),
                                    cfg.max_new_tokens)
            if name == cfg.match:
                ref = fp
            cells_out.append({"length": length, "depth": depth, "needle": needle, "code": cell.code, "policy": label,
                              "correct": ok, "answer": text, "budget": budget, **fp, "seconds": time.perf_counter() - t0})
            say(f"L={length} depth={depth:.2f} needle {needle}: {label}: {'OK ' if ok else 'MISS'} "
                f"{text.strip()[:30]!r} (mean KV {fp['mean_kv_bytes'] / 2**20:.2f} MiB, "
                f"{time.perf_counter() - t0:.0f}s)")
    for c in cells_out:
        c.pop("ends", None)
    result = summarize(cells_out, cfg)
    if cfg.trace and cfg.match in cfg.policies:
        cell = make_cell(tokenizer, haystack, max(cfg.lengths), 0.5, f"{rng.randrange(10000, 100000)}", prefix)
        result["trace"] = run_trace(model, tokenizer, cell, _policy(cfg.match, cfg.overrides, cfg.prefill_chunk, None),
                                    cfg.max_new_tokens)
    return result


def summarize(cells: list[dict], cfg: NiahConfig) -> dict:
    policies: dict[str, dict] = {}
    for name in cfg.labels():
        mine = [c for c in cells if c["policy"] == name]
        if not mine:
            continue
        k = sum(c["correct"] for c in mine)
        rates = [c["gate_open_rate"] for c in mine if c.get("gate_open_rate") is not None]
        policies[name] = {
            "accuracy": k / len(mine),
            "correct": k,
            "trials": len(mine),
            "ci95": wilson(k, len(mine)),
            "mean_kv_tokens": sum(c["mean_kv_tokens"] for c in mine) / len(mine),
            "mean_kv_bytes": sum(c["mean_kv_bytes"] for c in mine) / len(mine),
            "mean_cold_bytes": sum(c.get("mean_cold_bytes", 0.0) for c in mine) / len(mine),
            "peak_kv_tokens": max(c["peak_kv_tokens"] for c in mine),
            "peak_kv_bytes": max(c["peak_kv_bytes"] for c in mine),
            "gate_open_rate": sum(rates) / len(rates) if rates else None,
            "by_length": {str(n): sum(c["correct"] for c in mine if c["length"] == n)
                          / max(1, sum(1 for c in mine if c["length"] == n)) for n in cfg.lengths},
            "by_cell": {f"{n}@{d:g}": f"{sum(c['correct'] for c in mine if (c['length'], c['depth']) == (n, d))}"
                                      f"/{sum(1 for c in mine if (c['length'], c['depth']) == (n, d))}"
                        for n, d in itertools.product(cfg.lengths, cfg.depths)},
        }
    return {"bench": "niah", "text": CORPUS_NAME, "lengths": list(cfg.lengths), "depths": list(cfg.depths),
            "needles": cfg.needles, "seed": cfg.seed, "matched_to": cfg.match, "matched_total": cfg.match_total,
            "matched_both": cfg.match_both,
            "overrides": cfg.overrides, "prefill_chunk": cfg.prefill_chunk,
            "policies": policies, "cells": cells, "paper": PAPER["niah_accuracy"]}


def _cell_rate(cells: list[dict], policy: str, length: int, depth: float) -> float:
    hits = [float(c["correct"]) for c in cells if (c["policy"], c["length"], c["depth"]) == (policy, length, depth)]
    return sum(hits) / len(hits) if hits else float("nan")


def plot_heatmap(result: dict, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result["policies"])
    lengths, depths = result["lengths"], result["depths"]
    fig, axes = plt.subplots(1, len(names), figsize=(2.6 * len(names) + 1, 3.2), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        grid = [[_cell_rate(result["cells"], name, n, d) for n in lengths] for d in depths]
        ax.imshow(grid, vmin=0, vmax=1, cmap="RdYlGn", aspect="auto")
        ax.set_title(f"{name}\nacc {result['policies'][name]['accuracy']:.2f}", fontsize=9)
        ax.set_xticks(range(len(lengths)), [str(n) for n in lengths], fontsize=7, rotation=45)
        ax.set_yticks(range(len(depths)), [f"{d:.0%}" for d in depths], fontsize=7)
        ax.set_xlabel("context tokens", fontsize=8)
    axes[0][0].set_ylabel("needle depth", fontsize=8)
    fig.suptitle(f"NIAH {result.get('model', '')}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_trace(trace: dict, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.2))
    x = range(len(trace["confidence"]))
    ax.plot(x, trace["confidence"], color="#3a7", label="confidence")
    ax.axvspan(trace["question_start"], trace["question_end"], color="#fc8", alpha=0.4, label="question")
    ax.set_ylabel("confidence")
    ax.set_ylim(0, 1)
    ax.set_xlabel("token (haystack tail, question, answer)")
    ax2 = ax.twinx()
    ax2.step(x, trace["budget"], color="#48c", where="post", label="budget")
    ax2.set_ylabel("budget (tokens)")
    fig.legend(loc="upper left", fontsize=8)
    ax.set_title(f"confkv around the question (L={trace['length']}, answer {trace['answer'].strip()[:20]!r})",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


@dataclass
class NiahOptions:
    model: str = option("smollm2-135m", "registry name or HF directory")
    quick: bool = option(False, "CPU grid: 512/1024 tokens x depths 0/50/100%")
    lengths: str | None = option(None, "context lengths [1K..32K up to the model limit]")
    depths: str | None = option(None, "needle depths in [0,1] [0,.25,.5,.75,1]")
    needles: int = option(3, "trials per cell, each with its own passcode", low=1)
    seed: int = option(0, "seed of the passcodes (a new seed with new depths gives needles no earlier run has seen)",
                       low=0)
    policies: str | None = option(None, "comma-separated subset (the fixed baselines need the --match policy) "
                                  "[role main in `confkv-agent policies`; on request: role on-request]")  # fmt: skip
    match: str = option("confkv", "the gated policy the fixed baselines are byte-matched to")
    match_total: bool = option(False, "match resident + cold-tier bytes (one device)")
    match_both: bool = option(False, "run each fixed baseline at resident bytes and, as <name>@total, at resident + "
                              "cold bytes, from one run of the gated policy")  # fmt: skip
    no_trace: bool = option(False, "skip the token-by-token confidence trace around the question (one more run)")
    set_: list[str] | None = option(None, "override of the gated policies, key=value", flag="--set")
    dtype: str = option("auto", kind="dtype")
    int8: bool = option(False, "the same as --dtype int8 (W8A8 Linear layers, fp32 activations)")


def run(opts: NiahOptions, progress: Progress) -> dict:
    """Load the model and text, then every cell (`run_niah`)."""
    from confkv.bench.common import corpus_ids
    from confkv.models import load_for_inference
    from confkv.policies import parse_overrides

    lengths = ints(opts.lengths, "lengths") if opts.lengths else None
    overrides = parse_overrides(opts.set_)
    dtype = resolve_dtype(opts.dtype, opts.model, progress)
    depths = floats(opts.depths, "depths")
    model, tokenizer = load_for_inference(opts.model, dtype, opts.int8)
    limit = getattr(model.config, "max_position_embeddings", None) or 32768
    if lengths is None:
        lengths = (512, 1024) if opts.quick else tuple(n for n in (1024, 2048, 4096, 8192, 16384, 32768) if n <= limit)
    depths = depths or ((0.0, 0.5, 1.0) if opts.quick else (0.0, 0.25, 0.5, 0.75, 1.0))
    cfg = NiahConfig(lengths=tuple(lengths), depths=tuple(depths), policies=names(opts.policies) or POLICIES,
                     needles=opts.needles, match=opts.match, match_total=opts.match_total, seed=opts.seed,
                     match_both=opts.match_both, trace=not opts.no_trace,
                     prefill_chunk=128 if opts.quick else 512,
                     overrides={**(QUICK_OVERRIDES if opts.quick else {}), **overrides}).validate()  # fmt: skip
    bos = (tokenizer.bos_token_id,) if tokenizer.bos_token_id is not None else ()
    haystack = corpus_ids(tokenizer, max(lengths))[len(bos):]
    result = run_niah(model, tokenizer, haystack, cfg, progress, prefix=bos)
    result.update(model=opts.model, quick=opts.quick, weights="int8 linears" if opts.int8 else dtype)
    return result


def table(result: dict):
    from rich.table import Table

    from confkv.bench.common import fmt

    t = Table(title=f"bench niah: {result.get('model')}, lengths {result['lengths']}, depths {result['depths']}, "
                    f"{result.get('needles', 1)} needles per cell")
    cols = ["policy", "correct", "95% CI", *[f"acc@{n}" for n in result["lengths"]], "mean KV MiB", "peak KV MiB",
            "cold MiB", "gate open", "paper"]
    for col in cols:
        t.add_column(col, justify="left" if col == "policy" else "right")
    for name, row in result["policies"].items():
        lo, hi = row.get("ci95", (None, None))
        rate = row.get("gate_open_rate")
        t.add_row(name, f"{row.get('correct', '?')}/{row.get('trials', '?')}", f"{fmt(lo)}-{fmt(hi)}",
                  *[fmt(row["by_length"][str(n)]) for n in result["lengths"]],
                  fmt(row.get("mean_kv_bytes", 0) / 2**20, 3), fmt(row["peak_kv_bytes"] / 2**20, 3),
                  fmt(row.get("mean_cold_bytes", 0) / 2**20, 3),
                  "-" if rate is None else f"{rate:.0%}", fmt(result["paper"].get(name), 3))
    if "trace" in result:
        tr = result["trace"]
        t.add_row("trace: confidence haystack -> question", *[""] * (len(cols) - 3),
                  f"{tr['mean_confidence_haystack_tail']:.3f} -> {tr['mean_confidence_question']:.3f}", "")
    return t


BENCHMARK = Benchmark(
    "niah", NiahOptions, run, table,
    plots={"niah": plot_heatmap, "niah-trace": lambda r, path: "trace" in r and plot_trace(r["trace"], path)},
    help="Needle in a haystack: accuracy per policy at matched footprint, heatmap and a confidence/budget trace.",
)
