"""Fidelity of the rankers' inputs against dense attention (issue 12): each test fails on the old behaviour."""

from __future__ import annotations

import torch

from confkv.policies import get_policy
from confkv.session import ConfKVSession
from confkv.testing import tiny_model


def _dense_probs(arch: str, ids: torch.Tensor) -> list[torch.Tensor]:
    """Per-layer eager attention probabilities `[B, Hq, L, L]` of one full forward."""
    model, _ = tiny_model(arch, attn_implementation="eager")
    with torch.no_grad():
        return list(model(ids, output_attentions=True).attentions)


def test_h2o_sums_a_prefill_chunk_over_its_queries() -> None:
    """H2O's score is attention mass summed over every query since the token arrived: after one 20-token chunk,
    each key's accumulator is the column sum of the dense attention matrix (GQA group mean), not the per-call mean
    (the old behaviour, 20x too small, which let one decode step weigh as much as a whole prefill chunk)."""
    model, vocab = tiny_model("llama")
    ids = torch.randint(0, vocab, (1, 20), generator=torch.Generator().manual_seed(3))
    policy = get_policy("h2o", {"budget": "64", "sinks": "2", "protect": "4", "prefill_chunk": "32"})
    session = ConfKVSession(model, policy)
    session.append(ids)
    for layer, probs in zip(session.cache.layers, _dense_probs("llama", ids), strict=True):
        b, hq, _, t = probs.shape
        h_kv = layer.n_kv_heads
        want = probs.sum(dim=2).view(b, h_kv, hq // h_kv, t).mean(dim=2)
        torch.testing.assert_close(layer.fp.view("acc"), want, rtol=1e-4, atol=1e-5)
