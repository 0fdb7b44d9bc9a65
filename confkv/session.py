"""A long-lived Conf-KV conversation: one cache kept alive across many calls, never re-prefilled.

The agent appends each new observation, decodes an action, appends the next observation, and so on: only new tokens
are ever run through the model. Long appends are prefilled in chunks of `policy.prefill_chunk` with eviction after
every chunk, so the KV peak during prefill is bounded by budget + chunk, not by the input length.

Confidence of an appended chunk: the mean confidence over its last `CHUNK_CONFIDENCE_POSITIONS` positions (the
logits of those positions only are computed, which keeps a 150k-vocabulary head cheap). During decoding every step's
confidence comes from that step's raw logits, before any sampling constraint.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch

from confkv.cache import ConfKVCache
from confkv.confidence import confidence
from confkv.policies import PolicyConfig

CHUNK_CONFIDENCE_POSITIONS = 64


@dataclass
class StepRecord:
    """One model call: what the cache looked like right after it."""

    kind: str  # "prefill" or "decode"
    tokens: int  # tokens appended by the call
    confidence: float  # confidence of the call's logits (chunk mean for prefill)
    budget: int | None  # global budget in force for the NEXT call
    kept_tokens: int  # mean physical length over layers
    kv_bytes: int
    token_id: int | None = None


@dataclass
class SessionStats:
    steps: list[StepRecord] = field(default_factory=list)
    prefilled_tokens: int = 0
    decoded_tokens: int = 0


LogitsHook = Callable[[torch.Tensor, list[int]], torch.Tensor]


class ConfKVSession:
    """Owns a model + `ConfKVCache`; `append` text/tokens, `decode` tokens, read memory and step records."""

    def __init__(self, model: torch.nn.Module, policy: PolicyConfig | str = "confkv", tokenizer=None, **cache_kw) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.cache = ConfKVCache(model, policy, **cache_kw)
        self.policy = self.cache.policy
        self.stats = SessionStats()
        self.last_logits: torch.Tensor | None = None  # [B, V] logits of the last position seen
        self.device = next(model.parameters()).device
        self.confidence_s = 0.0  # time spent turning decode logits into confidence (benchmarks report its share)

    @property
    def seen(self) -> int:
        return self.cache.get_seq_length()

    def _forward(self, ids: torch.Tensor, keep: int) -> torch.Tensor:
        start = self.seen
        position_ids = torch.arange(start, start + ids.shape[1], device=self.device).expand(ids.shape[0], -1)
        with torch.no_grad():
            out = self.model(
                input_ids=ids.to(self.device), position_ids=position_ids, cache=self.cache, use_cache=True,
                logits_to_keep=keep,
            )
        return out.logits

    def _record(self, kind: str, tokens: int, conf: float, token_id: int | None = None) -> None:
        kept = [layer.physical_length for layer in self.cache.layers]
        self.stats.steps.append(
            StepRecord(kind, tokens, conf, self.cache.global_budget, round(sum(kept) / len(kept)),
                       sum(layer.kv_bytes() for layer in self.cache.layers), token_id)
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
        for lo in range(0, ids.shape[1], chunk):
            part = ids[:, lo : lo + chunk]
            n_conf = min(part.shape[1], CHUNK_CONFIDENCE_POSITIONS)
            logits = self._forward(part, part.shape[1] if all_logits else n_conf)
            weights, rescale = self.policy.confidence_weights, self.policy.confidence_rescale
            conf = float(confidence(logits[:, -n_conf:], weights, rescale).mean())
            self.cache.set_confidence(conf)
            self.last_logits = logits[:, -1]
            self.stats.prefilled_tokens += part.shape[1]
            self._record("prefill", part.shape[1], conf)
            if all_logits:
                kept.append(logits)
        return torch.cat(kept, dim=1) if all_logits else self.last_logits

    def step(self, token_id: int) -> torch.Tensor:
        """Append one decoded token (batch 1); returns its logits `[1, V]` and sets the next step's budget."""
        logits = self._forward(torch.tensor([[token_id]]), 1)[:, -1]
        t0 = time.perf_counter()
        conf = float(confidence(logits, self.policy.confidence_weights, self.policy.confidence_rescale).min())
        self.confidence_s += time.perf_counter() - t0
        self.cache.set_confidence(conf)
        self.last_logits = logits
        self.stats.decoded_tokens += 1
        self._record("decode", 1, conf, token_id)
        return logits

    def decode(
        self,
        max_new_tokens: int,
        stop_ids: Iterable[int] = (),
        logits_hook: LogitsHook | None = None,
        on_token: Callable[[int, StepRecord], None] | None = None,
    ) -> list[int]:
        """Greedy decoding from the last logits. `logits_hook(logits, generated)` may constrain the choice (its
        output is used for the argmax only; confidence always comes from the raw logits)."""
        if self.last_logits is None:
            raise RuntimeError("decode() needs a prompt: call append() first")
        stops = set(stop_ids)
        generated: list[int] = []
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
        return generated

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
