"""A tiny byte-level BPE chat tokenizer built in code (no download) for driving tiny random models as agents.

Byte-level like Qwen's and SmolLM's: every string is encodable, decoding one token at a time concatenates to the
full text. A few merges (`click`, `] [`, ...) give multi-character tokens so the constrained decoder's prefix walk
is exercised on tokens that span grammar segments. ChatML special tokens and a ChatML chat template.
"""

from __future__ import annotations

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
