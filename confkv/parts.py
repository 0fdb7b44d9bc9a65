"""The parts a `KVPolicy` is composed of: gate x ranking x protection x storage, each a small frozen dataclass.

Their fields are the flat `--set` keys (`KVPolicy.keys`), with each field's valid range declared on it
(`confkv.params.param`). The gate and ranking parts name a registered plugin (`gated`, `ranker`) and hold values for
the keys every registered gate or ranker declares (`gate_keys`, `ranker_keys`) rather than fields of their own, so
a gate or ranker with a new parameter touches only its own file and its registry line.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields
from typing import Any

from confkv.confidence import DEFAULT_WEIGHTS
from confkv.gates import GATES, STORED_AS, BudgetGate, build_gate, gate_name, gate_params
from confkv.params import PolicyError, Range, check_ranges, param
from confkv.rankers import RANKERS, Ranker, build_ranker, ranker_params

# Keys that existed before gates were plugins, in the order `KVPolicy.to_dict` has always written them (trace DBs,
# run keys and JSON results store it); keys of gates registered since follow in registry order.
STORED_GATE_ORDER = ("budget", "gated", "n_low", "n_high", "tau", "tau_quantile", "shrink", "pyramid",
                     "pyramid_spread", "confidence_weights", "confidence_rescale", "chunk_confidence")


@dataclass(frozen=True, init=False)
class Gate:
    """The policy's gate part: which registered gate decides each forward's budget (`gated`, see `confkv.gates`),
    the values of every registered gate's keys, and what all gates share: the confidence signal they read and how a
    global budget is split over layers (flat, or PyramidKV-style: deeper layers smaller, mean = the global budget).

    Built like the flat keys read: `Gate(gated="threshold", n_low=256, tau=0.4)`, `Gate(budget=512)`. The gate's
    parameters are not fields here but each gate's own `param` fields (`gate_keys`), so a new gate adds keys without
    touching this class; `values` holds only those that differ from their defaults, so two parts are equal exactly
    when they build the same gate."""

    gated: bool | str = False
    pyramid: bool = False
    pyramid_spread: float = param(0.5, 0.0, 1.0, open_high=True)
    confidence_weights: tuple[float, float, float] = DEFAULT_WEIGHTS
    confidence_rescale: bool = False
    # A multi-token forward's confidence: "mean" over its last CONFIDENCE_POSITIONS positions (a chunk's overall
    # certainty), or "last": the final position's, i.e. the next-token distribution the following step depends on
    # (a question's last token, where the model must retrieve, is judged by itself, not averaged away).
    chunk_confidence: str = param("mean", choices=("mean", "last"))
    values: tuple[tuple[str, Any], ...] = ()

    def __init__(self, values: tuple[tuple[str, Any], ...] = (), **settings: Any) -> None:
        for f in fields(Gate):
            if f.name != "values":
                object.__setattr__(self, f.name, settings.pop(f.name, f.default))
        known = gate_keys()
        merged = {**dict(values), **settings}
        kept = {k: v for k, v in merged.items() if k not in known or v != known[k][0].default}
        object.__setattr__(self, "values", tuple(sorted(kept.items())))
        if isinstance(self.gated, str) and self.gated in STORED_AS:  # a name for a value stored as a bool
            stored = STORED_AS[self.gated]
            if gate_name(stored, merged.get("tau_quantile")) != self.gated:
                raise PolicyError(f"gated={self.gated} does not fit tau_quantile={merged.get('tau_quantile')!r} "
                                  "(the quantile gate is the one with a tau_quantile: --set tau=auto:q)")
            object.__setattr__(self, "gated", stored)

    def __getattr__(self, key: str) -> Any:  # only called when normal lookup fails: gate.n_low
        if key.startswith("_") or key == "values":
            raise AttributeError(key)
        for k, v in object.__getattribute__(self, "values"):
            if k == key:
                return v
        known = gate_keys().get(key)
        if known is None:
            raise AttributeError(key)
        return known[0].default

    @property
    def kind(self) -> str:
        """The selected gate's registered name (`threshold` for `gated=True`, ...)."""
        return gate_name(self.gated, self.tau_quantile)

    def with_values(self, **values: Any) -> Gate:
        """A copy with shared fields and/or gate keys changed (not validated: `check` does that)."""
        own = {f.name: getattr(self, f.name) for f in fields(Gate) if f.name != "values"}
        return Gate(values=self.values, **{**own, **values})

    def check(self) -> None:
        """Every gate key within its range (whichever gate declares it), the shared fields, then the selected
        gate's own checks."""
        check_ranges(self)
        known = gate_keys()
        unknown = [k for k, _v in self.values if k not in known]
        if unknown:
            raise PolicyError(f"unknown gate key {unknown[0]!r}; known: {', '.join(known)}")
        for key, (_f, rng) in known.items():
            rng.check(key, getattr(self, key))
        weights = self.confidence_weights
        if len(weights) != 3 or not all(isinstance(w, int | float) and math.isfinite(w) and w >= 0 for w in weights):
            raise PolicyError(f"confidence_weights must be 3 numbers >= 0 (entropy, margin, max-prob), got {weights!r}")
        if sum(weights) <= 0:
            raise PolicyError(f"confidence_weights must not all be 0, got {weights!r}")
        self.build().check()

    def build(self) -> BudgetGate:
        """The selected gate with its parameters (settings only: `schedule()` builds the per-cache state)."""
        if self.kind not in GATES:
            raise PolicyError(f"unknown gate {self.kind!r}; known: {', '.join(GATES)}")
        cls = GATES[self.kind]
        return build_gate(cls, {key: getattr(self, key) for key in gate_params(cls)})

    @property
    def plugin(self) -> BudgetGate:
        """`build()`, once per part (the eviction step asks `evicts` per layer and forward)."""
        built = self.__dict__.get("_built")
        if built is None:
            built = self.build()
            object.__setattr__(self, "_built", built)
            object.__setattr__(self, "_evicts", built.evicts)
        return built

    @property
    def evicts(self) -> bool:
        evicts = self.__dict__.get("_evicts")
        return self.plugin.evicts if evicts is None else evicts


