"""`bench dtype`: the same agent-shaped work in several dtypes, side by side in one run, and whether greedy agrees.

Why this shape: an agent step is a prefill of a new observation (hundreds to thousands of tokens) followed by a
short greedy decode, through one live cache that already holds the system prompt and demonstration. So the shared
`prefix` is prefilled once per dtype (pinned, untimed: the agent does it once per process) and each prompt is
appended to a fork of it (chunked, as the agent does) and decoded greedily; prefill tokens/s, decode ms/token and the
step time (prefill + decode) are timed per dtype, the dtypes interleaved prompt by prompt so load on the machine
hits all of them alike. Agreement is against the first dtype (the reference, normally fp32): the share of prompts
whose greedy tokens are identical, and the mean share of positions equal before the first difference.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

import torch


def _one(start, ids: list[int], decode_tokens: int) -> tuple[float, float, list[int]]:
    session = start.fork()
    t0 = time.perf_counter()
    session.append(ids)
    t1 = time.perf_counter()
    tokens = session.decode(decode_tokens)
    t2 = time.perf_counter()
    return t1 - t0, (t2 - t1) / max(len(tokens) - 1, 1), tokens


def _prefix_share(a: list[int], b: list[int]) -> float:
    same = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        same += 1
    return same / max(len(a), 1)


def run_dtype_bench(
    load: Callable[[str], torch.nn.Module],
    dtypes: Sequence[str],
    prompts: Sequence[list[int]],
    decode_tokens: int = 16,
    progress: Callable[[str], None] = lambda _: None,
    prefix: Sequence[int] = (),
) -> dict:
    """`load(dtype)` returns the model in that dtype; every model stays loaded so prompts can be interleaved."""
    from confkv.session import ConfKVSession

    starts = {}
    for name in dtypes:
        progress(f"loading {name}")
        starts[name] = ConfKVSession(load(name), "full")
        if prefix:
            with torch.no_grad():
                starts[name].append(list(prefix), pin=True)
    per: dict[str, dict[str, list]] = {d: {"prefill_s": [], "decode_s": [], "tokens": []} for d in dtypes}
    for i, ids in enumerate(prompts):
        for name in dtypes:
            progress(f"prompt {i + 1}/{len(prompts)} ({len(ids)} tokens) in {name}")
            with torch.no_grad():
                prefill_s, decode_s, tokens = _one(starts[name], ids, decode_tokens)
            per[name]["prefill_s"].append(prefill_s)
            per[name]["decode_s"].append(decode_s)
            per[name]["tokens"].append(tokens)
    ref = dtypes[0]
    rows = []
    for name in dtypes:
        p = per[name]
        steps = [a + b * decode_tokens for a, b in zip(p["prefill_s"], p["decode_s"], strict=True)]
        rows.append({
            "dtype": name,
            "prefill_tok_s": statistics.median(len(ids) / s for ids, s in zip(prompts, p["prefill_s"], strict=True)),
            "decode_ms_per_token": 1000 * statistics.median(p["decode_s"]),
            "median_step_s": statistics.median(steps),
            "greedy_identical": sum(t == r for t, r in zip(p["tokens"], per[ref]["tokens"], strict=True)),
            "greedy_prefix_share": statistics.mean(
                _prefix_share(r, t) for t, r in zip(p["tokens"], per[ref]["tokens"], strict=True)),
            "tokens": p["tokens"],
        })  # fmt: skip
    base = rows[0]["median_step_s"]
    for row in rows:
        row["step_time_vs_reference"] = row["median_step_s"] / base
    return {
        "reference": ref,
        "prompts": len(prompts),
        "prefix_tokens": len(prefix),
        "prompt_tokens": [len(p) for p in prompts],
        "decode_tokens": decode_tokens,
        "threads": torch.get_num_threads(),
        "rows": rows,
    }


def format_report(report: dict) -> list[str]:
    lines = [f"bench dtype: {report.get('model', '?')}, {report['prompts']} prompts "
             f"({min(report['prompt_tokens'])}-{max(report['prompt_tokens'])} tokens after a shared "
             f"{report.get('prefix_tokens', 0)}-token prefix), {report['decode_tokens']} "
             f"decoded tokens each, {report['threads']} threads; reference {report['reference']}"]  # fmt: skip
    lines.append(f"{'dtype':<6} {'prefill tok/s':>14} {'decode ms/tok':>14} {'median step s':>14} {'vs ref':>7} "
                 f"{'greedy same':>12}")  # fmt: skip
    for r in report["rows"]:
        lines.append(f"{r['dtype']:<6} {r['prefill_tok_s']:>14.1f} {r['decode_ms_per_token']:>14.1f} "
                     f"{r['median_step_s']:>14.2f} {r['step_time_vs_reference']:>6.2f}x "
                     f"{r['greedy_identical']:>5}/{report['prompts']:<6}")  # fmt: skip
    return lines
