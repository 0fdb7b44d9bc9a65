"""The free-running eval cut by task attributes: per site, difficulty and memory span, what each policy achieved,
what a step cost, what the live cache saved against re-sending the conversation, and why episodes failed.

Why apart from `traces.summary`: the summary is per policy over episode rows only; these cuts need the task files
(site, difficulty, memory span, the answer for `traces.failures`) and step rows (step time, context length). The
per-group figures reuse `summarize`, so "success", "retention vs full" and "KV vs full" mean the same in both.

"Re-send" is what an agent runtime that sends the whole conversation every step (the anchors' way) would prefill:
the context length before each step's reply (`total_tokens - output_tokens`), summed over steps. The live cache
prefills only each step's new turn (`prefilled_tokens`; the system prompt is prefilled once per process).

"Attended" is what each step's attention actually spans: the kept tokens per layer (mean over layers) at the end of
the step, against the conversation's logical length. Why it is reported: it is the machine-independent part of a
step's cost that eviction changes. Each prefilled token attends to every kept one; on the 1.5B default at a
12K-token context a 512-token chunk's sdpa took 0.73 s per layer on one core (fp32), ~20 s over 28 layers, against
~15 s for the same tokens' weight matmuls (34 tok/s), so a full-KV forum episode (3.5K-token pages) slows down step
by step while an evicting policy's steps stay flat. Seconds per step are not comparable across runs on different
machines.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from statistics import fmean, median
from typing import TYPE_CHECKING, Any

from traces.failures import CATEGORIES, Failure, StepParser, classify_all
from traces.summary import final_attempts, summarize, unfinished

if TYPE_CHECKING:
    from envs.taskspec import Task
    from traces.store import TraceStore

GROUPINGS = ("site", "difficulty", "memory_span")


@dataclass(frozen=True)
class PolicyCost:
    """Per policy, over its final attempts: median seconds per step, mean tokens prefilled vs re-sent per episode."""

    episodes: int
    steps: int
    median_step_s: float | None
    mean_steps: float | None
    mean_prefilled_tokens: float | None
    mean_resend_tokens: float | None
    mean_context_tokens: float | None  # per step: the conversation's logical length
    mean_attended_tokens: float | None  # per step: kept tokens (mean over layers)


def task_group(task: Task, grouping: str) -> str:
    """The task's value for a grouping; a task on two sites is "cross-site"."""
    if grouping == "site":
        return task.sites[0] if len(task.sites) == 1 else "cross-site"
    if grouping in ("difficulty", "memory_span"):
        return str(getattr(task, grouping))
    raise ValueError(f"unknown grouping {grouping!r} (known: {', '.join(GROUPINGS)})")


def policy_costs(episodes: Iterable[Mapping[str, Any]], steps_of: Any) -> dict[str, PolicyCost]:
    """Step-level costs per policy; `steps_of(episode_id)` returns the episode's step rows."""
    per: dict[str, dict[str, list[float]]] = {}
    for ep in episodes:
        acc = per.setdefault(ep["policy"], {"step_s": [], "steps": [], "prefilled": [], "resend": [], "context": [],
                                            "attended": []})  # fmt: skip
        steps = steps_of(int(ep["id"]))
        acc["steps"].append(len(steps))
        acc["step_s"] += [s["step_ms"] / 1000 for s in steps if s.get("step_ms") is not None]
        for s in steps:
            if s.get("kept_tokens_per_layer") and s.get("total_tokens") is not None:  # the store decodes the list
                acc["context"].append(s["total_tokens"])
                acc["attended"].append(fmean(s["kept_tokens_per_layer"]))
        if steps and all(s.get("total_tokens") is not None for s in steps):
            acc["prefilled"].append(sum(s.get("prefilled_tokens") or 0 for s in steps))
            acc["resend"].append(sum(s["total_tokens"] - (s.get("output_tokens") or 0) for s in steps))
    return {
        policy: PolicyCost(
            episodes=len(acc["steps"]),
            steps=int(sum(acc["steps"])),
            median_step_s=median(acc["step_s"]) if acc["step_s"] else None,
            mean_steps=fmean(acc["steps"]) if acc["steps"] else None,
            mean_prefilled_tokens=fmean(acc["prefilled"]) if acc["prefilled"] else None,
            mean_resend_tokens=fmean(acc["resend"]) if acc["resend"] else None,
            mean_context_tokens=fmean(acc["context"]) if acc["context"] else None,
            mean_attended_tokens=fmean(acc["attended"]) if acc["attended"] else None,
        )
        for policy, acc in per.items()
    }