_GATE_KEYS: tuple[tuple, dict[str, tuple[dataclasses.Field, Range]]] = ((), {})


def gate_keys() -> dict[str, tuple[dataclasses.Field, Range]]:
    """Every registered gate's parameter keys: key -> (field, range), in `STORED_GATE_ORDER` then registry order.
    Recomputed when the registry changes (a test may register a gate); a key declared twice must agree."""
    global _GATE_KEYS
    snapshot = tuple(GATES.items())
    if _GATE_KEYS[0] != snapshot:
        out: dict[str, tuple[dataclasses.Field, Range]] = {}
        for name, cls in snapshot:
            for key, (f, rng) in gate_params(cls).items():
                if key in STATIC_KEYS or key == "ranker":
                    raise TypeError(f"gate {name!r}: parameter {key!r} is already a policy key")
                seen = out.get(key)
                if seen is not None and (seen[0].default, str(seen[0].type), seen[1]) != (f.default, str(f.type), rng):
                    raise TypeError(f"gate {name!r} declares {key!r} unlike an earlier gate (default, type, range)")
                out.setdefault(key, (f, rng))
        rank = {key: i for i, key in enumerate(STORED_GATE_ORDER)}
        _GATE_KEYS = (snapshot, dict(sorted(out.items(), key=lambda kv: rank.get(kv[0], len(rank)))))
    return _GATE_KEYS[1]


