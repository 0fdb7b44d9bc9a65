"""Typed rows the episode runner hands to the trace store.

A dataclass per row instead of a dozen keyword arguments: the runner fills what it measured, the store validates
and writes it, and a misspelt field is a TypeError at the call site rather than a silently missing column.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class StepRecord:
    """One agent step. Only `step` is required; everything else is whatever the runner measured."""

    step: int
    url: str | None = None
    observation: str | None = None
    observation_tokens: int | None = None
    prefilled_tokens: int | None = None
    total_tokens: int | None = None
    output_tokens: int | None = None
    raw_output: str | None = None
    action: str | None = None
    result: str | None = None
    parse_error: str | None = None
    exec_error: str | None = None
    kept_tokens_per_layer: list[int] = field(default_factory=list)
    kv_bytes: int | None = None
    prefill_ms: float | None = None
    decode_ms: float | None = None
    step_ms: float | None = None

    def to_row(self, episode_id: int) -> dict[str, Any]:
        """Validate and convert to a `steps` table row."""
        if not isinstance(self.step, int) or self.step < 0:
            raise ValueError(f"step index must be a non-negative int, got {self.step!r}")
        for name in ("observation_tokens", "prefilled_tokens", "total_tokens", "output_tokens", "kv_bytes"):
            _check_non_negative(name, getattr(self, name))
        for name in ("prefill_ms", "decode_ms", "step_ms"):
            _check_non_negative(name, getattr(self, name))
        kept = [int(k) for k in self.kept_tokens_per_layer]
        if any(k < 0 for k in kept):
            raise ValueError(f"kept_tokens_per_layer must be non-negative, got {kept}")
        row = asdict(self)
        row["kept_tokens_per_layer"] = json.dumps(kept)
        row["episode_id"] = episode_id
        return row


@dataclass
class DecodeToken:
    """One generated token with the confidence and the budget the cache used for it."""

    token_index: int
    token_text: str
    confidence: float
    budget: int
    kept_tokens: int | None = None
    kv_bytes: int | None = None

    def to_row(self, episode_id: int, step: int) -> dict[str, Any]:
        """Validate and convert to a `decode_tokens` table row."""
        if not isinstance(self.token_index, int) or self.token_index < 0:
            raise ValueError(f"token_index must be a non-negative int, got {self.token_index!r}")
        conf = float(self.confidence)
        if math.isnan(conf) or not 0.0 <= conf <= 1.0:
            raise ValueError(f"confidence must be in [0, 1], got {self.confidence!r} (token {self.token_index})")
        _check_non_negative("budget", self.budget)
        _check_non_negative("kept_tokens", self.kept_tokens)
        _check_non_negative("kv_bytes", self.kv_bytes)
        row = asdict(self)
        row.update(episode_id=episode_id, step=step, confidence=conf, budget=int(self.budget))
        return row


@dataclass
class PrefillChunk:
    """One prefill call of a step (the cache prefills long appends in chunks and evicts after each): how many
    tokens went in, the chunk's confidence and the cache right after it. With the decode tokens this gives the
    whole episode token by token (`traces.episode_plot`)."""

    chunk_index: int
    tokens: int
    confidence: float
    budget: int | None = None  # None: no budget (full cache)
    kept_tokens: int | None = None
    kv_bytes: int | None = None

    def to_row(self, episode_id: int, step: int) -> dict[str, Any]:
        if not isinstance(self.chunk_index, int) or self.chunk_index < 0:
            raise ValueError(f"chunk_index must be a non-negative int, got {self.chunk_index!r}")
        if not isinstance(self.tokens, int) or self.tokens < 1:
            raise ValueError(f"a prefill chunk holds at least one token, got {self.tokens!r}")
        conf = float(self.confidence)
        if math.isnan(conf) or not 0.0 <= conf <= 1.0:
            raise ValueError(f"confidence must be in [0, 1], got {self.confidence!r} (chunk {self.chunk_index})")
        for name in ("budget", "kept_tokens", "kv_bytes"):
            _check_non_negative(name, getattr(self, name))
        row = asdict(self)
        row.update(episode_id=episode_id, step=step, confidence=conf)
        return row


def _check_non_negative(name: str, value: float | None) -> None:
    if value is not None and value < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
