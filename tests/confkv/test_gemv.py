"""`RowGemvLinear`: one-row bf16 calls through the measured row kernel (`torch.mv` by default), everything else
exactly `F.linear`."""

from __future__ import annotations

import torch

from confkv.models.gemv import RowGemvLinear, row_gemv_linears
from confkv.testing import tiny_model


def test_swap_keeps_the_parameters_and_skips_fp32():
    model, _ = tiny_model("llama")
    assert row_gemv_linears(model) == 0  # fp32: nothing to gain
    assert row_gemv_linears(tiny_model("llama")[0].to(torch.float16)) == 0  # fp16 addmv is slower on CPU
    model = model.to(torch.bfloat16)
    linears = {n: m for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    weights = {n: m.weight for n, m in linears.items()}
    assert row_gemv_linears(model) == len(linears) > 0
    for name, module in model.named_modules():
        if name in linears:
            assert type(module) is RowGemvLinear and module.weight is weights[name]  # same tensor: ties survive
    assert row_gemv_linears(model) == 0  # idempotent


def test_one_row_matches_linear_and_many_rows_are_exact():
    torch.manual_seed(0)
    plain = torch.nn.Linear(64, 96, bias=True).to(torch.bfloat16)
    holder = torch.nn.Sequential(plain)
    row_gemv_linears(holder)
    fast = holder[0]
    assert type(fast) is RowGemvLinear
    one = torch.randn(1, 1, 64, dtype=torch.bfloat16)
    ref = torch.nn.functional.linear(one.float(), plain.weight.float(), plain.bias.float())
    out = fast(one)
    assert out.shape == (1, 1, 96) and out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref, atol=0.1, rtol=0.02)  # bf16 rounding of a 64-term sum
    many = torch.randn(1, 5, 64, dtype=torch.bfloat16)
    assert torch.equal(fast(many), torch.nn.functional.linear(many, plain.weight, plain.bias))


def test_a_bf16_models_decode_logits_stay_close_after_the_swap():
    from transformers import DynamicCache

    model, _ = tiny_model("llama")
    model = model.to(torch.bfloat16)
    ids, nxt = torch.tensor([list(range(3, 40))]), torch.tensor([[41]])

    def step() -> torch.Tensor:
        cache = DynamicCache()
        with torch.no_grad():
            model(ids, cache=cache, use_cache=True)
            return model(nxt, cache=cache, use_cache=True).logits.float()

    before = step()
    assert row_gemv_linears(model) > 0
    after = step()
    torch.testing.assert_close(after, before, atol=0.05, rtol=0.05)