@dataclass(frozen=True)
class RankerSpec:
    """Which ranker (a name in `confkv.rankers.RANKERS`) and the values of ranker parameters.

    The parameters are not fields here but each ranker's own `param` fields (`ranker_keys`), so a new ranker adds
    keys without touching this class: `spec.alpha` reads a value or its declared default. `values` holds only the
    values that differ from their defaults, so two specs are equal exactly when they build the same rankers."""

    ranker: str = "ema"
    values: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        known = ranker_keys()
        kept = {k: v for k, v in dict(self.values).items() if k not in known or v != known[k][0].default}
        object.__setattr__(self, "values", tuple(sorted(kept.items())))

    def __getattr__(self, key: str) -> Any:  # only called when normal lookup fails: spec.alpha
        if key.startswith("_") or key in ("ranker", "values"):
            raise AttributeError(key)
        for k, v in object.__getattribute__(self, "values"):
            if k == key:
                return v
        known = ranker_keys().get(key)
        if known is None:
            raise AttributeError(key)
        return known[0].default

    def with_values(self, **values: Any) -> RankerSpec:
        """A copy with `ranker` and/or parameter keys changed (not validated: `check` does that)."""
        ranker = values.pop("ranker", self.ranker)
        return RankerSpec(ranker, tuple({**dict(self.values), **values}.items()))

    def check(self) -> None:
        """Every parameter key within its range (whichever ranker declares it), and a known ranker."""
        for key, (_f, rng) in ranker_keys().items():
            rng.check(key, getattr(self, key))
        self.build()

    def build(self) -> Ranker:
        """A fresh ranker (rankers may hold state, e.g. a seeded generator: one per cache layer)."""
        if self.ranker not in RANKERS:
            raise PolicyError(f"unknown ranker {self.ranker!r}; known: {', '.join(RANKERS)}")
        cls = RANKERS[self.ranker]
        return build_ranker(cls, {key: getattr(self, key) for key in ranker_params(cls)})


_RANKER_KEYS: tuple[tuple, dict[str, tuple[dataclasses.Field, Range]]] = ((), {})


def ranker_keys() -> dict[str, tuple[dataclasses.Field, Range]]:
    """Every registered ranker's parameter keys, in registry order: key -> (field, range). Recomputed when the
    registry changes (a test may register a ranker for its duration); a key declared twice must agree."""
    global _RANKER_KEYS
    snapshot = tuple(RANKERS.items())
    if _RANKER_KEYS[0] != snapshot:
        out: dict[str, tuple[dataclasses.Field, Range]] = {}
        for name, cls in snapshot:
            for key, (f, rng) in ranker_params(cls).items():
                if key in STATIC_KEYS or key == "ranker" or key in gate_keys():
                    raise TypeError(f"ranker {name!r}: parameter {key!r} is already a policy key")
                seen = out.get(key)
                if seen is not None and (seen[0].default, str(seen[0].type), seen[1]) != (f.default, str(f.type), rng):
                    raise TypeError(f"ranker {name!r} declares {key!r} unlike an earlier ranker (default, type, range)")
                out.setdefault(key, (f, rng))
        _RANKER_KEYS = (snapshot, out)
    return _RANKER_KEYS[1]


@dataclass(frozen=True)
class Protection:
    """Never evicted: the first `sinks` positions and the `protect` most recent ones (plus pins, set at run time)."""

    sinks: int = param(4, 0)
    protect: int = param(64, 0)


