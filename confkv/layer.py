"""One layer of the Conf-KV cache: a `transformers` cache layer that stores, removes and quantizes for real.

Storage: an INT8 store (old tokens, per-token-per-head scales) and a model-dtype store (the recent window), each a
`SlotStore`, so kept bytes are really kept bytes. With a cold tier (`Storage.cold`), evicted slots move to a third
store that attention never reads, from which `recall` brings slots back when the budget rises. Every slot carries
its absolute position (`pos`) and the ranker's accumulator (`acc`). The model-dtype window is ordered and shared by all heads; the INT8 store is unordered and each
KV head evicts its own tokens (same count per head, so tensors stay rectangular).

The layer decides nothing: during a forward, `update()` appends the new tokens and hands attention a view; attention
(`confkv.attention`) returns the call's per-key mass (and its last query), which `keep_attention` stores; after
the last layer, the policy
(`KVPolicy.apply_all`, driven by `ConfKVCache.end_forward`) folds the mass, and tells the layer what to quantize
(`quantize_oldest`) and evict (`evict`). `get_seq_length()` is the logical length (tokens seen), which keeps default
position ids absolute.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers.cache_utils import CacheLayerMixin

from confkv.kernels import SegmentedKV, channel_scales, quantize_int8, quantize_keys
from confkv.slots import SlotStore


class NotAttachedError(RuntimeError):
    """A `ConfKVCache` was used in a forward without its attention implementation attached."""


@dataclass
class LayerView:
    """What `update` hands to the attention function instead of dense K/V tensors."""

    layer: ConfKVLayer
    q_len: int


class ConfKVLayer(CacheLayerMixin):
    is_sliding = False
    is_compileable = False
    is_croppable = False

    def __init__(
        self,
        layer_idx: int,
        wants_mass: bool = False,
        evicts: bool = False,
        record_evictions: bool = False,
        on_update: Callable[[], None] | None = None,
        channel_keys: bool = True,
        cold_capacity: int = 0,
    ) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.wants_mass = wants_mass  # attention must return per-key mass (the policy ranks by it)
        self.evicts = evicts  # kept positions may differ per head (so prefill cannot share one sdpa mask)
        self.record_evictions = record_evictions
        self.on_update = on_update  # the cache checks it is attached and keeps its peak accounting
        self.capacity_hint: int | None = None  # the last budget + slack: caps geometric growth of the model-dtype store
        self.channel_keys = channel_keys  # INT8 keys get per-channel scales, fixed at the first migration
        self.k_channel: torch.Tensor | None = None  # [B, H_kv, D]
        self.fp = SlotStore()
        self.q8 = SlotStore()
        self.cold_capacity = cold_capacity  # 0: evicted slots are dropped
        self.cold = SlotStore()  # evicted slots, in the format of the store they left; attention never reads them
        self.last_query: torch.Tensor | None = None  # [B, H_q, D] of the last forward (kept only with a cold tier)
        self.recalls: list[tuple[torch.Tensor, int]] = []  # (recalled positions [B,H,k], first query pos that sees them)
        self.recalled = False  # this forward's eviction step recalled cold slots (the session may rerun its last token)
        self.seen = 0
        self.new_tokens = 0  # appended since the last eviction step
        self.mass: torch.Tensor | None = None  # the call's mass per KV head [B, H_kv, Tq+Tf], set by attention
        self.evictions: list[tuple[torch.Tensor, int]] = []  # (evicted positions [B,H,k], last query pos that saw them)
        self._slot_bytes: tuple[int, int] | None = None  # bytes per slot of the model-dtype and INT8 stores
        self.pin_state: tuple[tuple, int] | None = None  # (pins, kept pinned tokens): see `policy.pinned_count`
        self.acc_seed: torch.Tensor | float = 0.0  # what a decoded token's accumulator starts at: `Ranker.seed_value`

    # -- transformers CacheLayerMixin ----------------------------------------------------------------------------
    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        self.dtype = key_states.dtype
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs) -> tuple[LayerView, LayerView]:
        if self.on_update:
            self.on_update()
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        b, h, length, _ = key_states.shape
        hint = self.capacity_hint
        limit = None if hint is None else hint + length
        if length == 1 and self.fp.bufs:  # decode: scalar fills, no per-layer index tensors
            self.fp.append(limit=limit, k=key_states, v=value_states, pos=self.seen, acc=self.acc_seed)
        else:
            pos = torch.arange(self.seen, self.seen + length, device=key_states.device)
            self.fp.append(
                limit=limit,
                k=key_states,
                v=value_states,
                pos=pos.expand(b, h, length),
                acc=torch.zeros(b, h, length, dtype=torch.float32, device=key_states.device),  # the policy seeds it
            )
        self.seen += length
        self.new_tokens += length
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
        self.fp, self.q8, self.seen, self.mass, self.new_tokens = SlotStore(), SlotStore(), 0, None, 0
        self.cold, self.last_query = SlotStore(), None
        self.evictions, self.recalls = [], []
        self._slot_bytes = None
        self.pin_state = None
        self.k_channel = None
        self.acc_seed = 0.0

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        raise NotImplementedError("Conf-KV does not support beam search (per-head eviction state is not reordered)")

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("Conf-KV layers cannot be cropped: evicted tokens are gone")

    def offload(self) -> None:  # the base class would touch .keys/.values, which this layer does not use
        return None

    def prefetch(self) -> None:
        return None

    # -- what attention reads ------------------------------------------------------------------------------------
    @property
    def physical_length(self) -> int:
        return self.fp.n + self.q8.n

    def positions(self) -> torch.Tensor:
        """Absolute positions of every physically kept token, per KV head `[B, H_kv, T]` (INT8 slots first)."""
        parts = [s.view("pos") for s in (self.q8, self.fp) if s.n]
        return torch.cat(parts, dim=2) if parts else torch.empty(0, 0, 0, dtype=torch.long)

    @property
    def n_kv_heads(self) -> int:
        return self.fp.bufs["k"].shape[1]

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
            k_channel=self.k_channel if has_q8 else None,
        )

    # -- what attention returned ---------------------------------------------------------------------------------
    def keep_attention(self, mass: torch.Tensor | None, last_query: torch.Tensor | None) -> None:
        """Store one attention call's results for the policy's step after the forward: the mass (ranking; None
        when the policy ranks without it) and, with a cold tier, the last query (recall)."""
        self.mass = mass
        if last_query is not None:
            self.last_query = last_query

    # -- what the policy tells it --------------------------------------------------------------------------------
    def take_mass(self) -> torch.Tensor | None:
        """The last forward's mass (consumed), and the end of that forward's bookkeeping."""
        mass, self.mass, self.new_tokens = self.mass, None, 0
        return mass

    def acc_before_new(self) -> torch.Tensor | None:
        """The accumulator of the store that held most tokens before this forward's new tokens (rankers read a
        per-head summary of it to seed the new tokens)."""
        fp_old = self.fp.n - self.new_tokens
        if self.q8.n > fp_old:
            return self.q8.view("acc")
        return self.fp.view("acc")[:, :, :fp_old] if fp_old else None

    def quantize_oldest(self, m: int, capacity: int | None = None) -> None:
        """Move the `m` oldest model-dtype tokens (same positions in all heads) to the INT8 store."""
        if self.channel_keys and self.k_channel is None:  # calibrated once, on the whole window (not just the batch)
            self.k_channel = channel_scales(self.fp.view("k"))
        old = self.fp.pop_front(m)
        k_q, k_scale = quantize_keys(old["k"], self.k_channel)
        v_q, v_scale = quantize_int8(old["v"])
        self.q8.append(limit=capacity, k=k_q, v=v_q, k_scale=k_scale, v_scale=v_scale, pos=old["pos"], acc=old["acc"])

    def evict(self, store: SlotStore, victims: torch.Tensor) -> None:
        """Remove slots `victims [B, H, k]` of `store` (recorded with the last query position that saw them); with a
        cold tier they move there, and the tier drops its least-attended slots beyond its capacity."""
        if self.record_evictions:
            self.evictions.append((store.view("pos").gather(2, victims).clone(), self.seen - 1))
        if self.cold_capacity:
            self.cold.append(**store.gather(victims))
            over = self.cold.n - self.cold_capacity
            if over > 0:
                self.cold.remove(self.cold.view("acc").topk(over, dim=-1, largest=False).indices)
        store.remove(victims)

    def recall(self, store: SlotStore, m: int, block: int = 1) -> None:
        """Move `m` cold slots per KV head back into `store` (the store they were evicted from): those the last
        forward's final query attends to most (q.k, the mean query of the head's GQA group, scales applied), taken
        by position blocks of `block` tokens, best block first (a block scores its best slot). Why the query and not
        the accumulator: the tokens a confident step dropped had low past attention by construction; what an
        uncertain step needs is what its own query looks for."""
        cold = self.cold
        b, h_kv = cold.bufs["k"].shape[:2]
        q = self.last_query.float().view(b, h_kv, -1, self.last_query.shape[-1]).mean(dim=2)  # [B, H_kv, D]
        if "k_scale" in cold.bufs:  # INT8 slots: k = k_q * k_scale (* per-channel scale)
            if self.k_channel is not None:
                q = q * self.k_channel.float()
            scores = torch.einsum("bhd,bhnd->bhn", q, cold.view("k").float()) * cold.view("k_scale").float()
        else:
            scores = torch.einsum("bhd,bhnd->bhn", q, cold.view("k").float())
        if block > 1:  # rank slots by their block's best score, then by their own (ties inside a block)
            blocks = torch.div(cold.view("pos"), block, rounding_mode="floor")
            ids = blocks - blocks.min(dim=-1, keepdim=True).values
            best = scores.new_full((*scores.shape[:2], int(ids.max()) + 1), float("-inf"))
            best = best.scatter_reduce(2, ids, scores, reduce="amax")
            spread = (scores.max() - scores.min()).clamp_min(1e-6)
            scores = best.gather(2, ids) + 1e-3 * (scores - scores.min()) / spread
        chosen = scores.topk(m, dim=-1).indices
        slots = cold.gather(chosen)
        if self.record_evictions:
            self.recalls.append((slots["pos"].clone(), self.seen))
        cold.remove(chosen)
        if store.n:  # ranked as the best resident token of the head: the next confident step must not drop them first
            slots["acc"] = store.view("acc").amax(dim=-1, keepdim=True).expand_as(slots["acc"]).clone()
        store.append(**slots)
        self.pin_state = None  # a recalled slot may lie in a pin added after it left: recount once
        self.recalled = True

    def newest_resident(self) -> bool:
        """The last token seen is still in the model-dtype store of every head (it is, unless nothing is protected)."""
        return bool(self.fp.n) and bool((self.fp.view("pos") == self.seen - 1).any(dim=-1).all())

    def pop_newest(self) -> None:
        """Forget the last token seen (its K/V and slot; check `newest_resident` first), so the session can run it
        again, e.g. after a recall made context visible that its first pass did not see."""
        fp = self.fp
        fp.remove((fp.view("pos") == self.seen - 1).float().argmax(dim=-1, keepdim=True))
        self.seen -= 1
        self.pin_state = None
        self.recalls = [(p, self.seen if t == self.seen + 1 else t) for p, t in self.recalls]  # its rerun sees them

    def fit(self, fp_slots: int, q8_slots: int) -> None:
        """Free spare capacity beyond these slot counts (see `SlotStore.fit`)."""
        self.fp.fit(fp_slots)
        self.q8.fit(q8_slots)

    # -- accounting ----------------------------------------------------------------------------------------------
    def kv_bytes(self) -> int:
        """Bytes of every live slot: K, V, INT8 scales, and the per-slot position and ranker accumulator (what the
        cache keeps per token; `full_bytes_per_token` is the plain cache's K+V, so `full` reads ~2% above 1.0)."""
        if self._slot_bytes is None and self.fp.bufs:
            self._slot_bytes = (self.fp.slot_bytes(tuple(self.fp.bufs)), 0)
        if self._slot_bytes is None:
            return 0
        if self._slot_bytes[1] == 0 and self.q8.bufs:
            self._slot_bytes = (self._slot_bytes[0], self.q8.slot_bytes(tuple(self.q8.bufs)))
        return self.fp.n * self._slot_bytes[0] + self.q8.n * self._slot_bytes[1]

    def cold_bytes(self) -> int:
        """Bytes of the cold tier's live slots (not read by attention; on a single device they are still memory)."""
        return self.cold.n * self.cold.slot_bytes(tuple(self.cold.bufs)) if self.cold.n else 0

    def alloc_bytes(self) -> int:
        """Bytes actually allocated for this layer, bookkeeping (positions, scores) and spare capacity included."""
        return self.fp.alloc_bytes() + self.q8.alloc_bytes() + self.cold.alloc_bytes()

    def full_bytes_per_token(self) -> int:
        """Bytes one token would take in a full model-dtype cache (K and V, all batch rows and heads)."""
        if "k" not in self.fp.bufs:
            return 0
        k = self.fp.bufs["k"]
        return 2 * k.shape[0] * k.shape[1] * k.shape[3] * k.element_size()
