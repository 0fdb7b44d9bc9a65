"""End to end on an accelerator at real model shapes with random weights (issue 39): what the CPU figures cannot say.

Why random weights: the GPU machine has no model files and no network, and the bytes and the time of a decode step
depend on the shapes, not on the values. The model is built on the meta device (no memory, no init) and then filled
on the target device, so a 7B model costs seconds, not a 15 GB transfer. What random weights cannot show is quality,
and the gate: their next-token distributions are near uniform, so Conf-KV's confidence stays low and the gate keeps
`n_high` (the report prints the gate-open rate it saw).

Two measurements:
- `decode_at_context`: plain transformers (`DynamicCache`, SDPA), our `full` and `confkv` each prefill the same
  random ids, then decode teacher-forced steps; per variant ms per token, peak device memory above the weights
  (prefill included), resident KV bytes and the share of a step spent in the cache's eviction bookkeeping
  (measured in a second pass with `ConfKVCache.sync_for_timing`, so it is the bookkeeping's own device time on
  CUDA, while the timed pass runs as served).
- `kv_after_generation`: a policy greedily generates `n_new` tokens after a short prompt, one step at a time as in
  serving; the cache's resident bytes at the end, against `bench memory`'s arithmetic for the same budgets. A time
  limit stops the loop early and says how far it got.
Everything runs on CPU too (tiny shapes), which is how the tests keep it working between GPU sessions.
"""

from __future__ import annotations

import gc
import time
from dataclasses import asdict, dataclass
from typing import Any

import torch

from confkv.bench.decode import PlainDecoder, SessionDecoder, device_clock, whole_cycles
from confkv.bench.kv_bytes import KVConfig
from confkv.policies import get_policy
from confkv.session import ConfKVSession


@dataclass(frozen=True)
class ModelShape:
    """The shapes of a Qwen2 checkpoint (its config.json), all a random-weight twin needs."""

    name: str
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int

    def config(self, mlp_scale: float = 1.0, max_positions: int = 32768 + 4096) -> Any:
        """A `Qwen2Config`; `mlp_scale` narrows the MLP (it moves neither the KV bytes nor attention's shapes)."""
        from transformers import Qwen2Config

        return Qwen2Config(
            vocab_size=self.vocab, hidden_size=self.hidden, num_hidden_layers=self.layers,
            num_attention_heads=self.heads, num_key_value_heads=self.kv_heads,
            intermediate_size=max(1, round(self.intermediate * mlp_scale)), max_position_embeddings=max_positions,
            rope_theta=1_000_000.0, rms_norm_eps=1e-6, tie_word_embeddings=False, use_sliding_window=False,
        )  # fmt: skip

    def kv_config(self, dtype_bytes: int) -> KVConfig:
        return KVConfig(self.name, self.layers, self.kv_heads, self.hidden // self.heads, dtype_bytes,
                        "config.json shapes")  # fmt: skip


# Qwen2.5-7B(-Instruct) and -32B config.json on the Hugging Face hub.
QWEN25_7B = ModelShape("Qwen2.5-7B", 3584, 18944, 28, 28, 4, 152064)
QWEN25_32B = ModelShape("Qwen2.5-32B", 5120, 27648, 64, 40, 8, 152064)
TINY = ModelShape("tiny", 64, 128, 2, 4, 2, 512)  # the CPU smoke test's


def random_model(shape: ModelShape, device: torch.device | str, dtype: torch.dtype = torch.bfloat16,
                 mlp_scale: float = 1.0, seed: int = 0, std: float = 0.02) -> Any:
    """A Qwen2 causal LM of `shape` with random weights, built on the meta device and filled on `device`: linear
    and embedding weights N(0, std), biases 0, norms 1; the rotary tables rebuilt there (`to_empty` leaves every
    buffer uninitialised)."""
    from transformers import AutoModelForCausalLM

    device = torch.device(device)
    config = shape.config(mlp_scale)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa")
    model.to_empty(device=device)
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            own = dict(module.named_parameters(recurse=False))
            if "Norm" in type(module).__name__:
                for p in own.values():
                    p.fill_(1.0)
                continue
            for name, p in own.items():
                p.zero_() if name == "bias" else p.normal_(0.0, std, generator=gen)
    for name, module in list(model.named_modules()):
        if type(module).__name__.endswith("RotaryEmbedding"):
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, type(module)(config=module.config).to(device))
    return model.eval()


def _memory(device: torch.device) -> int | None:
    return torch.cuda.memory_allocated(device) if device.type == "cuda" else None