@dataclass(frozen=True)
class Storage:
    """Tokens older than the `int8_after` most recent ones are INT8 (None = model dtype throughout); long inputs are
    prefilled in chunks of `prefill_chunk` with eviction after each (bounds the prefill peak).

    `slack` amortises the storage work: a layer may run `slack` tokens over its budget (and the model-dtype window
    `slack` tokens over `int8_after`) before one pass evicts down to the budget (and migrates down to the window).
    So right after any forward, physical length <= budget + slack (+ pinned tokens), and right after an eviction
    pass it is exactly the budget; with `slack=0` every forward evicts (the exact budget, the old behaviour). A
    decode step then costs the ranking, top-k and compaction once per `slack + 1` steps instead of every step."""

    int8_after: int | None = param(None, 1, note=" (or None to disable INT8)")
    # INT8 keys: "channel" (per-channel pre-scaling, KIVI-style) or "token" (per token only)
    key_scales: str = param("channel", choices=("channel", "token"))
    prefill_chunk: int = param(512, 1)
    # 32 by measurement. A first sweep (SmolLM2-135M, 4K context, AVX2 machine, PyTorch decode path) found
    # 0 -> 1.15x, 16 -> 1.29x, 32 -> 1.29x, 64 -> 1.30x of plain DynamicCache speed. With the compiled decode kernel
    # the passes themselves became the larger part of the bookkeeping (AMX machine, `bench decode --contexts
    # 1024,4096,8192 --repeats 3 --steps 34`, fp32): slack 16 -> 0.99x at 1K, bookkeeping 6.2-7.1% of a step;
    # 32 -> 1.03x / 1.57x / 2.39x, bookkeeping 4.1 / 4.3 / 4.9%. The cost: up to 32 extra kept tokens per layer.
    slack: int = param(32, 0)
    # Recallable eviction: evicted slots move to a cold tier of this many tokens per layer (0: dropped for good) that
    # attention skips; when the budget rises (the gate opens) a layer refills its room from it (`ConfKVLayer.recall`).
    cold: int = param(0, 0)
    # Recall whole position blocks of this many tokens (the best block first, InfLLM/Quest-style); 1 = single tokens.
    # Why: a fact is a span (the digits of a number and the words that name it), and single-token recall brought
    # back some of a needle's digits without the rest (README, issue 12).
    recall_block: int = param(16, 1)
    # After a recall, run the forward's last token again so the next token is predicted WITH the recalled context
    # (without it, the first answer token after a question is still decided from logits that never saw it).
    recall_rerun: bool = True


_PARTS = {"gate": Gate, "protection": Protection, "storage": Storage}  # + "ranking" and each registry's keys
STATIC_KEYS = {f.name: (part, f) for part, kind in _PARTS.items() for f in fields(kind) if f.name != "values"}
if len(STATIC_KEYS) != sum(len(fields(kind)) for kind in _PARTS.values()) - 1 or "ranker" in STATIC_KEYS:
    raise TypeError("policy part fields must be unique: they are the flat `--set` keys")
RANKER_FIELD = next(f for f in fields(RankerSpec) if f.name == "ranker")
_FLAT: tuple[tuple, dict[str, tuple[str, dataclasses.Field]]] = ((), {})


def flat_keys() -> dict[str, tuple[str, dataclasses.Field]]:
    """Override key -> (part, field), in part order (gate, ranking, protection, storage); the gate's keys in
    `STORED_GATE_ORDER`, then those of gates registered since. A plugin's field may be named unlike its key
    (`EMARanker.decay` is `ema_decay`). Cached per registry state: `KVPolicy` reads keys through it every forward."""
    global _FLAT
    snapshot = (tuple(GATES.items()), tuple(RANKERS.items()))
    if _FLAT[0] != snapshot:
        gate, rest = {}, {}
        for key, entry in STATIC_KEYS.items():
            (gate if entry[0] == "gate" else rest)[key] = entry
        gate.update({k: ("gate", f) for k, (f, _r) in gate_keys().items()})
        rank = {key: i for i, key in enumerate(STORED_GATE_ORDER)}
        gate = dict(sorted(gate.items(), key=lambda kv: rank.get(kv[0], len(rank))))
        ranking = {"ranker": ("ranking", RANKER_FIELD), **{k: ("ranking", f) for k, (f, _r) in ranker_keys().items()}}
        _FLAT = (snapshot, {**gate, **ranking, **rest})
    return _FLAT[1]


def key_ranges() -> dict[str, Range | None]:
    """Each override key's declared range (None: checked by its part's `check`, or free), for listings."""
    out: dict[str, Range | None] = {}
    for key, (_part, f) in flat_keys().items():
        plugin = gate_keys().get(key) or ranker_keys().get(key)
        out[key] = plugin[1] if plugin else f.metadata.get("range")
    out["gated"] = Range(choices=("false", "true", *GATES))
    out["ranker"] = Range(choices=tuple(RANKERS))
    return out
