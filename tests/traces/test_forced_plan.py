"""`traces forced-plan`: what a forced run still owes, read back from the rows the store wrote, in the order and at
the precision a resumed run must use."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlite_utils
from typer.testing import CliRunner

from cli.main import app
from confkv.policies import get_policy
from envs.taskspec import load_task
from runner.footprint import footprint_labels, label_budgets
from traces.forced_plan import estimate_plan, forced_coverage, forced_plan, id_ranges
from traces.store import TraceStore

runner = CliRunner()
TASKS = Path(__file__).resolve().parents[2] / "tasks"
LABELS = ["full", "sliding-int8@180", "h2o-int8@180"]
FILES = ["shopping_001.yaml", "shopping_003.yaml", "shopping_015.yaml", "classifieds_003.yaml", "forum_004.yaml"]


def _db(path: Path) -> sqlite_utils.Database:
    """shopping 1: every label done at fp32 (owes nothing); shopping 3: full at fp32-bf16-bf16 and sliding failed
    (owes sliding and h2o at fp32-bf16-bf16); shopping 15: full at fp32, sliding at fp32 and at fp32-bf16-bf16 (owes h2o); the rest: nothing."""
    with TraceStore(path) as store:
        runs = {(label, d): store.start_run("tiny", label, {"agent": {"dtype": d}}, mode="forced", git_revision=None,
                                            machine=None)
                for label in LABELS for d in ("fp32", "fp32-bf16-bf16")}  # fmt: skip

        def done(label: str, dtype: str, task: int) -> None:
            episode = store.start_episode(runs[(label, dtype)], str(task))
            store.finish_episode(episode, success=True, peak_kv_bytes=1, full_kv_bytes=1)

        for label in LABELS:
            done(label, "fp32", 1)
        done("full", "fp32-bf16-bf16", 3)
        done("full", "fp32", 15)
        done("sliding-int8@180", "fp32", 15)
        done("sliding-int8@180", "fp32-bf16-bf16", 15)  # the same label finished at a second precision, later
        store.fail_episode(store.start_episode(runs[("sliding-int8@180", "fp32-bf16-bf16")], "3"), "superseded")
    return sqlite_utils.Database(path)


def _loaded() -> list:
    return [(TASKS / f, load_task(TASKS / f)) for f in FILES]


def test_the_plan_owes_what_did_not_finish_at_each_tasks_precision(tmp_path: Path) -> None:
    plan = forced_plan(_db(tmp_path / "f.sqlite"), _loaded(), LABELS, "fp32")
    by_id = {p.task.task_id: p for p in plan}
    assert 1 not in by_id  # every label done
    assert by_id[3].precision == "fp32-bf16-bf16"  # stays at its full row's precision
    assert by_id[3].done == ("full",) and by_id[3].missing == ("sliding-int8@180", "h2o-int8@180")  # failed: owed
    assert by_id[15].precision == "fp32" and by_id[15].missing == ("h2o-int8@180",)
    assert by_id[103].precision == "fp32" and by_id[103].missing == tuple(LABELS)  # no rows: the default
    # cheapest first: short before long, then fewer reference steps, then task id
    keys = [(p.task.memory_span != "short", p.reference_steps, p.task.task_id) for p in plan]
    assert keys == sorted(keys) and plan[-1].task.task_id == 15


def test_rebase_plans_a_task_that_owes_labels_again_at_the_precision_asked(tmp_path: Path) -> None:
    # 15 owes h2o at fp32 (its full's precision): rebased to fp32-bf16-bf16 it owes full and h2o there (its sliding
    # finished at both); 1 owes nothing at fp32 and stays out; 3 is at the precision asked already
    db = _db(tmp_path / "f.sqlite")
    by_id = {p.task.task_id: p for p in forced_plan(db, _loaded(), LABELS, "fp32-bf16-bf16", rebase=True)}
    assert 1 not in by_id
    assert by_id[15].precision == "fp32-bf16-bf16"
    assert by_id[15].done == ("sliding-int8@180",) and by_id[15].missing == ("full", "h2o-int8@180")
    assert by_id[3].precision == "fp32-bf16-bf16" and by_id[3].missing == ("sliding-int8@180", "h2o-int8@180")
    assert forced_plan(db, _loaded(), LABELS, "fp32-bf16-bf16")[-1].precision == "fp32"  # without it: 15 stays
    rows = forced_coverage(db, _loaded(), LABELS, "fp32-bf16-bf16", rebase=True)
    assert [r.not_begun for r in rows if (r.site, r.span) == ("shopping", "long")] == [(15,)]  # no full there yet
    args = ["traces", "forced-plan", str(TASKS / "shopping_015.yaml"), "--db", str(tmp_path / "f.sqlite"),
            "--budgets", "180", "--dtype", "fp32-bf16-bf16", "--rebase", "--commands"]  # fmt: skip
    result = runner.invoke(app, [*args, "--policies", "full,sliding-int8,h2o-int8"])
    assert result.exit_code == 0 and result.output.split()[0] == "fp32-bf16-bf16", result.output
    result = runner.invoke(app, [*args, "--policies", "sliding-int8,h2o-int8"])
    assert result.exit_code == 1 and "add full to --policies" in result.output


def test_coverage_counts_tasks_by_site_and_span_at_their_precision(tmp_path: Path) -> None:
    rows = forced_coverage(_db(tmp_path / "f.sqlite"), _loaded(), LABELS, "fp32")
    got = {(r.site, r.span): (r.complete, r.partial, r.not_begun) for r in rows}
    assert got == {("shopping", "long"): ((), (15,), ()), ("shopping", "short"): ((1,), (3,), ()),
                   ("classifieds", "short"): ((), (), (103,)), ("forum", "short"): ((), (), (204,))}  # fmt: skip
    assert rows[0].span == "long" and sum(r.tasks for r in rows) == len(FILES)
    # without h2o asked for, 15 has every label (its sliding at fp32, its full's precision)
    db = sqlite_utils.Database(tmp_path / "f.sqlite")
    assert forced_coverage(db, _loaded(), LABELS[:2], "fp32")[0].complete == (15,)
    assert id_ranges([5, 1, 2, 3, 7, 8]) == "1-3, 5, 7-8" and id_ranges([]) == "-"


def test_a_plan_names_the_labels_eval_writes() -> None:
    built = {name: get_policy(name) for name in ("full", "sliding-int8", "confkv")}
    assert [label for label, _, _ in label_budgets(built, [90, 180])] == list(footprint_labels(built, [90, 180], (8, 4)))
    assert [label for label, _, _ in label_budgets(built, [])] == ["full", "sliding-int8", "confkv"]


def test_forced_plan_cli(tmp_path: Path) -> None:
    _db(tmp_path / "f.sqlite")
    args = ["traces", "forced-plan", *(str(TASKS / f) for f in FILES), "--db", str(tmp_path / "f.sqlite"),
            "--policies", "full,sliding-int8,h2o-int8", "--budgets", "180"]  # fmt: skip
    result = runner.invoke(app, [*args, "--commands", "--exclude-tasks", "204"])
    assert result.exit_code == 0, result.output
    lines = [line.split() for line in result.output.splitlines()]
    assert [Path(path).name for _, path in lines] == ["classifieds_003.yaml", "shopping_003.yaml", "shopping_015.yaml"]
    assert [precision for precision, _ in lines] == ["fp32", "fp32-bf16-bf16", "fp32"]
    long = runner.invoke(app, [*args, "--commands", "--memory-span", "long"])
    assert [Path(line.split()[1]).name for line in long.output.splitlines()] == ["shopping_015.yaml"], long.output
    table = runner.invoke(app, args)
    assert table.exit_code == 0 and "4 of 5 tasks owe labels" in table.output
    assert "no finished rows with timings yet" in table.output  # rows without tokens or time: no estimate
    only = runner.invoke(app, [*args, "--estimate"])
    assert only.exit_code == 0 and only.output.strip() == "no finished rows with timings yet: nothing to estimate " \
        "the time left from"
    done = runner.invoke(app, [*args, "--coverage"])
    assert done.exit_code == 0 and "| shopping | short | 2 | 1: 1 | 1: 3 | - |" in done.output, done.output
    assert done.output.rstrip().endswith("| all | | 5 | 1 | 2 | 2 |")
    nofull = runner.invoke(app, [*args[:-4], "--policies", "sliding-int8", *args[-2:], "--coverage"])
    assert nofull.exit_code == 1 and "add full" in nofull.output
    for bad, message in ((["--policies", "nosuch"], "unknown policy"), (["--budgets", "x"], "--budgets expects"),
                         (["--budgets", "8"], "integers >= 16"),  # eval's own check (runner.footprint)
                         (["--memory-span", "mid"], "--memory-span must be")):  # fmt: skip
        result = runner.invoke(app, [*args, *bad])
        assert result.exit_code == 1 and message in result.output, result.output
    result = runner.invoke(app, [*args[:-6], "--db", str(tmp_path / "none.sqlite"), *args[-4:]])
    assert result.exit_code == 1 and "no trace database" in result.output
    # a missing task file is a task error (TaskSpecError is a ValueError: it once read as a bad --budgets)
    result = runner.invoke(app, ["traces", "forced-plan", str(tmp_path / "gone.yaml"), *args[len(FILES) + 2:]])
    assert result.exit_code == 1 and "no such file" in result.output and "--budgets" not in result.output


def test_the_estimate_costs_each_owed_label_at_its_precisions_rate_per_token(tmp_path: Path) -> None:
    db = _db(tmp_path / "f.sqlite")
    timing = {("1", "full"): (1000, 20.0), ("1", "sliding-int8@180"): (1000, 10.0), ("1", "h2o-int8@180"): (1000, 10.0),
              ("3", "full"): (500, 5.0), ("15", "full"): (2000, 40.0), ("15", "sliding-int8@180"): (2000, 20.0)}
    for (task, label), (tokens, wall) in timing.items():
        db.execute("update episodes set prefilled_tokens = ?, wall_s = ? where task_id = ? and policy = ? and "
                   "status = 'done'", [tokens, wall, task, label])  # fmt: skip
    db.execute("update episodes set wall_s = 10.0 where task_id = '15' and status = 'done' and run_id in "
               "(select id from runs where policy_config like '%bf16%')")  # sliding at bf16: 2000 tokens, 0.005 s each
    db.conn.commit()
    loaded = _loaded()
    plan = forced_plan(db, loaded, LABELS, "fp32")
    est = estimate_plan(db, loaded, plan, cpu_kind="another cpu")
    steps = {t.task_id: len(t.reference_solution) for _, t in loaded}
    per_step = sorted([1000 / steps[1], 500 / steps[3], 2000 / steps[15]])[1]  # shopping's median tokens per step
    guessed = per_step * (steps[103] + steps[204]) * (0.02 + 0.01 + 0.01)  # not begun: every label at fp32's rates
    assert est.by_precision["fp32-bf16-bf16"] == pytest.approx(500 * 0.005 * 2)  # task 3 owes sliding and h2o
    assert est.by_precision["fp32"] == pytest.approx(2000 * 0.01 + guessed)  # task 15 owes h2o; 103 and 204 all
    assert (est.rows, est.own, est.classes, est.guessed, est.borrowed, est.unknown) == (7, 0, 3, 2, (), ())
    # this CPU's own rows price a class once it has min_rows of them there; the other classes stay every machine's
    db.execute("update episodes set cpu_kind = 'old cpu'")
    db.execute("update episodes set cpu_kind = 'new cpu', wall_s = wall_s / 2 where task_id = '1'")
    db.conn.commit()
    mine = estimate_plan(db, loaded, plan, cpu_kind="new cpu", min_rows=2)  # fp32 budgeted: 2 rows here, full 1
    assert (mine.own, mine.classes) == (1, 3)
    assert mine.by_precision["fp32"] == pytest.approx(2000 * 0.005 + per_step * (steps[103] + steps[204]) * (
        (10 + 40) / 3000 + 0.005 + 0.005))  # fmt: skip
    assert mine.by_precision["fp32-bf16-bf16"] == pytest.approx(5.0)  # no bf16 rows on the new cpu
    # a precision with no rows borrows its class's rate; a plan whose tasks have no rows at all is named, not free
    at_new = forced_plan(db, [(path, t) for path, t in loaded if t.task_id in (103, 204)], LABELS, "bf16")
    borrowed = estimate_plan(db, loaded, at_new)
    assert borrowed.borrowed == ("bf16 budgeted", "bf16 full") and borrowed.seconds > 0 and not borrowed.unknown
    alone = estimate_plan(db, [(path, t) for path, t in loaded if t.task_id in (103, 204)], at_new)
    assert alone.seconds == 0 and len(alone.unknown) == 2 and "no task has rows" in alone.unknown[0]
    bare = sqlite_utils.Database(tmp_path / "none.sqlite")
    assert estimate_plan(bare, loaded, forced_plan(bare, loaded, LABELS, "fp32")).rows == 0


def test_superseded_rows_are_owed_again_and_keep_their_reason(tmp_path: Path) -> None:
    """`traces forced-supersede`: a task's finished rows (or only some labels) become `error` rows that say why, so
    the plan owes them again; the other tasks' rows stay; bad input is refused before anything is written."""
    path = tmp_path / "f.sqlite"
    _db(path)
    args = ["traces", "forced-supersede", "--db", str(path)]
    result = runner.invoke(app, [*args, "--tasks", "15", "--policies", "sliding-int8@180", "--why", "a bug"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == ["superseded task 15 sliding-int8@180"] * 2  # at both precisions
    plan = {p.task.task_id: p for p in forced_plan(sqlite_utils.Database(path), _loaded(), LABELS, "fp32")}
    assert plan[15].missing == ("sliding-int8@180", "h2o-int8@180") and plan[15].done == ("full",)
    assert 1 not in plan  # another task's rows are untouched
    result = runner.invoke(app, [*args, "--tasks", "1", "--why", "showed the wall clock"])
    assert result.exit_code == 0 and len(result.output.splitlines()) == 3
    errors = {r["error"] for r in sqlite_utils.Database(path).query("select error from episodes where task_id = '1'")}
    assert errors == {"superseded: showed the wall clock"}
    plan = {p.task.task_id: p for p in forced_plan(sqlite_utils.Database(path), _loaded(), LABELS, "fp32")}
    assert plan[1].missing == tuple(LABELS)
    for bad, message in ((["--tasks", "1", "--why", " "], "say why"), (["--tasks", ",", "--why", "x"], "names no task"),
                         (["--tasks", "1", "--why", "x"], "no finished forced rows of task(s) 1"),
                         (["--tasks", "404", "--why", "x"], "no finished forced rows")):  # fmt: skip
        result = runner.invoke(app, [*args, *bad])
        assert result.exit_code == 1 and message in result.output, result.output
