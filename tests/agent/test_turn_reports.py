"""The agent reports every decision it makes to its cache (`ModelAgent.end_turn`): the turn-level gate reads the
least confident choice of each reply; per-forward gates ignore it."""

from __future__ import annotations

import pytest

from agent.model_policy import ModelAgent
from confkv import get_policy
from confkv.testing import tiny_chat_tokenizer, tiny_model
from tests.runner.test_decisions import PAGES, _page

SMALL = {"n_low": "64", "n_high": "128", "tau": "0.5", "sinks": "2", "protect": "4", "int8_after": "none"}


@pytest.mark.parametrize("policy", ["confkv-turn", "confkv"])
def test_the_agent_reports_each_decision_to_its_cache(policy):
    model, _ = tiny_model("qwen2", seed=0, max_position_embeddings=8192)
    agent = ModelAgent(model, tiny_chat_tokenizer(), get_policy(policy, SMALL),
                       max_action_tokens=16, model_name="tiny")  # fmt: skip
    reported: list[float] = []
    agent.begin("open the cart")
    end_turn = agent.session.cache.end_turn
    agent.session.cache.end_turn = lambda c: (reported.append(c), end_turn(c))  # type: ignore[method-assign]
    last = None
    for k, nodes in enumerate(PAGES):
        action, info = agent.act(_page(nodes, k), last)
        last = f"OK: {action}"
        assert 0.0 <= reported[-1] <= 1.0
    assert len(reported) == len(PAGES)
    assert agent.session.cache.turn_decisions == (len(PAGES) if policy == "confkv-turn" else 0)
