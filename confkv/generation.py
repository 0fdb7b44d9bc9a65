"""Greedy generation on a `ConfKVSession`, with the per-step record the CLI and benchmarks print."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import torch

from confkv.policy import KVPolicy
from confkv.session import ConfKVSession


@dataclass
class GenerationResult:
    text: str
    token_ids: list[int]
    prompt_tokens: int
    steps: list[dict] = field(default_factory=list)  # per decode step: confidence, budget, kept_tokens, kv_bytes
    peak_kv_bytes: int = 0
    full_kv_bytes: int = 0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    policy: dict = field(default_factory=dict)

    @property
    def tokens_per_s(self) -> float:
        return len(self.token_ids) / self.decode_s if self.decode_s > 0 else 0.0

    def to_json(self) -> dict:
        out = asdict(self)
        out["tokens_per_s"] = self.tokens_per_s
        out["peak_kv_ratio_vs_full"] = self.peak_kv_bytes / self.full_kv_bytes if self.full_kv_bytes else None
        return out


def encode_prompt(tokenizer, prompt: str, chat: bool) -> torch.Tensor:
    """Token ids of the prompt; `chat=True` wraps it as one user turn of the model's chat template."""
    if chat:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("this model has no chat template; run without --chat")
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, return_tensors="pt", return_dict=True
        )["input_ids"]
        return ids
    return tokenizer(prompt, return_tensors="pt").input_ids


def generate(
    model: torch.nn.Module,
    tokenizer,
    prompt: str,
    policy: KVPolicy | str,
    max_new_tokens: int = 64,
    chat: bool = False,
    ignore_eos: bool = False,
) -> GenerationResult:
    session = ConfKVSession(model, policy, tokenizer=tokenizer)
    ids = encode_prompt(tokenizer, prompt, chat)
    t0 = time.perf_counter()
    session.append(ids)
    t1 = time.perf_counter()
    stops = [] if ignore_eos or tokenizer.eos_token_id is None else [tokenizer.eos_token_id]
    new = session.decode(max_new_tokens, stop_ids=stops)
    t2 = time.perf_counter()
    steps = [
        {"confidence": s.confidence, "budget": s.budget, "kept_tokens": s.kept_tokens, "kv_bytes": s.kv_bytes}
        for s in session.stats.steps
        if s.kind == "decode"
    ]
    return GenerationResult(
        text=tokenizer.decode(new, skip_special_tokens=True),
        token_ids=new,
        prompt_tokens=int(ids.shape[1]),
        steps=steps,
        peak_kv_bytes=session.cache.peak_kv_bytes,
        full_kv_bytes=session.cache.full_kv_bytes(),
        prefill_s=t1 - t0,
        decode_s=t2 - t1,
        policy=session.policy.to_dict(),
    )


def plain_generate(model: torch.nn.Module, tokenizer, prompt: str, max_new_tokens: int, chat: bool,
                   ignore_eos: bool) -> list[int]:
    """The reference: `model.generate` with transformers' own DynamicCache and the model's own attention (sdpa as
    `confkv.models.load` loads it; sessions attach `confkv` attention only for their calls), greedy."""
    ids = encode_prompt(tokenizer, prompt, chat)
    with torch.no_grad():
        out = model.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens, do_sample=False,
            eos_token_id=None if ignore_eos else tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id,
            **({"min_new_tokens": max_new_tokens} if ignore_eos else {}),
        )
    return out[0, ids.shape[1]:].tolist()
