"""Conf-KV on a real pretrained model (SmolLM2-135M from its PyPI package): the integration check of issue 2."""

from __future__ import annotations

import pytest
import torch

from confkv.generation import generate, plain_generate
from confkv.policies import get_policy

PROMPT = "The three most important inventions of the industrial revolution were"


@pytest.fixture(scope="module")
def smollm2():
    from confkv.models import DownloadError, load

    try:
        return load("smollm2-135m")
    except DownloadError as exc:
        pytest.skip(f"smollm2-135m could not be downloaded from the package registry: {exc}")


@pytest.mark.model
def test_full_policy_gives_the_same_tokens_as_plain_generate(smollm2) -> None:
    model, tok = smollm2
    ours = generate(model, tok, PROMPT, get_policy("full"), max_new_tokens=48, ignore_eos=True)
    plain = plain_generate(model, tok, PROMPT, 48, chat=False, ignore_eos=True)
    assert ours.token_ids == plain
    # Our slots also keep a position and an accumulator per token and head (12 of SmolLM2's 512 bytes per head).
    assert ours.full_kv_bytes < ours.peak_kv_bytes <= 1.03 * ours.full_kv_bytes


@pytest.mark.model
def test_confkv_evicts_and_quantizes_on_a_real_model(smollm2) -> None:
    model, tok = smollm2
    # slack 16 of these small budgets (the default 32 would be 40-67% of them and bound the footprint less tightly)
    policy = get_policy("confkv", {"n_low": "48", "n_high": "80", "protect": "16", "int8_after": "16", "slack": "16"})
    result = generate(model, tok, PROMPT, policy, max_new_tokens=120, ignore_eos=True)
    assert len(result.token_ids) == 120
    assert max(s["kept_tokens"] for s in result.steps) <= 80
    assert {s["budget"] for s in result.steps} <= {48, 80}
    assert result.peak_kv_bytes < 0.35 * result.full_kv_bytes
    assert all(0.0 <= s["confidence"] <= 1.0 for s in result.steps)
    words = result.text.split()
    assert len(words) > 40 and len(set(words)) > 15, f"degenerate text: {result.text!r}"
    assert not torch.isnan(torch.tensor([s["confidence"] for s in result.steps])).any()