def breakdown(store: TraceStore, tasks: Iterable[Task], *, run_ids: Iterable[int] | None = None,
              model: str | None = None, across_runs: bool = False,
              parse_step: StepParser | None = None) -> dict[str, Any]:  # fmt: skip
    """Everything `traces breakdown` prints, as JSON-ready data (free-running runs only; tasks not in `tasks`
    are left out, e.g. MiniWoB++ episodes). `across_runs`: each (task, policy) once over all runs
    (`final_attempts`). `parse_step`: the runner's action parser, for the final answers (`failures.final_answer`)."""
    by_id = {str(t.task_id): t for t in tasks}
    rows = [e for e in store.episodes(run_ids=run_ids, model=model) if e["mode"] != "forced"]
    finals = [r for r in final_attempts(rows, across_runs) if str(r["task_id"]) in by_id]
    cut_short = [r for r in unfinished(rows, across_runs) if str(r["task_id"]) in by_id]
    step_cache: dict[int, list[dict[str, Any]]] = {}

    def steps_of(episode_id: int) -> list[dict[str, Any]]:
        if episode_id not in step_cache:
            step_cache[episode_id] = store.steps(episode_id)
        return step_cache[episode_id]

    groups: dict[str, dict[str, Any]] = {}
    for grouping in GROUPINGS:
        values: dict[str, list[Mapping[str, Any]]] = {}
        for row in finals:
            values.setdefault(task_group(by_id[str(row["task_id"])], grouping), []).append(row)
        groups[grouping] = {value: _group_json(members) for value, members in sorted(values.items())}
    failures = classify_all(by_id, finals, steps_of, parse_step)
    return {
        "overall": _group_json(finals),
        "costs": {p: asdict(c) for p, c in policy_costs(finals, steps_of).items()},
        "groups": groups,
        "failures": failure_counts(failures),
        "failed_episodes": [asdict(f) for f in failures],
        "unfinished": [{"episode_id": r["id"], "task_id": str(r["task_id"]), "policy": r["policy"]}
                       for r in cut_short],  # fmt: skip
    }


def _group_json(rows: list[Mapping[str, Any]]) -> dict[str, Any]:
    summary = summarize(rows)
    return {p: {"episodes": s.episodes, "successes": s.successes, "success_rate": s.success_rate,
                "retention_vs_full": s.retention_vs_full, "peak_kv_ratio_vs_full": s.peak_kv_ratio_vs_full}
            for p, s in summary.policies.items()}  # fmt: skip


def failure_counts(failures: Iterable[Failure]) -> dict[str, dict[str, int]]:
    """policy -> category -> count (every category present, zeros included, in `CATEGORIES` order)."""
    out: dict[str, dict[str, int]] = {}
    for f in failures:
        out.setdefault(f.policy, dict.fromkeys(CATEGORIES, 0))[f.category] += 1
    return out


def breakdown_markdown(data: Mapping[str, Any]) -> str:
    """Markdown tables of a `breakdown` result (for docs/results and the README)."""
    policies = list(data["overall"])
    others = [p for p in policies if p != "full"]
    header = ["group"] + [f"{p} success" for p in policies] + [f"{p} retention / KV vs full" for p in others]
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]

    def row(name: str, group: Mapping[str, Any]) -> str:
        cells = []
        for p in policies:
            s = group.get(p)
            cells.append("-" if s is None else f"{s['successes']}/{s['episodes']} ({s['success_rate']:.0%})")
        for p in others:
            s = group.get(p)
            cells.append("-" if s is None else f"{_pct(s['retention_vs_full'])} / {_ratio(s['peak_kv_ratio_vs_full'])}")
        return f"| {name} | " + " | ".join(cells) + " |"

    lines.append(row("**all**", data["overall"]))
    for grouping, values in data["groups"].items():
        for value, group in values.items():
            lines.append(row(f"{grouping}: {value}", group))
    lines += ["", "| policy | episodes | steps | median s/step | mean steps | prefilled tok/ep | re-send tok/ep | "
              "attended / context tok/step |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for p, c in data["costs"].items():
        lines.append(f"| {p} | {c['episodes']} | {c['steps']} | {_num(c['median_step_s'], 1)} | "
                     f"{_num(c['mean_steps'], 1)} | {_num(c['mean_prefilled_tokens'], 0)} | "
                     f"{_num(c['mean_resend_tokens'], 0)} | {_num(c['mean_attended_tokens'], 0)} / "
                     f"{_num(c['mean_context_tokens'], 0)} |")  # fmt: skip
    lines += ["", "| policy | " + " | ".join(CATEGORIES) + " |", "|---" * (1 + len(CATEGORIES)) + "|"]
    for p, counts in data["failures"].items():
        lines.append(f"| {p} | " + " | ".join(str(counts[c]) for c in CATEGORIES) + " |")
    if data.get("unfinished"):
        cut = ", ".join(f"{u['task_id']} {u['policy']} (episode {u['episode_id']})" for u in data["unfinished"])
        lines += ["", f"Interrupted, not counted (a resume reruns them): {cut}"]
    return "\n".join(lines) + "\n"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def _num(x: float | None, digits: int) -> str:
    return "-" if x is None else f"{x:.{digits}f}"
