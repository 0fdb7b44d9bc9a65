"""`confkv-agent traces forced-table` and `traces miniwob`: the Markdown tables of docs/results, from trace
databases filled through the store's own write path (runs, episodes, forced results)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from confkv.bench.stats import wilson
from traces.forced import BROKEN_PREFIX, record_forced
from traces.store import TraceStore

runner = CliRunner()
HOSTILE = "\x1b]0;pwned\x07|[bold]x[/bold]"  # a terminal title escape, a cell separator, rich markup
FULL_DECIDED = ("click [3]", "click [5]", "stop [42]")


def _forced(store: TraceStore, run: int, task: str, *, span: str = "long", action: float, answer: float,
            peak: int = 2**20, greedy: str | None = "42", decisions: tuple[str, ...] = (),
            sha: str | None = None) -> None:
    episode = store.start_episode(run, task)
    label = store.run(run)["policy"]
    result = {"task_id": task, "policy": label, "base_policy": label.split("@")[0], "memory_span": span,
              "trajectory_sha": sha or f"sha-{task}", "steps": 3, "action_tokens": 10, "action_nll": action,
              "action_acc": 0.5, "answer_tokens": 2, "answer_nll": answer, "answer_acc": 0.5, "greedy_answer": greedy,
              "answer_exact": 1, "answer_pass": 1, "mean_kv_bytes": peak / 2, "peak_kv_bytes": peak,
              "full_kv_bytes": 4 * 2**20, "decisions": json.dumps(list(decisions)) if decisions else None}  # fmt: skip
    record_forced(store, episode, result, [])
    store.finish_episode(episode, success=True, peak_kv_bytes=peak, full_kv_bytes=4 * 2**20)


@pytest.fixture
def forced_db(tmp_path: Path) -> Path:
    """full and confkv on tasks 1 (long) and 2 (short), task 3 broken for both; sliding finished task 1 only."""
    path = tmp_path / "forced.sqlite"
    with TraceStore(path) as store:
        runs = {p: store.start_run("tiny", p, {"name": p}, mode="forced", git_revision=None, machine=None)
                for p in ("full", "confkv", "sliding")}  # fmt: skip
        _forced(store, runs["full"], "1", action=0.5, answer=1.0, peak=4 * 2**20, decisions=FULL_DECIDED)
        _forced(store, runs["full"], "2", span="short", action=0.4, answer=2.0, peak=4 * 2**20)
        _forced(store, runs["confkv"], "1", action=0.7, answer=1.5, greedy=HOSTILE,
                decisions=(*FULL_DECIDED[:2], "stop [7]"))  # the last decision lost
        _forced(store, runs["confkv"], "2", span="short", action=0.6, answer=2.25)
        _forced(store, runs["sliding"], "1", action=0.6, answer=1.1, peak=2 * 2**20)
        for p in ("full", "confkv"):
            store.fail_episode(store.start_episode(runs[p], "3"), BROKEN_PREFIX + "step 1 'click [9]' failed")
    return path


def _table(output: str, header: str) -> dict[tuple[str, ...], list[str]]:
    """The rows of the Markdown table whose header starts with `header`, keyed by their first cells."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {header} |"))
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        rows[tuple(cells[:2]) if header == "task" else (cells[0],)] = cells
    return rows


def test_forced_table_prints_the_policy_summary_and_every_task_row(forced_db: Path) -> None:
    result = runner.invoke(app, ["traces", "forced-table", "--db", str(forced_db)])
    assert result.exit_code == 0, result.output
    summary = _table(result.output, "policy")
    assert list(summary) == [("full",), ("confkv",), ("sliding",)]  # baseline first
    # confkv vs full on the same trajectories: answer ΔNLL +0.5 (long task 1) and +0.25 (short task 2), action +0.2
    assert summary[("confkv",)][:7] == ["confkv", "2", "1", "+0.500", "+0.250", "+0.200", "0.650"]
    assert summary[("confkv",)][9:] == ["2/2/2", "25.0%", "25.0%"]
    assert summary[("full",)][1:6] == ["2", "1", "+0.000", "+0.000", "+0.000"]
    assert summary[("sliding",)][1:5] == ["1", "0", "+0.100", "-"]
    tasks = _table(result.output, "task")
    assert [k for k in tasks if k[0] == "1"] == [("1", "full"), ("1", "confkv"), ("1", "sliding")]
    assert tasks[("3", "confkv")][2] == "broken: step 1 'click [9]' failed"
    assert tasks[("2", "full")][2:] == ["3", "10", "0.400", "2", "2.000", "'42'", "1", "4", "-"]
    assert tasks[("1", "sliding")][-2] == "2"  # peak KV MiB
    # at how many decisions each label decided as full did: confkv lost one of three; sliding predates decisions
    assert [tasks[("1", p)][-1] for p in ("full", "confkv", "sliding")] == ["3/3", "2/3", "-"]


