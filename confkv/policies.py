"""Eviction policies as data: one flat dataclass, a registry of named presets, `--set key=value` overrides.

A policy answers three questions for the cache: how many tokens may a layer keep now (budget schedule + pyramid
split), which ones (ranker, sinks, protected window), and how they are stored (INT8 after `int8_after` tokens).
`random`, `recency` and `attention` share Conf-KV's gate, so they evict at the same rate and times; only the
ranking differs (the paper's matched-rate ablation).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields, replace

from confkv.budget import FixedBudget, GatedBudget, pyramid_budgets
from confkv.confidence import DEFAULT_WEIGHTS
from confkv.rankers import RANKERS, EMARanker, RandomRanker, Ranker


class PolicyError(ValueError):
    """An unknown policy name, override key or bad value."""


@dataclass
class PolicyConfig:
    name: str = "full"
    # Budget: `budget` for a fixed schedule; `n_low`/`n_high`/`tau` for the confidence gate. None = keep all.
    budget: int | None = None
    gated: bool = False
    n_low: int = 256
    n_high: int = 512
    tau: float = 0.5
    # Ranking inside the budget.
    ranker: str = "ema"
    alpha: float = 0.5
    ema_decay: float = 0.9
    sinks: int = 4
    protect: int = 64
    # Storage: tokens older than the `int8_after` most recent ones are INT8 (None = model dtype throughout).
    # The model-dtype window is also protected from eviction, so the effective protected window is
    # max(protect, int8_after).
    int8_after: int | None = None
    # Per-layer split: PyramidKV-style, deeper layers smaller, mean = the global budget.
    pyramid: bool = False
    pyramid_spread: float = 0.5
    # Long inputs are prefilled in chunks with eviction in between (bounds the prefill peak).
    prefill_chunk: int = 512
    confidence_weights: tuple[float, float, float] = DEFAULT_WEIGHTS
    confidence_rescale: bool = False
    seed: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def evicts(self) -> bool:
        return self.gated or self.budget is not None

    @property
    def protected(self) -> int:
        """Recent tokens never evicted (the FP window counts as protected when INT8 is on)."""
        return max(self.protect, self.int8_after or 0)

    def schedule(self) -> FixedBudget | GatedBudget | None:
        if self.gated:
            return GatedBudget(self.n_low, self.n_high, self.tau)
        return FixedBudget(self.budget) if self.budget is not None else None

    def make_ranker(self) -> Ranker:
        if self.ranker not in RANKERS:
            raise PolicyError(f"unknown ranker {self.ranker!r}; known: {', '.join(RANKERS)}")
        cls = RANKERS[self.ranker]
        if issubclass(cls, EMARanker):
            alpha = 1.0 if self.ranker == "attention" else self.alpha
            return cls(alpha=alpha, decay=self.ema_decay)
        if cls is RandomRanker:
            return RandomRanker(seed=self.seed)
        return cls()

    def layer_budgets(self, global_budget: int, n_layers: int) -> list[int]:
        """Budget of each layer for one global budget."""
        if not self.pyramid:
            return [global_budget] * n_layers
        return pyramid_budgets(global_budget, n_layers, self.pyramid_spread, minimum=self.min_layer_budget)

    @property
    def min_layer_budget(self) -> int:
        return self.sinks + self.protected + 1

    def validate(self) -> PolicyConfig:
        """Every value within its range (the message names the allowed range), then the budget arithmetic."""
        import math

        def in_range(key: str, low: float, high: float | None = None, *, open_high: bool = False) -> None:
            value = getattr(self, key)
            ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
            ok = ok and value >= low and (high is None or (value < high if open_high else value <= high))
            if not ok:
                allowed = f">= {low}" if high is None else f"in [{low}, {high}{')' if open_high else ']'}"
                raise PolicyError(f"{key} must be {allowed}, got {value!r}")

        for key in ("alpha", "ema_decay", "tau"):
            in_range(key, 0.0, 1.0)
        in_range("pyramid_spread", 0.0, 1.0, open_high=True)
        for key in ("sinks", "protect"):
            in_range(key, 0)
        if self.gated:
            in_range("n_low", 1)
            in_range("n_high", 1)
            if self.n_low > self.n_high:
                raise PolicyError(f"n_low must be <= n_high, got n_low={self.n_low} > n_high={self.n_high}")
        weights = self.confidence_weights
        if len(weights) != 3 or not all(isinstance(w, int | float) and math.isfinite(w) and w >= 0 for w in weights):
            raise PolicyError(f"confidence_weights must be 3 numbers >= 0 (entropy, margin, max-prob), got {weights!r}")
        if sum(weights) <= 0:
            raise PolicyError(f"confidence_weights must not all be 0, got {weights!r}")
        lows = [b for b in (self.budget,) if b is not None]
        if self.gated:
            lows += [self.n_low, self.n_high]
        for b in lows:
            if b < self.min_layer_budget:  # the pyramid floors every layer at the same minimum
                raise PolicyError(
                    f"policy {self.name!r}: budget {b} leaves no room to evict: it must be >= "
                    f"sinks ({self.sinks}) + protected window ({self.protected}) + 1"
                )
        if self.int8_after is not None and self.int8_after < 1:
            raise PolicyError("int8_after must be >= 1 (or None to disable INT8)")
        if self.prefill_chunk < 1:
            raise PolicyError("prefill_chunk must be >= 1")
        self.make_ranker()
        return self

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


_CONFKV = dict(gated=True, n_low=256, n_high=512, tau=0.5, ranker="ema", sinks=4, protect=64, int8_after=64)

PRESETS: dict[str, dict] = {
    "full": dict(),
    "sliding": dict(budget=512, ranker="recency", sinks=4, protect=0),
    "h2o": dict(budget=512, ranker="h2o", sinks=0, protect=256),
    "confkv": dict(_CONFKV),
    "confkv-pyramid": dict(_CONFKV, pyramid=True),
    "random": dict(_CONFKV, ranker="random", int8_after=None),
    "recency": dict(_CONFKV, ranker="recency", int8_after=None),
    "attention": dict(_CONFKV, ranker="attention", int8_after=None),
}


def _coerce(key: str, raw: str, current: object, annotation: str) -> object:
    """Parse a `--set` value by the field's declared type."""
    text = raw.strip()
    if text.lower() in ("none", "null", "off") and "None" in annotation:
        return None
    try:
        if "tuple" in annotation:
            return tuple(float(x) for x in text.strip("()[]").split(","))
        if "bool" in annotation:
            if text.lower() in ("1", "true", "yes", "on"):
                return True
            if text.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(text)
        if "int" in annotation:
            return int(text)
        if "float" in annotation:
            return float(text)
    except ValueError as exc:
        raise PolicyError(f"--set {key}={raw}: expected {annotation}") from exc
    return text


def parse_overrides(items: list[str] | None) -> dict[str, str]:
    """`["n_low=128", "tau=0.4"]` -> dict; a malformed item is a clear error."""
    out: dict[str, str] = {}
    for item in items or []:
        if "=" not in item:
            raise PolicyError(f"--set expects key=value, got {item!r}")
        key, value = item.split("=", 1)
        out[key.strip()] = value
    return out


def get_policy(name: str, overrides: dict[str, str | object] | None = None) -> PolicyConfig:
    """A preset by name with overrides applied and checked."""
    if name not in PRESETS:
        raise PolicyError(f"unknown policy {name!r}; known: {', '.join(PRESETS)}")
    policy = PolicyConfig(name=name, **PRESETS[name])
    known = {f.name: f for f in fields(PolicyConfig) if f.name not in ("name", "extra")}
    changes: dict[str, object] = {}
    for key, value in (overrides or {}).items():
        if key not in known:
            raise PolicyError(f"unknown policy key {key!r}; known: {', '.join(sorted(known))}")
        annotation = str(known[key].type)
        changes[key] = _coerce(key, value, getattr(policy, key), annotation) if isinstance(value, str) else value
    return replace(policy, **changes).validate()
