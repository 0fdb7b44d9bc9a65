"""Why a free-running episode failed: one coarse category per failed episode, decided from its trace alone.

A 1.5B agent fails most tasks, and "12% success" says nothing about what to fix next. The trace holds every page
the agent saw (`steps.observation`) and the task holds the answer it was scored on, so the commonest questions can
be answered mechanically: did the answer ever reach the screen, was it still on screen when the agent gave up, or
did the agent read it pages back and lose it? The categories, first that applies:

- `error`: the episode crashed (browser, model, harness); the reason is the error's first line.
- `format`: the agent's answer holds every needed item, loosely (case, spacing, number formatting), but the
  evaluator rejected it (an exact-match task answered with extra words, say).
- `not_achievable`: the task cannot be done on these sites (reference "N/A") and the agent did not say so.
- `navigation`: the answer never appeared on a page the agent saw; for action tasks, the agent never reached the
  page the evaluator checks.
- `grounding`: the answer was on one of the last two pages the agent saw and it answered otherwise or not at all;
  for action tasks, it reached the checked page but did not complete the action there.
- `memory`: the answer was seen, but only two or more pages before the end, and the final answer is wrong or
  missing (the fact sat far back in the context: under an evicting policy it may be gone, under `full` the model
  did not use it).

The categories are heuristics over text, not judgements: an answer shown under another name, or a page the
observation truncated, lands in `navigation`. The breakdown says where to look; the trace ids say what to read.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from envs.evaluators import contains, normalize
from envs.taskspec import OR_SEPARATOR

if TYPE_CHECKING:
    from envs.taskspec import Task

CATEGORIES = ("error", "format", "not_achievable", "navigation", "grounding", "memory")
RECENT_PAGES = 2  # "on screen at the end": seen on one of the last this many observations


@dataclass(frozen=True)
class Failure:
    """One failed episode: its trace id, category, whether the agent replied `stop`, and why (one line)."""

    episode_id: int
    task_id: str
    policy: str
    category: str
    stopped: bool
    steps: int
    detail: str


# The stop action as the trace's `action` column stores it: the canonical text `Action.to_text()` writes,
# `stop [answer]` (the answer is everything inside the outermost brackets), `stop []` or `stop`.
_STOP_RE = re.compile(r"^\s*stop\s*(?:\[(?P<answer>.*)\])?\s*$", re.DOTALL | re.IGNORECASE)
StepParser = Callable[[str], Any]  # the runner's action parser (`agent.actions.parse_action`): `.verb`, `.answer`


def stop_answer(text: str) -> str | None:
    """The answer of a stored canonical stop action (None for any other action)."""
    m = _STOP_RE.match(text)
    return None if m is None else (m["answer"] or "").strip()


def final_answer(steps: Sequence[Mapping[str, Any]], parse_step: StepParser | None = None) -> str | None:
    """The text of the episode's `stop [...]` action (None if the agent never stopped): a stop ends an episode, so
    only the last step can hold it. `parse_step` (the runner's parser, which also finds an action inside a raw
    reply) is passed in by the caller, so traces need not import the agent; without it the stored canonical text
    is read (`stop_answer`)."""
    if not steps:
        return None
    text = steps[-1].get("action") or steps[-1].get("raw_output") or ""
    if parse_step is None:
        return stop_answer(text)
    try:
        action = parse_step(text)
    except ValueError:  # (agent.actions.ActionParseError)
        return None
    return (action.answer or "") if action.verb == "stop" else None


def _items(task: Task) -> list[list[str]]:
    """What the answer must hold: one list of alternatives per needed item (empty for action tasks)."""
    ref = task.eval.reference_answers
    if ref is None:
        return []
    if ref.exact_match is not None:
        return [[ref.exact_match]]
    return [[alt.strip() for alt in item.split(OR_SEPARATOR)] for item in ref.must_include or []]


def _seen_steps(item: list[str], observations: Sequence[str]) -> list[int]:
    return [i for i, text in enumerate(observations) if any(contains(alt, text) for alt in item)]


def _loosely_holds(answer: str, item: list[str]) -> bool:
    squash = "".join(normalize(answer).split())
    return any("".join(normalize(alt).split()) in squash for alt in item)


def _checked_paths(task: Task) -> list[str]:
    """Path+query of the pages the evaluator looks at (url_match's reference, program_html's URLs)."""
    urls = [task.eval.reference_url] if task.eval.reference_url else []
    urls += [c.url for c in task.eval.program_html if c.url != "last"]
    return [_path(u) for u in urls]


def _path(url: str) -> str:
    parts = urlsplit(url.split("__", 2)[-1] if url.startswith("__") else url)
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def classify(task: Task, episode: Mapping[str, Any], steps: Sequence[Mapping[str, Any]],
             parse_step: StepParser | None = None) -> Failure | None:  # fmt: skip
    """The failure category of one finished episode (None if it succeeded); `parse_step`: see `final_answer`."""
    if episode["status"] == "done" and episode.get("success"):
        return None
    answer = final_answer(steps, parse_step)

    def failure(category: str, detail: str) -> Failure:
        return Failure(int(episode["id"]), str(episode["task_id"]), str(episode["policy"]), category,
                       answer is not None, len(steps), detail)  # fmt: skip

    if episode["status"] == "error":
        return failure("error", (episode.get("error") or "error").strip().splitlines()[0][:160])
    said = "no stop" if answer is None else f"answered {answer[:80]!r}"
    items = _items(task)
    if task.is_not_achievable:
        return failure("not_achievable", f"reference N/A; {said}")
    if answer is not None and items and all(_loosely_holds(answer, item) for item in items):
        return failure("format", f"{said}; holds the reference but the evaluator said: {episode.get('eval_reason')}")
    observations = [s.get("observation") or "" for s in steps]
    if items:
        seen = [_seen_steps(item, observations) for item in items]
        missing = [item[0] for item, at in zip(items, seen, strict=True) if not at]
        if missing:
            return failure("navigation", f"{', '.join(repr(m) for m in missing)} never on a page it saw; {said}")
        recent = len(observations) - RECENT_PAGES
        if all(max(at) >= recent for at in seen):
            return failure("grounding", f"the answer was on the last pages (steps {_steps(seen)}); {said}")
        return failure("memory", f"the answer was seen only pages back (steps {_steps(seen)}); {said}")
    paths = _checked_paths(task)
    visited = {_path(s.get("url") or "") for s in steps}
    if paths and not visited & set(paths):
        return failure("navigation", f"never reached {', '.join(paths)}; {said}")
    return failure("grounding", f"reached the page but did not complete the action; {said}")


def _steps(seen: list[list[int]]) -> str:
    return ",".join(str(i) for i in sorted({i for at in seen for i in at}))


def classify_all(tasks: Mapping[str, Task], episodes: Iterable[Mapping[str, Any]],
                 steps_of: Any, parse_step: StepParser | None = None) -> list[Failure]:  # fmt: skip
    """Failures of `episodes` (final attempts) whose task is in `tasks`; `steps_of(episode_id)` reads the steps."""
    out: list[Failure] = []
    for ep in episodes:
        task = tasks.get(str(ep["task_id"]))
        if task is None or (ep["status"] == "done" and ep.get("success")):  # successes need no steps read
            continue
        found = classify(task, ep, steps_of(int(ep["id"])), parse_step)
        if found is not None:
            out.append(found)
    return out
