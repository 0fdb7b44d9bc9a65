"""Tiny random models for unit tests, built from configs (no downloads, milliseconds to build), and a tiny chat
tokenizer to drive them as agents.

Three architectures cover what the cache must handle: Llama and Qwen2 (RoPE, grouped-query attention with 2 query
heads per KV head) and GPT-2 (learned absolute positions, no GQA). Weights are drawn under a fixed seed inside a
forked RNG, so every call with the same arguments gives the same model and the caller's RNG state is untouched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PreTrainedModel

ARCHS = ("llama", "qwen2", "gpt2")
TINY_VOCAB = 512

# The usual init (std 0.02) makes a tiny model's attention almost exactly uniform (entropy = log T), so rankers and
# oracle comparisons could not tell kept tokens from evicted ones; std 0.2 gives peaked attention (entropy ~2.2 of
# 4.16 nats over 64 tokens) and logits with std ~1.6, still finite in fp32.
INIT_STD = 0.2

_COMMON: dict[str, Any] = {
    "vocab_size": TINY_VOCAB,
    "initializer_range": INIT_STD,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "max_position_embeddings": 4096,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
}
_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {**_COMMON, "intermediate_size": 128, "num_key_value_heads": 2},
    "qwen2": {**_COMMON, "intermediate_size": 128, "num_key_value_heads": 2, "use_sliding_window": False},
    # GPT-2's config uses its own field names; these mirror the others (n_positions bounds absolute positions).
    "gpt2": {
        "vocab_size": TINY_VOCAB,
        "n_embd": 64,
        "n_layer": 2,
        "n_head": 4,
        "n_positions": 1024,
        "initializer_range": INIT_STD,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
    },
}
_GPT2_ALIASES = {
    "hidden_size": "n_embd",
    "num_hidden_layers": "n_layer",
    "num_attention_heads": "n_head",
    "max_position_embeddings": "n_positions",
}


def tiny_config(arch: str, **overrides: Any):
    """The config ``tiny_model`` builds from; overrides use the usual (Llama-style) names for every arch."""
    from transformers import GPT2Config, LlamaConfig, Qwen2Config

    if arch not in _DEFAULTS:
        raise ValueError(f"unknown tiny arch {arch!r}; choose one of {', '.join(ARCHS)}")
    kwargs = dict(_DEFAULTS[arch])
    for key, value in overrides.items():
        kwargs[_GPT2_ALIASES.get(key, key) if arch == "gpt2" else key] = value
    cls = {"llama": LlamaConfig, "qwen2": Qwen2Config, "gpt2": GPT2Config}[arch]
    return cls(**kwargs)


def tiny_model(
    arch: str, seed: int = 0, attn_implementation: str = "sdpa", **overrides: Any
) -> tuple[PreTrainedModel, int]:
    """A small random ``arch`` causal LM (fp32, sdpa, eval mode) and its vocab size.

    Defaults: 2 layers, hidden 64, 4 query heads, 2 KV heads for llama/qwen2, vocab 512, init std 0.2. Any config field can be
    overridden, e.g. ``tiny_model("llama", num_hidden_layers=3, num_key_value_heads=1)``; ``attn_implementation="eager"``
    gives the fallback attention path.
    """
    import torch
    from transformers import AutoModelForCausalLM

    config = tiny_config(arch, **overrides)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation=attn_implementation)
    model.eval()
    return model, config.vocab_size


# -- a tiny byte-level BPE chat tokenizer, built in code (no download), for driving tiny random models as agents ------
# Byte-level like Qwen's and SmolLM's: every string is encodable, decoding one token at a time concatenates to the
# full text. A few merges (`click`, `] [`, ...) give multi-character tokens so the constrained decoder's prefix walk
# is exercised on tokens that span grammar segments. ChatML special tokens and a ChatML chat template.
CHATML_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGE_WORDS = ["click", "type", "stop", "scroll", "Ġ[", "]Ġ[", "Ġthe"]


def tiny_chat_tokenizer(template: str = CHATML_TEMPLATE):
    """A `PreTrainedTokenizerFast` with 3 special tokens + 256 bytes + a few merges (< 512 ids, the tiny vocab)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    byte_chars = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    for ch in byte_chars:
        vocab[ch] = len(vocab)
    merges: list[tuple[str, str]] = []
    for word in MERGE_WORDS:
        for end in range(2, len(word) + 1):
            left, right = word[: end - 1], word[end - 1 : end]
            if word[:end] not in vocab:
                merges.append((left, right))
                vocab[word[:end]] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", bos_token="<|endoftext|>",
                                   pad_token="<|endoftext|>", additional_special_tokens=["<|im_start|>"])  # fmt: skip
    fast.chat_template = template
    return fast
