"""`confkv-agent traces retention`: how many of `full`'s free-running passes each policy kept (`traces.retention`)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from cli.trace_db import DB_HELP
from traces import DEFAULT_DB_PATH

TASKS_DIR = Path(__file__).resolve().parents[1] / "tasks"


def retention_command(
    db: Path = typer.Option(DEFAULT_DB_PATH, "--db", help=DB_HELP),
    run: list[int] = typer.Option(..., "--run", help="Free-running run ids, `full`'s among them (repeatable)."),
    tasks: Path | None = typer.Option(None, "--tasks", help="Task files (a directory): tasks whose reference is N/A "
                                      "are marked, their passes being no evidence of skill [the repository's tasks/]"),  # fmt: skip
    guess: list[str] = typer.Option([], "--guess", help="A task whose pass a reader found to be a guess in its "
                                    "trace (repeatable); marked and left out of the evidence-only figure."),  # fmt: skip
    as_json: bool = typer.Option(False, "--json", help="Print the figures as JSON."),
) -> None:
    """Per policy, how many of `full`'s passes it kept (Wilson 95%), the same without the marked passes (N/A
    references, named guesses), paired wins, and its peak KV against full's on those tasks; then task by task."""
    from cli.trace_db import _fail, _ids, _open, _runs
    from envs.taskspec import TaskSpecError, load_tasks
    from traces.fmt import terminal_safe
    from traces.retention import BASELINE, outcomes, retention, retention_json, retention_markdown, task_marks

    run_ids = _ids(run, "run", db) or []
    specs = []
    if tasks is not None or TASKS_DIR.is_dir():
        try:
            specs = load_tasks(tasks or TASKS_DIR)
        except (TaskSpecError, OSError) as exc:
            raise _fail(terminal_safe(f"--tasks {tasks or TASKS_DIR}: {exc}")) from None
    else:
        typer.echo(f"no task files at {TASKS_DIR} (pass --tasks): N/A references are not marked", err=True)
    with _open(db) as store:
        runs = _runs(store, run_ids, db)
        for rid in run_ids:
            if runs[rid].get("mode") == "forced":
                raise _fail(f"run {rid} is a forced run (no success of its own): `traces forced-table` reads it")
        if not any(runs[rid]["policy"] == BASELINE for rid in run_ids):
            raise _fail(f"none of runs {', '.join(map(str, run_ids))} is a `{BASELINE}` run: retention is counted "
                        f"on {BASELINE}'s passes")  # fmt: skip
        rows = store.episodes(run_ids=run_ids)
    per_task = outcomes(rows, task_marks(specs, guess))
    results = retention(per_task)
    if as_json:
        typer.echo(json.dumps(retention_json(per_task, results), indent=2))
    else:
        typer.echo(retention_markdown(per_task, results))
