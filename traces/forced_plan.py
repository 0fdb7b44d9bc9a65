"""What a forced run still owes, task by task, read from its database.

Why: the frontier (issue 36) runs for dozens of process-hours across sessions, often on another machine after the
last one went back with its processes. Each session used to rebuild the list of tasks left, their order and each
task's precision by hand; a slip (a task started at a second precision, a 12-step task picked before the cheap
ones) cost hours. The plan is derived from the rows alone, so any session resumes the same work in the same order.

Order: short-memory tasks before long ones, then fewer reference steps first (the cheapest tasks first, so the
number of tasks every label has scored grows fastest), then task id. A task stays at the precision its rows were
scored at (rows pair only within one); a task with no rows goes at the precision asked for. `rebase` moves a task that
still owes labels at another precision to the one asked for, where all its labels are owed again (its old rows stay,
and each table shows a task at the precision that has most of its labels: `traces.forced.one_precision_per_task`):
on a Zen 5, fp32 runs at a quarter of `fp32-bf16-bf16`'s speed, so a task begun at fp32 on an AVX2 machine finishes
sooner scored again from `full` than owed at fp32.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import TYPE_CHECKING

from envs.taskspec import Task
from traces.forced import run_precision

if TYPE_CHECKING:
    import sqlite_utils

    from traces.store import TraceStore


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
                default_precision: str, rebase: bool = False) -> list[PlannedTask]:
    """Every task of `tasks` (path, task) that still misses one of `labels` at its precision, in the order above
    (to plan one memory span, pass only its tasks: the CLI filters them once for the plan and the coverage). With
    `rebase`, such a task at another precision than `default_precision` is planned at that one instead (module
    docstring); a task with every label at its own precision is left alone."""
    done = done_labels(db)
    plan = []
    for path, task in tasks:
        have = done.get(task.task_id, {})
        precision = task_precision(have, default_precision)
        finished = tuple(lbl for lbl in labels if have.get(lbl, set()) & {precision, None})
        if rebase and precision != default_precision and len(finished) < len(labels):
            precision = default_precision
            finished = tuple(lbl for lbl in labels if default_precision in have.get(lbl, set()))
        missing = tuple(lbl for lbl in labels if lbl not in finished)
        if missing:
            plan.append(PlannedTask(task, path, precision, finished, missing))
    plan.sort(key=lambda p: cheapest_first(p.task))
    return plan


@dataclass(frozen=True)
class Coverage:
    """What one site and memory span has: task ids with every label, with `full` and some labels still owed, and
    with no `full` row yet (a task's labels count at its precision only, as in the plan)."""

    site: str
    span: str
    complete: tuple[int, ...]
    partial: tuple[int, ...]
    not_begun: tuple[int, ...]

    @property
    def tasks(self) -> int:
        return len(self.complete) + len(self.partial) + len(self.not_begun)


def forced_coverage(db: sqlite_utils.Database, tasks: Sequence[tuple[Path, Task]], labels: Sequence[str],
                    default_precision: str, rebase: bool = False) -> list[Coverage]:
    """One row per (site, memory span) of `tasks`, long spans first: the page's "what is here" as data, so a
    snapshot states its coverage from the rows rather than from a hand-kept list. A task without `full` is not
    begun whatever else it has: no other label pairs without it."""
    if "full" not in labels:
        raise ValueError("coverage counts tasks by their `full` row: the labels must include full")
    owed = {p.task.task_id: p for p in forced_plan(db, tasks, labels, default_precision, rebase)}
    groups: dict[tuple[str, str], list[list[int]]] = {}
    for _, task in tasks:
        group = groups.setdefault((task.kind, task.memory_span), [[], [], []])
        p = owed.get(task.task_id)
        group[0 if p is None else 1 if "full" in p.done else 2].append(task.task_id)
    return [Coverage(site, span, *(tuple(sorted(ids)) for ids in group))
            for (site, span), group in sorted(groups.items(), key=lambda kv: (kv[0][1] != "long", kv[0][0]))]


def id_ranges(ids: Sequence[int]) -> str:
    """`1, 2, 3, 5` -> `1-3, 5`: task ids as a reader scans them."""
    runs: list[list[int]] = []
    for i in sorted(set(ids)):
        if runs and runs[-1][1] == i - 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) or "-"


@dataclass(frozen=True)
class Estimate:
    """What a plan still costs in process-seconds (one single-threaded process), read off the run's own rows.

    Why from the rows: a task's cost is its prefilled tokens times a rate that depends on the CPU kind and the
    precision (a Zen 5 runs `fp32-bf16-bf16` ~1.5x faster than a Zen 4), so a hand-kept "hours left" went stale with
    every machine. `full` gets its own rate (its attention reads every key; the budgeted labels read ~3K)."""

    seconds: float
    by_precision: dict[str, float]
    rows: int  # the done rows with timings
    own: int  # the rate classes (precision, full or not) that this CPU kind's own rows priced
    classes: int  # the rate classes the plan needed
    guessed: int  # tasks with no row yet: their tokens are their site's median tokens per reference step x steps
    borrowed: tuple[str, ...]  # classes no row has, priced at the same class's median rate over other precisions
    unknown: tuple[str, ...]  # what could not be priced at all (left out of `seconds`): no rate, or no tokens


