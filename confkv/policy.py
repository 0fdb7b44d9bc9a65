"""`KVPolicy`: one object that decides what a Conf-KV cache keeps, composed of small frozen parts.

    policy = KVPolicy("mine", gate=Gate(gated="threshold"), ranking=RankerSpec("h2o"), protection=Protection(sinks=4))

A policy is gate x ranker x protection x storage (kvpress-style: small dataclasses, built instances in a registry,
see `confkv.policies`). It owns every decision of one eviction step: the budget (confidence -> tokens per layer),
the per-KV-head mass (GQA reduction), the ranking, and protection (sinks, the recent window, pinned spans).
Storage (`confkv.layer`, `confkv.slots`) only appends, removes and quantizes the slots it is told to; attention
(`confkv.attention`) only computes outputs and per-key mass. `ConfKVCache.end_forward` calls `KVPolicy.apply_all`
(every layer) once per forward, after the last layer, with the budget decided from that forward's logits.

Override keys (`--set key=value`) are the field names of the parts plus each registered gate's and ranker's
parameters (see `confkv.gates`, `confkv.rankers`); they form one flat namespace, so `policy.n_low` reads
`policy.gate.n_low` and `policy.alpha` reads `policy.ranking.alpha`. A field's valid range is declared on the field (`confkv.params.param`); `validate` reads it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from confkv.budget import pyramid_budgets
from confkv.confidence import confidence
from confkv.gates import Schedule
from confkv.params import PolicyError, check_ranges
from confkv.parts import Gate, Protection, RankerSpec, Storage, flat_keys
from confkv.rankers import Ranker

if TYPE_CHECKING:
    from confkv.layer import ConfKVLayer

# Confidence of a multi-token forward: the mean over its last positions (the session computes logits for these only,
# which keeps a 150k-vocabulary head cheap); with a batch, the least confident row decides (one budget per layer,
# and the uncertain sequence is the one that needs context).
CONFIDENCE_POSITIONS = 64
Spans = list[tuple[int, int | None]]


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
        """Override key -> (part, field), see `confkv.parts.flat_keys`."""
        return flat_keys()

    def __getattr__(self, key: str) -> Any:  # only called when normal lookup fails: policy.n_low -> gate.n_low
        if key.startswith("_"):
            raise AttributeError(key)
        entry = flat_keys().get(key)
        if entry is None:
            raise AttributeError(key)
        return getattr(object.__getattribute__(self, entry[0]), key)

    def with_values(self, **values: Any) -> KVPolicy:
        """A copy with flat keys changed (`with_values(n_low=128, ranker="h2o")`); validated."""
        keys, changes = KVPolicy.keys(), {}
        for key, value in values.items():
            if key not in keys:
                raise PolicyError(f"unknown policy key {key!r}; known: {', '.join(sorted(keys))}")
            changes.setdefault(keys[key][0], {})[key] = value
        parts = {p: getattr(self, p).with_values(**kv) if p in ("gate", "ranking")
                 else dataclasses.replace(getattr(self, p), **kv) for p, kv in changes.items()}
        return dataclasses.replace(self, **parts).validate()

    @staticmethod
    def defaults() -> dict[str, Any]:
        """Every override key's default (what a config recorded before the key existed implicitly had)."""
        return {key: f.default for key, (_part, f) in KVPolicy.keys().items()}

    def to_dict(self) -> dict:
        """Flat settings (what traces store): the name and every override key."""
        return {"name": self.name, **{k: getattr(self, k) for k in KVPolicy.keys()}}

    # -- derived settings ----------------------------------------------------------------------------------------
    @property
    def evicts(self) -> bool:
        return self.gate.evicts

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

    def schedule(self) -> Schedule | None:
        """A fresh budget schedule for one cache (None: keep every token), from the policy's gate."""
        return self.gate.plugin.schedule()

    def make_ranker(self) -> Ranker:
        return self.ranking.build()

    def validate(self) -> KVPolicy:
        """Every value within its range (declared on its field; the message names the allowed range), the checks
        between fields of one part, then the budget arithmetic between parts."""
        self.gate.check()
        for part in (self.protection, self.storage):
            check_ranges(part)
        self.ranking.check()
        for b in self.gate.plugin.budgets():
            if b < self.min_layer_budget:  # the pyramid floors every layer at the same minimum
                raise PolicyError(
                    f"policy {self.name!r}: budget {b} leaves no room to evict: it must be >= "
                    f"sinks ({self.protection.sinks}) + protected window ({self.protected}) + 1"
                )
        return self

    # -- decisions -----------------------------------------------------------------------------------------------
    def confidence(self, logits: torch.Tensor) -> torch.Tensor:
        """One forward's confidence (0-dim tensor) from its logits `[B, L, V]`: mean over the last
        `CONFIDENCE_POSITIONS` positions (or the last position alone, `chunk_confidence="last"`), then the least
        confident row."""
        tail = logits[:, -1:] if self.gate.chunk_confidence == "last" else logits[:, -CONFIDENCE_POSITIONS:]
        per_pos = confidence(tail, self.gate.confidence_weights, self.gate.confidence_rescale)
        return per_pos.mean(dim=-1).min()

    def confidence_rows(self, length: int, recorded: bool = True) -> int:
        """Logit rows a forward of `length` new tokens computes, so that `confidence` reads what it needs and no more
        (each row is a 150k-vocabulary product in fp32): the chunk mean's last `CONFIDENCE_POSITIONS`, or the last
        row alone when the gate reads only that (`chunk_confidence="last"`) or, with `recorded=False` (nobody keeps
        the confidence), when the gate does not read a forward's confidence at all."""
        if self.gate.chunk_confidence == "last" or not (recorded or self.gate.plugin.reads_forward_confidence):
            return min(length, 1)
        return min(length, CONFIDENCE_POSITIONS)

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
