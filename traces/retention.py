"""Free-running success retention on the baseline's passes: `confkv-agent traces retention`.

Why on `full`'s passes: the paper's agent claim ("~95% of full-KV success at ~2.8x lower peak KV") asks how many of
the tasks the model solves with its whole memory a policy still solves. A task `full` fails says nothing about the
cache, so the kept share is counted over full's passes (Wilson 95%), and the other direction is shown apart as
paired wins (the policy passes where full failed, on the tasks both ran).

Why marks: a pass is evidence of skill only if the agent found the answer. Two kinds are not, and a second figure
leaves them out: a task whose reference is N/A (read from the task file: the agent answers N/A often, so it passes
those without reading anything) and a pass a reader found to be a guess in its trace (named with `--guess`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from statistics import median
from typing import Any

from confkv.bench.stats import wilson
from envs.taskspec import Task
from traces.fmt import markdown_cell, task_order
from traces.summary import final_attempts

BASELINE = "full"


@dataclass(frozen=True)
class TaskOutcome:
    task_id: str
    mark: str | None  # "N/A reference" | "guess" | None: why a pass is no evidence of skill
    passed: dict[str, bool]  # policy -> passed (only the policies that finished the task)
    peak_kv_bytes: dict[str, int]


@dataclass(frozen=True)
class PolicyRetention:
    policy: str
    base_passes: int  # full's passes among the tasks this policy finished
    kept: int
    ci95: tuple[float, float]
    evidence_passes: int  # the same without marked tasks
    evidence_kept: int
    evidence_ci95: tuple[float, float]
    won: int  # tasks this policy passed and full failed (both finished)
    shared: int  # tasks both finished
    peak_kv_ratio: float | None  # median over full's passes of this policy's peak KV / full's


def task_marks(tasks: Iterable[Task], guesses: Iterable[str] = ()) -> dict[str, str]:
    """task id -> why its pass is no evidence of skill."""
    marks = {str(t.task_id): "N/A reference" for t in tasks
             if t.eval.reference_answers is not None and t.eval.reference_answers.is_not_achievable}  # fmt: skip
    marks.update({str(g): "guess" for g in guesses})
    return marks


def outcomes(rows: Iterable[Mapping[str, Any]], marks: Mapping[str, str]) -> list[TaskOutcome]:
    """One row per task from episodes (the final attempt of each task and policy, across runs)."""
    by_task: dict[str, dict[str, Mapping[str, Any]]] = {}
    for row in final_attempts(rows, across_runs=True):
        by_task.setdefault(str(row["task_id"]), {})[row["policy"]] = row
    out = []
    for task_id in sorted(by_task, key=task_order):
        eps = by_task[task_id]
        out.append(TaskOutcome(
            task_id, marks.get(task_id),
            {p: bool(r["status"] == "done" and r["success"]) for p, r in eps.items()},
            {p: r["peak_kv_bytes"] for p, r in eps.items() if r.get("peak_kv_bytes")}))  # fmt: skip
    return out


def retention(per_task: Sequence[TaskOutcome], baseline: str = BASELINE) -> list[PolicyRetention]:
    """Each non-baseline policy against the baseline, task by task (see the module docstring)."""
    policies = sorted({p for t in per_task for p in t.passed} - {baseline})
    out = []
    for policy in policies:
        both = [t for t in per_task if baseline in t.passed and policy in t.passed]
        passes = [t for t in both if t.passed[baseline]]
        evidence = [t for t in passes if t.mark is None]
        kept = sum(t.passed[policy] for t in passes)
        kept_evidence = sum(t.passed[policy] for t in evidence)
        ratios = [t.peak_kv_bytes[policy] / t.peak_kv_bytes[baseline] for t in passes
                  if policy in t.peak_kv_bytes and baseline in t.peak_kv_bytes]  # fmt: skip
        out.append(PolicyRetention(
            policy, len(passes), kept, wilson(kept, len(passes)), len(evidence), kept_evidence,
            wilson(kept_evidence, len(evidence)), sum(t.passed[policy] and not t.passed[baseline] for t in both),
            len(both), median(ratios) if ratios else None))  # fmt: skip
    return out


def _share(k: int, n: int, ci: tuple[float, float]) -> str:
    return f"{k}/{n} ({k / n:.0%}, {ci[0]:.0%}-{ci[1]:.0%})" if n else "-"


def retention_markdown(per_task: Sequence[TaskOutcome], results: Sequence[PolicyRetention],
                       baseline: str = BASELINE) -> str:  # fmt: skip
    lines = [f"| policy | kept of {baseline}'s passes | kept, marked passes left out | won | tasks both ran | "
             f"peak KV vs {baseline} (median) |", "|---|---|---|---|---|---|"]  # fmt: skip
    for r in results:
        ratio = "-" if r.peak_kv_ratio is None else f"{r.peak_kv_ratio:.2f}x"
        lines.append(f"| {markdown_cell(r.policy)} | {_share(r.kept, r.base_passes, r.ci95)} | "
                     f"{_share(r.evidence_kept, r.evidence_passes, r.evidence_ci95)} | {r.won} | {r.shared} | "
                     f"{ratio} |")  # fmt: skip
    policies = [baseline] + [r.policy for r in results]
    lines += ["", "| task | " + " | ".join(markdown_cell(p) for p in policies) + " | mark |",
              "|---" * (len(policies) + 2) + "|"]  # fmt: skip
    for t in per_task:
        if not t.passed.get(baseline) and not any(t.passed.values()):
            continue  # nobody passed: nothing to compare
        cells = ["pass" if t.passed.get(p) else ("fail" if p in t.passed else "-") for p in policies]
        lines.append(f"| {markdown_cell(t.task_id)} | " + " | ".join(cells) + f" | {t.mark or ''} |")
    return "\n".join(lines)


def retention_json(per_task: Sequence[TaskOutcome], results: Sequence[PolicyRetention]) -> dict[str, Any]:
    return {"baseline": BASELINE, "policies": {r.policy: asdict(r) for r in results},
            "tasks": [asdict(t) for t in per_task]}  # fmt: skip
