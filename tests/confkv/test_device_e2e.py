"""The GPU check's end-to-end parts at tiny shapes on CPU: a model built on the meta device and filled on the target
is a working model (its rotary tables rebuilt), and the decode and KV-bytes measurements report what the cache holds."""

from __future__ import annotations

import torch

from confkv.bench.device_e2e import TINY, ModelShape, decode_at_context, kv_after_generation, random_model


def test_a_model_filled_after_the_meta_device_computes_as_one_built_normally():
    from transformers import AutoModelForCausalLM

    model = random_model(TINY, "cpu", torch.float32, seed=3)
    normal = AutoModelForCausalLM.from_config(TINY.config(), dtype=torch.float32, attn_implementation="sdpa").eval()
    normal.load_state_dict(model.state_dict())  # the weights; non-persistent buffers (rotary) are the model's own
    ids = torch.randint(10, 500, (1, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, normal(ids).logits, atol=1e-5)
    assert model.model.layers[0].input_layernorm.weight.eq(1).all()
    assert model.model.layers[0].self_attn.q_proj.bias.eq(0).all()
    narrow = random_model(TINY, "cpu", torch.float32, mlp_scale=0.5)
    assert narrow.model.layers[0].mlp.up_proj.out_features == TINY.intermediate // 2
    assert ModelShape("x", 5120, 27648, 64, 40, 8, 152064).kv_config(2).fp_token_bytes == 2 * 64 * 8 * 128 * 2


def test_decode_rows_and_kv_bytes_after_generation():
    model = random_model(TINY, "cpu", torch.float32)
    rows = decode_at_context(model, 600, steps=8)
    by = {r.variant: r for r in rows}
    assert list(by) == ["plain", "full", "confkv"] and all(r.ms_per_token > 0 for r in rows)
    assert by["full"].kept_tokens == by["plain"].kept_tokens > by["confkv"].kept_tokens  # confkv evicted past n_high
    assert by["plain"].bookkeeping_share is None and 0 < by["confkv"].bookkeeping_share < 1
    full = kv_after_generation(model, TINY, "full", 300)
    confkv = kv_after_generation(model, TINY, "confkv", 600, overrides={"n_low": "128", "n_high": "200"})
    assert full.generated == 300 and full.kv_bytes == full.kv_bytes_arithmetic  # our full: K/V plus slot bookkeeping
    assert full.plain_kv_bytes == (64 + 300) * TINY.kv_config(4).fp_token_bytes < full.kv_bytes
    assert confkv.kept_tokens < 260 and confkv.kv_bytes < full.kv_bytes
    assert abs(confkv.kv_bytes - confkv.kv_bytes_arithmetic) <= 0.05 * confkv.kv_bytes_arithmetic
    stopped = kv_after_generation(model, TINY, "full", 10_000, time_limit_s=0.0)
    assert stopped.generated == 64 and stopped.asked == 10_000  # the time limit is checked every 64 tokens


def test_the_cache_keyword_is_read_from_the_models_forward():
    """transformers renamed `past_key_values` to `cache` within 5.x; an unknown keyword is swallowed by **kwargs
    in the older forward, so the model silently builds its own cache: the keyword must be one forward declares."""
    import inspect

    from confkv.cache import cache_kwarg
    from confkv.testing import tiny_model

    for arch in ("llama", "qwen2", "gpt2"):
        model, _ = tiny_model(arch)
        assert cache_kwarg(model) in inspect.signature(type(model).forward).parameters

    class Older(torch.nn.Module):
        def forward(self, input_ids, past_key_values=None, **kwargs):
            return past_key_values

    assert cache_kwarg(Older()) == "past_key_values"