def test_forced_table_keeps_the_chosen_labels_and_the_common_tasks(forced_db: Path) -> None:
    result = runner.invoke(app, ["traces", "forced-table", "--db", str(forced_db), "--policies", "full,confkv"])
    assert result.exit_code == 0, result.output
    assert list(_table(result.output, "policy")) == [("full",), ("confkv",)]
    result = runner.invoke(app, ["traces", "forced-table", "--db", str(forced_db), "--common"])
    assert result.exit_code == 0, result.output
    # only task 1 was finished by all three labels, so task 2's short-memory delta is gone
    assert {k[0] for k in _table(result.output, "task")} == {"1"}
    assert _table(result.output, "policy")[("confkv",)][1:6] == ["1", "0", "+0.500", "-", "+0.200"]
    result = runner.invoke(app, ["traces", "forced-table", "--db", str(forced_db), "--policies", "full,h2o"])
    assert result.exit_code == 1
    assert "no forced results for policy 'h2o'" in result.output and "confkv, full, sliding" in result.output


def test_forced_table_keeps_or_leaves_out_the_named_tasks(forced_db: Path) -> None:
    """A held-out comparison: leave out the tasks a threshold was read off, or keep only some."""
    result = runner.invoke(app, ["traces", "forced-table", "--db", str(forced_db), "--exclude-tasks", "1,3"])
    assert result.exit_code == 0, result.output
    assert {k[0] for k in _table(result.output, "task")} == {"2"}
    assert _table(result.output, "policy")[("confkv",)][1:6] == ["1", "0", "-", "+0.250", "+0.200"]
    result = runner.invoke(app, ["traces", "forced-table", "--db", str(forced_db), "--tasks", "1"])
    assert result.exit_code == 0, result.output
    assert {k[0] for k in _table(result.output, "task")} == {"1"}
    result = runner.invoke(app, ["traces", "forced-table", "--db", str(forced_db), "--tasks", "1,99"])
    assert result.exit_code == 1 and "no forced results for task 99" in result.output
    result = runner.invoke(app, ["traces", "forced-table", "--db", str(forced_db), "--memory-span", "short"])
    assert result.exit_code == 0, result.output
    assert {k[0] for k in _table(result.output, "task")} == {"2"}  # task 2 is the short one, 1 long
    result = runner.invoke(app, ["traces", "forced-table", "--db", str(forced_db), "--memory-span", "long"])
    assert {k[0] for k in _table(result.output, "task")} == {"1"}  # 3 is broken under every label: span unknown
    result = runner.invoke(app, ["traces", "forced-table", "--db", str(forced_db), "--memory-span", "medium"])
    assert result.exit_code == 1 and "--memory-span must be long or short, not 'medium'" in result.output
    png = forced_db.parent / "frontier.png"
    result = runner.invoke(app, ["traces", "forced-table", "--db", str(forced_db), "--tasks", "1", "--png", str(png)])
    assert result.exit_code == 0, result.output
    assert png.read_bytes().startswith(b"\x89PNG")


def test_forced_table_names_rows_that_replayed_another_trajectory(tmp_path: Path) -> None:
    """A row whose replay fed other tokens than full's pairs with nothing: the table says so instead of averaging
    without it in silence (a site that printed the wall clock once did this to two tasks)."""
    path = tmp_path / "moved.sqlite"
    with TraceStore(path) as store:
        runs = {p: store.start_run("tiny", p, {"name": p}, mode="forced", git_revision=None, machine=None)
                for p in ("full", "confkv", "sliding")}  # fmt: skip
        for task in ("1", "2"):
            _forced(store, runs["full"], task, action=0.5, answer=1.0)
            _forced(store, runs["confkv"], task, action=0.6, answer=1.5)
        _forced(store, runs["sliding"], "1", action=0.6, answer=1.5, sha="sha-1-at-another-time")
        _forced(store, runs["sliding"], "3", action=0.6, answer=1.5)  # no full on task 3: nothing to pair, no note
    result = runner.invoke(app, ["traces", "forced-table", "--db", str(path)])
    assert result.exit_code == 0, result.output
    assert "not paired with full (another trajectory was replayed), so left out of every delta: task 1: sliding\n" \
        in result.output
    result = runner.invoke(app, ["traces", "forced-table", "--db", str(path), "--policies", "full,confkv"])
    assert "not paired" not in result.output


