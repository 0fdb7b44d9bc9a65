"""`KVPolicy`: one object that decides what a Conf-KV cache keeps, composed of small frozen parts.

    policy = KVPolicy("mine", gate=Gate(gated=True), ranking=RankerSpec("h2o"), protection=Protection(sinks=4))

A policy is gate x ranker x protection x storage (kvpress-style: small dataclasses, built instances in a registry,
see `confkv.policies`). It owns every decision of one eviction step: the budget (confidence -> tokens per layer),
the per-KV-head mass (GQA reduction), the ranking, and protection (sinks, the recent window, pinned spans).
Storage (`confkv.layer`, `confkv.slots`) only appends, removes and quantizes the slots it is told to; attention
(`confkv.attention`) only computes outputs and per-key mass. `ConfKVCache.end_forward` calls `KVPolicy.apply_all`
(every layer) once per forward, after the last layer, with the budget decided from that forward's logits.

Override keys (`--set key=value`) are the field names of the parts; they form one flat namespace, so
`policy.n_low` reads `policy.gate.n_low`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

import torch

from confkv.budget import FixedBudget, GatedBudget, Hysteresis, QuantileGate, pyramid_budgets
from confkv.confidence import DEFAULT_WEIGHTS, confidence
from confkv.rankers import RANKERS, EMARanker, RandomRanker, Ranker

if TYPE_CHECKING:
    from confkv.layer import ConfKVLayer

# Confidence of a multi-token forward: the mean over its last positions (the session computes logits for these only,
# which keeps a 150k-vocabulary head cheap); with a batch, the least confident row decides (one budget per layer,
# and the uncertain sequence is the one that needs context).
CONFIDENCE_POSITIONS = 64
Spans = list[tuple[int, int | None]]


class PolicyError(ValueError):
    """An unknown policy name, override key or bad value."""


@dataclass(frozen=True)
class Gate:
    """How many tokens a layer keeps: `budget` (fixed) or the confidence gate `n_low`/`n_high`/`tau`; split over
    layers flat or PyramidKV-style (deeper layers smaller, mean = the global budget). None budget = keep all."""

    budget: int | None = None
    gated: bool = False
    n_low: int = 256
    n_high: int = 512
    tau: float = 0.5
    tau_quantile: float | None = None  # `tau=auto:q`: tau = the q-quantile of the cache's own confidences
    shrink: int | None = None  # hysteresis: close the gate by at most this many tokens per forward (None: at once)
    pyramid: bool = False
    pyramid_spread: float = 0.5
    confidence_weights: tuple[float, float, float] = DEFAULT_WEIGHTS
    confidence_rescale: bool = False
    # A multi-token forward's confidence: "mean" over its last CONFIDENCE_POSITIONS positions (a chunk's overall
    # certainty), or "last": the final position's, i.e. the next-token distribution the following step depends on
    # (a question's last token, where the model must retrieve, is judged by itself, not averaged away).
    chunk_confidence: str = "mean"

    def schedule(self) -> FixedBudget | GatedBudget | QuantileGate | Hysteresis | None:
        if self.gated:
            if self.tau_quantile is not None:
                gate: GatedBudget | QuantileGate = QuantileGate(self.n_low, self.n_high, self.tau_quantile)
            else:
                gate = GatedBudget(self.n_low, self.n_high, self.tau)
            return gate if self.shrink is None else Hysteresis(gate, self.shrink)
        return FixedBudget(self.budget) if self.budget is not None else None


@dataclass(frozen=True)
class RankerSpec:
    """Which ranker (a name in `confkv.rankers.RANKERS`) and its parameters."""

    ranker: str = "ema"
    alpha: float = 0.5
    ema_decay: float = 0.9
    seed: int = 0

    def build(self) -> Ranker:
        """A fresh ranker (rankers may hold state, e.g. a seeded generator: one per cache layer)."""
        if self.ranker not in RANKERS:
            raise PolicyError(f"unknown ranker {self.ranker!r}; known: {', '.join(RANKERS)}")
        cls = RANKERS[self.ranker]
        if issubclass(cls, EMARanker):
            return cls(alpha=1.0 if self.ranker == "attention" else self.alpha, decay=self.ema_decay)
        if issubclass(cls, RandomRanker):
            return cls(seed=self.seed)
        return cls()


@dataclass(frozen=True)
class Protection:
    """Never evicted: the first `sinks` positions and the `protect` most recent ones (plus pins, set at run time)."""

    sinks: int = 4
    protect: int = 64


@dataclass(frozen=True)
class Storage:
    """Tokens older than the `int8_after` most recent ones are INT8 (None = model dtype throughout); long inputs are
    prefilled in chunks of `prefill_chunk` with eviction after each (bounds the prefill peak).

    `slack` amortises the storage work: a layer may run `slack` tokens over its budget (and the model-dtype window
    `slack` tokens over `int8_after`) before one pass evicts down to the budget (and migrates down to the window).
    So right after any forward, physical length <= budget + slack (+ pinned tokens), and right after an eviction
    pass it is exactly the budget; with `slack=0` every forward evicts (the exact budget, the old behaviour). A
    decode step then costs the ranking, top-k and compaction once per `slack + 1` steps instead of every step."""

    int8_after: int | None = None
    key_scales: str = "channel"  # INT8 keys: "channel" (per-channel pre-scaling, KIVI-style) or "token" (per token only)
    prefill_chunk: int = 512
    # 32 by measurement. A first sweep (SmolLM2-135M, 4K context, AVX2 machine, PyTorch decode path) found
    # 0 -> 1.15x, 16 -> 1.29x, 32 -> 1.29x, 64 -> 1.30x of plain DynamicCache speed. With the compiled decode kernel
    # the passes themselves became the larger part of the bookkeeping (AMX machine, `bench decode --contexts
    # 1024,4096,8192 --repeats 3 --steps 34`, fp32): slack 16 -> 0.99x at 1K, bookkeeping 6.2-7.1% of a step;
    # 32 -> 1.03x / 1.57x / 2.39x, bookkeeping 4.1 / 4.3 / 4.9%. The cost: up to 32 extra kept tokens per layer.
    slack: int = 32
    # Recallable eviction: evicted slots move to a cold tier of this many tokens per layer (0: dropped for good) that
    # attention skips; when the budget rises (the gate opens) a layer refills its room from it (`ConfKVLayer.recall`).
    cold: int = 0
    # Recall whole position blocks of this many tokens (the best block first, InfLLM/Quest-style); 1 = single tokens.
    # Why: a fact is a span (the digits of a number and the words that name it), and single-token recall brought
    # back some of a needle's digits without the rest (README, issue 12).
    recall_block: int = 16
    # After a recall, run the forward's last token again so the next token is predicted WITH the recalled context
    # (without it, the first answer token after a question is still decided from logits that never saw it).
    recall_rerun: bool = True


_PARTS = {"gate": Gate, "ranking": RankerSpec, "protection": Protection, "storage": Storage}
_KEYS = {f.name: (part, f) for part, kind in _PARTS.items() for f in fields(kind)}
if len(_KEYS) != sum(len(fields(kind)) for kind in _PARTS.values()):
    raise TypeError("policy part fields must be unique: they are the flat `--set` keys")


@dataclass(frozen=True)
class KVPolicy:
    """What a cache keeps: gate x ranking x protection x storage, plus the decisions of one eviction step."""

    name: str = "full"
    gate: Gate = field(default_factory=Gate)
    ranking: RankerSpec = field(default_factory=RankerSpec)
    protection: Protection = field(default_factory=Protection)
    storage: Storage = field(default_factory=Storage)

    # -- the flat namespace of override keys ---------------------------------------------------------------------
    @staticmethod
    def keys() -> dict[str, tuple[str, dataclasses.Field]]:
        """Override key -> (part, field)."""
        return _KEYS

    def __getattr__(self, key: str) -> Any:  # only called when normal lookup fails: policy.n_low -> gate.n_low
        part = _KEYS.get(key)
        if part is None:
            raise AttributeError(key)
        return getattr(object.__getattribute__(self, part[0]), key)

    def with_values(self, **values: Any) -> KVPolicy:
        """A copy with flat keys changed (`with_values(n_low=128, ranker="h2o")`); validated."""
        keys, changes = KVPolicy.keys(), {}
        for key, value in values.items():
            if key not in keys:
                raise PolicyError(f"unknown policy key {key!r}; known: {', '.join(sorted(keys))}")
            changes.setdefault(keys[key][0], {})[key] = value
        parts = {p: dataclasses.replace(getattr(self, p), **kv) for p, kv in changes.items()}
        return dataclasses.replace(self, **parts).validate()

    @staticmethod
    def defaults() -> dict[str, Any]:
        """Every override key's default (what a config recorded before the key existed implicitly had)."""
        return {key: f.default for key, (_part, f) in _KEYS.items()}

    def to_dict(self) -> dict:
        """Flat settings (what traces store): the name and every override key."""
        return {"name": self.name, **{k: getattr(self, k) for k in KVPolicy.keys()}}

    # -- derived settings ----------------------------------------------------------------------------------------
    @property
    def evicts(self) -> bool:
        return self.gate.gated or self.gate.budget is not None

    @property
    def protected(self) -> int:
        """Recent tokens never evicted (the model-dtype window counts as protected when INT8 is on)."""
        return max(self.protection.protect, self.storage.int8_after or 0)

    @property
    def min_layer_budget(self) -> int:
        return self.protection.sinks + self.protected + 1

    @property
    def wants_mass(self) -> bool:
        """Attention must return per-key mass (else it may take the fused sdpa path)."""
        return self.evicts and self.ranking.build().uses_attention

    def schedule(self) -> FixedBudget | GatedBudget | QuantileGate | Hysteresis | None:
        return self.gate.schedule()

    def make_ranker(self) -> Ranker:
        return self.ranking.build()

    def validate(self) -> KVPolicy:
        """Every value within its range (the message names the allowed range), then the budget arithmetic."""
        gate = self.gate

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
        if gate.shrink is not None:
            in_range("shrink", 1)
        if gate.tau_quantile is not None:
            in_range("tau_quantile", 0.0, 1.0, open_high=True)
            if gate.tau_quantile == 0.0:
                raise PolicyError("tau_quantile must be in (0, 1) (tau=auto:q), got 0")
        for key in ("sinks", "protect"):
            in_range(key, 0)
        if gate.gated:
            in_range("n_low", 1)
            in_range("n_high", 1)
            if gate.n_low > gate.n_high:
                raise PolicyError(f"n_low must be <= n_high, got n_low={gate.n_low} > n_high={gate.n_high}")
        weights = gate.confidence_weights
        if len(weights) != 3 or not all(isinstance(w, int | float) and math.isfinite(w) and w >= 0 for w in weights):
            raise PolicyError(f"confidence_weights must be 3 numbers >= 0 (entropy, margin, max-prob), got {weights!r}")
        if sum(weights) <= 0:
            raise PolicyError(f"confidence_weights must not all be 0, got {weights!r}")
        lows = [b for b in (gate.budget,) if b is not None]
        if gate.gated:
            lows += [gate.n_low, gate.n_high]
        for b in lows:
            if b < self.min_layer_budget:  # the pyramid floors every layer at the same minimum
                raise PolicyError(
                    f"policy {self.name!r}: budget {b} leaves no room to evict: it must be >= "
                    f"sinks ({self.protection.sinks}) + protected window ({self.protected}) + 1"
                )
        if self.storage.int8_after is not None and self.storage.int8_after < 1:
            raise PolicyError("int8_after must be >= 1 (or None to disable INT8)")
        if self.gate.chunk_confidence not in ("mean", "last"):
            raise PolicyError(f"chunk_confidence must be 'mean' or 'last', got {self.gate.chunk_confidence!r}")
        if self.storage.key_scales not in ("channel", "token"):
            raise PolicyError(f"key_scales must be 'channel' or 'token', got {self.storage.key_scales!r}")
        if self.storage.prefill_chunk < 1:
            raise PolicyError("prefill_chunk must be >= 1")
        in_range("slack", 0)
        in_range("cold", 0)
        in_range("recall_block", 1)
        self.ranking.build()
        return self

    # -- decisions -----------------------------------------------------------------------------------------------
    def confidence(self, logits: torch.Tensor) -> torch.Tensor:
        """One forward's confidence (0-dim tensor) from its logits `[B, L, V]`: mean over the last
        `CONFIDENCE_POSITIONS` positions (or the last position alone, `chunk_confidence="last"`), then the least
        confident row."""
        tail = logits[:, -1:] if self.gate.chunk_confidence == "last" else logits[:, -CONFIDENCE_POSITIONS:]
        per_pos = confidence(tail, self.gate.confidence_weights, self.gate.confidence_rescale)
        return per_pos.mean(dim=-1).min()

    def layer_budgets(self, global_budget: int, n_layers: int) -> list[int]:
        """Budget of each layer for one global budget."""
        if not self.gate.pyramid:
            return [global_budget] * n_layers
        return pyramid_budgets(global_budget, n_layers, self.gate.pyramid_spread, minimum=self.min_layer_budget)

    def protected_mask(self, pos: torch.Tensor, now: int, pins: Spans) -> torch.Tensor:
        """True where a slot may not be evicted: sinks, the recent window, pinned spans."""
        return (pos < self.protection.sinks) | (pos > now - self.protected) | pinned_mask(pos, pins)

    def apply_all(self, layers: list[ConfKVLayer], rankers: list[Ranker], budgets: list[int] | None,
                  pins: Spans, fold_mass: bool = True) -> None:
        """The eviction step after a forward: `fold` every layer, the accumulator updates of all layers in one call
        (`Ranker.accumulate_all`: on a decode step that evicts nothing they are most of the per-layer work), then
        `settle` each layer. `fold_mass=False` consumes the
        forward's mass without folding it (a rerun of a position whose mass was folded already)."""
        news = [layer.new_tokens for layer in layers]
        pairs = [pair for layer, ranker in zip(layers, rankers, strict=True) for pair in self.fold(layer, ranker)]
        if pairs and fold_mass:
            rankers[0].accumulate_all(pairs, news[0])  # same ranker class and parameters in every layer
        for i, layer in enumerate(layers):
            self.settle(layer, rankers[i], None if budgets is None else budgets[i], pins, news[i])

    def fold(self, layer: ConfKVLayer, ranker: Ranker) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Seed a chunk's new tokens and consume the forward's mass: the (accumulator, KV-head mass) pairs still to
        fold, one per store (a decoded token arrived with `layer.acc_seed`, see `Ranker.seed_value`)."""
        new = layer.new_tokens
        if new > 1 and self.evicts:  # (a policy that never evicts never ranks)
            ranker.seed_new(layer.acc_before_new(), layer.fp.view("acc")[:, :, -new:])
        mass = layer.take_mass()  # per KV head already (`confkv.attention` asks for the GQA mean)
        if mass is None:
            return []
        if not layer.q8.n:
            return [(layer.fp.view("acc"), mass)]
        q8_mass, fp_mass = mass.split([layer.q8.n, layer.fp.n], dim=-1)
        return [(layer.q8.view("acc"), q8_mass), (layer.fp.view("acc"), fp_mass)]

    def settle(self, layer: ConfKVLayer, ranker: Ranker, budget: int | None, pins: Spans, new: int) -> None:
        """After the fold: once the layer is more than `slack` tokens over its budget (or its model-dtype window
        `slack` over `int8_after`), quantize what fell out of the window and evict down to `budget` (+ pinned
        tokens, which sit outside it), then shrink storage. With a cold tier, a layer below its budget (the budget
        rose) refills the room from it. No host sync on a step that does not evict (counts are kept on the host)."""
        chunk = new > 1 and self.evicts
        slack = self.storage.slack
        window = self.storage.int8_after
        n_pinned = pinned_count(layer, pins, new) if pins and budget is not None else 0
        over = budget is not None and layer.physical_length - n_pinned > budget + slack
        if window is not None and layer.fp.n > window and (over or layer.fp.n > window + slack):
            layer.quantize_oldest(layer.fp.n - window, capacity=None if budget is None else budget + slack + 1)
        if not over:
            room = 0 if budget is None else budget - (layer.physical_length - n_pinned)
            if room > 0 and layer.cold.n and layer.last_query is not None:
                # The budget rose (the gate opened): bring back what this forward's query looks for.
                layer.recall(layer.q8 if window is not None else layer.fp, min(room, layer.cold.n),
                             self.storage.recall_block)
            if chunk:
                layer.acc_seed = _seed(ranker, layer)
            return
        self._evict(layer, ranker, budget, pins, n_pinned)
        # Keep room for the next `slack + 1` tokens; free the rest (e.g. after the gate dropped n_high -> n_low).
        fp_room = (window if window is not None else budget) + slack + 1
        layer.fit(fp_slots=fp_room, q8_slots=max(budget - layer.fp.n, 0) + slack + 1)
        if self.evicts:
            layer.acc_seed = _seed(ranker, layer)

    def _evict(self, layer: ConfKVLayer, ranker: Ranker, budget: int, pins: Spans, n_pinned: int) -> None:
        excess = layer.physical_length - budget - n_pinned
        if excess <= 0:
            return
        store = layer.q8 if self.storage.int8_after is not None else layer.fp
        now = layer.seen - 1
        pos = store.view("pos")
        protected = self.protected_mask(pos, now, pins)
        scores = ranker.rank(store.view("acc"), pos, now, protected).float().masked_fill(protected, float("inf"))
        # At most sinks + window + pinned slots are protected: only when that bound leaves too little room is the
        # exact count read from the device (a host sync).
        if excess > store.n - (self.protection.sinks + self.protected + n_pinned):
            evictable = int((~protected).sum(dim=-1).min())
            if evictable < excess:
                raise RuntimeError(
                    f"layer {layer.layer_idx}: must evict {excess} tokens but only {evictable} are evictable "
                    f"(budget {budget}, sinks {self.protection.sinks}, protected {self.protected})"
                )
        layer.evict(store, scores.topk(excess, dim=-1, largest=False).indices)


def _seed(ranker: Ranker, layer: ConfKVLayer) -> torch.Tensor | float:
    """The accumulator the layer's next decoded tokens start at (after this step's bookkeeping: no new tokens)."""
    value = ranker.seed_value(layer.acc_before_new())
    return 0.0 if value is None else value


def pinned_count(layer: ConfKVLayer, pins: Spans, new: int) -> int:
    """Kept pinned tokens of a layer (counted on one head: pins are shared), without a host sync per step.

    Pinned tokens are never evicted while their pin holds, so the count only grows by the new tokens that fall in
    a pin (host arithmetic). It is read from the device once each time the pin list changes."""
    key = tuple(pins)
    if layer.pin_state is None or layer.pin_state[0] != key:
        count = int(sum(pinned_mask(s.view("pos")[:1, :1], pins).sum() for s in (layer.q8, layer.fp) if s.n))
    else:
        count = layer.pin_state[1] + covered(pins, layer.seen - new, layer.seen)
    layer.pin_state = (key, count)
    return count


def covered(pins: Spans, lo: int, hi: int) -> int:
    """How many positions of `[lo, hi)` lie in the union of the pinned spans."""
    spans = sorted((max(a, lo), hi if b is None else min(b, hi)) for a, b in pins)
    total, reach = 0, lo
    for a, b in spans:
        a = max(a, reach)
        if b > a:
            total += b - a
            reach = b
    return total


def pinned_mask(pos: torch.Tensor, pins: Spans) -> torch.Tensor:
    mask = torch.zeros_like(pos, dtype=torch.bool)
    for start, end in pins:
        span = pos >= start
        if end is not None:
            span &= pos < end
        mask |= span
    return mask
