"""The run key of a policy with `--set` overrides, pinned: resumed evals find their earlier runs by it.

The expected keys were computed at commit ca723b9, when the overrides still travelled to the runner as strings
(`AgentSettings(overrides={"n_low": "128", "tau": "0.4"})`, parsed again by `get_policy` in the runner). Building the
policy once at the CLI edge must leave them byte-identical. The agent identity (version, prompt hash) is fixed here
so that a new prompt, which rightly starts new runs, does not move the pin; a new policy key changes `to_dict` and so
this key too (old runs are then found through `KVPolicy.defaults()`): update the pin only for such a change.
"""

from __future__ import annotations

import pickle

import pytest
import typer

from cli.policies import build_policies
from runner import forced, worker
from runner.worker import AgentSettings, run_config
from traces.store import run_key

MODEL = "qwen2.5-coder-1.5b"
SETS = ["n_low=128", "tau=0.4"]
FREE_KEY = "687d40e2d1f10ca8"
FORCED_KEY = "793f2194382bc627"


@pytest.fixture
def agent_v9(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker, "agent_identity",
                        lambda reasoning, labels=True: {"version": 9, "prompt_sha": "5b35296818cd"})  # fmt: skip


def test_the_free_running_run_key_is_unchanged_and_survives_the_trip_to_a_worker(agent_v9: None) -> None:
    settings = AgentSettings(model=MODEL, policies=build_policies(["confkv"], SETS), max_steps=15, dtype="bf16")
    model, config = run_config("confkv", settings)
    assert (config["n_low"], config["tau"], config["n_high"]) == (128, 0.4, 512)
    assert run_key(model, "confkv", config) == FREE_KEY
    # spawned workers and Ray actors get the settings pickled: the same policy object, the same key
    shipped = pickle.loads(pickle.dumps(settings))
    assert shipped.policies == settings.policies
    model, config = run_config("confkv", shipped)
    assert run_key(model, "confkv", config) == FREE_KEY


def test_the_forced_run_key_is_unchanged() -> None:
    (spec,) = forced.forced_specs(build_policies(["confkv"], SETS), [])
    agent = {"constrained": True, "reasoning": False, "int8": False, "dtype": "bf16", "version": 9,
             "prompt_sha": "3af7f3a7299e"}  # fmt: skip
    assert run_key(MODEL, spec.label, forced.run_config(spec, agent)) == FORCED_KEY


def test_a_name_nobody_built_is_the_registered_preset_and_an_unknown_one_fails_early() -> None:
    from confkv.policies import PolicyError, get_policy

    settings = AgentSettings(model="m", policies=build_policies(["confkv"], ["n_low=128"]))
    assert settings.kv_policy("confkv").n_low == 128
    assert settings.kv_policy("sliding") == get_policy("sliding")  # no overrides were given for it
    with pytest.raises(PolicyError, match="unknown policy 'nope'"):
        worker.check_policy_names(["scripted", "nope"], settings)


def test_build_policies_errors_name_the_option() -> None:
    cases = {(("nope",), ()): ("--policies", "unknown policy 'nope'"),
             (("confkv",), ("bogus=1",)): ("--set", "unknown policy key 'bogus'"),
             (("confkv",), ("n_low",)): ("--set", "--set expects key=value"),
             (("confkv",), ("n_low=x\x1b[2J",)): ("--set", "expected int"),
             ((), ("n_low",)): ("--set", "--set expects key=value")}  # fmt: skip
    for (names, items), (hint, message) in cases.items():
        with pytest.raises(typer.BadParameter) as info:
            build_policies(list(names), list(items), policy_hint="--policies")
        assert info.value.param_hint == hint and message in info.value.message, (names, items)
        assert "\x1b" not in info.value.message and "\n" not in info.value.message
    built = build_policies(["full", "confkv", "full"], ["n_low=128"])
    assert list(built) == ["full", "confkv"] and built["confkv"].n_low == 128
