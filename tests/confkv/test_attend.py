"""Attention computes and returns; the layer stores: `attend` leaves the layer as it found it, and what it returns
is what the adapter transformers calls hands to the layer."""

from __future__ import annotations

import torch

from confkv import ConfKVSession, get_policy
from confkv.attention import attend
from confkv.layer import LayerView
from confkv.testing import tiny_model
from tests.confkv.test_cache import SMALL


def test_attend_returns_mass_and_query_and_writes_nothing_onto_the_layer() -> None:
    model, vocab = tiny_model("qwen2")
    policy = get_policy("confkv-recall", {**SMALL, "n_low": "12", "n_high": "20", "int8_after": "4", "cold": "64"})
    session = ConfKVSession(model, policy)
    session.append(torch.randint(0, vocab, (1, 40), generator=torch.Generator().manual_seed(31)))
    layer = session.cache.layers[0]
    before = {k: (v if isinstance(v, int | float | bool) else id(v)) for k, v in vars(layer).items()}
    query = torch.randn(1, 4, 1, 16, generator=torch.Generator().manual_seed(32))
    got = attend(query, LayerView(layer, 1), 0.25)
    assert {k: (v if isinstance(v, int | float | bool) else id(v)) for k, v in vars(layer).items()} == before
    assert got.out.shape == (1, 4, 1, 16) and got.mass.shape == (1, 2, layer.physical_length)
    torch.testing.assert_close(got.mass.sum(-1), torch.ones(1, 2))  # a probability over the kept keys
    assert torch.equal(got.last_query, query[:, :, -1])

    layer.keep_attention(got.mass, got.last_query)  # what `confkv_attention` does with it
    assert layer.take_mass() is got.mass and layer.last_query is got.last_query
