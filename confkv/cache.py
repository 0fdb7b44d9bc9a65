"""`ConfKVCache`: a `transformers` 5.x `Cache` whose layers evict, compact and quantize for real; `attach` scopes it.

    cache = ConfKVCache(model, get_policy("confkv"))
    with attach(model, cache):
        model.generate(**inputs, cache=cache)

Creating a cache does not touch the model. `attach(model, cache)` switches the model to the `confkv` attention
implementation (see `confkv.attention`) and installs one forward hook on the model; on exit both are undone, so
plain forwards work again. The hook calls `end_forward(logits)` once per forward, after the last layer: the
forward's confidence decides the budget (so the budget from step t's logits governs what is kept right after step
t), and the policy (`KVPolicy.apply_all`) evicts layer by layer. The cache keeps exact memory accounting: live KV bytes,
their peak (reached after the layers' updates, before eviction), and the bytes a full cache of the run would hold.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache

from confkv.attention import ATTN_NAME
from confkv.confidence import ConfidenceLogitsProcessor
from confkv.layer import ConfKVLayer, NotAttachedError
from confkv.policies import get_policy
from confkv.policy import KVPolicy


@dataclass
class MemorySnapshot:
    kv_bytes: int  # live K, V and INT8 scales, all layers
    alloc_bytes: int  # allocated, bookkeeping and spare capacity included
    full_kv_bytes: int  # what a full model-dtype cache would hold for the same tokens
    kept_tokens: list[int]  # physical length per layer
    int8_tokens: list[int]
    cold_bytes: int = 0  # the cold tier (recallable eviction): not read by attention, not in kv_bytes


def cache_kwarg(model: torch.nn.Module) -> str:
    """The keyword the model's `forward` takes its cache by: `cache` in recent transformers 5.x, `past_key_values`
    before the rename (5.17 has only that one; an unknown keyword is swallowed by `**kwargs` there and the model
    silently builds a fresh cache every forward). Read from the signature, not from the version."""
    import inspect

    params = inspect.signature(type(model).forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def num_layers(config) -> int:
    cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
    for name in ("num_hidden_layers", "n_layer", "num_layers"):
        if getattr(cfg, name, None):
            return int(getattr(cfg, name))
    raise ValueError("cannot tell the number of layers from the model config")


class ConfKVCache(Cache):
    def __init__(self, model: torch.nn.Module, policy: KVPolicy | str = "confkv", record_evictions: bool = False) -> None:
        self.policy = get_policy(policy) if isinstance(policy, str) else policy.validate()
        self.n_layers = num_layers(model.config)
        self.schedule = self.policy.schedule()  # replaceable, e.g. by a `ReplayBudget` (bench ppl)
        self.rankers = [self.policy.make_ranker() for _ in range(self.n_layers)]
        self.confidence: float | None = None
        self.global_budget: int | None = None
        self._layer_budgets: list[int] | None = None
        self._forced: int | None = None
        self._budget_table: dict[int, list[int]] = {}
        self.pins: list[tuple[int, int | None]] = []
        self.attached = 0  # how many `attach` scopes hold this cache
        self.peak_kv_bytes = 0
        self.gate_decisions = 0  # forwards whose confidence a gated schedule judged
        self.gate_opens = 0  # ... and how many of them it answered above n_low
        self.turn_decisions = 0  # decisions reported through end_turn that a turn-level schedule judged
        self.turn_opens = 0  # ... and how many of them opened it
        self.bookkeeping_s = 0.0  # time in end_forward (confidence, ranking, migration, compaction): for benchmarks
        # On CUDA a benchmark sets this so end_forward synchronises before and after its work: without it the clock
        # would count the forward still queued on the device (the confidence's float() waits for it) as bookkeeping.
        self.sync_for_timing = False
        self.fold_mass = True  # False while the session reruns a token: its position's mass was folded already
        wants_mass = self.policy.wants_mass
        layers = [
            ConfKVLayer(i, wants_mass, self.policy.evicts, record_evictions, on_update=self._check_attached,
                        channel_keys=self.policy.key_scales == "channel", cold_capacity=self.policy.cold)
            for i in range(self.n_layers)
        ]
        super().__init__(layers=layers)
        self._decide(None)

    # -- budget --------------------------------------------------------------------------------------------------
    def _decide(self, confidence: float | None) -> None:
        """The global and per-layer budgets for a confidence (a pending `set_budget` wins, once)."""
        self.confidence = confidence
        if self._forced is not None:
            self._forced = None
            return
        if self.schedule is None:
            self.global_budget, self._layer_budgets = None, None
            return
        budget = self.schedule.budget(confidence)
        if confidence is not None and self.policy.gated:  # (a replayed schedule counts against the same n_low)
            self.gate_decisions += 1
            self.gate_opens += budget > self.policy.n_low
        self._split(budget)

    def _split(self, global_budget: int) -> None:
        self.global_budget = int(global_budget)
        if self.global_budget not in self._budget_table:
            self._budget_table[self.global_budget] = self.policy.layer_budgets(self.global_budget, self.n_layers)
        self._layer_budgets = self._budget_table[self.global_budget]

    def set_budget(self, global_budget: int) -> None:
        """Force the global budget of the next eviction step (instead of the schedule's answer), e.g. in tests."""
        self._split(global_budget)
        self._forced = self.global_budget

    def pin(self, spans: list[tuple[int, int | None]]) -> None:
        """Replace the pinned position spans `[start, end)` (end None = open-ended): never evicted, and outside the
        budget. Pins take effect at the next eviction step, i.e. at the end of the next forward (every prefill chunk
        and every decode step ends with one): pin a span BEFORE appending its tokens (positions need not exist yet;
        `(seen, None)` protects everything appended from now on). A pin set after a chunked append comes too late
        for its early chunks. `ConfKVSession.append(ids, pin=True)` pins exactly the appended span. Unpinned tokens
        compete for the budget again at the next eviction step."""
        self.pins[:] = [(int(a), None if b is None else int(b)) for a, b in spans]

    def add_pin(self, start: int, end: int | None) -> None:
        """Pin one more span `[start, end)`, keeping the existing pins (same timing rule as `pin`)."""
        self.pin([*self.pins, (start, end)])

    def end_turn(self, confidence: float | None) -> None:
        """A caller's decision (an agent's reply) ended with this confidence, the least confident of its choices. A
        turn-level schedule (`confkv.budget.TurnBudget`) sets the budget it holds until the next decision from it;
        per-forward schedules ignore it. The new budget applies from the next forward's eviction step."""
        decide = getattr(self.schedule, "end_turn", None)
        if decide is None or confidence is None:
            return
        self.turn_decisions += 1
        self.turn_opens += bool(decide(float(confidence)))

    @property
    def gate_open_rate(self) -> float | None:
        """Share of judged decisions on which the gate opened: per turn for a turn-level gate, else per forward
        (None: not gated, or nothing judged yet)."""
        if self.turn_decisions:
            return self.turn_opens / self.turn_decisions
        return self.gate_opens / self.gate_decisions if self.gate_decisions else None

    def resident_shares(self, spans: Sequence[tuple[int, int]]) -> list[float]:
        """Per span [start, end): the share of its positions the layers' KV heads still hold (INT8 or not; the cold
        tier does not count), averaged over layers and heads: 1.0 under full KV. What an evicting policy let go of,
        e.g. of each earlier page of an agent's episode. Each layer's positions are gathered once for all spans."""
        if any(end <= start for start, end in spans):
            raise ValueError(f"empty span in {list(spans)}")
        if not spans or not self.layers:
            return [0.0] * len(spans)
        totals = [0.0] * len(spans)
        for layer in self.layers:
            pos = layer.positions()
            if pos.numel() == 0:
                continue
            for k, (start, end) in enumerate(spans):
                inside = ((pos >= start) & (pos < end)).sum(dim=-1, dtype=torch.float32) / (end - start)
                totals[k] += float(inside.mean())
        return [t / len(self.layers) for t in totals]

    @property
    def layer_budgets(self) -> list[int] | None:
        """The per-layer budgets of the last (or forced next) eviction step; None = keep everything."""
        return None if self._layer_budgets is None else list(self._layer_budgets)

    def confidence_processor(self) -> ConfidenceLogitsProcessor:
        """A logits processor that records each generated step's confidence (its `history`). The budget does not
        need it: the attached cache reads each forward's confidence from the logits itself."""
        return ConfidenceLogitsProcessor(lambda c: None, self.policy.confidence_weights, self.policy.confidence_rescale)

    # -- the one eviction step per forward -----------------------------------------------------------------------
    def end_forward(self, logits: torch.Tensor | None) -> None:
        """After all layers: confidence of `logits [B, L, V]` -> budget -> the policy evicts every layer."""
        if not any(layer.new_tokens for layer in self.layers):
            return  # not a forward through this cache (another cache, or no cache)
        sync = self.sync_for_timing and logits is not None and logits.is_cuda
        if sync:
            torch.cuda.synchronize(logits.device)
        t0 = time.perf_counter()
        conf = None if logits is None else float(self.policy.confidence(logits))
        self._decide(conf)
        budgets = self._layer_budgets
        for i, layer in enumerate(self.layers):
            layer.capacity_hint = None if budgets is None else budgets[i] + self.policy.slack
        self.policy.apply_all(self.layers, self.rankers, budgets, self.pins, fold_mass=self.fold_mass)
        if sync:
            torch.cuda.synchronize(logits.device)
        self.bookkeeping_s += time.perf_counter() - t0

    def take_recalled(self) -> bool:
        """Whether the last eviction step recalled cold slots in any layer (and clear it)."""
        hit = False
        for layer in self.layers:
            hit |= layer.recalled
            layer.recalled = False
        return hit

    def _check_attached(self) -> None:
        if not self.attached:
            raise NotAttachedError(
                "ConfKVCache used in a forward outside `with confkv.attach(model, cache):` (or a ConfKVSession)"
            )

    # -- accounting ----------------------------------------------------------------------------------------------
    def _account(self) -> None:
        total = sum(layer.kv_bytes() for layer in self.layers)
        if total > self.peak_kv_bytes:
            self.peak_kv_bytes = total

    def memory(self) -> MemorySnapshot:
        return MemorySnapshot(
            kv_bytes=sum(layer.kv_bytes() for layer in self.layers),
            alloc_bytes=sum(layer.alloc_bytes() for layer in self.layers),
            full_kv_bytes=self.full_kv_bytes(),
            kept_tokens=[layer.physical_length for layer in self.layers],
            int8_tokens=[layer.q8.n for layer in self.layers],
            cold_bytes=sum(layer.cold_bytes() for layer in self.layers),
        )

    def full_kv_bytes(self) -> int:
        return sum(layer.seen * layer.full_bytes_per_token() for layer in self.layers)

    def reset(self) -> None:
        super().reset()
        self.peak_kv_bytes = 0
        self._decide(None)


def _logits(output: object) -> torch.Tensor | None:
    logits = getattr(output, "logits", None)
    return logits if isinstance(logits, torch.Tensor) and logits.dim() == 3 else None


_ATTN_CONFIGS: weakref.WeakKeyDictionary[torch.nn.Module, list] = weakref.WeakKeyDictionary()


def _attn_configs(model: torch.nn.Module) -> list:
    """Every config object the model's attention reads `_attn_implementation` from (the top config, sub-configs,
    sub-models' own configs). Found once per model, when one `set_attn_implementation(ATTN_NAME)` also validates
    the switch; `attach` then toggles these attributes directly (a module walk per decode step costs milliseconds)."""
    configs = _ATTN_CONFIGS.get(model)
    if configs is None:
        found = {id(model.config): model.config}
        for sub in model.modules():
            config = getattr(sub, "config", None)
            if config is not None and hasattr(config, "_attn_implementation_internal"):
                found[id(config)] = config
        for config in list(found.values()):
            for key in getattr(config, "sub_configs", {}):
                sub_config = getattr(config, key, None)
                if sub_config is not None and hasattr(sub_config, "_attn_implementation_internal"):
                    found[id(sub_config)] = sub_config
        configs = list(found.values())
        before = [config._attn_implementation_internal for config in configs]
        model.set_attn_implementation(ATTN_NAME)
        for config, impl in zip(configs, before, strict=True):
            config._attn_implementation_internal = impl
        _ATTN_CONFIGS[model] = configs
    return configs


@contextmanager
def attach(model: torch.nn.Module, cache: ConfKVCache) -> Iterator[ConfKVCache]:
    """Within the block, `model` runs the `confkv` attention and `cache` evicts after every forward; on exit the
    model's previous attention implementation is back and the hook is gone. Nested scopes are cheap no-ops."""
    previous = [(config, config._attn_implementation_internal) for config in _attn_configs(model)]
    for config, _ in previous:
        config._attn_implementation_internal = ATTN_NAME

    def after_forward(module, args, output):
        cache._account()  # the peak: every layer holds its new tokens, nothing evicted yet
        cache.end_forward(_logits(output))
        cache._account()

    handle = model.register_forward_hook(after_forward)
    cache.attached += 1
    try:
        yield cache
    finally:
        cache.attached -= 1
        handle.remove()
        for config, impl in previous:
            config._attn_implementation_internal = impl
