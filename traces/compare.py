"""Pair two runs' finished episodes task by task: success each, and the first step where their actions differ.

Why: greedy decoding is deterministic on one machine and dtype, so two agent versions that share the prompt take the
same actions until a changed rule first bites; the first differing step names the rule that changed the episode.
This is how each agent version was judged against the last (docs/results/agent-v5-v6-ab.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from traces.fmt import task_order

if TYPE_CHECKING:
    from traces.store import TraceStore


@dataclass(frozen=True)
class PairedEpisode:
    """One task run by both: episode ids, outcomes, and where the actions first part (None: they never do)."""

    task_id: str
    old_episode: int
    new_episode: int
    old_success: bool
    new_success: bool
    old_actions: tuple[str, ...]
    new_actions: tuple[str, ...]

    @property
    def first_difference(self) -> int | None:
        pairs = zip(self.old_actions, self.new_actions, strict=False)
        return next((i for i, (a, b) in enumerate(pairs) if a != b), None)

    def describe(self) -> str:
        step = self.first_difference
        if step is not None:
            return f"step {step}: `{self.old_actions[step]}` -> `{self.new_actions[step]}`"
        if len(self.old_actions) == len(self.new_actions):
            return "same actions"
        return f"same first {min(len(self.old_actions), len(self.new_actions))} actions"


def finished_episodes(store: TraceStore, run_id: int, policy: str) -> dict[str, tuple[int, bool, tuple[str, ...]]]:
    """task id -> (episode id, success, actions) for the run's finished episodes of `policy` (the latest if several).

    Raises `TraceStoreError` for a run the database does not have, so a mistyped run id is not an empty table.
    """
    store.run(run_id)
    out = {}
    for ep in store.episodes(run_ids=[run_id], policy=policy, status="done"):
        actions = tuple(s["action"] or "" for s in store.steps(ep["id"]))
        out[ep["task_id"]] = (ep["id"], bool(ep["success"]), actions)
    return out


def compare_runs(old: TraceStore, old_run: int, new: TraceStore, new_run: int, policy: str = "full") -> list[PairedEpisode]:
    """The tasks both runs finished under `policy`, in task order (numeric ids by number)."""
    a, b = finished_episodes(old, old_run, policy), finished_episodes(new, new_run, policy)
    shared = sorted(set(a) & set(b), key=task_order)
    return [PairedEpisode(t, a[t][0], b[t][0], a[t][1], b[t][1], a[t][2], b[t][2]) for t in shared]


def compare_markdown(pairs: list[PairedEpisode]) -> str:
    """A table per task and a last line: passes each, tasks won and lost by the new run."""
    lines = ["| task | old ep | new ep | old | new | first differing step: old -> new |", "|---|---|---|---|---|---|"]
    for p in pairs:
        outcome = ("pass" if p.old_success else "fail", "pass" if p.new_success else "fail")
        lines.append(f"| {p.task_id} | {p.old_episode} | {p.new_episode} | {outcome[0]} | {outcome[1]} | {p.describe()} |")
    won = sum(p.new_success and not p.old_success for p in pairs)
    lost = sum(p.old_success and not p.new_success for p in pairs)
    old_passed, new_passed = sum(p.old_success for p in pairs), sum(p.new_success for p in pairs)
    lines += ["", f"{len(pairs)} shared tasks: old {old_passed} passed, new {new_passed} passed ({won} won, {lost} lost)"]
    return "\n".join(lines)
