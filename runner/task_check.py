"""`tasks check`: prove every task is well-formed, solvable by its reference solution, and not solved by doing nothing.

Why both runs: a reference solution that passes only shows the evaluator accepts *something*; the negative run
(reset, open the start page, `stop [confkv-negative-probe]`) shows it does not accept *everything* (e.g. a url_match
whose reference is the start page, or a program_html check that the seeded data already satisfies).

Both runs are ordinary agent episodes (`runner.episode.run_episode`) with a `ScriptedAgent`, so a pass here means the
task works under the runner's own loop: freshly reset sites, a clean confined browser (no cookies, one tab), the
same executor, stop rules and evaluator. Task selection and the summary are data (`envs.check`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from agent.actions import parse_action
from agent.model_policy import ScriptedAgent
from envs.check import TaskCheck, TaskSelection, select_tasks
from envs.taskspec import Task
from runner.episode import run_episode
from traces.records import StepRecord

NEGATIVE_PROBE = "stop [confkv-negative-probe]"


class ReplayCrashed(RuntimeError):
    """The replay episode ended in an exception; the message is `Type: text` of that exception."""


def _why(exc: Exception) -> str:
    return str(exc) if isinstance(exc, ReplayCrashed) else f"{type(exc).__name__}: {exc}"


class _NoTrace:
    """The trace store interface `run_episode` writes to, keeping nothing: a check records its outcome only."""

    def start_episode(self, *args: Any, **kwargs: Any) -> int:
        return 0

    def __getattr__(self, name: str) -> Callable[..., None]:  # add_step, add_decode_tokens, finish/fail_episode
        return lambda *args, **kwargs: None


def replay(task: Task, sites: Any, browser: Any, steps: list[str]) -> tuple[bool, str | None, str]:
    """Reset the sites, clear the browser (cookies, extra tabs), run `steps` as one episode. Returns (passed,
    the error of the first failed step or None, the evaluator's reason)."""
    sites.reset()
    browser.context.clear_cookies()
    for page in browser.pages[1:]:
        page.close()
    failures: list[str] = []

    def on_step(record: StepRecord, tokens: object) -> None:
        error = record.parse_error or record.exec_error
        if error and record.raw_output and not failures:
            failures.append(f"step {record.step + 1} {record.raw_output!r} failed: {error}")

    agent = ScriptedAgent(steps, stop_on_failure=True)
    result = run_episode(task, agent, sites, _NoTrace(), 0, max_steps=len(steps) + 3, on_step=on_step,  # type: ignore[arg-type]
                         browser=browser)
    if result.status != "done":  # the episode crashed (browser, evaluator): its reason names the exception
        raise ReplayCrashed(result.reason)
    return result.success, (failures[0] if failures else None), result.reason


def check_task(task: Task, sites: Any) -> TaskCheck:
    """Reference run (must score 1) and negative run (must score < 1) for one valid task, in one confined browser
    (launching Chromium is the slowest step on 2 cores)."""
    from runner.browser import BrowserSession

    started = time.monotonic()
    out = TaskCheck(path=task.source, task_id=task.task_id, valid=True)
    if task.not_evaluable:
        out.reasons.append(f"not evaluable: {task.not_evaluable}")
        out.reference_pass = out.negative_fail = False
        return out
    with BrowserSession(allowed_origins=[sites.url(name) for name in task.sites]) as browser:
        try:
            passed, error, reason = replay(task, sites, browser, task.reference_solution)
            out.reference_pass = error is None and passed
            if error:
                out.reasons.append(f"reference: {error}")
            elif not passed:
                out.reasons.append(f"reference: {reason}")
        except Exception as exc:  # a crash in one task must not hide the others' results
            out.reference_pass = False
            out.reasons.append(f"reference: {_why(exc)}")
        try:
            passed, _, reason = replay(task, sites, browser, [NEGATIVE_PROBE])
            out.negative_fail = not passed
            if passed:
                out.reasons.append(f"negative probe passed (task is solved by doing nothing): {reason}")
        except Exception as exc:
            out.negative_fail = False
            out.reasons.append(f"negative: {_why(exc)}")
    out.seconds = time.monotonic() - started
    return out


def check_tasks(selection: TaskSelection, progress: Callable[[TaskCheck], None] | None = None) -> list[TaskCheck]:
    """Validate the files (reference steps in the agent's grammar), pick tasks, start the needed sites once and
    check each task. Invalid files are reported without running them."""
    invalid, valid = select_tasks(selection, parse_step=parse_action)
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
