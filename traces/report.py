"""PNG reports from a trace database: the three pictures that explain a Conf-KV evaluation.

1. confidence and budget over an episode's decoding tokens (does the budget follow confidence?),
2. KV bytes over steps per policy (how fast does each cache grow across a long episode?),
3. success vs peak KV memory per policy (what does the memory saving cost in success?);
   episodes without memory measurements (the `scripted` reference replays) get a plain success-rate bar chart;
4. for `eval --mode forced` runs, the memory frontier: answer ΔNLL vs mean and peak KV bytes (`traces.forced`).

Uses `matplotlib.figure.Figure` directly (Agg canvas, no pyplot): no global backend state, safe in any process.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from statistics import fmean
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from traces.forced import forced_rows
from traces.forced_plot import plot_frontier
from traces.plots import byte_scale, policy_colors, save_figure
from traces.replay import budget_expansions
from traces.store import TraceStore
from traces.summary import final_attempts, summarize


def plot_confidence_budget(store: TraceStore, episode_id: int, path: Path) -> Path:
    """Confidence (left axis) and budget (right axis, step line) over all decoding tokens of one episode."""
    episode = store.episode(episode_id)
    tokens = store.decode_tokens(episode_id)
    if not tokens:
        raise ValueError(f"episode {episode_id} has no decode tokens to plot")
    x = list(range(len(tokens)))
    fig = Figure(figsize=(10, 4))
    ax = fig.add_subplot()
    ax.plot(x, [t["confidence"] for t in tokens], color="tab:blue", lw=1, label="confidence")
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("decoding token (all steps)")
    ax.set_ylabel("confidence", color="tab:blue")
    budget_ax = ax.twinx()
    budget_ax.step(x, [t["budget"] for t in tokens], where="post", color="tab:purple", lw=1.5, label="budget")
    budget_ax.set_ylabel("budget (tokens / layer)", color="tab:purple")
    starts: dict[int, int] = {}
    for i, tok in enumerate(tokens):
        starts.setdefault(tok["step"], i)
    for step, start in starts.items():
        ax.axvline(start, color="grey", ls=":", lw=0.8)
        ax.text(start, 1.02, f"s{step}", fontsize=7, color="grey")
    expansions = budget_expansions(tokens)
    if expansions:
        budget_ax.scatter(
            [e.position for e in expansions],
            [e.after for e in expansions],
            marker="^",
            color="red",
            zorder=3,
            label=f"expansion ({len(expansions)})",
        )
    lines = ax.get_legend_handles_labels()
    more = budget_ax.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], loc="lower left", fontsize=8)
    ax.set_title(f"episode {episode_id}: {episode['task_id']} / {episode['policy']} ({episode['model']})")
    return save_figure(fig, path)


def plot_kv_by_policy(
    episodes: Sequence[dict[str, Any]], steps_by_episode: dict[int, list[dict[str, Any]]], path: Path
) -> Path:
    """Mean KV bytes at each step index per policy, with the min-max band across episodes."""
    per_policy: dict[str, dict[int, list[int]]] = {}
    for ep in episodes:
        for step in steps_by_episode.get(ep["id"], []):
            if step["kv_bytes"] is not None:
                per_policy.setdefault(ep["policy"], {}).setdefault(step["step"], []).append(step["kv_bytes"])
    if not per_policy:
        raise ValueError("no steps with kv_bytes to plot")
    divisor, unit = byte_scale(v for by_step in per_policy.values() for vs in by_step.values() for v in vs)
    fig = Figure(figsize=(8, 4.5))
    ax = fig.add_subplot()
    colors = policy_colors(per_policy)
    for policy, color in colors.items():
        by_step = per_policy[policy]
        xs = sorted(by_step)
        ax.plot(xs, [fmean(by_step[s]) / divisor for s in xs], marker="o", ms=3, color=color, label=policy)
        ax.fill_between(
            xs,
            [min(by_step[s]) / divisor for s in xs],
            [max(by_step[s]) / divisor for s in xs],
            color=color,
            alpha=0.15,
        )
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("step")
    ax.set_ylabel(f"KV cache ({unit})")
    ax.set_title("KV cache size over steps (mean, min-max band)")
    ax.legend()
    ax.grid(alpha=0.3)
    return save_figure(fig, path)


def plot_success_vs_memory(episodes: Sequence[dict[str, Any]], path: Path) -> Path:
    """Per policy: success rate vs mean peak KV bytes (large labelled point) and each episode (small dots)."""
    measured = [e for e in episodes if e["peak_kv_bytes"] is not None]
    if not measured:
        raise ValueError("no finished episodes with peak_kv_bytes to plot")
    summary = summarize(episodes)
    divisor, unit = byte_scale(e["peak_kv_bytes"] for e in measured)
    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    colors = policy_colors(summary.policies)
    for policy, stats in summary.policies.items():
        mine = [e for e in measured if e["policy"] == policy]
        # deterministic jitter so 0/1 outcomes of many episodes do not hide each other
        jitter = [(zlib.crc32(str(e["id"]).encode()) % 100 - 50) / 1000 for e in mine]
        ax.scatter(
            [e["peak_kv_bytes"] / divisor for e in mine],
            [(1 if e["success"] else 0) + j for e, j in zip(mine, jitter, strict=True)],
            s=10,
            alpha=0.35,
            color=colors[policy],
        )
        if stats.mean_peak_kv_bytes is not None:
            x = stats.mean_peak_kv_bytes / divisor
            ax.scatter(
                [x],
                [stats.success_rate],
                s=120,
                color=colors[policy],
                edgecolor="black",
                alpha=1.0,
                zorder=3,
                label=f"{policy} ({stats.episodes} ep.)",
            )
            ax.annotate(policy, (x, stats.success_rate), textcoords="offset points", xytext=(6, 6))
    ax.set_xlabel(f"peak KV cache ({unit})")
    ax.set_ylabel("success (rate; dots = episodes)")
    ax.set_ylim(-0.1, 1.1)
    ax.set_title("Success vs peak KV memory per policy")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return save_figure(fig, path)


def plot_success_by_policy(episodes: Sequence[dict[str, Any]], path: Path) -> Path:
    """Success rate per policy as bars labelled with successes/episodes: what every finished episode can show."""
    summary = summarize(episodes)
    if not summary.policies:
        raise ValueError("no finished episodes to plot")
    names = list(summary.policies)
    colors = policy_colors(names)
    fig = Figure(figsize=(max(4.0, 1.2 * len(names) + 2), 4))
    ax = fig.add_subplot()
    rates = [summary.policies[n].success_rate for n in names]
    ax.bar(names, rates, color=[colors[n] for n in names])
    for i, n in enumerate(names):
        stats = summary.policies[n]
        ax.annotate(f"{stats.successes}/{stats.episodes}", (i, rates[i]), ha="center", textcoords="offset points",
                    xytext=(0, 4))  # fmt: skip
    ax.set_ylim(0, 1.15)
    ax.set_ylabel("success rate")
    ax.set_title("Success per policy")
    return save_figure(fig, path)


def default_episodes_to_plot(store: TraceStore, run_ids: Iterable[int] | None = None, per_policy: int = 1) -> list[int]:
    """The latest finished episodes with decode tokens, `per_policy` of each policy."""
    chosen: dict[str, list[int]] = {}
    for ep in reversed(store.episodes(run_ids=run_ids)):
        if ep["status"] == "running" or len(chosen.get(ep["policy"], [])) >= per_policy:
            continue
        if store.decode_tokens(ep["id"]):
            chosen.setdefault(ep["policy"], []).append(ep["id"])
    return sorted(i for ids in chosen.values() for i in ids)


def write_report(
    store: TraceStore,
    out_dir: str | Path,
    *,
    episode_ids: Sequence[int] | None = None,
    run_ids: Iterable[int] | None = None,
) -> list[Path]:
    """Write every plot the data allows into `out_dir`; returns the PNG paths (empty when there is nothing)."""
    out = Path(out_dir)
    run_ids = None if run_ids is None else list(run_ids)
    ids = list(episode_ids) if episode_ids is not None else default_episodes_to_plot(store, run_ids)
    written = [plot_confidence_budget(store, i, out / f"confidence_budget_episode_{i}.png") for i in ids]
    forced = forced_rows(store.db, run_ids)  # `eval --mode forced`: the memory frontier, not success
    if any(not r["broken"] for r in forced):
        written.append(plot_frontier(forced, out / "forced_frontier.png"))
    finished = [e for e in final_attempts(store.episodes(run_ids=run_ids)) if e["mode"] != "forced"]
    steps = {e["id"]: store.steps(e["id"]) for e in finished}
    if any(s["kv_bytes"] is not None for rows in steps.values() for s in rows):
        written.append(plot_kv_by_policy(finished, steps, out / "kv_bytes_by_policy.png"))
    if any(e["peak_kv_bytes"] is not None for e in finished):
        written.append(plot_success_vs_memory(finished, out / "success_vs_peak_memory.png"))
    elif finished:  # e.g. only scripted episodes: no memory to plot, but their outcomes are worth a picture
        written.append(plot_success_by_policy(finished, out / "success_by_policy.png"))
    return written