def test_forced_table_cells_stay_data(forced_db: Path) -> None:
    result = runner.invoke(app, ["traces", "forced-table", "--db", str(forced_db)])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "\x07" not in result.output
    row = next(line for line in result.output.splitlines() if line.startswith("| 1 | confkv |"))
    # the answer is one cell: its `|` escaped, its escapes shown, its markup printed as typed
    assert "\\x1b]0;pwned\\x07\\|[bold]x[/bold]" in row and len(row.replace("\\|", "").split("|")) == 13


def _miniwob(store: TraceStore, run: int, name: str, seed: int, success: bool | None, *, peak: int,
             steps: int = 1) -> None:
    episode = store.start_episode(run, f"miniwob/{name}/{seed}")
    for step in range(steps):
        store.add_step(episode, step=step, action="click [1]")
    if success is None:
        store.fail_episode(episode, "chromium died", peak_kv_bytes=peak, full_kv_bytes=1000)
    else:
        store.finish_episode(episode, success=success, peak_kv_bytes=peak, full_kv_bytes=1000, wall_s=10.0 * steps)


@pytest.fixture
def miniwob_db(tmp_path: Path) -> tuple[Path, dict[str, int]]:
    """full and confkv on click-button seeds 0-2 and enter-text seeds 0-1; confkv also started focus-text alone
    (a stopped eval's half-done task: compared by nobody)."""
    path = tmp_path / "miniwob.sqlite"
    outcomes = {  # (task, seed) -> (full, confkv); None = an error episode (a failure)
        ("click-button", 0): (True, True), ("click-button", 1): (True, False), ("click-button", 2): (False, True),
        ("enter-text", 0): (True, True), ("enter-text", 1): (None, True),
    }  # fmt: skip
    with TraceStore(path) as store:
        runs = {p: store.start_run("tiny", p, {"n_low": 128}, git_revision=None, machine=None)
                for p in ("full", "confkv")}  # fmt: skip
        for (name, seed), (full, confkv) in outcomes.items():
            steps = 1 if name == "click-button" else 2
            _miniwob(store, runs["full"], name, seed, full, peak=1000, steps=steps)
            _miniwob(store, runs["confkv"], name, seed, confkv, peak=300 if name == "click-button" else 500,
                     steps=steps)  # fmt: skip
        _miniwob(store, runs["confkv"], "focus-text", 0, True, peak=900)
        other = store.start_run("tiny", "sliding", {}, git_revision=None, machine=None)
        store.finish_episode(store.start_episode(other, "shopping-1"), success=True)
        runs["sliding"] = other
        runs["full-again"] = store.start_run("tiny", "full", {"n_low": 64}, git_revision=None, machine=None)
    return path, runs


def test_miniwob_table_intervals_paired_counts_and_kv(miniwob_db: tuple[Path, dict[str, int]], tmp_path: Path) -> None:
    db, runs = miniwob_db
    out = tmp_path / "docs" / "miniwob.json"
    args = ["traces", "miniwob", "--db", str(db), "--run", str(runs["confkv"]), "--run", str(runs["full"])]
    result = runner.invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "| task | seeds | full | confkv |"  # full first whatever the --run order
    assert "| click-button | 3 | 2/3 | 2/3 |" in lines and "| enter-text | 2 | 1/2 | 2/2 |" in lines
    assert "| **all** | 5 (task, seed) | **3/5** | **4/5** |" in lines
    assert not any("focus-text" in line for line in lines)
    lo, hi = wilson(3, 5)
    assert (lo, hi) == pytest.approx((0.2307, 0.8824), abs=1e-4)  # the textbook Wilson interval of 3/5
    assert wilson(0, 9)[0] == 0.0 and wilson(9, 9)[1] == 1.0 and wilson(0, 0) == (0.0, 1.0)
    assert "full: 3/5 = 60% (Wilson 95% 23%-88%)" in lines
    assert "confkv: 4/5 = 80% (Wilson 95% 38%-96%)" in lines
    assert "confkv vs full, paired by (task, seed): 2 won, 1 lost, 2 tied" in lines
    # peak KV / full over the compared episodes only (focus-text's 0.9 is not among them)
    assert "confkv: peak KV / full 0.38 (min 0.30, max 0.50); steps median 1, mean 1.4; episode wall median 10 s" in lines
    assert any(line.startswith("full: peak KV / full 1.00 (min 1.00, max 1.00)") for line in lines)
    data = json.loads(out.read_text())
    assert data["db"] == str(db) and set(data["runs"]) == {str(runs["full"]), str(runs["confkv"])}
    assert data["runs"][str(runs["confkv"])] == {"model": "tiny", "policy": "confkv", "config": {"n_low": 128}}
    assert data["per_task"] == {"click-button": {"full": [1, 1, 0], "confkv": [1, 0, 1]},
                                "enter-text": {"full": [1, 0], "confkv": [1, 1]}}  # fmt: skip
    assert data["totals"]["full"] == {"success": 3, "episodes": 5, "ci95": pytest.approx([lo, hi])}
    assert data["totals"]["confkv"]["paired_vs"] == {"policy": "full", "won": 2, "lost": 1}
    assert len(data["episodes"]) == 11  # every final attempt, focus-text and the error included
    errors = [e for e in data["episodes"] if e["status"] == "error"]
    assert [(e["task_id"], e["policy"], e["success"]) for e in errors] == [("miniwob/enter-text/1", "full", 0)]


