"""`confkv-agent traces retention`: the free-running agent claim, counted on full's passes with the passes that are
no evidence of skill marked (N/A references from the task files, guesses named by a reader)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from traces.store import TraceStore

runner = CliRunner()
MiB = 2**20


def _episode(store: TraceStore, run: int, task: str, success: bool | None, peak: int) -> None:
    episode = store.start_episode(run, task)
    if success is None:
        store.fail_episode(episode, "RuntimeError: model crashed")
    else:
        store.finish_episode(episode, success=success, peak_kv_bytes=peak, full_kv_bytes=8 * MiB)


@pytest.fixture
def free_db(tmp_path: Path) -> Path:
    """full passes 1, 11 (an N/A reference in tasks/) and 20, fails 3; sliding keeps 1 and 11, loses 20, wins 3;
    h2o finished task 1 only (a crash on 3 counts as a failure, not a gap)."""
    path = tmp_path / "free.sqlite"
    with TraceStore(path) as store:
        full, sliding, h2o = (store.start_run("tiny", p, {"name": p}) for p in ("full", "sliding", "h2o"))
        for task, ok in (("1", True), ("11", True), ("20", True), ("3", False)):
            _episode(store, full, task, ok, 8 * MiB)
        for task, ok in (("1", True), ("11", True), ("20", False), ("3", True)):
            _episode(store, sliding, task, ok, 2 * MiB)
        _episode(store, h2o, "1", False, 4 * MiB)
        _episode(store, h2o, "3", None, 4 * MiB)
        forced = store.start_run("tiny", "full", {"name": "full"}, mode="forced", git_revision=None, machine=None)
        assert forced == 4
    return path


def test_retention_counts_full_passes_kept_marks_and_wins(free_db: Path) -> None:
    result = runner.invoke(app, ["traces", "retention", "--db", str(free_db), "--run", "1", "--run", "2",
                                 "--run", "3", "--guess", "20", "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    sliding, h2o = out["policies"]["sliding"], out["policies"]["h2o"]
    assert (sliding["base_passes"], sliding["kept"], sliding["won"], sliding["shared"]) == (3, 2, 1, 4)
    # 11 (N/A reference) and 20 (a guess) are marked: one unmarked pass of full's left, and sliding kept it
    assert (sliding["evidence_passes"], sliding["evidence_kept"]) == (1, 1)
    assert sliding["peak_kv_ratio"] == pytest.approx(0.25)
    lo, hi = sliding["ci95"]
    assert lo < 2 / 3 < hi
    assert (h2o["base_passes"], h2o["kept"], h2o["won"], h2o["shared"]) == (1, 0, 0, 2)
    marks = {t["task_id"]: t["mark"] for t in out["tasks"]}
    assert marks == {"1": None, "3": None, "11": "N/A reference", "20": "guess"}


def test_retention_markdown_lists_every_task_someone_passed(free_db: Path) -> None:
    result = runner.invoke(app, ["traces", "retention", "--db", str(free_db), "--run", "1", "--run", "2"])
    assert result.exit_code == 0, result.output
    # no --guess: 20 counts as evidence, so of the unmarked passes (1, 20) sliding kept one
    assert "| sliding | 2/3 (67%" in result.output and "| 1/2 (50%" in result.output
    assert "| 3 | fail | pass |  |" in result.output and "| 11 | pass | pass | N/A reference |" in result.output


@pytest.mark.parametrize("args, message", [
    (["--run", "4"], "run 4 is a forced run"),
    (["--run", "2", "--run", "3"], "none of runs 2, 3 is a `full` run"),
    (["--run", "1", "--run", "99"], "99"),
])  # fmt: skip
def test_retention_refuses_runs_it_cannot_count(free_db: Path, args: list[str], message: str) -> None:
    result = runner.invoke(app, ["traces", "retention", "--db", str(free_db), *args])
    assert result.exit_code == 1 and message in result.output


def test_retention_refuses_a_task_directory_that_does_not_load(free_db: Path, tmp_path: Path) -> None:
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "x.yaml").write_text("task_id: [\n")
    result = runner.invoke(app, ["traces", "retention", "--db", str(free_db), "--run", "1",
                                 "--tasks", str(tmp_path / "bad")])  # fmt: skip
    assert result.exit_code == 1 and "--tasks" in result.output
