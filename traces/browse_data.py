"""What the trace browser shows, read from the store and shaped for display: no widgets here, so it is testable and
the app (`traces.browse`) only lays things out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from traces.episode_plot import EpisodeSeries, episode_series, layer_strip
from traces.fmt import terminal_safe
from traces.store import TraceStore

FILTER_KEYS = ("task", "policy", "outcome")


def outcome(ep: Mapping[str, Any]) -> str:
    """success | failure | error | running (the word `traces ls` shows)."""
    if ep["status"] != "done":
        return str(ep["status"])
    return "success" if ep["success"] else "failure"


def parse_filter(text: str) -> dict[str, list[str]]:
    """`policy:confkv outcome:failure shop` -> {"policy": ["confkv"], "outcome": ["failure"], "task": ["shop"]}.

    A bare word filters the task id; an unknown `key:` is a ValueError naming the keys."""
    out: dict[str, list[str]] = {}
    for word in text.split():
        key, sep, value = word.partition(":")
        if not sep:
            key, value = "task", word
        if key not in FILTER_KEYS:
            raise ValueError(f"unknown filter '{key}:'; use {', '.join(k + ':' for k in FILTER_KEYS)} or a bare word")
        if value:
            out.setdefault(key, []).append(value.lower())
    return out


def filter_episodes(episodes: Iterable[Mapping[str, Any]], text: str) -> list[Mapping[str, Any]]:
    """Episodes matching every filter term: task (substring), policy (exact), outcome (exact)."""
    terms = parse_filter(text)
    kept = []
    for ep in episodes:
        fields = {"task": str(ep["task_id"]).lower(), "policy": str(ep["policy"]).lower(), "outcome": outcome(ep)}
        ok = all(v in fields["task"] for v in terms.get("task", []))
        ok = ok and all(fields["policy"] == v for v in terms.get("policy", []))
        ok = ok and all(fields["outcome"] == v for v in terms.get("outcome", []))
        if ok:
            kept.append(ep)
    return kept


@dataclass
class EpisodeView:
    episode: dict[str, Any]
    steps: list[dict[str, Any]]
    series: EpisodeSeries
    layers: list[tuple[int, str, int]]  # per-layer strip; [] unless the policy is a pyramid one

    @property
    def is_pyramid(self) -> bool:
        return "pyramid" in str(self.episode["policy"])


def load_episode(store: TraceStore, episode_id: int) -> EpisodeView:
    episode = store.episode(episode_id)
    steps = store.steps(episode_id)
    series = episode_series(steps, store.prefill_chunks(episode_id), store.decode_tokens(episode_id))
    layers = layer_strip(steps) if "pyramid" in str(episode["policy"]) else []
    return EpisodeView(episode, steps, series, layers)


def partner(episodes: Sequence[Mapping[str, Any]], current: Mapping[str, Any],
            marked: int | None = None) -> Mapping[str, Any] | None:
    """The episode to compare with: the marked one if it is another episode of the same task, else the latest
    episode of the same task with another policy (`full` preferred when `current` is not full)."""
    same = [e for e in episodes if e["task_id"] == current["task_id"] and e["id"] != current["id"]]
    if marked is not None:
        for e in same:
            if e["id"] == marked:
                return e
    others = [e for e in same if e["policy"] != current["policy"]]
    if not others:
        return None
    full = [e for e in others if e["policy"] == "full"]
    return (full or others)[-1]


def step_text(step: Mapping[str, Any] | None, observation_lines: int | None = None) -> str:
    """The step pane: action, result, error, reply and observation, as plain text: show it without markup parsing;
    control characters are already written out (`terminal_safe`)."""
    if step is None:
        return "(no such step: the episode had ended)"
    error = step.get("parse_error") or step.get("exec_error")
    observation = step.get("observation") or ""
    if observation_lines is not None:
        lines = observation.splitlines()
        observation = "\n".join(lines[:observation_lines]) + (f"\n… {len(lines) - observation_lines} more lines"
                                                                if len(lines) > observation_lines else "")
    parts = [
        f"step {step['step']}  {step.get('url') or ''}",
        f"action: {step.get('action') or '-'}",
        f"result: {step.get('result') or '-'}",
        f"error:  {error or '-'}",
        f"reply:  {step.get('raw_output') or ''}",
        "observation:",
        observation,
    ]
    return terminal_safe("\n".join(parts))


def mean_confidence(series: EpisodeSeries, step: int) -> float | None:
    values = [c for c, s, k in zip(series.confidence, series.step, series.kind, strict=True)
              if s == step and k == "decode"]  # fmt: skip
    return sum(values) / len(values) if values else None
