"""What a forced run still owes, task by task, read from its database.

Why: the frontier (issue 36) runs for dozens of process-hours across sessions, often on another machine after the
last one went back with its processes. Each session used to rebuild the list of tasks left, their order and each
task's precision by hand; a slip (a task started at a second precision, a 12-step task picked before the cheap
ones) cost hours. The plan is derived from the rows alone, so any session resumes the same work in the same order.

Order: short-memory tasks before long ones, then fewer reference steps first (the cheapest tasks first, so the
number of tasks every label has scored grows fastest), then task id. A task stays at the precision its rows were
scored at (rows pair only within one); a task with no rows goes at the precision asked for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from envs.taskspec import Task
from traces.forced import run_precision

if TYPE_CHECKING:
    import sqlite_utils


@dataclass(frozen=True)
class PlannedTask:
    """One task's standing: the labels it has done, the ones it still needs, and the precision they must run at."""

    task: Task
    path: Path
    precision: str
    done: tuple[str, ...]
    missing: tuple[str, ...]

    @property
    def reference_steps(self) -> int:
        return len(self.task.reference_solution)


def cheapest_first(task: Task) -> tuple[bool, int, int]:
    """The sort key of the order above. `eval --mode forced` (`runner.forced.run_forced`) runs its tasks in it too,
    so a plan handed to one `eval` process keeps its order (task files load sorted by id)."""
    return task.memory_span != "short", len(task.reference_solution), task.task_id


def done_labels(db: sqlite_utils.Database) -> dict[int, dict[str, set[str | None]]]:
    """task id -> {label: the precisions it finished at} (an `error` row, superseded or crashed, owes its label
    again; a label can have finished at two precisions). A database with no episodes yet gives an empty map."""
    if not {"episodes", "runs"} <= set(db.table_names()):
        return {}
    sql = ("select e.task_id, e.policy, r.policy_config from episodes e join runs r on r.id = e.run_id "
           "where e.status = 'done'")  # fmt: skip
    out: dict[int, dict[str, set[str | None]]] = {}
    for task_id, label, config in db.execute(sql).fetchall():
        out.setdefault(int(task_id), {}).setdefault(label, set()).add(run_precision(config))
    return out


def task_precision(labels: Mapping[str, set[str | None]], default: str) -> str:
    """The precision a task's next rows must use: its `full` row's, else any row's, else `default`."""
    for precisions in (labels.get("full", set()), *labels.values()):
        known = sorted(p for p in precisions if p)
        if known:
            return known[0]
    return default


def forced_plan(db: sqlite_utils.Database, tasks: Sequence[tuple[Path, Task]], labels: Sequence[str],
                default_precision: str, memory_span: str | None = None) -> list[PlannedTask]:
    """Every task of `tasks` (path, task) that still misses one of `labels` at its precision, in the order above."""
    done = done_labels(db)
    plan = []
    for path, task in tasks:
        if memory_span is not None and task.memory_span != memory_span:
            continue
        have = done.get(task.task_id, {})
        precision = task_precision(have, default_precision)
        finished = tuple(lbl for lbl in labels if have.get(lbl, set()) & {precision, None})
        missing = tuple(lbl for lbl in labels if lbl not in finished)
        if missing:
            plan.append(PlannedTask(task, path, precision, finished, missing))
    plan.sort(key=lambda p: cheapest_first(p.task))
    return plan
