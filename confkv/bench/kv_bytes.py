"""Resident KV bytes as a Conf-KV cache stores them, per token: the arithmetic `bench memory` reports and the
quality benchmarks match fixed budgets on (`common.byte_matched_budget`).

- a model-dtype token: K and V, every layer and KV head: 2 * layers * kv_heads * head_dim * dtype_bytes;
- an INT8 token: 2 * layers * kv_heads * (head_dim * 1 + 4): int8 values plus one fp32 scale per token and head
  (`confkv.kernels.quantize_int8`);
- every token Conf-KV keeps also carries 12 bytes per layer and KV head (its position and ranker accumulator);
  the full cache it is compared with is a plain one, K and V only.
A module of its own, below both `common` and `memory`, so neither imports the other for it.
"""

from __future__ import annotations

from dataclasses import dataclass

INT8_SCALE_BYTES = 4  # fp32 scale per token per KV head, for K and for V
SLOT_BOOKKEEPING_BYTES = 12  # per token per KV head in a Conf-KV cache: int64 position + fp32 ranker accumulator


@dataclass(frozen=True)
class KVConfig:
    name: str
    layers: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int
    source: str

    @property
    def fp_token_bytes(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes

    @property
    def int8_token_bytes(self) -> int:
        return 2 * self.layers * self.kv_heads * (self.head_dim + INT8_SCALE_BYTES)

    def bytes(self, fp_tokens: int, int8_tokens: int = 0) -> int:
        """K/V bytes alone (what a plain cache of `fp_tokens` holds)."""
        return fp_tokens * self.fp_token_bytes + int8_tokens * self.int8_token_bytes

    def cache_bytes(self, fp_tokens: int, int8_tokens: int = 0) -> int:
        """What a Conf-KV cache holds for these tokens: K/V plus each slot's position and accumulator."""
        slots = (fp_tokens + int8_tokens) * self.layers * self.kv_heads
        return self.bytes(fp_tokens, int8_tokens) + slots * SLOT_BOOKKEEPING_BYTES

    def kept_bytes(self, kept: int, int8_after: int | None = None) -> int:
        """Resident bytes of a Conf-KV cache holding `kept` tokens per layer, the newest `int8_after` of them in the
        model dtype and the rest INT8 (None: no INT8): the cost the benchmarks match fixed budgets on."""
        return self.cache_bytes(*kept_split(kept, None, int8_after))

    @classmethod
    def from_model(cls, model) -> KVConfig:
        """The KV geometry of a loaded `transformers` model (text config; head_dim derived when absent)."""
        cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        layers = getattr(cfg, "num_hidden_layers", None) or cfg.n_layer
        heads = getattr(cfg, "num_attention_heads", None) or cfg.n_head
        kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
        dtype_bytes = next(model.parameters()).element_size()
        return cls(type(model).__name__, int(layers), int(kv_heads), int(head_dim), dtype_bytes, "model config")


def kept_split(seen: int, budget: int | None, int8_after: int | None) -> tuple[int, int]:
    """(model-dtype tokens, INT8 tokens) a layer holds after `seen` tokens under `budget`."""
    kept = seen if budget is None else min(seen, budget)
    fp = kept if int8_after is None else min(kept, int8_after)
    return fp, kept - fp