def test_miniwob_bad_input_is_one_line(miniwob_db: tuple[Path, dict[str, int]], tmp_path: Path) -> None:
    db, runs = miniwob_db
    cases = {
        ("--db", str(tmp_path / "nope.sqlite"), "--run", "1"): "no trace database at",
        ("--db", str(db), "--run", "99"): "no run 99",
        ("--db", str(db), "--run", str(runs["sliding"])): "is not an `eval --suite miniwob` run",
        ("--db", str(db), "--run", str(runs["full"]), "--run", str(runs["full-again"])): "are both policy 'full'",
        ("--db", str(db), "--run", "1", "--out", str(tmp_path)): "is a directory",
    }
    for args, message in cases.items():
        result = runner.invoke(app, ["traces", "miniwob", *args])
        assert result.exit_code == 1, (args, result.output)
        assert message in result.output and "Traceback" not in result.output, args
        assert len(result.output.strip().splitlines()) == 1, result.output
    assert not (tmp_path / "nope.sqlite").exists()
    text = tmp_path / "notes.txt"
    text.write_text("not a database\n")
    result = runner.invoke(app, ["traces", "forced-table", "--db", str(text)])
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_frontier_points_carry_the_tables_interval_and_task_count(tmp_path: Path) -> None:
    """Each plotted point is the paired mean over the tasks every label finished, with the bootstrap interval the
    tables print, so overlapping whiskers read as not told apart."""
    from traces.forced import forced_rows
    from traces.forced_plot import frontier_points
    from traces.paired import bootstrap_ci

    path = tmp_path / "f.sqlite"
    deltas = [0.5, 0.1, 0.3, 0.9]
    with TraceStore(path) as store:
        runs = {p: store.start_run("tiny", p, {"name": p}, mode="forced", git_revision=None, machine=None)
                for p in ("full", "sliding@128", "sliding@64")}  # fmt: skip
        for i, d in enumerate(deltas):
            _forced(store, runs["full"], str(i), action=0.5, answer=1.0, peak=4 * 2**20)
            _forced(store, runs["sliding@64"], str(i), action=0.6, answer=1.0 + d, peak=2**20)
            _forced(store, runs["sliding@128"], str(i), action=0.6, answer=1.0 + d / 2, peak=2 * 2**20)
        rows = forced_rows(store.db)
    points = frontier_points(rows, "answer_dnll", "long")
    (full,), (sliding, wider) = points["full"], points["sliding"]  # a policy's budgets: one line, by memory
    assert (full.x, full.y, full.lo, full.hi, full.tasks) == (1.0, 0.0, 0.0, 0.0, 4)
    assert wider.x == 0.5 and abs(wider.y - sum(deltas) / 8) < 1e-9
    assert sliding.x == 0.25 and sliding.tasks == 4 and abs(sliding.y - sum(deltas) / 4) < 1e-9
    assert (sliding.lo, sliding.hi) == pytest.approx(bootstrap_ci(deltas)) and sliding.lo < sliding.y < sliding.hi
    assert frontier_points(rows, "answer_dnll", "short") == {}


