"""`confkv-agent run` / `eval` through typer's runner: clear errors with exit code 2, and a scripted eval."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app

TASKS = Path(__file__).resolve().parents[2] / "tasks"
runner = CliRunner()


def _invoke(args: list[str]):
    return runner.invoke(app, args)


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", str(TASKS / "shopping_001.yaml"), "--policy", "nope"], "unknown policy 'nope'"),
        (["run", str(TASKS / "shopping_001.yaml"), "--set", "bogus=1"], "unknown policy key 'bogus'"),
        (["run", str(TASKS / "shopping_001.yaml"), "--model", "no-such-model"], "unknown model 'no-such-model'"),
        (["run", str(TASKS / "shopping_001.yaml"), "--model", "./missing/dir"], "does not exist"),
        (["run", "missing.yaml", "--policy", "scripted"], "cannot read: No such file"),
        (["eval", str(TASKS / "shopping_001.yaml"), "--policies", "full,bogus"], "unknown policy 'bogus'"),
    ],
)
def test_bad_input_is_a_clear_error_with_exit_code_2(args, message, tmp_path):
    db = tmp_path / "t.sqlite"
    result = _invoke([*args, "--db", str(db)])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not db.exists()  # nothing was started or written


def test_malformed_task_file_names_the_problem(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("task_id: 1\nsites: [shopping]\nintent: x\nstart_url: __SHOPPING__/\n")
    result = _invoke(["run", str(bad), "--policy", "scripted", "--db", str(tmp_path / "t.sqlite")])
    assert result.exit_code == 2 and "eval: required key is missing" in result.output


@pytest.mark.browser
def test_scripted_eval_prints_the_promised_json_and_resumes(tmp_path):
    db = tmp_path / "t.sqlite"
    args = ["eval", str(TASKS / "shopping_001.yaml"), str(TASKS / "shopping_002.yaml"), "--policies", "scripted",
            "--db", str(db), "--json"]  # fmt: skip
    first = _invoke(args)
    assert first.exit_code == 0, first.output
    doc = json.loads(first.stdout[first.stdout.index("{") :])
    scripted = doc["policies"]["scripted"]
    assert scripted["episodes"] == 2 and scripted["success_rate"] == 1.0
    assert {"retention_vs_full", "peak_kv_ratio_vs_full"} <= scripted.keys()
    again = _invoke(args)
    assert "0 episodes to run, 2 already finished" in again.output


def test_eval_hands_the_runner_the_policies_built_once_with_their_overrides(monkeypatch, tmp_path):
    import runner.batch
    from confkv.policies import get_policy
    from traces.summary import summarize

    seen = {}

    def fake_run_batch(tasks, names, settings, db, **kw):
        seen.update(names=names, settings=settings)
        return None, summarize([])

    monkeypatch.setattr(runner.batch, "run_batch", fake_run_batch)
    result = _invoke(["eval", str(TASKS / "shopping_001.yaml"), "--policies", "full,confkv,scripted", "--set",
                      "n_low=128", "--set", "tau=0.4", "--dtype", "fp32", "--db", str(tmp_path / "t.sqlite"),
                      "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert seen["names"] == ["full", "confkv", "scripted"]
    policies = seen["settings"].policies
    assert list(policies) == ["full", "confkv"]  # `scripted` has no cache
    assert policies["confkv"] == get_policy("confkv", {"n_low": 128, "tau": 0.4})
    assert policies["full"] == get_policy("full", {"n_low": 128, "tau": 0.4})  # --set applies to every policy


def test_free_eval_at_a_footprint_builds_the_forced_modes_policies(monkeypatch, tmp_path):
    """`eval --budgets` in free mode (retention at the frontier's bytes) must run the very policy the forced mode
    scores under the same label."""
    import runner.batch
    from confkv.policies import get_policy
    from confkv.testing import tiny_chat_tokenizer, tiny_model
    from runner.footprint import at_footprint, footprint_slots
    from traces.summary import summarize

    model, _ = tiny_model("qwen2")
    model.save_pretrained(tmp_path / "m", safe_serialization=True)
    tiny_chat_tokenizer().save_pretrained(tmp_path / "m")
    seen = {}

    def fake_run_batch(tasks, names, settings, db, **kw):
        seen.update(names=names, settings=settings)
        return None, summarize([])

    monkeypatch.setattr(runner.batch, "run_batch", fake_run_batch)
    result = _invoke(["eval", str(TASKS / "shopping_001.yaml"), "--policies", "full,sliding-int8,h2o,scripted",
                      "--budgets", "64,96", "--model", str(tmp_path / "m"), "--dtype", "fp32",
                      "--db", str(tmp_path / "t.sqlite"), "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert seen["names"] == ["full", "sliding-int8@64", "sliding-int8@96", "h2o@64", "h2o@96", "scripted"]
    policies = seen["settings"].policies
    assert policies["full"] == get_policy("full")
    for label in ("sliding-int8@64", "h2o@96"):
        name, budget = label.split("@")
        assert policies[label] == at_footprint(get_policy(name), int(budget), footprint_slots(model.config, "fp32"))
    assert policies["sliding-int8@64"].budget > 64  # INT8 tokens past the window: more tokens for the same bytes


def test_policy_errors_are_data_not_console_markup(tmp_path):
    for args in (["generate", "hi"], ["run", str(TASKS / "shopping_001.yaml"), "--db", str(tmp_path / "t.sqlite")]):
        result = _invoke([*args, "--set", "[red]x[/red]=1"])
        assert result.exit_code == 2, result.output
        assert "unknown policy key '[red]x[/red]'" in result.output, result.output
    result = _invoke(["generate", "hi", "--model", "./[red]x[/red].gguf", "--dtype", "fp32"])
    assert result.exit_code == 2 and "model path [red]x[/red].gguf does not exist" in result.output, result.output
