"""Task suites `eval --suite` knows: `tasks` (our YAML tasks, the default) and `miniwob` (MiniWoB++ pages).

A MiniWoB++ episode is `(task name, seed)`, recorded as task id `miniwob/<name>/<seed>`; it runs through the same
observation/executor/agent stack as a site task (`runner.episode_tasks`), and its reward is the page's own
(`envs.miniwob`: raw reward > 0 = success, the time penalty ignored).

Which MiniWoB++ tasks the action grammar can express (`agent.actions`: click/hover/clear/type/press/scroll on
elements of the accessibility-tree observation, addressed by id): every task whose solution is clicking named
elements, typing into fields, picking options, pressing keys and scrolling. Not expressible: anything needing
pointer coordinates or gestures (drag, draw, sliders, colour wheels, points on a canvas or an SVG), text selection,
or elements with no role/name in the observation (unlabelled shapes and colour swatches). `MINIWOB_EXPRESSIBLE`
lists the tasks that fit, `MINIWOB_NOT_EXPRESSIBLE` the rest with the reason; `MINIWOB_DEFAULT` is the measured
set.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from envs.evaluators import EvalResult
    from envs.miniwob import MiniWobEpisode
    from runner.browser import BrowserSession

SUITES = ("tasks", "miniwob")

#: The default measured set: one or a few grammar actions each, every element named in the observation.
MINIWOB_DEFAULT = (
    "click-button", "click-button-sequence", "click-checkboxes", "click-checkboxes-soft", "click-collapsible",
    "click-dialog", "click-dialog-2", "click-link", "click-option", "click-tab", "click-test", "click-test-2",
    "click-widget", "enter-password", "enter-text", "enter-text-2", "enter-text-dynamic", "focus-text",
    "focus-text-2", "login-user", "choose-list", "navigate-tree", "unicode-test", "use-autocomplete",
)  # fmt: skip

#: Further tasks the grammar can express (longer, or needing reading/arithmetic), not in the default set.
MINIWOB_EXPRESSIBLE = MINIWOB_DEFAULT + (
    "click-checkboxes-large", "click-checkboxes-transfer", "click-collapsible-2", "click-collapsible-nodelay",
    "click-collapsible-2-nodelay", "click-menu", "click-menu-2", "click-tab-2", "click-tab-2-easy",
    "click-tab-2-medium", "click-tab-2-hard", "click-test-transfer", "button-delay", "login-user-popup",
    "use-autocomplete-nodelay", "search-engine", "multi-layouts", "multi-orderings", "form-sequence",
    "form-sequence-2", "form-sequence-3", "read-table", "read-table-2", "find-word", "phone-book",
    "simple-arithmetic", "simple-algebra", "odd-or-even", "guess-number", "enter-date", "enter-time",
    "sign-agreement", "scroll-text", "scroll-text-2", "copy-paste", "copy-paste-2", "email-inbox",
    "email-inbox-delete", "email-inbox-forward", "email-inbox-forward-nl", "email-inbox-forward-nl-turk",
    "email-inbox-important", "email-inbox-nl-turk", "email-inbox-noscroll", "email-inbox-reply",
    "email-inbox-star-reply", "social-media", "social-media-all", "social-media-some", "order-food",
    "buy-ticket", "book-flight", "book-flight-nodelay", "choose-date", "choose-date-easy", "choose-date-medium",
    "choose-date-nodelay", "terminal", "find-greatest", "ascending-numbers", "number-checkboxes",
    "generate-number", "use-spinner",
)  # fmt: skip

_COORDINATES = "needs pointer coordinates or a drag gesture"
_UNNAMED = "its targets have no role/name in the observation (shapes, colours, canvas)"
MINIWOB_NOT_EXPRESSIBLE: dict[str, str] = {
    **{t: _COORDINATES for t in (
        "drag-box", "drag-circle", "drag-cube", "drag-items", "drag-items-grid", "drag-shapes", "drag-shapes-2",
        "drag-single-shape", "drag-sort-numbers", "draw-circle", "draw-line", "bisect-angle", "circle-center",
        "find-midpoint", "right-angle", "resize-textarea", "use-slider", "use-slider-2", "use-colorwheel",
        "use-colorwheel-2", "hot-cold", "click-scroll-list")},
    **{t: _UNNAMED for t in (
        "click-shape", "click-color", "click-shades", "click-pie", "click-pie-nodelay", "count-shape",
        "count-sides", "identify-shape", "grid-coordinate", "hover-shape", "tic-tac-toe", "visual-addition")},
    **{t: "needs selecting text" for t in ("highlight-text", "highlight-text-2", "text-editor", "text-transform")},
    **{t: "moving or timed targets a step of seconds cannot follow" for t in (
        "chase-circle", "moving-items", "simon-says", "stock-market", "daily-calendar")},
}  # fmt: skip


def parse_task_names(text: str | None, default: Sequence[str] = MINIWOB_DEFAULT) -> list[str]:
    """`click-button,enter-text` -> names, checked against the installed pages (unknown name = ValueError)."""
    from envs.miniwob import list_tasks

    names = [t.strip() for t in (text or "").split(",") if t.strip()] or list(default)
    known = set(list_tasks())
    for name in names:
        if name not in known:
            near = sorted(t for t in known if t.split("-")[0] == name.split("-")[0])[:8]
            hint = f"; similar: {', '.join(near)}" if near else ""
            raise ValueError(f"unknown MiniWoB++ task '{name}'{hint}")
        if name in MINIWOB_NOT_EXPRESSIBLE:
            raise ValueError(f"MiniWoB++ task '{name}' cannot be expressed by the action grammar: "
                             f"{MINIWOB_NOT_EXPRESSIBLE[name]}")  # fmt: skip
    return list(dict.fromkeys(names))


@dataclass
class MiniWobTask:
    """One seeded MiniWoB++ episode as the episode loop sees it (see `runner.episode_tasks.EpisodeTask`)."""

    name: str
    seed: int = 0
    max_time_s: float | None = None
    sites: list[str] = field(default_factory=list)
    reference_solution: list[str] = field(default_factory=list)  # none: problems are generated per seed
    _episode: MiniWobEpisode | None = field(default=None, repr=False, compare=False)

    @property
    def task_id(self) -> str:
        return f"miniwob/{self.name}/{self.seed}"

    def open_session(self, sites: Any, headless: bool, screenshots_dir: str | Path | None) -> BrowserSession:
        from runner.browser import BrowserSession

        return BrowserSession([], headless=headless, screenshots_dir=screenshots_dir, allow_file=True)

    def prepare(self, session: BrowserSession, sites: Any) -> str:
        """Open the page, seed it and start the clock; the instruction is generated now, so it is returned."""
        from envs.miniwob import DEFAULT_MAX_TIME_S, MiniWobEpisode

        max_time = self.max_time_s if self.max_time_s is not None else DEFAULT_MAX_TIME_S
        self._episode = MiniWobEpisode(self.name, self.seed, max_time_s=max_time, session=session)
        return self._episode.start()

    def _started(self) -> MiniWobEpisode:
        if self._episode is None:
            raise RuntimeError(f"{self.task_id}: prepare() was not called")
        return self._episode

    def finished(self, session: BrowserSession) -> bool:
        return self._started().done

    def evaluate(self, answer: str | None, session: BrowserSession, sites: Any) -> EvalResult:
        from envs.evaluators import EvalResult

        episode = self._started()
        if not episode.done:
            return EvalResult(0.0, "the MiniWoB++ episode did not end (no reward given)")
        reward = episode.reward
        why = f" ({episode.reason})" if episode.reason else ""
        return EvalResult(1.0 if reward > 0 else 0.0, f"MiniWoB++ raw reward {reward:.2f}{why}")


def miniwob_tasks(names: Sequence[str], seeds: int | Sequence[int], max_time_s: float | None = None) -> list[Any]:
    """Every (name, seed) pair, seed-major (all tasks at seed 0 first: a stopped eval covers whole seeds);
    `seeds=5` means seeds 0..4."""
    seed_list = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    if not seed_list:
        raise ValueError("--seeds must be at least 1")
    return [MiniWobTask(name, seed, max_time_s) for seed in seed_list for name in names]


def select_tasks(suite: str, paths: Sequence[str | Path], names: str | None, seeds: int) -> list[Any]:
    """The tasks of one `eval` invocation: YAML task files (suite `tasks`) or MiniWoB++ (name, seed) pairs."""
    if suite == "tasks":
        if names:
            raise ValueError("--tasks names MiniWoB++ tasks; with --suite tasks pass task files or folders")
        from agent.actions import parse_action
        from envs.taskspec import load_tasks

        return load_tasks(list(paths), parse_step=parse_action)
    if suite == "miniwob":
        return miniwob_tasks(parse_task_names(names), seeds)
    raise ValueError(f"unknown suite {suite!r}; expected one of {', '.join(SUITES)}")
