"""Policies as plugins: a ranker or a gate with a parameter is one module plus one registry line, a preset is one
registry line, and every registered policy, ranker and gate runs on a tiny model (the matrix is read from the
registry)."""

from __future__ import annotations

import importlib
import textwrap
from pathlib import Path

import pytest
import torch

from confkv import ConfKVSession, get_policy
from confkv.gates import GATES, gate_params
from confkv.policies import BASELINES, PRESETS, ROLES, PolicyError, policy_names, registered
from confkv.policy import Gate, KVPolicy, Protection, RankerSpec, Storage
from confkv.rankers import RANKERS, ranker_params
from confkv.testing import tiny_model
from tests.confkv.oracle import oracle_logits
from tests.confkv.test_cache import SMALL, run_session

# A whole ranker module, as a contributor would write it: the class owns its parameter and the parameter's range.
STRIDE_RANKER = '''
from dataclasses import dataclass

import torch

from confkv.params import param
from confkv.rankers.base import Ranker


@dataclass
class StrideRanker(Ranker):
    """Keeps every `stride`-th position (and the newest): a ranker that needs no attention mass."""

    stride: int = param(4, 1)
    uses_attention = False

    def rank(self, acc: torch.Tensor, pos: torch.Tensor, now: int, protected=None) -> torch.Tensor:
        return (pos % self.stride == 0).float() + pos.float() / (now + 1)
'''


@pytest.fixture
def stride_ranker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "stride_ranker.py").write_text(textwrap.dedent(STRIDE_RANKER))
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("stride_ranker")
    monkeypatch.setitem(RANKERS, "stride", module.StrideRanker)  # the registry line
    yield module.StrideRanker


def test_a_ranker_with_a_parameter_is_one_module_and_one_registry_line(stride_ranker) -> None:
    small = {**SMALL, "n_low": "12", "n_high": "20", "int8_after": "none"}
    policy = get_policy("confkv", {**small, "ranker": "stride", "stride": "3"})
    assert policy.make_ranker() == stride_ranker(stride=3) and policy.stride == 3
    assert policy.to_dict()["stride"] == 3 and KVPolicy.keys()["stride"][0] == "ranking"
    assert not policy.wants_mass, "the ranker's own uses_attention decides whether attention returns mass"
    with pytest.raises(PolicyError, match=r"stride must be >= 1, got 0"):
        get_policy("confkv", {"ranker": "stride", "stride": "0"})
    with pytest.raises(PolicyError, match="expected int"):
        get_policy("confkv", {"ranker": "stride", "stride": "x"})
    assert get_policy("confkv").stride == 4, "a new key has its default in every policy (like alpha under h2o)"

    model, vocab = tiny_model("llama")
    ids = torch.randint(0, vocab, (1, 60), generator=torch.Generator().manual_seed(21))
    session, got = run_session(model, ids, policy, prefill=24)
    assert any(layer.evictions for layer in session.cache.layers)
    torch.testing.assert_close(got, oracle_logits(model, ids[:, :-1], session.cache)[:, 23:], atol=5e-5, rtol=1e-4)


def test_the_listing_and_keys_follow_the_registry(stride_ranker) -> None:
    from cli.policies import listing

    keys = {k["key"]: k for k in listing()["keys"]}
    assert keys["stride"]["default"] == 4 and keys["stride"]["allowed"] == ">= 1"
    assert keys["alpha"]["allowed"] == "in [0.0, 1.0]"
    assert [p["name"] for p in listing()["policies"]] == list(policy_names())


# A whole gate module: a two-level gate (n_low / n_high, hysteresis via `shrink`) that decides by its own parameter.
PERIODIC_GATE = '''
from dataclasses import dataclass

from confkv.gates.base import TwoLevelGate
from confkv.params import param


@dataclass
class Periodic:
    """Opens on every `period`-th judged forward (a stand-in for a gate that reads something else than tau)."""

    n_low: int
    n_high: int
    period: int
    seen: int = 0

    def budget(self, confidence):
        if confidence is None:
            return self.n_high
        self.seen += 1
        return self.n_high if self.seen % self.period == 0 else self.n_low

    @property
    def max_budget(self):
        return self.n_high


@dataclass(frozen=True)
class PeriodicGate(TwoLevelGate):
    period: int = param(4, 1)

    def inner(self):
        return Periodic(self.n_low, self.n_high, self.period)
'''


