"""MiniWoB++ through the agent stack: suite selection, one task end to end with a scripted agent, `eval --suite`."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from agent.model_policy import StepInfo
from cli.main import app
from envs.miniwob import list_tasks
from runner.episode import run_episode
from runner.episode_tasks import NoSites
from runner.suites import (
    MINIWOB_DEFAULT,
    MINIWOB_EXPRESSIBLE,
    MINIWOB_NOT_EXPRESSIBLE,
    MiniWobTask,
    select_tasks,
)
from traces.store import TraceStore


class ButtonClicker:
    """A scripted agent that reads the instruction it was given and clicks the button it names (or another)."""

    name = "scripted"
    model_name = "scripted"

    def __init__(self, wrong: bool = False) -> None:
        self.wrong = wrong
        self.intent = ""
        self.calls = 0

    def begin(self, task_intent: str) -> None:
        self.intent = task_intent

    def act(self, observation, last_result):
        self.calls += 1
        wanted = re.fullmatch(r'Click on the "(.+)" button\.', self.intent).group(1)
        buttons = [(i, name) for i, (role, name) in observation.nodes.items() if role == "button"]
        pick = next(i for i, name in buttons if (name == wanted) != self.wrong)
        reply = f"click [{pick}]"
        return reply, StepInfo(raw_output=reply)

    def memory(self):
        return None

    def close(self) -> None:
        pass


def test_every_page_is_classified_and_the_default_set_is_expressible() -> None:
    pages = set(list_tasks())
    assert pages == set(MINIWOB_EXPRESSIBLE) | set(MINIWOB_NOT_EXPRESSIBLE)
    assert not set(MINIWOB_EXPRESSIBLE) & set(MINIWOB_NOT_EXPRESSIBLE)
    assert len(MINIWOB_DEFAULT) >= 20 and set(MINIWOB_DEFAULT) <= set(MINIWOB_EXPRESSIBLE)


def test_suite_selection_and_its_errors(tmp_path) -> None:
    tasks = select_tasks("miniwob", [], "click-button, enter-text", 2)
    assert [t.task_id for t in tasks] == ["miniwob/click-button/0", "miniwob/enter-text/0",
                                          "miniwob/click-button/1", "miniwob/enter-text/1"]  # fmt: skip
    assert len(select_tasks("miniwob", [], None, 1)) == len(MINIWOB_DEFAULT)
    with pytest.raises(ValueError, match="unknown MiniWoB\\+\\+ task 'click-buton'; similar: click-"):
        select_tasks("miniwob", [], "click-buton", 1)
    with pytest.raises(ValueError, match="'drag-box' cannot be expressed.*drag gesture"):
        select_tasks("miniwob", [], "drag-box", 1)
    with pytest.raises(ValueError, match="unknown suite 'webshop'"):
        select_tasks("webshop", [], None, 1)
    with pytest.raises(ValueError, match="--tasks names MiniWoB"):
        select_tasks("tasks", [tmp_path], "click-button", 1)


@pytest.mark.browser
@pytest.mark.parametrize("wrong", [False, True])
def test_click_button_end_to_end_is_rewarded_by_the_page(tmp_path, wrong: bool) -> None:
    agent = ButtonClicker(wrong=wrong)
    with TraceStore(tmp_path / "t.sqlite") as store:
        run_id = store.start_run("scripted", "scripted", {"test": "miniwob"})
        result = run_episode(MiniWobTask("click-button", seed=3), agent, NoSites(), store, run_id, max_steps=5)
        assert result.status == "done", result.reason
        assert result.success is (not wrong)
        assert result.stop_reason == "the task page ended the episode" and agent.calls == 1
        (row,) = store.episodes(run_ids=[run_id])
        steps = store.steps(row["id"])
    assert row["task_id"] == "miniwob/click-button/3" and row["success"] == int(not wrong)
    assert re.match(r"MiniWoB\+\+ raw reward (-?[0-9.]+)", row["eval_reason"])
    reward = float(re.match(r"MiniWoB\+\+ raw reward (-?[0-9.]+)", row["eval_reason"]).group(1))
    assert (reward > 0) is (not wrong)
    assert len(steps) == 1 and steps[0]["action"].startswith("click [")
    assert "Click on the" in steps[0]["observation"] and steps[0]["url"].startswith("file://")


@pytest.mark.browser
def test_eval_suite_miniwob_writes_rows_per_seed_and_resumes(tmp_path) -> None:
    db = tmp_path / "t.sqlite"
    args = ["eval", "--suite", "miniwob", "--tasks", "click-test", "--seeds", "2", "--policies", "scripted",
            "--max-steps", "2", "--db", str(db), "--json"]  # fmt: skip
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    with TraceStore.open_existing(db) as store:
        rows = store.episodes()
    # MiniWoB tasks have no reference solution: the scripted agent sends empty replies and fails, but is recorded
    assert sorted(r["task_id"] for r in rows) == ["miniwob/click-test/0", "miniwob/click-test/1"]
    assert all(r["status"] == "done" and r["success"] == 0 for r in rows)
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0 and "0 episodes to run, 2 already finished" in again.output
    bad = CliRunner().invoke(app, ["eval", "--suite", "miniwob", "--tasks", "drag-box", "--db", str(db)])
    assert bad.exit_code == 2 and "cannot be expressed" in bad.output
    bad = CliRunner().invoke(app, ["eval", "--suite", "miniwob", "--backend", "slurm", "--db", str(db)])
    assert bad.exit_code == 2 and "--backend must be local or ray" in bad.output