def test_forced_rows_pair_only_within_one_precision(tmp_path: Path) -> None:
    """A task scored at two precisions is two experiments: a table shows it at one (the one with `full` and most of
    the labels shown, or the one --dtype names), and a policy's row never pairs with `full`'s row of another."""
    from traces.forced import forced_rows, paired_with_full

    path = tmp_path / "p.sqlite"
    with TraceStore(path) as store:
        runs = {(p, d): store.start_run("tiny", p, {"name": p, "agent": {"dtype": d}}, mode="forced",
                                        git_revision=None, machine=None)
                for p in ("full", "sliding@64") for d in ("fp32", "fp32-bf16-bf16")}  # fmt: skip
        _forced(store, runs[("full", "fp32")], "1", action=0.5, answer=1.0)
        _forced(store, runs[("sliding@64", "fp32")], "1", action=0.6, answer=1.5)
        _forced(store, runs[("full", "fp32-bf16-bf16")], "1", action=0.5, answer=1.25)
        _forced(store, runs[("sliding@64", "fp32-bf16-bf16")], "1", action=0.6, answer=2.0)
        _forced(store, runs[("sliding@64", "fp32-bf16-bf16")], "2", action=0.6, answer=2.0)
        _forced(store, runs[("full", "fp32")], "2", action=0.5, answer=1.0)
        for task, d in (("3", "fp32-bf16-bf16"), ("4", "fp32")):  # one precision each: these pool
            _forced(store, runs[("full", d)], task, action=0.5, answer=1.0)
            _forced(store, runs[("sliding@64", d)], task, action=0.6, answer=1.5)
        _forced(store, runs[("full", "fp32-bf16-bf16")], "5", action=0.5, answer=1.0)  # full alone
        _forced(store, runs[("full", "fp32")], "6", action=0.5, answer=1.0)  # begun at fp32, scored again (--rebase)
        _forced(store, runs[("full", "fp32-bf16-bf16")], "6", action=0.5, answer=1.5)
        _forced(store, runs[("sliding@64", "fp32-bf16-bf16")], "6", action=0.6, answer=3.0)
        rows = [r for r in forced_rows(store.db) if r["task_id"] in ("1", "2")]
    assert len(rows) == 6  # one row per (label, task, precision): the later precision does not replace the earlier
    pairs = {(r["policy"], r["task_id"], r["precision"]): r["answer_nll"] - b["answer_nll"]
             for r, b in paired_with_full(rows)}  # fmt: skip
    assert pairs[("sliding@64", "1", "fp32")] == 0.5 and pairs[("sliding@64", "1", "fp32-bf16-bf16")] == 0.75
    assert ("sliding@64", "2", "fp32-bf16-bf16") not in pairs  # full ran task 2 at fp32 only
    result = runner.invoke(app, ["traces", "forced-table", "--db", str(path)])
    assert result.exit_code == 0, result.output
    assert ("task 1 at fp32 (fp32-bf16-bf16 left out); task 2 at fp32 (fp32-bf16-bf16 left out); "
            "task 6 at fp32-bf16-bf16 (fp32 left out)") in result.output  # a tie goes to the first name; 2: full
    per_task = _table(result.output, "task")
    assert {k[0] for k in per_task if k[1] == "sliding@64"} == {"1", "3", "4", "6"}  # each task once
    assert per_task[("6", "full")][6] == "1.500"  # task 6's full is the fp32-bf16-bf16 row (fp32's: 1.000)
    result = runner.invoke(app, ["traces", "forced-table", "--db", str(path), "--dtype", "fp32"])
    assert result.exit_code == 0, result.output
    assert _table(result.output, "policy")[("sliding@64",)][1] == "2"  # tasks 1 and 4 at fp32
    result = runner.invoke(app, ["traces", "forced-table", "--db", str(path), "--tasks", "3,4"])
    assert result.exit_code == 0, result.output
    assert "precisions pooled (each task at one; pairs within a precision): fp32 (1 tasks), fp32-bf16-bf16 (1 tasks)" \
        in result.output
    assert _table(result.output, "policy")[("sliding@64",)][1] == "2"
    result = runner.invoke(app, ["traces", "forced-table", "--db", str(path), "--tasks", "4,5", "--common"])
    assert result.exit_code == 0, result.output  # --common keeps task 4 (fp32) only: nothing pooled is shown
    assert "precisions pooled" not in result.output and {k[0] for k in _table(result.output, "task")} == {"4"}
    result = runner.invoke(app, ["traces", "forced-table", "--db", str(path), "--dtype", "int4"])
    assert result.exit_code == 1 and "it has: fp32, fp32-bf16-bf16" in result.output
