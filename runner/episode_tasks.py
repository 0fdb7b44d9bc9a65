"""What the episode loop needs from a task, whatever its environment: our sites (WebArena-style YAML tasks) or a
MiniWoB++ page.

Why an adapter instead of a second episode loop: a MiniWoB score must measure the same agent (observation,
executor, stop rules, trace rows) as a site task; only four things differ, and they live here:
  `open_session` (which origins the browser may reach), `prepare` (reset/log in/open start pages, or seed the
  MiniWoB problem; returns the instruction the agent sees), `finished` (MiniWoB ends an episode itself) and
  `evaluate` (the task's evaluators, or the page's own reward protocol).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from envs.evaluators import EvalResult
    from envs.taskspec import Task
    from runner.browser import BrowserSession


@runtime_checkable
class EpisodeTask(Protocol):
    task_id: Any  # int for site tasks, "miniwob/<name>/<seed>" for MiniWoB++
    sites: list[str]
    reference_solution: list[str]

    def open_session(self, sites: Any, headless: bool, screenshots_dir: str | Path | None) -> BrowserSession: ...
    def prepare(self, session: BrowserSession, sites: Any) -> str: ...
    def finished(self, session: BrowserSession) -> bool: ...
    def evaluate(self, answer: str | None, session: BrowserSession, sites: Any) -> EvalResult: ...


class NoSites:
    """Stand-in for `envs.server.Sites` when no task of a batch needs a site (MiniWoB++ pages are files)."""

    urls: dict[str, str] = {}

    def url(self, name: str) -> str:
        raise KeyError(f"site '{name}' is not running here; running: none")

    def reset(self, names: Any = None) -> None:
        if names:
            raise KeyError(f"sites {list(names)} are not running here; running: none")

    def stop(self) -> None:
        pass


def start_sites(names: list[str]) -> Any:
    """`Sites(names)`, or `NoSites()` when there are none (Sites refuses an empty list)."""
    from envs.server import Sites

    return Sites(names) if names else NoSites()


@dataclass
class SiteTask:
    """A YAML task on our self-hosted sites (`envs.taskspec.Task`), as the episode loop sees it."""

    task: Task

    @property
    def task_id(self) -> int:
        return self.task.task_id

    @property
    def sites(self) -> list[str]:
        return list(self.task.sites)

    @property
    def reference_solution(self) -> list[str]:
        return list(self.task.reference_solution)

    def open_session(self, sites: Any, headless: bool, screenshots_dir: str | Path | None) -> BrowserSession:
        from runner.browser import BrowserSession

        return BrowserSession([sites.url(name) for name in self.task.sites], headless=headless,
                              screenshots_dir=screenshots_dir)  # fmt: skip

    def prepare(self, session: BrowserSession, sites: Any) -> str:
        from envs.server import login

        task = self.task
        if task.require_reset:
            sites.reset(task.sites)
        if task.require_login:
            for name in task.sites:
                login(session.active_page, sites.url(name))
        for i, url in enumerate(task.start_urls(sites.urls)):
            page = session.active_page if i == 0 else session.new_tab()
            page.goto(url, wait_until="load")
        session.tab_focus(0)
        return task.intent

    def finished(self, session: BrowserSession) -> bool:
        return False  # only the agent's `stop` or the stop rules end a site task

    def evaluate(self, answer: str | None, session: BrowserSession, sites: Any) -> EvalResult:
        from envs.evaluators import evaluate

        return evaluate(self.task, answer, session.active_page, sites.urls)


def as_episode_task(task: Any) -> EpisodeTask:
    """Site tasks are wrapped; anything already following `EpisodeTask` (e.g. `MiniWobTask`) passes through."""
    from envs.taskspec import Task

    if isinstance(task, Task):
        return SiteTask(task)
    if isinstance(task, EpisodeTask):
        return task
    raise TypeError(f"not a task: {type(task).__name__}")