@pytest.fixture
def periodic_gate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "periodic_gate.py").write_text(textwrap.dedent(PERIODIC_GATE))
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("periodic_gate")
    monkeypatch.setitem(GATES, "periodic", module.PeriodicGate)  # the registry line
    yield module.PeriodicGate


def test_a_gate_with_a_parameter_is_one_module_and_one_registry_line(periodic_gate) -> None:
    small = {**SMALL, "n_low": "12", "n_high": "20", "int8_after": "none"}
    policy = get_policy("confkv", {**small, "gated": "periodic", "period": "3"})
    assert policy.gate.build() == periodic_gate(n_low=12, n_high=20, period=3) and policy.period == 3
    assert (policy.to_dict()["gated"], policy.to_dict()["period"]) == ("periodic", 3)
    assert KVPolicy.keys()["period"][0] == "gate" and policy.evicts and policy.gated
    with pytest.raises(PolicyError, match=r"period must be >= 1, got 0"):
        get_policy("confkv", {"gated": "periodic", "period": "0"})
    with pytest.raises(PolicyError, match="expected int"):
        get_policy("confkv", {"gated": "periodic", "period": "x"})
    with pytest.raises(PolicyError, match="unknown gate 'nope'"):
        get_policy("confkv", {"gated": "nope"})
    assert get_policy("confkv").period == 4, "a new key has its default in every policy (like n_low under sliding)"
    assert get_policy("confkv", {"gated": "periodic", "shrink": "4"}).schedule().inner.period == 4

    model, vocab = tiny_model("llama")
    ids = torch.randint(0, vocab, (1, 60), generator=torch.Generator().manual_seed(25))
    session, got = run_session(model, ids, policy, prefill=24)
    assert any(layer.evictions for layer in session.cache.layers)
    assert {12, 20} <= {s.budget for s in session.stats.steps} and 0 < session.cache.gate_open_rate < 0.5
    torch.testing.assert_close(got, oracle_logits(model, ids[:, :-1], session.cache)[:, 23:], atol=5e-5, rtol=1e-4)


def test_the_listing_shows_a_new_gate_and_its_key(periodic_gate) -> None:
    from cli.policies import listing

    keys = {k["key"]: k for k in listing()["keys"]}
    assert keys["period"]["default"] == 4 and keys["period"]["allowed"] == ">= 1"
    assert "'periodic'" in keys["gated"]["allowed"] and keys["tau"]["allowed"] == "in [0.0, 1.0]"
    assert list(keys)[:3] == ["budget", "gated", "n_low"], "the keys stored before gates were plugins keep their order"


def test_the_listing_names_each_policys_gate() -> None:
    from cli.policies import listing

    gates = {p["name"]: p["gate"] for p in listing()["policies"]}
    assert gates["sliding"] == gates["confkv-fixed"] == "fixed" and gates["confkv"] == "threshold"
    from cli.policies import _gate_name
    from confkv.gates import GATES

    assert _gate_name(type(get_policy("confkv", {"tau": "auto:0.3"}).gate.plugin), GATES) == "quantile"