def _reset_peak(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


@dataclass
class DecodeAtContext:
    context: int
    variant: str  # plain | full | confkv
    ms_per_token: float
    tokens_per_s: float
    prefill_s: float
    peak_bytes_over_weights: int | None  # device memory, prefill and decode together (None on CPU)
    kv_bytes: int
    kept_tokens: int  # mean over layers at the end
    bookkeeping_share: float | None  # share of the decode steps spent in end_forward (ours only)
    gate_open_rate: float | None


def decode_at_context(model: Any, context: int, steps: int = 32, confkv_overrides: dict | None = None,
                      seed: int = 0) -> list[DecodeAtContext]:
    """Per variant, alone on the device (so its peak is its own): prefill `context` random ids, decode `steps`
    timed as served (no extra synchronisation), then, for ours, as many steps again with the bookkeeping clock
    synchronised (`sync_for_timing`), which gives the bookkeeping's share without slowing the timed window."""
    device = next(model.parameters()).device
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(10, model.config.vocab_size - 10, (1, context), generator=gen)
    forced = torch.randint(10, model.config.vocab_size - 10, (steps,), generator=gen).tolist()
    policies = {"full": get_policy("full"), "confkv": get_policy("confkv", confkv_overrides or {})}
    steps = whole_cycles(steps, policies["confkv"].slack)
    forced = (forced * (steps // len(forced) + 1))[:steps]
    rows = []
    for variant in ("plain", "full", "confkv"):
        _reset_peak(device)
        weights = _memory(device)
        t0 = device_clock(device)
        run = PlainDecoder(model, ids) if variant == "plain" else SessionDecoder(model, ids, policies[variant])
        prefill_s = device_clock(device) - t0
        cache = getattr(getattr(run, "session", None), "cache", None)
        if cache is not None:
            cache.sync_for_timing = False
        t0 = device_clock(device)
        for tok in forced:
            run.step(tok)
        spent = device_clock(device) - t0
        _, kept, kv, gate = run.figures()  # after the timed steps: the same tokens for every variant
        share = None
        if cache is not None:  # the bookkeeping pass: its own device time over the same number of steps
            cache.sync_for_timing, cache.bookkeeping_s = device.type == "cuda", 0.0
            t0 = device_clock(device)
            for tok in forced:
                run.step(tok)
            share = cache.bookkeeping_s / (device_clock(device) - t0)
        peak = None if weights is None else torch.cuda.max_memory_allocated(device) - weights
        rows.append(DecodeAtContext(context, variant, spent / steps * 1000, steps / spent, prefill_s, peak, kv, kept,
                                    share, gate))  # fmt: skip
        del run, cache
    _reset_peak(device)
    return rows


@dataclass
class KVAfterGeneration:
    policy: str
    prompt_tokens: int
    asked: int  # tokens asked for
    generated: int  # tokens generated before the time limit
    kv_bytes: int  # the cache's resident bytes at the end (`ConfKVCache.memory`)
    alloc_bytes: int  # what its buffers hold allocated (capacity included)
    kv_bytes_arithmetic: int  # `bench memory`'s figure for what the cache keeps (K/V and each slot's bookkeeping)
    plain_kv_bytes: int  # K/V alone of every token seen: what a plain `DynamicCache` would hold
    peak_bytes_over_weights: int | None
    kept_tokens: int  # mean over layers
    gate_open_rate: float | None
    ms_per_token: float


def kv_after_generation(model: Any, shape: ModelShape, policy_name: str, n_new: int, prompt_tokens: int = 64,
                        time_limit_s: float | None = None, overrides: dict | None = None,
                        seed: int = 0) -> KVAfterGeneration:
    """Greedy generation, one token per step, then the resident KV bytes, beside `bench memory`'s arithmetic for the
    tokens the cache reports it kept."""
    device = next(model.parameters()).device
    policy = get_policy(policy_name, overrides or {})
    prompt = torch.randint(10, shape.vocab - 10, (1, prompt_tokens), generator=torch.Generator().manual_seed(seed))
    _reset_peak(device)
    weights = _memory(device)
    session = ConfKVSession(model, policy)
    logits = session.append(prompt)
    t0 = device_clock(device)
    generated = 0
    with session.attached():
        while generated < n_new:
            logits = session.step(int(torch.argmax(logits[0])))
            generated += 1
            if time_limit_s is not None and generated % 64 == 0 and time.perf_counter() - t0 > time_limit_s:
                break
    spent = device_clock(device) - t0
    mem = session.memory()
    peak = None if weights is None else torch.cuda.max_memory_allocated(device) - weights
    cache = session.cache
    cfg = shape.kv_config(model.dtype.itemsize)
    kept = round(sum(mem.kept_tokens) / len(mem.kept_tokens))
    arithmetic = cfg.cache_bytes(session.seen) if not policy.evicts else cfg.kept_bytes(kept, policy.int8_after)
    row = KVAfterGeneration(policy_name, prompt_tokens, n_new, generated, mem.kv_bytes, mem.alloc_bytes, arithmetic,
                            cfg.bytes(session.seen), peak, kept, cache.gate_open_rate,
                            spent / max(1, generated) * 1000)  # fmt: skip
    del session, cache
    _reset_peak(device)
    return row


def rows_as_dicts(rows: list[Any]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]