def _rates(rows: Sequence[tuple]) -> dict[tuple[str | None, bool], tuple[float, int]]:
    """(precision, is full) -> (seconds per prefilled token, rows): total time over total tokens, not a median:
    rows are skewed (a pause, a shared core), and a median undercounted the frontier's past by 5-22% per class."""
    sums: dict[tuple[str | None, bool], list[float]] = {}
    for _, label, tokens, wall, config, _ in rows:
        total = sums.setdefault((run_precision(config), label == "full"), [0.0, 0.0, 0])
        total[0] += wall
        total[1] += tokens
        total[2] += 1
    return {key: (wall / tokens, int(n)) for key, (wall, tokens, n) in sums.items()}


def estimate_plan(db: sqlite_utils.Database, tasks: Sequence[tuple[Path, Task]], plan: Sequence[PlannedTask],
                  cpu_kind: str | None = None, min_rows: int = 10) -> Estimate:
    """Seconds left for `plan`: per owed label, the task's prefilled tokens (from its done rows, else guessed from
    the tasks of `tasks` that have rows: pass every task, not only the planned ones) times the seconds per prefilled
    token of the done rows of its class (precision, `full` or not). A class's rate comes from this `cpu_kind`'s rows
    when it has `min_rows` of them, else from every machine's, else from the class's median over other precisions;
    what none of these prices is named in `unknown`, never counted as free."""
    columns = set(db["episodes"].columns_dict) if "episodes" in db.table_names() else set()
    kind_col = "e.cpu_kind" if "cpu_kind" in columns else "null"
    sql = (f"select e.task_id, e.policy, e.prefilled_tokens, e.wall_s, r.policy_config, {kind_col} "
           "from episodes e join runs r on r.id = e.run_id where e.status = 'done' and e.prefilled_tokens > 0 "
           "and e.wall_s > 0")  # fmt: skip
    rows = db.execute(sql).fetchall() if columns else []
    mine = _rates([row for row in rows if cpu_kind is not None and row[5] == cpu_kind])
    every = _rates(rows)
    tokens_of: dict[int, list[int]] = {}
    for task_id, _, tokens, _, _, _ in rows:  # a task's tokens are its trajectory's, on any machine
        tokens_of.setdefault(int(task_id), []).append(int(tokens))
    per_step: dict[str, list[float]] = {}
    for _, task in tasks:
        if task.task_id in tokens_of and task.reference_solution:
            per_step.setdefault(task.kind, []).append(median(tokens_of[task.task_id]) / len(task.reference_solution))
    every_site = [v for values in per_step.values() for v in values]
    by_precision: dict[str, float] = {}
    guessed, own, needed, borrowed, unknown = 0, set(), set(), set(), set()
    for p in plan:
        if p.task.task_id in tokens_of:
            tokens = median(tokens_of[p.task.task_id])
        elif per_step.get(p.task.kind) or every_site:
            guessed += 1
            tokens = median(per_step.get(p.task.kind) or every_site) * p.reference_steps
        else:
            unknown.add(f"task {p.task.task_id} (no task has rows to guess its tokens from)")
            continue
        for label in p.missing:
            key = (p.precision, label == "full")
            name = f"{p.precision} {'full' if key[1] else 'budgeted'}"
            needed.add(key)
            if key in mine and mine[key][1] >= min_rows:
                rate = mine[key][0]
                own.add(key)
            elif key in every:
                rate = every[key][0]
            elif others := [r for (_, f), (r, _) in every.items() if f == key[1]]:
                rate = median(others)
                borrowed.add(name)
            else:
                unknown.add(name)
                continue
            by_precision[p.precision] = by_precision.get(p.precision, 0.0) + tokens * rate
    return Estimate(sum(by_precision.values()), by_precision, len(rows), len(own), len(needed), guessed,
                    tuple(sorted(borrowed)), tuple(sorted(unknown)))


SUPERSEDED_PREFIX = "superseded: "


def supersede(store: TraceStore, task_ids: set[str], why: str,
              labels: set[str] | None = None) -> list[tuple[str, str]]:
    """Mark the finished forced rows of these tasks (of these labels only, if given) as superseded, so the plan owes
    their labels again and the tables stop reading them; returns the (task, label) pairs marked.

    Why: a task whose replay changed between processes (it showed the wall clock) or whose rows came from a bug must
    be scored again whole, and its old rows must neither pair with the new ones nor vanish: they stay, as `error`
    rows whose reason says why (`SUPERSEDED_PREFIX`)."""
    if not why.strip():
        raise ValueError("say why the rows are superseded (it is kept with them)")
    if not {"episodes", "runs"} <= set(store.db.table_names()) or not task_ids:
        return []
    marks = ",".join("?" * len(task_ids))
    sql = (f"select e.id, e.task_id, e.policy from episodes e join runs r on r.id = e.run_id "
           f"where r.mode = 'forced' and e.status = 'done' and e.task_id in ({marks}) order by e.id")  # fmt: skip
    with store._write() as db:  # the store's immediate transaction: every row or none, beside running evals
        rows = [r for r in db.query(sql, sorted(task_ids)) if labels is None or r["policy"] in labels]
        for r in rows:
            db.execute("update episodes set status = 'error', error = ? where id = ?",
                       [SUPERSEDED_PREFIX + why.strip(), r["id"]])
    return [(r["task_id"], r["policy"]) for r in rows]
