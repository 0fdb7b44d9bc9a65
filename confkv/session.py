"""A long-lived Conf-KV conversation: one cache kept alive across many calls, never re-prefilled.

The agent appends each new observation, decodes an action, appends the next observation, and so on: only new tokens
are ever run through the model. Long appends are prefilled in chunks of `policy.prefill_chunk` with eviction after
every chunk, so the KV peak during prefill is bounded by budget + chunk, not by the input length.

Attachment: each public call (`append`, `step`, `decode`) runs inside one `confkv.attach(model, cache)` scope, so the
model is plain again between calls (benchmarks and tests mix plain forwards with sessions), and a whole `decode`
switches the attention implementation once, not per token.

Confidence of a call: `KVPolicy.confidence` (the mean over its last `CONFIDENCE_POSITIONS` positions, the least
confident row; only those positions' logits are computed, `KVPolicy.confidence_rows`, which keeps a 150k-vocabulary
head cheap). During decoding every step's confidence comes from that step's raw logits, before any sampling
constraint.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from confkv.cache import ConfKVCache, attach, cache_kwarg
from confkv.policy import KVPolicy


@dataclass
class CallRecord:
    """One model call: what the cache looked like right after it (the agent's per-step record is
    `traces.records.StepRecord`)."""

    kind: str  # "prefill" or "decode"
    tokens: int  # tokens appended by the call
    confidence: float  # confidence of the call's logits (chunk mean for prefill)
    budget: int | None  # global budget decided from this call's confidence: what was kept right after it
    kept_tokens: int  # mean physical length over layers
    kv_bytes: int
    token_id: int | None = None
    cold_bytes: int = 0  # the cold tier (recallable eviction), apart from the resident kv_bytes


@dataclass
class SessionStats:
    steps: list[CallRecord] = field(default_factory=list)
    prefilled_tokens: int = 0
    decoded_tokens: int = 0


LogitsHook = Callable[[torch.Tensor, list[int]], torch.Tensor]


class ConfKVSession:
    """Owns a model + `ConfKVCache`; `append` text/tokens, `decode` tokens, read memory and step records."""

    def __init__(self, model: torch.nn.Module, policy: KVPolicy | str = "confkv", tokenizer=None, **cache_kw) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.cache = ConfKVCache(model, policy, **cache_kw)
        self.policy = self.cache.policy
        self.stats = SessionStats()
        self.last_logits: torch.Tensor | None = None  # [B, V] logits of the last position seen
        self.device = next(model.parameters()).device
        self._cache_kw = cache_kwarg(model)
        self._scope_depth = 0
        # Compute each prefill chunk's confidence as recorded (`CallRecord.confidence`, the traces' chunk rows) even
        # where no gate reads it; a caller that keeps no chunk confidence (the forced replay) sets False and saves
        # the LM head's rows for it.
        self.chunk_confidence = True

    @property
    def seen(self) -> int:
        return self.cache.get_seq_length()

    def fork(self) -> ConfKVSession:
        """A new session that starts exactly where this one stands: its own copy of the cache (tensors, ranker
        state, pins, budget, peak) and counters, the same model. Why: a prefix every episode shares (the agent's
        system prompt) is prefilled once and forked per episode instead of being run through the model again."""
        if self._scope_depth:
            raise RuntimeError("fork() inside a call on this session")
        new = copy.copy(self)
        new.cache = copy.deepcopy(self.cache)
        new.policy = new.cache.policy
        new.stats = copy.deepcopy(self.stats)
        new.last_logits = None if self.last_logits is None else self.last_logits.clone()
        return new

    @contextmanager
    def attached(self) -> Iterator[None]:
        """One `attach(model, cache)` scope around a public call (nested calls reuse the outer scope)."""
        if self._scope_depth:
            self._scope_depth += 1
            try:
                yield
            finally:
                self._scope_depth -= 1
            return
        with attach(self.model, self.cache):
            self._scope_depth = 1
            try:
                yield
            finally:
                self._scope_depth = 0

    def _forward(self, ids: torch.Tensor, keep: int) -> torch.Tensor:
        """One forward; the cache evicts at its end (`ConfKVCache.end_forward`). If that eviction step recalled cold
        slots (`Storage.recall_rerun`), the last token is run once more so its logits see them (the other positions'
        logits, when asked for, stay those of the first pass; the rankers fold that position's mass once, from the
        first pass)."""
        logits = self._forward_once(ids, keep)
        # (`cold` first: a policy without a cold tier never recalls, so its forwards skip the per-layer flag scan)
        if self.policy.cold and self.policy.recall_rerun and self.cache.take_recalled() and ids.shape[0] == 1:
            if all(layer.newest_resident() for layer in self.cache.layers):
                for layer in self.cache.layers:
                    layer.pop_newest()
                self.cache.fold_mass = False  # the first pass folded this position's mass: once per position
                try:
                    logits = torch.cat([logits[:, :-1], self._forward_once(ids[:, -1:], 1)], dim=1)
                finally:
                    self.cache.fold_mass = True
                self.cache.take_recalled()  # a recall at the end of the rerun itself is not rerun again
        return logits

    def _forward_once(self, ids: torch.Tensor, keep: int) -> torch.Tensor:
        start = self.seen
        position_ids = torch.arange(start, start + ids.shape[1], device=self.device).expand(ids.shape[0], -1)
        with self.attached(), torch.no_grad():
            out = self.model(
                input_ids=ids.to(self.device), position_ids=position_ids, **{self._cache_kw: self.cache}, use_cache=True,
                logits_to_keep=keep,
            )
        return out.logits

    def _record(self, kind: str, tokens: int, conf: float, token_id: int | None = None) -> None:
        kept = [layer.physical_length for layer in self.cache.layers]
        self.stats.steps.append(
            CallRecord(kind, tokens, conf, self.cache.global_budget, round(sum(kept) / len(kept)),
                       sum(layer.kv_bytes() for layer in self.cache.layers), token_id,
                       sum(layer.cold_bytes() for layer in self.cache.layers))
        )

    def append(
        self, ids: torch.Tensor | Iterable[int] | str, all_logits: bool = False, pin: bool = False
    ) -> torch.Tensor:
        """Run new tokens through the model (chunked); returns the last position's logits `[B, V]`, or with
        `all_logits=True` every position's logits `[B, L, V]` (for perplexity; costs L x V floats).

        `pin=True` pins the appended span before its first chunk runs, so none of it is ever evicted (pinning
        after the call would be too late: eviction runs between chunks)."""
        ids = self._as_ids(ids)
        if ids.shape[1] == 0:
            raise ValueError("append() needs at least one token")
        if pin:
            self.cache.add_pin(self.seen, self.seen + ids.shape[1])
        chunk = self.policy.prefill_chunk
        kept: list[torch.Tensor] = []
        with self.attached():
            for lo in range(0, ids.shape[1], chunk):
                part = ids[:, lo : lo + chunk]
                n_conf = self.policy.confidence_rows(part.shape[1], recorded=self.chunk_confidence)
                logits = self._forward(part, part.shape[1] if all_logits else n_conf)
                self.last_logits = logits[:, -1]
                self.stats.prefilled_tokens += part.shape[1]
                self._record("prefill", part.shape[1], self.cache.confidence)
                if all_logits:
                    kept.append(logits)
        return torch.cat(kept, dim=1) if all_logits else self.last_logits

    def step(self, token_id: int) -> torch.Tensor:
        """Append one decoded token (batch 1); returns its logits `[1, V]`. Its confidence sets the budget of the
        eviction right after it."""
        logits = self._forward(torch.tensor([[token_id]]), 1)[:, -1]
        self.last_logits = logits
        self.stats.decoded_tokens += 1
        self._record("decode", 1, self.cache.confidence, token_id)
        return logits

    def decode(
        self,
        max_new_tokens: int,
        stop_ids: Iterable[int] = (),
        logits_hook: LogitsHook | None = None,
        on_token: Callable[[int, CallRecord], None] | None = None,
    ) -> list[int]:
        """Greedy decoding from the last logits. `logits_hook(logits, generated)` may constrain the choice (its
        output is used for the argmax only; confidence always comes from the raw logits)."""
        if self.last_logits is None:
            raise RuntimeError("decode() needs a prompt: call append() first")
        stops = set(stop_ids)
        generated: list[int] = []
        with self.attached():
            self._decode_loop(max_new_tokens, stops, generated, logits_hook, on_token)
        return generated

    def _decode_loop(self, max_new_tokens: int, stops: set[int], generated: list[int],
                     logits_hook: LogitsHook | None, on_token: Callable[[int, CallRecord], None] | None) -> None:
        for _ in range(max_new_tokens):
            logits = self.last_logits[0]
            if logits_hook is not None:
                logits = logits_hook(logits, generated)
            token = int(torch.argmax(logits))
            generated.append(token)
            if token in stops:
                break
            self.step(token)
            if on_token is not None:
                on_token(token, self.stats.steps[-1])

    def _as_ids(self, ids: torch.Tensor | Iterable[int] | str) -> torch.Tensor:
        if isinstance(ids, str):
            if self.tokenizer is None:
                raise ValueError("append(text) needs a tokenizer; pass tokenizer= or token ids")
            ids = self.tokenizer(ids, return_tensors="pt", add_special_tokens=self.seen == 0).input_ids
        if not isinstance(ids, torch.Tensor):
            ids = torch.tensor([list(ids)], dtype=torch.long)
        if ids.dim() == 1:
            ids = ids.unsqueeze(0)
        return ids.long()

    def memory(self):
        return self.cache.memory()
