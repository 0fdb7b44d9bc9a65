"""The data of one picture of a whole episode, token by token: confidence, budget and kept tokens, prefill chunks
and decoded tokens alike, with step boundaries and gate openings (the budget growing) marked.

Pure functions on trace rows, so the terminal browser (`traces.browse`) only draws, and tests check the numbers.

x is the count of tokens the model has run through so far in the episode: a prefill chunk of n tokens advances
it by n (one point at the chunk's end), a decoded token by 1. Databases written before prefill chunks were
recorded still place every step correctly: the step's `prefilled_tokens` advance x without a point.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Row = Mapping[str, Any]


@dataclass
class EpisodeSeries:
    x: list[int] = field(default_factory=list)  # tokens through the episode at this point
    kind: list[str] = field(default_factory=list)  # "prefill" (one chunk) or "decode" (one token)
    step: list[int] = field(default_factory=list)
    confidence: list[float] = field(default_factory=list)
    budget: list[int | None] = field(default_factory=list)  # None: no budget (full cache keeps everything)
    kept: list[int | None] = field(default_factory=list)
    step_starts: list[tuple[int, int]] = field(default_factory=list)  # (step, x where it begins)
    gate_openings: list[tuple[int, int, int]] = field(default_factory=list)  # (x, budget before, budget after)

    def __len__(self) -> int:
        return len(self.x)


def _by_step(rows: Iterable[Row]) -> dict[int, list[Row]]:
    grouped: dict[int, list[Row]] = defaultdict(list)
    for row in rows:
        grouped[int(row["step"])].append(row)
    return grouped


def episode_series(steps: Sequence[Row], prefill_chunks: Iterable[Row], decode_tokens: Iterable[Row]) -> EpisodeSeries:
    """Merge a step list (`TraceStore.steps`) with its prefill chunks and decode tokens into one token axis."""
    chunks, tokens = _by_step(prefill_chunks), _by_step(decode_tokens)
    out, position, last_budget = EpisodeSeries(), 0, None
    step_ids = sorted({int(s["step"]) for s in steps} | set(chunks) | set(tokens))
    prefilled = {int(s["step"]): s.get("prefilled_tokens") for s in steps}

    def add(kind: str, step: int, row: Row) -> None:
        nonlocal last_budget
        budget = row.get("budget")
        out.x.append(position)
        out.kind.append(kind)
        out.step.append(step)
        out.confidence.append(float(row["confidence"]))
        out.budget.append(budget)
        out.kept.append(row.get("kept_tokens"))
        if budget is not None and last_budget is not None and budget > last_budget:
            out.gate_openings.append((position, last_budget, budget))
        if budget is not None:
            last_budget = budget

    for step in step_ids:
        out.step_starts.append((step, position))
        step_chunks = sorted(chunks.get(step, []), key=lambda r: r["chunk_index"])
        if step_chunks:
            for row in step_chunks:
                position += int(row["tokens"])
                add("prefill", step, row)
        elif prefilled.get(step):
            position += int(prefilled[step])  # older trace: no chunk rows, keep the axis right anyway
        for row in sorted(tokens.get(step, []), key=lambda r: r["token_index"]):
            position += 1
            add("decode", step, row)
    return out


def align_by_step(left: Sequence[Row], right: Sequence[Row]) -> list[tuple[Row | None, Row | None]]:
    """Pair two episodes' steps by step index; the shorter episode gets None where it had already ended."""
    a = {int(s["step"]): s for s in left}
    b = {int(s["step"]): s for s in right}
    return [(a.get(i), b.get(i)) for i in sorted(set(a) | set(b))]


def layer_strip(steps: Sequence[Row], width: int = 60) -> list[tuple[int, str, int]]:
    """Per layer: (layer, one block per step scaled to the largest kept count of any layer, last kept count).

    For the pyramid policy each layer keeps a different number of tokens; this shows it as one row per layer."""
    from traces.replay import sparkline

    per_step = [list(s.get("kept_tokens_per_layer") or []) for s in steps]
    n_layers = max((len(k) for k in per_step), default=0)
    if n_layers == 0:
        return []
    top = max(max(k) for k in per_step if k)
    rows = []
    for layer in range(n_layers):
        values = [float(k[layer]) if layer < len(k) else 0.0 for k in per_step][-width:]
        rows.append((layer, sparkline(values, lo=0.0, hi=float(top)), int(values[-1])))
    return rows
