"""Per-task MiniWoB++ success of `eval --suite miniwob` runs, policy beside policy: `confkv-agent traces miniwob`.

Why paired by (task, seed): the suite draws each instruction and page from the seed, so two policies on one
(task, seed) faced the same episode, and a win or loss there is the cache's doing, not the draw's. Only the pairs
every selected policy finished are compared (a stopped eval leaves the last task half done); the JSON keeps every
final attempt as well. The first policy (`full` when present) is the baseline of the paired counts.

One run per policy: two runs of one policy would collide on (task, seed), so they are refused, not merged.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from confkv.bench.stats import wilson
from traces.errors import TraceStoreError
from traces.fmt import markdown_cell
from traces.summary import final_attempts

if TYPE_CHECKING:
    from traces.store import TraceStore

BASELINE = "full"
EPISODE_KEYS = ("task_id", "policy", "status", "success", "steps", "wall_s", "peak_kv_bytes", "full_kv_bytes",
                "eval_reason")  # fmt: skip


@dataclass(frozen=True)
class PolicyOutcome:
    """One policy over the compared (task, seed) pairs."""

    policy: str
    success: int
    episodes: int
    ci95: tuple[float, float]
    won: int | None  # pairs this policy solved and the baseline did not (None for the baseline itself)
    lost: int | None
    kv_ratios: tuple[float, ...]  # peak KV / full KV per episode that recorded both
    steps: tuple[int, ...]
    walls: tuple[float, ...]


@dataclass(frozen=True)
class MiniwobResults:
    db: str
    runs: dict[int, dict[str, Any]]  # run id -> model, policy, config
    policies: tuple[str, ...]  # baseline first
    per_task: dict[str, dict[str, list[int]]]  # task name -> policy -> success per seed, seeds in order
    outcomes: dict[str, PolicyOutcome]
    episodes: list[Mapping[str, Any]]  # every final attempt of the runs, compared or not


def _key(row: Mapping[str, Any]) -> tuple[str, int]:
    """`miniwob/<name>/<seed>` -> (name, seed); anything else is not a MiniWoB++ episode (runner.suites)."""
    parts = str(row["task_id"]).split("/")
    if len(parts) != 3 or parts[0] != "miniwob" or not parts[2].isdigit():
        raise TraceStoreError(f"run {row['run_id']} is not an `eval --suite miniwob` run: its task "
                              f"{str(row['task_id'])[:60]!r} is not miniwob/NAME/SEED")  # fmt: skip
    return parts[1], int(parts[2])


def miniwob_results(store: TraceStore, run_ids: Sequence[int]) -> MiniwobResults:
    """Gather and pair the runs' final attempts. Raises `TraceStoreError` for a run the database lacks, two runs
    of one policy, or a run that is not a MiniWoB++ suite, so a mistyped id is an error and not an empty table."""
    runs = {run_id: store.run(run_id) for run_id in dict.fromkeys(run_ids)}
    by_policy: dict[str, int] = {}
    for run_id, run in runs.items():
        if run["policy"] in by_policy:
            raise TraceStoreError(f"runs {by_policy[run['policy']]} and {run_id} are both policy {run['policy']!r}: "
                                  "give one run per policy")  # fmt: skip
        by_policy[run["policy"]] = run_id
    rows = final_attempts(store.episodes(run_ids=list(runs)))
    by_key: dict[tuple[str, int], dict[str, int]] = defaultdict(dict)
    for row in rows:
        by_key[_key(row)][row["policy"]] = int(row["success"] or 0)
    policies = tuple(sorted(by_policy, key=lambda p: (p != BASELINE, p)))
    complete = {k: v for k, v in sorted(by_key.items()) if all(p in v for p in policies)}
    per_task: dict[str, dict[str, list[int]]] = defaultdict(lambda: {p: [] for p in policies})
    for (name, _seed), outcome in complete.items():
        for p in policies:
            per_task[name][p].append(outcome[p])
    outcomes = {p: _outcome(p, policies[0], complete, [r for r in rows if r["policy"] == p and _key(r) in complete])
                for p in policies}  # fmt: skip
    return MiniwobResults(str(store.path), {k: {"model": r["model"], "policy": r["policy"],
                                                "config": r["policy_config"]} for k, r in runs.items()},
                          policies, dict(per_task), outcomes, rows)  # fmt: skip


def _outcome(policy: str, baseline: str, complete: Mapping[tuple[str, int], Mapping[str, int]],
             mine: Iterable[Mapping[str, Any]]) -> PolicyOutcome:
    mine = list(mine)
    success, n = sum(v[policy] for v in complete.values()), len(complete)
    paired = policy != baseline
    return PolicyOutcome(
        policy, success, n, wilson(success, n),
        won=sum(v[policy] > v[baseline] for v in complete.values()) if paired else None,
        lost=sum(v[policy] < v[baseline] for v in complete.values()) if paired else None,
        kv_ratios=tuple(r["peak_kv_bytes"] / r["full_kv_bytes"] for r in mine
                        if r["peak_kv_bytes"] and r["full_kv_bytes"]),
        steps=tuple(sorted(int(r["steps"] or 0) for r in mine)),
        walls=tuple(sorted(float(r["wall_s"] or 0) for r in mine)),
    )  # fmt: skip


def miniwob_markdown(res: MiniwobResults) -> str:
    """The per-task table (successes / seeds), the Wilson intervals, the paired counts and the memory lines."""
    ps = res.policies
    lines = ["| task | seeds | " + " | ".join(markdown_cell(p) for p in ps) + " |", "|---|---|" + "---|" * len(ps)]
    for name, per in sorted(res.per_task.items()):
        n = len(per[ps[0]])
        lines.append(f"| {markdown_cell(name)} | {n} | " + " | ".join(f"{sum(per[p])}/{n}" for p in ps) + " |")
    o = res.outcomes
    n_all = o[ps[0]].episodes
    lines.append(f"| **all** | {n_all} (task, seed) | " + " | ".join(f"**{o[p].success}/{n_all}**" for p in ps) + " |")
    for p in ps:
        lo, hi = o[p].ci95
        lines.append(f"{markdown_cell(p)}: {o[p].success}/{n_all} = {o[p].success / max(n_all, 1):.0%} "
                     f"(Wilson 95% {lo:.0%}-{hi:.0%})")  # fmt: skip
    for p in ps[1:]:
        won, lost = o[p].won or 0, o[p].lost or 0
        lines.append(f"{markdown_cell(p)} vs {markdown_cell(ps[0])}, paired by (task, seed): {won} won, {lost} lost, "
                     f"{n_all - won - lost} tied")  # fmt: skip
    for p in ps:
        if not o[p].steps:
            continue
        r = o[p].kv_ratios
        kv = f"{statistics.mean(r):.2f} (min {min(r):.2f}, max {max(r):.2f})" if r else "- (not recorded)"
        lines.append(f"{markdown_cell(p)}: peak KV / full {kv}; steps median {statistics.median(o[p].steps)}, "
                     f"mean {statistics.mean(o[p].steps):.1f}; episode wall median {statistics.median(o[p].walls):.0f} s")  # fmt: skip
    return "\n".join(lines)


def miniwob_json(res: MiniwobResults) -> dict[str, Any]:
    """What `--out` writes (docs/results/miniwob*.json): the runs, per-task successes, totals with their Wilson
    interval and paired counts, and every final attempt."""
    totals: dict[str, dict[str, Any]] = {}
    for p, o in res.outcomes.items():
        totals[p] = {"success": o.success, "episodes": o.episodes, "ci95": list(o.ci95)}
        if o.won is not None:
            totals[p]["paired_vs"] = {"policy": res.policies[0], "won": o.won, "lost": o.lost}
    return {
        "db": res.db,
        "runs": {str(k): v for k, v in res.runs.items()},
        "per_task": {name: {p: per[p] for p in res.policies} for name, per in sorted(res.per_task.items())},
        "totals": totals,
        "episodes": [{k: r[k] for k in EPISODE_KEYS} for r in res.episodes],
    }
