"""The policy as one object: a new ranker is one class plus a registry line, eviction runs once per forward after
all layers with the budget of that forward's own logits, and `attach` scopes the attention switch."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from confkv import ConfKVCache, ConfKVSession, attach, get_policy
from confkv.layer import NotAttachedError
from confkv.policies import PRESETS
from confkv.policy import KVPolicy
from confkv.rankers import RANKERS, Ranker
from confkv.testing import tiny_model
from tests.confkv.oracle import oracle_logits
from tests.confkv.test_cache import SMALL, run_session


def test_a_mass_only_ranker_is_one_class_and_one_registry_line(monkeypatch: pytest.MonkeyPatch) -> None:
    @dataclass
    class LastMassRanker(Ranker):
        """Keeps the tokens the latest call attended most (no history): needs only the mass."""

        calls: int = 0

        def accumulate(self, acc: torch.Tensor, mass: torch.Tensor, queries: int = 1) -> torch.Tensor:
            return acc.copy_(mass)

        def rank(self, acc: torch.Tensor, pos: torch.Tensor, now: int, protected=None) -> torch.Tensor:
            self.calls += 1
            return acc

    monkeypatch.setitem(RANKERS, "last-mass", LastMassRanker)  # the registry line
    model, vocab = tiny_model("qwen2")
    ids = torch.randint(0, vocab, (1, 60), generator=torch.Generator().manual_seed(11))
    policy = get_policy("confkv", {**SMALL, "ranker": "last-mass", "n_low": "12", "n_high": "20", "int8_after": "none"})
    session, got = run_session(model, ids, policy, prefill=24)
    assert all(r.calls > 0 for r in session.cache.rankers), "the new ranker must decide the evictions"
    assert any(layer.evictions for layer in session.cache.layers)
    torch.testing.assert_close(got, oracle_logits(model, ids[:, :-1], session.cache)[:, 23:], atol=5e-5, rtol=1e-4)


def test_the_budget_of_a_forward_applies_right_after_it() -> None:
    """No lag: a confident first prefill is cut to n_low at once (the cautious n_high is only the budget before any
    logits exist), and every layer holds its budget right after the call that decided it."""
    model, vocab = tiny_model("llama")
    policy = get_policy("confkv", {**SMALL, "n_low": "12", "n_high": "20", "tau": "0", "int8_after": "none"})
    session = ConfKVSession(model, policy)
    assert session.cache.layer_budgets == [20, 20]
    session.append(torch.randint(0, vocab, (1, 30), generator=torch.Generator().manual_seed(12)))
    assert session.cache.global_budget == 12
    assert [layer.physical_length for layer in session.cache.layers] == [12, 12]


def test_eviction_runs_once_per_forward_after_every_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    model, vocab = tiny_model("gpt2", num_hidden_layers=3)
    session = ConfKVSession(model, get_policy("sliding", {**SMALL, "budget": "16"}))
    calls: list[tuple[int, bool]] = []
    order: list[str] = []
    fold, settle = KVPolicy.fold, KVPolicy.settle

    def spy_fold(self, layer, ranker):
        calls.append((layer.layer_idx, all(other.new_tokens for other in session.cache.layers)))
        order.append("fold")
        return fold(self, layer, ranker)

    def spy_settle(self, layer, *args):
        order.append("settle")
        return settle(self, layer, *args)

    monkeypatch.setattr(KVPolicy, "fold", spy_fold)
    monkeypatch.setattr(KVPolicy, "settle", spy_settle)
    session.append(torch.randint(0, vocab, (1, 20), generator=torch.Generator().manual_seed(13)))  # 2 chunks
    session.step(5)
    assert [i for i, _ in calls] == [0, 1, 2] * 3
    assert order == (["fold"] * 3 + ["settle"] * 3) * 3, "every layer's mass is folded before any layer evicts"
    assert [ready for i, ready in calls if i == 0] == [True] * 3, "layer 0 evicts only after the last layer ran"


def test_attach_scopes_the_attention_switch_and_plain_forwards_work_after_it() -> None:
    model, vocab = tiny_model("llama")
    ids = torch.randint(0, vocab, (1, 12), generator=torch.Generator().manual_seed(14))
    with torch.no_grad():
        plain = model(ids).logits
    cache = ConfKVCache(model, get_policy("full"))
    assert model.config._attn_implementation == "sdpa", "creating a cache must not touch the model"
    with attach(model, cache):
        assert model.config._attn_implementation == "confkv" and len(model._forward_hooks) == 1
        with torch.no_grad():
            ours = model(ids, cache=cache).logits
    assert model.config._attn_implementation == "sdpa" and len(model._forward_hooks) == 0
    torch.testing.assert_close(ours, plain, atol=2e-5, rtol=1e-4)
    session = ConfKVSession(model, get_policy("confkv", SMALL | {"n_low": "12", "n_high": "20", "int8_after": "4"}))
    session.append(ids)
    session.decode(3)
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, plain)  # the session left the model plain
    with pytest.raises(NotAttachedError, match="outside `with confkv.attach"), torch.no_grad():
        model(ids, cache=ConfKVCache(model, get_policy("full")))


def test_every_preset_round_trips_through_its_flat_keys() -> None:
    for name, preset in PRESETS.items():
        flat = preset.to_dict()
        assert flat.pop("name") == name and set(flat) == set(KVPolicy.keys())
        rebuilt = get_policy(name, {k: "none" if v is None else ",".join(map(str, v)) if isinstance(v, tuple)
                                    else str(v) for k, v in flat.items()})
        assert rebuilt == preset
    assert get_policy("confkv", {"ema_decay": "0.5"}).ranking.ema_decay == 0.5


def test_a_policy_composes_from_parts_like_a_preset_with_overrides() -> None:
    from confkv.policy import Gate, Protection, RankerSpec, Storage

    composed = KVPolicy("confkv", Gate(gated=True, n_low=96, n_high=192, tau=0.5), RankerSpec("ema"),
                        Protection(sinks=4, protect=32), Storage(int8_after=32)).validate()
    assert composed == get_policy("confkv", {"n_low": "96", "n_high": "192", "protect": "32", "int8_after": "32"})
    assert (composed.n_low, composed.protected, composed.ranker, composed.wants_mass) == (96, 32, "ema", True)
    with pytest.raises(AttributeError):
        composed.no_such_key  # noqa: B018
