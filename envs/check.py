"""`tasks check`: prove every task is well-formed, solvable by its reference solution, and not solved by doing nothing.

Why both runs: a reference solution that passes only shows the evaluator accepts *something*; the negative run
(reset, open the start page, `stop [confkv-negative-probe]`) shows it does not accept *everything* (e.g. a url_match
whose reference is the start page, or a program_html check that the seeded data already satisfies).

Each run gets freshly reset sites and a clean confined `BrowserSession` (no cookies, one tab), as an agent episode
would, so a pass here means the task works under the runner's conditions.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from envs.evaluators import EvalResult, evaluate
from envs.taskspec import Task, task_files, validate_files

if TYPE_CHECKING:
    from agent.browser import BrowserSession

NEGATIVE_PROBE = "stop [confkv-negative-probe]"


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


def parse_ids(text: str) -> set[int]:
    """"1,2,10-12" -> {1, 2, 10, 11, 12}; a clear ValueError otherwise."""
    ids: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        lo, sep, hi = part.partition("-")
        try:
            ids.update(range(int(lo), int(hi) + 1) if sep else {int(lo)})
        except ValueError:
            raise ValueError(f"bad task id {part!r}: expected numbers like 1,2,10-12") from None
    return ids


def _raw_meta(path: Path) -> tuple[Any, list[str] | None]:
    """Best-effort task_id and sites of an invalid file, so filters still apply to it."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None, None
    if not isinstance(data, dict):
        return None, None
    sites = data.get("sites")
    return data.get("task_id"), ([str(s) for s in sites] if isinstance(sites, list) else None)


def _selected(task_id: Any, task_sites: list[str] | None, sites: set[str] | None, ids: set[int] | None) -> bool:
    """Filters: `ids` by task_id; `sites` keeps tasks whose sites are all among them. Unknown metadata is kept."""
    if ids is not None and isinstance(task_id, int) and task_id not in ids:
        return False
    return not (sites is not None and task_sites is not None and not set(task_sites) <= sites)


# --------------------------------------------------------------------------------------------------------- replay


def run_episode(task: Task, sites: Any, session: BrowserSession, steps: list[str]) -> tuple[EvalResult, str | None]:
    """Reset the sites, clear the browser (cookies, extra tabs), sign in if asked, open the start tab(s), replay
    `steps` with the agent's executor, then evaluate. Returns the evaluation and the error that stopped the replay."""
    from agent.actions import parse_action
    from agent.executor import execute
    from envs.server import expand_url, login

    sites.reset()
    session.context.clear_cookies()
    for page in session.pages[1:]:
        page.close()
    urls = sites.urls
    if task.require_login:
        for name in task.sites:
            login(session.active_page, sites.url(name))
    for i, url in enumerate(task.start_urls(urls)):
        page = session.active_page if i == 0 else session.new_tab()
        page.goto(url, wait_until="load")
    session.tab_focus(0)
    answer, error = None, None
    for number, line in enumerate(steps, 1):
        action = parse_action(line)
        if action.verb == "goto" and action.url:
            action = dataclasses.replace(action, url=expand_url(action.url, urls))
        result = execute(session, action, None)
        if not result.ok:
            error = f"step {number} {line!r} failed: {result.error}"
            break
        if result.done:
            answer = result.answer
            break
    return evaluate(task, answer, session.active_page, urls), error


def check_task(task: Task, sites: Any) -> TaskCheck:
    """Reference run (must score 1) and negative run (must score < 1) for one valid task.

    Both runs share one confined browser (launching Chromium is the slowest step on 2 cores); `run_episode` clears
    its cookies and tabs, so the negative run starts as logged out and as fresh as a new session would."""
    from agent.browser import BrowserSession

    started = time.monotonic()
    out = TaskCheck(path=task.source, task_id=task.task_id, valid=True)
    if task.not_evaluable:
        out.reasons.append(f"not evaluable: {task.not_evaluable}")
        out.reference_pass = out.negative_fail = False
        return out
    with BrowserSession(allowed_origins=[sites.url(name) for name in task.sites]) as session:
        try:
            result, error = run_episode(task, sites, session, task.reference_solution)
            out.reference_pass = error is None and result.passed
            if error:
                out.reasons.append(f"reference: {error}")
            elif not result.passed:
                out.reasons.append(f"reference: {result.reason}")
        except Exception as exc:  # a crash in one task must not hide the others' results
            out.reference_pass = False
            out.reasons.append(f"reference: {type(exc).__name__}: {exc}")
        try:
            result, error = run_episode(task, sites, session, [NEGATIVE_PROBE])
            out.negative_fail = not result.passed
            if result.passed:
                out.reasons.append(f"negative probe passed (task is solved by doing nothing): {result.reason}")
        except Exception as exc:
            out.negative_fail = False
            out.reasons.append(f"negative: {type(exc).__name__}: {exc}")
    out.seconds = time.monotonic() - started
    return out


def check_tasks(
    dir_or_files: str | Path | Iterable[str | Path],
    sites: Iterable[str] | None = None,
    ids: set[int] | None = None,
    sample: int | None = None,
    seed: int = 0,
    progress: Callable[[TaskCheck], None] | None = None,
) -> list[TaskCheck]:
    """Validate the files, pick tasks (filters, then a seeded sample of the valid ones), start the needed sites once
    and check each task. Invalid files are reported without running them."""
    site_filter = set(sites) if sites is not None else None
    invalid: list[TaskCheck] = []
    valid: list[Task] = []
    for path, task, errors in validate_files(task_files(dir_or_files)):
        if task is None:
            task_id, task_sites = _raw_meta(path)
            if _selected(task_id, task_sites, site_filter, ids):
                tid = task_id if isinstance(task_id, int) else None
                invalid.append(TaskCheck(path=str(path), task_id=tid, valid=False, reasons=errors))
        elif _selected(task.task_id, list(task.sites), site_filter, ids):
            valid.append(task)
    if sample is not None and sample < len(valid):
        valid = random.Random(seed).sample(valid, sample)
    valid.sort(key=lambda t: t.task_id)
    for item in invalid:
        if progress:
            progress(item)
    results = list(invalid)
    if not valid:
        return results
    from envs.server import Sites

    needed = sorted({name for task in valid for name in task.sites})
    with Sites(needed) as running:
        for task in valid:
            item = check_task(task, running)
            results.append(item)
            if progress:
                progress(item)
    return results


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