def test_a_gate_key_must_not_clash_with_a_policy_key(monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import dataclass

    from confkv.gates import FixedGate
    from confkv.params import param

    @dataclass(frozen=True)
    class Clash(FixedGate):
        sinks: int = param(3, 1)

    monkeypatch.setitem(GATES, "clash", Clash)
    with pytest.raises(TypeError, match="'sinks' is already a policy key"):
        KVPolicy.keys()


def test_a_ranker_key_must_not_clash_with_a_policy_key(monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import dataclass

    from confkv.params import param
    from confkv.rankers import Ranker

    @dataclass
    class Clash(Ranker):
        budget: int = param(3, 1)

        def rank(self, acc, pos, now, protected=None):
            return acc

    monkeypatch.setitem(RANKERS, "clash", Clash)
    with pytest.raises(TypeError, match="'budget' is already a policy key"):
        KVPolicy.keys()


def test_a_preset_is_one_registry_line(monkeypatch: pytest.MonkeyPatch) -> None:
    mine = KVPolicy("h2o-small", Gate(budget=64), RankerSpec("h2o"), Protection(sinks=2, protect=8),
                    Storage(int8_after=8))
    monkeypatch.setitem(PRESETS, "h2o-small", mine)  # the registry line
    assert "h2o-small" in policy_names() and get_policy("h2o-small") == mine
    policy = get_policy("h2o-small", {**SMALL, "budget": "16", "int8_after": "4"})
    assert (policy.name, policy.budget, policy.int8_after, policy.ranker) == ("h2o-small", 16, 4, "h2o")
    model, vocab = tiny_model("qwen2")
    session = ConfKVSession(model, policy)
    session.append(torch.randint(0, vocab, (1, 40), generator=torch.Generator().manual_seed(22)))
    session.decode(3)
    assert all(layer.physical_length <= 16 for layer in session.cache.layers)


def test_the_benchmark_baselines_are_registered_and_roles_name_registered_policies() -> None:
    from confkv.bench import common, niah, ppl

    assert set(BASELINES) == {"confkv-fixed", "confkv-noint8", "sliding-int8", "h2o-int8", "random-int8"}
    assert all(name in registered() for names in ROLES.values() for name in names)
    assert common.FIXED_BASELINES == policy_names("fixed") and niah.POLICIES == ppl.MAIN == policy_names("main")
    assert policy_names("ablation-reference") == (ppl.NOINT8,)
    confkv = get_policy("confkv")
    fixed = common.fixed_policy(common.GATE_OFF, 300, {"n_low": "96"})
    assert (fixed.gated, fixed.budget, fixed.ranking, fixed.int8_after, fixed.n_low, fixed.slack) == (
        False, 300, confkv.ranking, confkv.int8_after, 96, 0)
    noint8 = get_policy("confkv-noint8")
    assert (noint8.int8_after, noint8.gate, noint8.ranking) == (None, confkv.gate, confkv.ranking)
    with pytest.raises(PolicyError, match="unknown policy role"):
        policy_names("nope")


def _small(name: str) -> KVPolicy:
    """A registered policy at tiny-model sizes, INT8 off (so the oracle is exact)."""
    base = registered()[name]
    over = {**SMALL, "int8_after": "none"}
    if base.gated:
        over.update(n_low="12", n_high="20", tau="0.3")
    elif base.budget is not None:
        over["budget"] = "12"
    return get_policy(name, over)


@pytest.mark.parametrize("name", policy_names())
def test_every_registered_policy_matches_the_oracle(name: str) -> None:
    policy = _small(name)
    model, vocab = tiny_model("qwen2")
    ids = torch.randint(0, vocab, (1, 56), generator=torch.Generator().manual_seed(23))
    session, got = run_session(model, ids, policy, prefill=24)
    assert any(layer.evictions for layer in session.cache.layers) == policy.evicts
    torch.testing.assert_close(got, oracle_logits(model, ids[:, :-1], session.cache)[:, 23:], atol=5e-5, rtol=1e-4)


@pytest.mark.parametrize("ranker", list(RANKERS))
def test_every_registered_ranker_builds_from_its_keys_and_evicts(ranker: str) -> None:
    cls = RANKERS[ranker]
    small = {**SMALL, "ranker": ranker, "n_low": "12", "n_high": "20", "int8_after": "4"}
    defaults = {key: str(f.default) for key, (f, _rng) in ranker_params(cls).items()}
    policy = get_policy("confkv", {**small, **defaults})
    assert type(policy.make_ranker()) is cls and policy == get_policy("confkv", small)
    model, vocab = tiny_model("llama")
    session = ConfKVSession(model, policy, record_evictions=True)
    session.append(torch.randint(0, vocab, (1, 40), generator=torch.Generator().manual_seed(24)))
    session.decode(2)
    assert any(layer.evictions for layer in session.cache.layers)


@pytest.mark.parametrize("gate", list(GATES))
def test_every_registered_gate_builds_from_its_keys_and_evicts(gate: str) -> None:
    cls = GATES[gate]
    # tiny sizes and a threshold that opens, for whichever of these keys the gate declares
    sizes = {"budget": "12", "n_low": "12", "n_high": "20", "tau": "0.3", "tau_quantile": "0.3"}
    small = {**SMALL, "gated": gate, "int8_after": "none",
             **{k: v for k, v in sizes.items() if k in gate_params(cls)}}
    policy = get_policy("confkv", small)
    assert type(policy.gate.build()) is cls and policy.gate.kind == gate
    defaults = {key: str(f.default) for key, (f, _rng) in gate_params(cls).items() if key not in small}
    assert get_policy("confkv", {**small, **defaults}) == policy
    model, vocab = tiny_model("qwen2")
    ids = torch.randint(0, vocab, (1, 56), generator=torch.Generator().manual_seed(26))
    session, got = run_session(model, ids, policy, prefill=24)
    assert any(layer.evictions for layer in session.cache.layers)
    torch.testing.assert_close(got, oracle_logits(model, ids[:, :-1], session.cache)[:, 23:], atol=5e-5, rtol=1e-4)
