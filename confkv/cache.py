"""`ConfKVCache`: a `transformers` 5.x `Cache` whose layers evict, compact and quantize for real.

    cache = ConfKVCache(model, get_policy("confkv"))
    model.generate(**inputs, cache=cache, logits_processor=[cache.confidence_processor()])

The cache switches the model to the `confkv` attention implementation (see `confkv.attention`), holds the global
budget (set from the last step's confidence through `set_confidence`), splits it per layer (pyramid or flat), and
keeps exact memory accounting: live KV bytes after every layer update, their peak, and the bytes a full cache of the
same run would hold.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache

from confkv.attention import ATTN_NAME
from confkv.confidence import ConfidenceLogitsProcessor
from confkv.layer import ConfKVLayer, LayerRules
from confkv.policies import PolicyConfig, get_policy


@dataclass
class MemorySnapshot:
    kv_bytes: int  # live K, V and INT8 scales, all layers
    alloc_bytes: int  # allocated, bookkeeping and spare capacity included
    full_kv_bytes: int  # what a full model-dtype cache would hold for the same tokens
    kept_tokens: list[int]  # physical length per layer
    int8_tokens: list[int]


def num_layers(config) -> int:
    cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
    for name in ("num_hidden_layers", "n_layer", "num_layers"):
        if getattr(cfg, name, None):
            return int(getattr(cfg, name))
    raise ValueError("cannot tell the number of layers from the model config")


class ConfKVCache(Cache):
    def __init__(
        self,
        model: torch.nn.Module,
        policy: PolicyConfig | str = "confkv",
        record_evictions: bool = False,
    ) -> None:
        self.policy = get_policy(policy) if isinstance(policy, str) else policy.validate()
        if getattr(model.config, "_attn_implementation", None) != ATTN_NAME:
            model.set_attn_implementation(ATTN_NAME)
        self.n_layers = num_layers(model.config)
        self.schedule = self.policy.schedule()
        self.confidence: float | None = None
        self.global_budget: int | None = None
        self._layer_budgets: list[int] | None = None
        self._budget_table: dict[int, list[int]] = {}
        self.peak_kv_bytes = 0
        self._live: list[int] = [0] * self.n_layers
        self.pins: list[tuple[int, int | None]] = []
        layers = [
            ConfKVLayer(
                i,
                LayerRules(
                    ranker=self.policy.make_ranker(),
                    sinks=self.policy.sinks,
                    protected=self.policy.protected,
                    int8_after=self.policy.int8_after,
                    budget=self._budget_getter(i),
                    record_evictions=record_evictions,
                    pins=self.pins,
                ),
                on_resize=self._resized_callback(i),
            )
            for i in range(self.n_layers)
        ]
        super().__init__(layers=layers)
        self.set_confidence(None)

    # -- budget --------------------------------------------------------------------------------------------------
    def _budget_getter(self, i: int):
        return lambda: None if self._layer_budgets is None else self._layer_budgets[i]

    def set_confidence(self, confidence: float | None) -> None:
        """Record step t's confidence; its budget applies from the next appended token on."""
        self.confidence = confidence
        if self.schedule is None:
            self.global_budget, self._layer_budgets = None, None
            return
        self.set_budget(self.schedule.budget(confidence))

    def set_budget(self, global_budget: int) -> None:
        self.global_budget = int(global_budget)
        if self.global_budget not in self._budget_table:
            self._budget_table[self.global_budget] = self.policy.layer_budgets(self.global_budget, self.n_layers)
        self._layer_budgets = self._budget_table[self.global_budget]

    def pin(self, spans: list[tuple[int, int | None]]) -> None:
        """Replace the pinned position spans `[start, end)` (end None = open-ended): never evicted, and outside the
        budget. Unpinned tokens become evictable at the next eviction.

        When a pin takes effect: at the next eviction, which runs after every forward call (every prefill chunk and
        every decode step). So pin a span BEFORE appending its tokens (positions need not exist yet): a long append
        is prefilled in chunks with eviction between them, and a pin set after it comes too late for the early
        chunks. `ConfKVSession.append(ids, pin=True)` does exactly that."""
        self.pins[:] = [(int(a), None if b is None else int(b)) for a, b in spans]

    def add_pin(self, start: int, end: int | None) -> None:
        """Pin one more span `[start, end)`, keeping the existing pins (same timing rule as `pin`)."""
        self.pin([*self.pins, (start, end)])

    @property
    def layer_budgets(self) -> list[int] | None:
        return None if self._layer_budgets is None else list(self._layer_budgets)

    def confidence_processor(self) -> ConfidenceLogitsProcessor:
        """A logits processor that feeds each generated step's confidence back into this cache."""
        return ConfidenceLogitsProcessor(
            self.set_confidence, self.policy.confidence_weights, self.policy.confidence_rescale
        )

    # -- accounting ----------------------------------------------------------------------------------------------
    def _resized_callback(self, i: int):
        def resized() -> None:
            self._live[i] = self.layers[i].kv_bytes()
            total = sum(self._live)
            if total > self.peak_kv_bytes:
                self.peak_kv_bytes = total

        return resized

    def memory(self) -> MemorySnapshot:
        return MemorySnapshot(
            kv_bytes=sum(layer.kv_bytes() for layer in self.layers),
            alloc_bytes=sum(layer.alloc_bytes() for layer in self.layers),
            full_kv_bytes=self.full_kv_bytes(),
            kept_tokens=[layer.physical_length for layer in self.layers],
            int8_tokens=[layer.q8.n for layer in self.layers],
        )

    def full_kv_bytes(self) -> int:
        return sum(layer.seen * layer.full_bytes_per_token() for layer in self.layers)

    def reset(self) -> None:
        super().reset()
        self.peak_kv_bytes = 0
        self._live = [0] * self.n_layers
        self.set_confidence(None)
