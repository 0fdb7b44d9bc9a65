"""One layer of the Conf-KV cache: a `transformers` cache layer that evicts and quantizes for real.

Storage: an INT8 store (old tokens, per-token-per-head scales) and a model-dtype store (the recent window), each a
`SlotStore`, so kept bytes are really kept bytes. Every slot carries its absolute position (`pos`) and the ranker's
accumulator (`acc`). The model-dtype window is ordered and shared by all heads; the INT8 store is unordered and each
KV head evicts its own tokens (same count per head, so tensors stay rectangular).

Lifecycle of one forward call (driven by the `confkv` attention function, see `confkv.attention`):
    update()            append the new tokens to the model-dtype store, return a view for attention
    attention           reads both stores (INT8 dequantized inside the kernel), returns per-key mass
    after_attention()   fold mass into `acc`; move tokens older than the window to INT8; evict down to the budget
So eviction happens after the tokens were used at this step, and the physical length after a call is <= budget.
`get_seq_length()` is the logical length (tokens seen), which keeps default position ids absolute.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers.cache_utils import CacheLayerMixin

from confkv.kernels import SegmentedKV, quantize_int8
from confkv.rankers import Ranker
from confkv.slots import SlotStore


@dataclass
class LayerRules:
    """What one layer needs from the policy."""

    ranker: Ranker
    sinks: int
    protected: int
    int8_after: int | None
    budget: Callable[[], int | None]  # the layer's budget now (None = keep everything)
    record_evictions: bool = False
    # Pinned position spans [start, end) (end None = open): never evicted and not counted against the budget.
    # The agent pins its system prompt and the turn being decided, so the budget governs older history only.
    pins: list[tuple[int, int | None]] | None = None


@dataclass
class LayerView:
    """What `update` hands to the attention function instead of dense K/V tensors."""

    layer: ConfKVLayer
    q_len: int


class ConfKVLayer(CacheLayerMixin):
    is_sliding = False
    is_compileable = False
    is_croppable = False

    def __init__(self, layer_idx: int, rules: LayerRules, on_resize: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.rules = rules
        self.fp = SlotStore()
        self.q8 = SlotStore()
        self.seen = 0
        self.q_pos: torch.Tensor | None = None  # positions of the current call's queries [B, L]
        self.on_resize = on_resize
        self.evictions: list[tuple[torch.Tensor, int]] = []  # (evicted positions [B,H,k], last query pos that saw them)
        self._slot_bytes: tuple[int, int] | None = None  # bytes per slot: model-dtype K+V, INT8 K+V+scales
        self.bookkeeping_s = 0.0  # time in after_attention (EMA, migration, ranking, compaction): for benchmarks

    # -- transformers CacheLayerMixin ----------------------------------------------------------------------------
    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        self.dtype = key_states.dtype
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs) -> tuple[LayerView, LayerView]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        b, h, length, _ = key_states.shape
        pos = torch.arange(self.seen, self.seen + length, device=key_states.device)
        self.q_pos = pos.expand(b, length)
        budget = self.rules.budget()
        self.fp.append(
            limit=None if budget is None else budget + length,
            k=key_states,
            v=value_states,
            pos=pos.expand(b, h, length),
            acc=self.rules.ranker.initial(self._all_acc(), length, key_states),
        )
        self.seen += length
        if self.on_resize:
            self.on_resize()
        view = LayerView(self, length)
        return view, view

    def get_seq_length(self) -> int:
        return self.seen

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        physical = self.physical_length
        return physical + query_length, self.seen - physical

    def get_max_length(self) -> int:
        return -1

    def reset(self) -> None:
        self.fp, self.q8, self.seen, self.q_pos = SlotStore(), SlotStore(), 0, None
        self.evictions = []
        self._slot_bytes = None

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        raise NotImplementedError("Conf-KV does not support beam search (per-head eviction state is not reordered)")

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("Conf-KV layers cannot be cropped: evicted tokens are gone")

    def offload(self) -> None:  # the base class would touch .keys/.values, which this layer does not use
        return None

    def prefetch(self) -> None:
        return None

    # -- attention side ------------------------------------------------------------------------------------------
    @property
    def physical_length(self) -> int:
        return self.fp.n + self.q8.n

    def positions(self) -> torch.Tensor:
        """Absolute positions of every physically kept token, per KV head `[B, H_kv, T]` (INT8 slots first)."""
        parts = [s.view("pos") for s in (self.q8, self.fp) if s.n]
        return torch.cat(parts, dim=2) if parts else torch.empty(0, 0, 0, dtype=torch.long)

    def segments(self) -> SegmentedKV:
        """The layer's keys/values for the attention kernel: INT8 slots first, then model-dtype slots."""
        has_q8 = self.q8.n > 0
        return SegmentedKV(
            k_q=self.q8.view("k") if has_q8 else None,
            v_q=self.q8.view("v") if has_q8 else None,
            k_scale=self.q8.view("k_scale") if has_q8 else None,
            v_scale=self.q8.view("v_scale") if has_q8 else None,
            k_fp=self.fp.view("k"),
            v_fp=self.fp.view("v"),
            pos_q=self.q8.view("pos") if has_q8 else None,
            pos_fp=self.fp.view("pos"),
        )

    @property
    def wants_mass(self) -> bool:
        return self.rules.ranker.uses_attention and self.rules.budget() is not None

    def after_attention(self, mass: torch.Tensor | None) -> None:
        """Fold the call's attention mass `[B, H_kv, Tq+Tf]` into the accumulators, then migrate and evict."""
        t0 = time.perf_counter()
        ranker = self.rules.ranker
        if mass is not None:
            n_q8 = self.q8.n
            if n_q8:
                ranker.accumulate(self.q8.view("acc"), mass[:, :, :n_q8])
            ranker.accumulate(self.fp.view("acc"), mass[:, :, n_q8:])
        self._migrate()
        self._evict()
        if self.on_resize:
            self.on_resize()
        self.bookkeeping_s += time.perf_counter() - t0

    # -- internals -----------------------------------------------------------------------------------------------
    def _all_acc(self) -> torch.Tensor | None:
        """The accumulator of the store holding most tokens (rankers only read a per-head summary of it)."""
        store = self.q8 if self.q8.n > self.fp.n else self.fp
        return store.view("acc") if store.n else None

    def _migrate(self) -> None:
        """Quantize the tokens that fell out of the model-dtype window (oldest first; same positions in all heads)."""
        window = self.rules.int8_after
        if window is None or self.fp.n <= window:
            return
        old = self.fp.pop_front(self.fp.n - window)
        k_q, k_scale = quantize_int8(old["k"])
        v_q, v_scale = quantize_int8(old["v"])
        budget = self.rules.budget()
        self.q8.append(
            limit=None if budget is None else budget + 1,
            k=k_q, v=v_q, k_scale=k_scale, v_scale=v_scale, pos=old["pos"], acc=old["acc"],
        )

    def _evict(self) -> None:
        budget = self.rules.budget()
        if budget is None:
            return
        n_pinned = 0
        if self.rules.pins:  # pinned positions are shared by all heads: count them on one head
            n_pinned = int(sum(self._pinned(s.view("pos")[:1, :1]).sum() for s in (self.q8, self.fp) if s.n))
        excess = self.physical_length - budget - n_pinned
        store = self.q8 if self.rules.int8_after is not None else self.fp
        if excess > 0:
            now = self.seen - 1
            pos = store.view("pos")
            scores = self.rules.ranker.rank(store.view("acc"), pos, now).float()
            pinned = (pos < self.rules.sinks) | (pos > now - self.rules.protected) | self._pinned(pos)
            scores = scores.masked_fill(pinned, float("inf"))
            evictable = int((~pinned).sum(dim=-1).min())
            if evictable < excess:
                raise RuntimeError(
                    f"layer {self.layer_idx}: must evict {excess} tokens but only {evictable} are evictable "
                    f"(budget {budget}, sinks {self.rules.sinks}, protected {self.rules.protected})"
                )
            victims = scores.topk(excess, dim=-1, largest=False).indices
            if self.rules.record_evictions:
                self.evictions.append((pos.gather(2, victims).clone(), now))
            store.remove(victims)
        # Keep room for the next decode token; free the rest (e.g. after the gate dropped n_high -> n_low).
        self.fp.fit((self.rules.int8_after or budget) + 1)
        self.q8.fit(max(budget - self.fp.n, 0) + 1)

    def _pinned(self, pos: torch.Tensor) -> torch.Tensor:
        mask = torch.zeros_like(pos, dtype=torch.bool)
        for start, end in self.rules.pins or ():
            span = pos >= start
            if end is not None:
                span &= pos < end
            mask |= span
        return mask

    # -- accounting ----------------------------------------------------------------------------------------------
    def kv_bytes(self) -> int:
        """Bytes of live K, V and INT8 scales (what the attention reads)."""
        if self._slot_bytes is None and self.fp.bufs:
            self._slot_bytes = (self.fp.slot_bytes(("k", "v")), 0)
        if self._slot_bytes is None:
            return 0
        if self._slot_bytes[1] == 0 and self.q8.bufs:
            self._slot_bytes = (self._slot_bytes[0], self.q8.slot_bytes(("k", "v", "k_scale", "v_scale")))
        return self.fp.n * self._slot_bytes[0] + self.q8.n * self._slot_bytes[1]

    def alloc_bytes(self) -> int:
        """Bytes actually allocated for this layer, bookkeeping (positions, scores) and spare capacity included."""
        return self.fp.alloc_bytes() + self.q8.alloc_bytes()

    def full_bytes_per_token(self) -> int:
        """Bytes one token would take in a full model-dtype cache (K and V, all batch rows and heads)."""
        if "k" not in self.fp.bufs:
            return 0
        k = self.fp.bufs["k"]
        return 2 * k.shape[0] * k.shape[1] * k.shape[3] * k.element_size()
