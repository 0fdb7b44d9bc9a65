"""The turn-level gate (issue 37): one budget per agent decision, held until the next, set from that decision's
least confident choice; per-forward confidences never move it."""

from __future__ import annotations

import pytest
import torch

from confkv import ConfKVSession, get_policy
from confkv.budget import Hysteresis, TurnBudget
from confkv.testing import tiny_model

SMALL = {"n_low": "12", "n_high": "24", "tau": "0.5", "sinks": "2", "protect": "4", "int8_after": "none", "slack": "0"}


def test_the_budget_is_held_between_decisions_whatever_each_forward_says():
    gate = TurnBudget(n_low=10, n_high=20, tau=0.5)
    assert [gate.budget(c) for c in (None, 0.99, 0.01)] == [20, 20, 20]  # no decision yet: cautious
    assert gate.end_turn(0.9) is False
    assert [gate.budget(c) for c in (0.01, 0.2)] == [10, 10]  # a sure decision: n_low, however unsure the page
    assert gate.end_turn(0.3) is True and gate.budget(0.99) == 20


def test_hysteresis_paces_the_closing_of_a_turn_gate():
    gate = Hysteresis(TurnBudget(n_low=10, n_high=20, tau=0.5), shrink=4)
    assert gate.budget(None) == 20
    gate.end_turn(0.9)
    assert [gate.budget(0.9) for _ in range(4)] == [16, 12, 10, 10]


def _kept(session: ConfKVSession) -> int:
    return max(layer.physical_length for layer in session.cache.layers)


def test_an_unsure_decision_keeps_more_of_the_next_turn_and_the_open_rate_counts_turns():
    policy = get_policy("confkv-turn", SMALL)
    model, vocab = tiny_model("qwen2")
    ids = torch.randint(0, vocab, (1, 120), generator=torch.Generator().manual_seed(31))
    kept = {}
    for label, decision in (("sure", 0.95), ("unsure", 0.05)):
        session = ConfKVSession(model, policy)
        session.append(ids[:, :60])
        session.cache.end_turn(decision)
        session.append(ids[:, 60:])  # the next observation arrives
        kept[label] = _kept(session)
        assert session.cache.gate_open_rate == (1.0 if label == "unsure" else 0.0)
    assert kept == {"sure": 12, "unsure": 24}


def test_with_a_cold_tier_an_unsure_decision_brings_older_turns_back():
    """Without a cold tier the turn gate can only stop evicting what comes next; `confkv-turn-recall` refills the
    room an unsure decision opens with tokens a sure one let go."""
    model, vocab = tiny_model("qwen2")
    ids = torch.randint(0, vocab, (1, 80), generator=torch.Generator().manual_seed(33))
    kept = {}
    for name in ("confkv-turn", "confkv-turn-recall"):
        session = ConfKVSession(model, get_policy(name, {**SMALL, "recall_block": "1"}))
        session.append(ids[:, :60])  # no decision yet: n_high
        session.cache.end_turn(0.95)  # sure: n_low, the rest of the first turn is let go
        session.append(ids[:, 60:70])
        session.cache.end_turn(0.05)  # unsure
        session.append(ids[:, 70:71])  # the next turn's first token
        kept[name] = _kept(session)
        assert session.cache.turn_opens == 1
    assert kept["confkv-turn"] == 13 and kept["confkv-turn-recall"] == 24  # 12 + 1 new; refilled to n_high


@pytest.mark.parametrize("extra", [{}, {"shrink": "4"}])
def test_gates_that_decide_per_forward_ignore_turns(extra):
    model, vocab = tiny_model("qwen2")
    session = ConfKVSession(model, get_policy("confkv", {**SMALL, **extra}))
    session.append(torch.randint(0, vocab, (1, 40), generator=torch.Generator().manual_seed(32)))
    rate = session.cache.gate_open_rate
    session.cache.end_turn(0.01)
    assert session.cache.turn_decisions == 0 and session.cache.gate_open_rate == rate
