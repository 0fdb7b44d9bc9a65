"""Terminal replay of a recorded episode: what the agent saw, what it did, and how the cache budget reacted.

The point of Conf-KV is that the budget follows the model's confidence, so each step ends with a two-line chart
over its decoding tokens (confidence, budget) with every budget expansion (n_low -> n_high) marked and listed.
Everything user-supplied (observations are full of `[12]`-style ids) goes through `rich.text.Text`, never markup,
and through `traces.fmt.terminal_safe`, so an ESC in a page or an answer is shown, not obeyed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.text import Text

from traces.fmt import format_bytes, format_ratio, terminal_safe, truncate
from traces.store import TraceStore, TraceStoreError

BLOCKS = "▁▂▃▄▅▆▇█"
EXPANSION_MARK = "▲"


@dataclass(frozen=True)
class Expansion:
    """The budget grew between two consecutive decoding tokens.

    Budgets are set from the PREVIOUS token's confidence (confidence -> budget for the next step), so the low
    confidence that caused the expansion is `trigger_confidence`, not this token's own.
    """

    position: int  # index in the step's token list
    token_index: int
    token_text: str
    before: int
    after: int
    trigger_confidence: float | None  # None when the trigger was the previous step's last token


def sparkline(values: Sequence[float], lo: float | None = None, hi: float | None = None) -> str:
    """One block character per value, scaled to [lo, hi] (defaults: the values' own range)."""
    if not values:
        return ""
    lo = min(values) if lo is None else lo
    hi = max(values) if hi is None else hi
    if hi <= lo:
        return BLOCKS[len(BLOCKS) // 2 - 1] * len(values)
    top = len(BLOCKS) - 1
    return "".join(BLOCKS[min(top, max(0, round((v - lo) / (hi - lo) * top)))] for v in values)


def downsample(values: Sequence[float], width: int, reduce: Callable[[Sequence[float]], float]) -> list[float]:
    """Fold `values` into at most `width` buckets (mean for confidence, max for budget keeps spikes visible)."""
    if len(values) <= width:
        return list(values)
    edges = [round(i * len(values) / width) for i in range(width + 1)]
    return [reduce(values[a:b]) for a, b in zip(edges, edges[1:], strict=False)]


def budget_expansions(tokens: Sequence[dict[str, Any]], previous_budget: int | None = None) -> list[Expansion]:
    """Tokens whose budget is larger than the one before (the previous step's last token for the first one)."""
    found, before, before_conf = [], previous_budget, None
    for position, tok in enumerate(tokens):
        if before is not None and tok["budget"] > before:
            found.append(Expansion(position, tok["token_index"], tok["token_text"], before, tok["budget"], before_conf))
        before, before_conf = tok["budget"], tok["confidence"]
    return found


def decode_chart(
    tokens: Sequence[dict[str, Any]],
    *,
    previous_budget: int | None = None,
    budget_range: tuple[int, int] | None = None,
    width: int = 64,
    max_listed: int = 8,
) -> Text:
    """Confidence and budget sparklines over the step's decoding tokens, expansions marked below with ▲."""
    text = Text()
    if not tokens:
        return text.append("no decoding tokens recorded", style="dim")
    conf = downsample([t["confidence"] for t in tokens], width, fmean)
    budget = downsample([float(t["budget"]) for t in tokens], width, max)
    lo, hi = budget_range or (min(budget), max(budget))
    expansions = budget_expansions(tokens, previous_budget)
    marks = [" "] * len(conf)
    for exp in expansions:
        marks[min(len(marks) - 1, exp.position * len(conf) // len(tokens))] = EXPANSION_MARK
    text.append("confidence ", style="bold").append(sparkline(conf, 0.0, 1.0), style="cyan")
    text.append(
        f"  mean {fmean(t['confidence'] for t in tokens):.2f}, min {min(t['confidence'] for t in tokens):.2f}\n"
    )
    text.append("budget     ", style="bold").append(sparkline(budget, lo, hi), style="magenta")
    text.append(f"  {min(t['budget'] for t in tokens)}..{max(t['budget'] for t in tokens)} tokens/layer\n")
    text.append("expansions ", style="bold").append("".join(marks), style="bold red")
    text.append(f"  {len(expansions)} over {len(tokens)} tokens")
    for exp in expansions[:max_listed]:
        cause = "" if exp.trigger_confidence is None else f" after confidence {exp.trigger_confidence:.2f}"
        text.append(
            f"\n  {EXPANSION_MARK} token {exp.token_index} {exp.token_text!r}: budget {exp.before} -> "
            f"{exp.after}{cause}",
            style="red",
        )
    if len(expansions) > max_listed:
        text.append(f"\n  … and {len(expansions) - max_listed} more", style="red")
    return text


def episode_header(episode: dict[str, Any]) -> Panel:
    """Task, policy, outcome and memory of the episode, one glance."""
    ok = {None: ("…", "yellow"), 1: ("success", "bold green"), 0: ("failure", "bold red")}[episode["success"]]
    text = Text()
    text.append(f"task {episode['task_id']}  ", style="bold").append(f"policy {episode['policy']}  ")
    text.append(f"model {episode['model']}  run {episode['run_id']}\n")
    text.append(f"{episode['status']}: ").append(ok[0], style=ok[1])
    if episode["score"] is not None:
        text.append(f"  score {episode['score']:.2f}")
    if episode["eval_reason"]:
        text.append(f"  ({truncate(episode['eval_reason'], 100)})")
    text.append(f"\nsteps {episode['steps'] if episode['steps'] is not None else '-'}  ")
    text.append(f"peak KV {format_bytes(episode['peak_kv_bytes'])}", style="bold")
    if episode["full_kv_bytes"]:
        fraction = (episode["peak_kv_bytes"] or 0) / episode["full_kv_bytes"]
        text.append(f" ({format_ratio(fraction, percent=True)} of full {format_bytes(episode['full_kv_bytes'])})")
    text.append(f"  peak RSS {format_bytes(episode['peak_rss_bytes'])}")
    if episode["peak_cuda_bytes"] is not None:
        text.append(f"  peak CUDA {format_bytes(episode['peak_cuda_bytes'])}")
    if episode["wall_s"] is not None:
        text.append(f"  wall {episode['wall_s']:.1f} s")
    if episode["error"]:
        text.append("\nerror: ", style="bold red").append(truncate(episode["error"].splitlines()[-1], 200), style="red")
    return Panel(text, title=f"episode {episode['id']}", expand=True)


def step_panel(
    step: dict[str, Any],
    tokens: Sequence[dict[str, Any]],
    *,
    previous_budget: int | None,
    budget_range: tuple[int, int] | None,
    full_observation: bool = False,
    observation_lines: int = 12,
) -> Panel:
    """URL, observation (cut to `observation_lines` unless `full_observation`), output, action, result, chart."""
    parts: list[RenderableType] = []
    head = Text()
    head.append("url ", style="bold").append(step["url"] or "-")
    head.append(
        f"\nobservation: {step['observation_tokens'] or '?'} tokens, prefilled {step['prefilled_tokens'] or '?'}"
        f", context {step['total_tokens'] or '?'}",
        style="bold",
    )
    parts.append(head)
    lines = (step["observation"] or "").splitlines()
    shown = lines if full_observation else lines[:observation_lines]
    obs = Text("\n".join(shown), style="dim")
    if len(shown) < len(lines):
        obs.append(f"\n… {len(lines) - len(shown)} more lines (--full-observation shows all)", style="italic")
    parts.append(obs)
    body = Text()
    if step["raw_output"] is not None and step["raw_output"].strip() != (step["action"] or "").strip():
        body.append("model output ", style="bold").append(truncate(step["raw_output"], 300)).append("\n")
    body.append("action ", style="bold").append(step["action"] or "(none)", style="bold yellow")
    if step["result"]:
        body.append("\nresult ", style="bold").append(truncate(step["result"], 300))
    if step["parse_error"]:
        body.append("\nparse error ", style="bold red").append(step["parse_error"], style="red")
    if step["exec_error"]:
        body.append("\nexec error ", style="bold red").append(step["exec_error"], style="red")
    kept = step["kept_tokens_per_layer"]
    body.append(f"\nKV {format_bytes(step['kv_bytes'])}")
    if kept:
        body.append(f", kept per layer {min(kept)}..{max(kept)} (mean {fmean(kept):.0f})")
    timings = [
        f"{name} {step[key]:.0f} ms"
        for name, key in (("prefill", "prefill_ms"), ("decode", "decode_ms"), ("step", "step_ms"))
        if step[key] is not None
    ]
    if timings:
        body.append("  " + ", ".join(timings), style="dim")
    parts.append(body)
    parts.append(decode_chart(tokens, previous_budget=previous_budget, budget_range=budget_range))
    return Panel(Group(*parts), title=f"step {step['step']}", title_align="left")


def _shown(row: dict[str, Any]) -> dict[str, Any]:
    """A stored row with its text made terminal-safe (pages, actions, answers and errors are user data)."""
    return {key: terminal_safe(value) if isinstance(value, str) else value for key, value in row.items()}


def replay(
    store: TraceStore,
    episode_id: int,
    console: Console | None = None,
    *,
    step: int | None = None,
    full_observation: bool = False,
    observation_lines: int = 12,
) -> None:
    """Print an episode (or one step of it) to the console, non-interactively."""
    console = console or Console()
    episode = _shown(store.episode(episode_id))
    steps = [_shown(row) for row in store.steps(episode_id)]
    tokens_by_step: dict[int, list[dict[str, Any]]] = {}
    for tok in store.decode_tokens(episode_id):
        tokens_by_step.setdefault(tok["step"], []).append(_shown(tok))
    budgets = [t["budget"] for toks in tokens_by_step.values() for t in toks]
    budget_range = (min(budgets), max(budgets)) if budgets else None
    if step is not None and step not in {s["step"] for s in steps}:
        known = ", ".join(str(s["step"]) for s in steps) or "none recorded"
        raise TraceStoreError(f"episode {episode_id} has no step {step} (steps: {known})")
    console.print(episode_header(episode))
    previous_budget = None
    for row in steps:
        tokens = tokens_by_step.get(row["step"], [])
        if step is None or row["step"] == step:
            console.print(
                step_panel(
                    row,
                    tokens,
                    previous_budget=previous_budget,
                    budget_range=budget_range,
                    full_observation=full_observation,
                    observation_lines=observation_lines,
                )
            )
        if tokens:
            previous_budget = tokens[-1]["budget"]
    if not steps:
        console.print(Text("no steps recorded", style="dim"))
