"""`confkv-agent traces ls|summary`, `replay` and `report` through typer's runner."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from cli.main import app

runner = CliRunner()


def test_traces_ls_table_and_json(populated):
    db = str(populated["path"])
    result = runner.invoke(app, ["traces", "ls", "--db", db])
    assert result.exit_code == 0, result.output
    for task in ("shop-1", "shop-2", "forum-1"):
        assert task in result.output
    assert "confkv" in result.output and "success" in result.output
    result = runner.invoke(app, ["traces", "ls", "--db", db, "--json", "--policy", "confkv", "--limit", "2"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [r["task_id"] for r in rows] == ["shop-2", "forum-1"] and {r["policy"] for r in rows} == {"confkv"}


def test_missing_database_is_a_clear_error_not_a_traceback(tmp_path):
    for args in (["traces", "ls"], ["replay", "1"], ["report", "--out", str(tmp_path / "r")], ["traces", "summary"]):
        result = runner.invoke(app, [*args, "--db", str(tmp_path / "nope.sqlite")])
        assert result.exit_code == 1, args
        assert "no trace database at" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "nope.sqlite").exists()
    result = runner.invoke(app, ["traces", "ls", "--db", str(tmp_path / "x"), "--status", "weird"])
    assert result.exit_code == 1 and "--status must be one of running, done, error" in result.output


def test_replay_episode_and_step(populated):
    db = str(populated["path"])
    ep = populated["episodes"][("confkv", "shop-2")]
    result = runner.invoke(app, ["replay", str(ep), "--db", db])
    assert result.exit_code == 0, result.output
    assert "action click [3]" in result.output and "action click [5]" in result.output
    assert "budget 128 -> 512" in result.output
    result = runner.invoke(app, ["replay", str(ep), "--db", db, "--step", "2"])
    assert result.exit_code == 0 and "action click [5]" in result.output and "click [3]" not in result.output
    result = runner.invoke(app, ["replay", "999", "--db", db])
    assert result.exit_code == 1 and "no episode 999" in result.output


def test_report_and_summary(populated, tmp_path):
    db = str(populated["path"])
    result = runner.invoke(app, ["report", "--db", db, "--out", str(tmp_path / "png")])
    assert result.exit_code == 0, result.output
    written = [line for line in result.output.splitlines() if line.endswith(".png")]
    assert len(written) == 4 and all((tmp_path / "png").joinpath(p.split("/")[-1]).stat().st_size > 0 for p in written)
    result = runner.invoke(app, ["traces", "summary", "--db", db, "--json"])
    assert result.exit_code == 0, result.output
    policies = json.loads(result.output)["policies"]
    assert policies["confkv"]["retention_vs_full"] == 0.5 and policies["confkv"]["peak_kv_ratio_vs_full"] == 0.25
    assert runner.invoke(app, ["report", "--db", db]).exit_code == 2  # --out is required


def test_traces_compare_pairs_two_runs_by_task_and_names_the_first_differing_step(tmp_path):
    from traces.store import TraceStore

    old_db, new_db = tmp_path / "old.sqlite", tmp_path / "new.sqlite"
    plans = {  # task -> (actions, success) per database
        old_db: {"1": (["click [3]", "stop [a]"], True), "2": (["click [4]", "stop [b]"], False), "9": (["stop"], False)},
        new_db: {"1": (["click [3]", "click [5]", "stop [c]"], False), "2": (["click [4]", "stop [b]"], True)},
    }
    for path, plan in plans.items():
        with TraceStore(path) as store:
            run = store.start_run("tiny", "full", {}, git_revision="abc", machine={"cores": 2})
            for task, (actions, success) in plan.items():
                episode = store.start_episode(run, task)
                for step, action in enumerate(actions):
                    store.add_step(episode, step=step, action=action, raw_output=action)
                store.finish_episode(episode, success=success, eval_reason="x")
    result = runner.invoke(app, ["traces", "compare", f"{old_db}:1", "1", "--db", str(new_db)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "| 1 | 1 | 1 | pass | fail | step 1: `stop [a]` -> `click [5]` |" in lines
    assert "| 2 | 2 | 2 | fail | pass | same actions |" in lines
    assert "2 shared tasks: old 1 passed, new 1 passed (1 won, 1 lost)" in lines  # task 9 ran only in the old run
    result = runner.invoke(app, ["traces", "compare", "1", "1", "--db", str(old_db), "--json"])
    assert [p["first_difference"] for p in json.loads(result.output)] == [None, None, None]
    for bad in (["nope", "1"], [f"{old_db}:7", "1"]):
        result = runner.invoke(app, ["traces", "compare", *bad, "--db", str(new_db)])
        assert result.exit_code == 1 and "Traceback" not in result.output, result.output
        assert "not a run" in result.output or "no run 7" in result.output
