"""Pins are in force before the tokens they protect are appended, for every registered KV policy (issue 16).

The system prompt is longer than both `prefill_chunk` and the budget here, so a pin set after the append (the old
code) finds most of it already evicted between chunks; the test fails on that.
"""

from __future__ import annotations

import pytest
import torch

from agent.model_policy import ModelAgent
from agent.observation import Observation
from confkv.policies import PRESETS, get_policy
from confkv.testing import tiny_chat_tokenizer, tiny_model


def _small_policy(name: str):
    """The preset with a budget of 24-48 tokens, 64-token prefill chunks and small protected/FP windows."""
    base = PRESETS[name]
    overrides = {"prefill_chunk": "64"}
    if base.gate.gated:
        overrides.update(n_low="24", n_high="48")
    elif base.gate.budget is not None:
        overrides["budget"] = "48"
    if base.protection.protect:
        overrides["protect"] = "8"
    if base.storage.int8_after:
        overrides["int8_after"] = "16"
    return get_policy(name, overrides)


def _kept(policy: ModelAgent) -> list[set[int]]:
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
    agent = ModelAgent(model, tok, kv, max_action_tokens=6, model_name="tiny")
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
    session = ConfKVSession(model, get_policy("sliding", {"budget": "16", "prefill_chunk": "8", "slack": "8"}))
    session.append(torch.arange(3, 43), pin=True)  # 40 tokens in 5 chunks, budget 16
    session.append(torch.arange(3, 43))  # unpinned: the budget applies
    for layer in session.cache.layers:
        kept = set(layer.positions()[0, 0].tolist())
        assert set(range(40)) <= kept and layer.physical_length <= 40 + 16 + 8  # pins + budget + slack


def test_the_system_prompt_is_prefilled_once_per_process_and_forked_per_episode(tiny):
    from agent.model_policy import _PREFIXES

    model, tok = tiny
    kv = _small_policy("confkv")
    _PREFIXES.pop(model, None)
    page = "\n".join(f"[{i}] link 'row {i}'" for i in range(12))
    obs = Observation(text=page, url="http://127.0.0.1/y", title="t", tabs=["t"], active_tab=0,
                      nodes={i: ("link", f"row {i}") for i in range(12)})
    first = ModelAgent(model, tok, kv, max_action_tokens=8, model_name="tiny")
    first.begin("open row 3")
    assert not first.prefix_reused
    reply1, info1 = first.act(obs, None)
    calls = []
    handle = model.register_forward_hook(lambda *a: calls.append(1))
    try:
        second = ModelAgent(model, tok, kv, max_action_tokens=8, model_name="tiny")
        second.begin("open row 3")
        assert second.prefix_reused and calls == [] and second.system_tokens == first.system_tokens
        reply2, info2 = second.act(obs, None)
    finally:
        handle.remove()
    assert reply2 == reply1 and [t.confidence for t in info2.tokens] == [t.confidence for t in info1.tokens]
    assert info2.kept_tokens_per_layer == info1.kept_tokens_per_layer
    for kept in _kept(second):  # the fork keeps the pin: the whole system prompt is still there
        assert set(range(second.system_tokens)) <= kept
