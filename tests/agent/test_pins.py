"""Pins are in force before the tokens they protect are appended, for every registered KV policy (issue 16).

The system prompt is longer than both `prefill_chunk` and the budget here, so a pin set after the append (the old
code) finds most of it already evicted between chunks; the test fails on that.
"""

from __future__ import annotations

import pytest
import torch

from agent.model_policy import ModelPolicy
from agent.observation import Observation
from confkv.policies import PRESETS, get_policy
from confkv.testing import tiny_model
from tests.agent.tiny_chat import tiny_chat_tokenizer

SMALL = {"n_low": "24", "n_high": "48", "budget": "48", "prefill_chunk": "64", "protect": "8", "int8_after": "16"}


def _small_policy(name: str):
    overrides = {k: v for k, v in SMALL.items() if k in PRESETS[name] or k == "prefill_chunk"}
    return get_policy(name, overrides)


def _kept(policy: ModelPolicy) -> list[set[int]]:
    """Per layer, the positions every KV head (of batch row 0) still holds."""
    out = []
    for layer in policy.session.cache.layers:
        pos = layer.positions()[0]
        heads = [set(row.tolist()) for row in pos]
        out.append(set.intersection(*heads))
    return out


@pytest.fixture(scope="module")
def tiny():
    model, _ = tiny_model("qwen2", max_position_embeddings=32768)
    return model, tiny_chat_tokenizer()


@pytest.mark.parametrize("name", list(PRESETS))
def test_system_prompt_and_current_turn_are_kept_under_every_policy(tiny, name):
    model, tok = tiny
    kv = _small_policy(name)
    agent = ModelPolicy(model, tok, kv, max_action_tokens=6, model_name="tiny")
    agent.begin("find the cheapest lamp")
    system = agent.system_tokens
    assert system > kv.prefill_chunk and (kv.schedule() is None or system > kv.schedule().budget(None))
    for kept in _kept(agent):
        assert set(range(system)) <= kept, f"{name}: system prompt tokens were evicted before the pin"

    page = "\n".join(f"[{i}] link 'item number {i}'" for i in range(40))  # a turn longer than chunk and budget
    obs = Observation(text=page, url="http://127.0.0.1/x", title="t", tabs=["t"], active_tab=0,
                      nodes={i: ("link", f"item number {i}") for i in range(40)})
    seen_during: list[list[set[int]]] = []
    decode = agent.session.decode

    def watch(*args, **kwargs):  # snapshot the cache right after the turn's prefill, before any decoding
        seen_during.append(_kept(agent))
        return decode(*args, **kwargs)

    agent.session.decode = watch
    start = agent.session.seen
    agent.act(obs, None)
    turn_end = start + (agent.session.stats.prefilled_tokens - system)
    for kept in seen_during[0]:
        assert set(range(system)) <= kept, f"{name}: system prompt lost while deciding"
        assert set(range(start, turn_end)) <= kept, f"{name}: the turn being decided was evicted"
    agent.act(obs, "OK")  # a second turn: the first one is released and the budget governs it again
    if kv.evicts:
        for kept in _kept(agent):
            assert set(range(system)) <= kept
            assert not set(range(start, turn_end)) <= kept, f"{name}: an old turn stayed pinned"

def test_pin_before_append_protects_a_long_chunked_prefill(tiny):
    from confkv.session import ConfKVSession

    model, _ = tiny
    session = ConfKVSession(model, get_policy("sliding", {"budget": "16", "prefill_chunk": "8"}))
    session.append(torch.arange(3, 43), pin=True)  # 40 tokens in 5 chunks, budget 16
    session.append(torch.arange(3, 43))  # unpinned: the budget applies
    for layer in session.cache.layers:
        kept = set(layer.positions()[0, 0].tolist())
        assert set(range(40)) <= kept and layer.physical_length <= 40 + 16 + 8
