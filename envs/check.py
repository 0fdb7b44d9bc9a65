"""The data side of `tasks check`: which tasks to check, the outcome per task, and the summary.

The replay itself (reference solution and negative probe through the agent's own episode loop) is
`runner.task_check`: envs holds tasks and evaluators and does not import the agent.
"""

from __future__ import annotations

import random
from collections.abc import Container, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from envs.safe_yaml import load_limited
from envs.taskspec import StepParser, Task, task_files, validate_files


@dataclass
class TaskCheck:
    """The outcome for one task file. `reference_pass` / `negative_fail` are None when not run (invalid task)."""

    path: str
    task_id: int | None
    valid: bool
    reference_pass: bool | None = None
    negative_fail: bool | None = None
    reasons: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.valid and bool(self.reference_pass) and bool(self.negative_fail)


MAX_TASK_ID = 2**63 - 1  # SQLite's INTEGER, where task ids end up; far above any real id


class TaskIds:
    """The task ids `--ids` names, kept as ranges: `1-99999999999999` is one `range`, never a set of 10**14 ints
    (building that set took 21 GB before the OOM killer ended it). Membership only, which is all a filter needs."""

    def __init__(self, ranges: Iterable[range]) -> None:
        self.ranges = tuple(ranges)

    def __contains__(self, task_id: object) -> bool:
        return isinstance(task_id, int) and any(task_id in r for r in self.ranges)

    def __repr__(self) -> str:
        return f"TaskIds({', '.join(f'{r.start}-{r.stop - 1}' for r in self.ranges)})"


def parse_ids(text: str) -> TaskIds:
    """"1,2,10-12" -> ids 1, 2, 10, 11 and 12 (lazily: any range costs the same); a clear ValueError otherwise."""
    ranges: list[range] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        lo, sep, hi = part.partition("-")
        try:
            first, last = int(lo), int(hi if sep else lo)
        except ValueError:
            raise ValueError(f"bad task id {part[:40]!r}: expected numbers like 1,2,10-12") from None
        if not 0 <= first <= MAX_TASK_ID or not 0 <= last <= MAX_TASK_ID:
            raise ValueError(f"bad task id {part[:40]!r}: ids go from 1 to {MAX_TASK_ID:,}")
        ranges.append(range(first, last + 1))
    return TaskIds(ranges)


def _raw_meta(path: Path) -> tuple[Any, list[str] | None]:
    """Best-effort task_id and sites of an invalid file, so filters still apply to it.

    Read with the loader's own limits (`load_limited`): this runs on exactly the files that loading refused, so an
    uncapped parse here re-opened every hole (a 2 MB file took 30 s and 930 MB), and whatever it raises (deep
    nesting, not UTF-8, not a regular file) only means "no metadata", never the end of the whole check."""
    try:
        _, data = load_limited(path)
    except (OSError, ValueError, yaml.YAMLError, RecursionError):  # ValueError: limits and UnicodeDecodeError
        return None, None
    if not isinstance(data, dict):
        return None, None
    sites = data.get("sites")
    return data.get("task_id"), ([str(s) for s in sites] if isinstance(sites, list) else None)


def _selected(task_id: Any, task_sites: list[str] | None, sites: set[str] | None,
              ids: Container[int] | None) -> bool:  # fmt: skip
    """Filters: `ids` by task_id; `sites` keeps tasks whose sites are all among them. Unknown metadata is kept."""
    if ids is not None and isinstance(task_id, int) and task_id not in ids:
        return False
    return not (sites is not None and task_sites is not None and not set(task_sites) <= sites)


@dataclass
class TaskSelection:
    """Which tasks to check: files or directories, then filters (`sites`: all of a task's sites among them; `ids`),
    then a seeded sample of `sample` valid tasks."""

    paths: str | Path | Iterable[str | Path]
    sites: Iterable[str] | None = None
    ids: Container[int] | None = None
    sample: int | None = None
    seed: int = 0


def select_tasks(selection: TaskSelection, parse_step: StepParser | None = None) -> tuple[list[TaskCheck], list[Task]]:
    """Validate the files and pick tasks (sorted by id). Returns the invalid files as failed checks, and the valid
    tasks to replay."""
    site_filter = set(selection.sites) if selection.sites is not None else None
    ids, sample = selection.ids, selection.sample
    invalid: list[TaskCheck] = []
    valid: list[Task] = []
    for path, task, errors in validate_files(task_files(selection.paths), parse_step):
        if task is None:
            task_id, task_sites = _raw_meta(path)
            if _selected(task_id, task_sites, site_filter, ids):
                tid = task_id if isinstance(task_id, int) else None
                invalid.append(TaskCheck(path=str(path), task_id=tid, valid=False, reasons=errors))
        elif _selected(task.task_id, list(task.sites), site_filter, ids):
            valid.append(task)
    if sample is not None and sample < len(valid):
        valid = random.Random(selection.seed).sample(valid, sample)
    valid.sort(key=lambda t: t.task_id)
    return invalid, valid


def summary(results: list[TaskCheck]) -> dict[str, Any]:
    """The `--json` document."""
    failures = [{"task": r.path, "task_id": r.task_id, "reasons": r.reasons} for r in results if not r.ok]
    return {
        "tasks": len(results),
        "valid": sum(r.valid for r in results),
        "reference_pass": sum(bool(r.reference_pass) for r in results),
        "negative_fail": sum(bool(r.negative_fail) for r in results),
        "failures": failures,
    }
