"""Run MiniWoB++ tasks (MIT, from the installed `miniwob` wheel) over file:// in our own `BrowserSession`.

Why not the wheel's own gymnasium env: it drives Chromium through Selenium with its own action space; we want the
exact observation/executor stack the agent uses on our sites, so a MiniWoB score measures the same agent. We only
borrow the task pages and their JS episode protocol (`core.js`):
  `Math.seedrandom(seed)` makes the generated problem deterministic, `core.EPISODE_MAX_TIME` (ms) bounds the episode,
  `core.startEpisodeReal()` generates the problem and starts the clock, `WOB_TASK_READY` turns true once the
  problem exists, `#query` holds the instruction, and `core.endEpisode` sets `WOB_RAW_REWARD_GLOBAL` (> 0 = success,
  without the time penalty) and `WOB_DONE_GLOBAL`.
The `flight.*` tasks need an HTTP server and are not offered.
"""

from __future__ import annotations

import importlib.util
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# The runner's browser (e.g. `runner.browser.BrowserSession`: `active_page`, `close()`); envs does not import the agent.
BrowserSession = Any

#: A slow local model may think for a minute per step; the default leaves room for ~10 steps.
DEFAULT_MAX_TIME_S = 600.0


def html_dir() -> Path:
    """`miniwob/html/miniwob` inside the installed wheel (found without importing it: it pulls gymnasium/selenium)."""
    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the 'miniwob' package is not installed: pip install 'confkv-agent[miniwob]'")
    return Path(next(iter(spec.submodule_search_locations))) / "html" / "miniwob"


def list_tasks() -> list[str]:
    """Names of the MiniWoB++ tasks that run over file:// (all but `flight.*`)."""
    return sorted(p.stem for p in html_dir().glob("*.html"))


class MiniWobEpisode:
    """One seeded MiniWoB++ episode. Use as a context manager; it uses the `session` it is given, or opens one with
    `open_session()` (e.g. `lambda: BrowserSession(allowed_origins=[], allow_file=True).start()`) and closes it.

    >>> with MiniWobEpisode("click-button", seed=3, session=browser) as ep:  # doctest: +SKIP
    ...     ep.utterance, ep.session  # act through runner.executor on ep.session, then read ep.reward / ep.done
    """

    def __init__(self, task: str, seed: int = 0, max_time_s: float = DEFAULT_MAX_TIME_S,
                 session: BrowserSession | None = None, open_session: Callable[[], BrowserSession] | None = None) -> None:
        path = html_dir() / f"{task}.html"
        if not path.is_file():
            near = [t for t in list_tasks() if task.split("-")[0] in t][:8]
            raise ValueError(f"unknown MiniWoB++ task '{task}'" + (f"; similar: {', '.join(near)}" if near else ""))
        self.task, self.seed, self.max_time_s = task, seed, max_time_s
        self.url = path.as_uri()
        if session is None and open_session is None:
            raise ValueError("MiniWobEpisode needs a browser: pass session= or open_session=")
        self._own_session = session is None
        self._session = session
        self._open_session = open_session

    @property
    def session(self) -> BrowserSession:
        if self._session is None:
            raise RuntimeError("episode not started: use `with MiniWobEpisode(...) as ep` or call start()")
        return self._session

    def __enter__(self) -> MiniWobEpisode:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self, ready_timeout_s: float = 5.0) -> str:
        """Open the task page, seed it, start the episode; return the instruction (`#query` text)."""
        if self._session is None:
            assert self._open_session is not None
            self._session = self._open_session()
        try:
            page = self.session.active_page
            page.goto(self.url, wait_until="load")
            page.wait_for_selector("#sync-task-cover", state="attached")  # core.startEpisode ran (window.onload)
            page.evaluate(
                f"Math.seedrandom({json.dumps(self.seed)}); core.EPISODE_MAX_TIME = {int(self.max_time_s * 1000)};"
                " core.startEpisodeReal();"
            )
            deadline = time.monotonic() + ready_timeout_s
            while not page.evaluate("WOB_TASK_READY"):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"MiniWoB++ task '{self.task}' did not become ready in {ready_timeout_s} s")
                page.wait_for_timeout(50)
        except BaseException:
            self.close()
            raise
        return self.utterance

    def _read(self, expression: str) -> object:
        return self.session.active_page.evaluate(expression)

    @property
    def utterance(self) -> str:
        return str(self._read("core.getUtterance()"))

    @property
    def reward(self) -> float:
        """Raw reward (no time penalty): > 0 success, <= 0 failure or not finished."""
        return float(self._read("WOB_RAW_REWARD_GLOBAL"))  # type: ignore[arg-type]

    @property
    def done(self) -> bool:
        return bool(self._read("WOB_DONE_GLOBAL"))

    @property
    def reason(self) -> str | None:
        value = self._read("WOB_REWARD_REASON")
        return None if value is None else str(value)

    def close(self) -> None:
        """Close the browser if this episode opened it (a session passed in stays open for its owner)."""
        if self._own_session and self._session is not None:
            self._session.close()
            self._session = None
