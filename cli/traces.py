"""`confkv-agent traces ls|summary|breakdown|compare|browse|forced-table|forced-plan|miniwob|confidence|retention`, `confkv-agent replay` and `confkv-agent report`: read the trace database.

These commands only read, so they never create a database: a missing or foreign file is a one-line error.
sqlite-utils, rich rendering and matplotlib are imported inside the commands to keep `--help` fast.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from cli.trace_db import DB_HELP, MAX_ID, _fail, _ids, _no_such, _open
from traces import DEFAULT_DB_PATH

_LS_COLUMNS = (
    "id",
    "run",
    "model",
    "policy",
    "task",
    "outcome",
    "steps",
    "peak KV",
    "KV/full",
    "wall s",
    "started UTC",
)


def _episode_row(ep: dict[str, Any]) -> list[str]:
    from traces.fmt import format_bytes, format_ratio

    outcome = ep["status"] if ep["status"] != "done" else ("success" if ep["success"] else "failure")
    fraction = ep["peak_kv_bytes"] / ep["full_kv_bytes"] if ep["peak_kv_bytes"] and ep["full_kv_bytes"] else None
    return [
        str(ep["id"]),
        str(ep["run_id"]),
        ep["model"],
        ep["policy"],
        ep["task_id"],
        outcome,
        "-" if ep["steps"] is None else str(ep["steps"]),
        format_bytes(ep["peak_kv_bytes"]),
        format_ratio(fraction, percent=True),
        "-" if ep["wall_s"] is None else f"{ep['wall_s']:.1f}",
        ep["started"][5:16].replace("T", " "),
    ]


def ls_command(
    db: Path = typer.Option(DEFAULT_DB_PATH, "--db", help=DB_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the episodes as a JSON list."),
    run: list[int] = typer.Option(None, "--run", help="Only these run ids (repeatable)."),
    policy: str | None = typer.Option(None, "--policy", help="Only this policy."),
    status: str | None = typer.Option(None, "--status", help="Only running, done or error episodes."),
    limit: int = typer.Option(50, "--limit", min=1, help="Show the most recent N episodes."),
) -> None:
    """List recorded episodes, most recent last."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    from traces.schema import EPISODE_STATUSES

    if status is not None and status not in EPISODE_STATUSES:
        raise _fail(f"--status must be one of {', '.join(EPISODE_STATUSES)}, got {status!r}")
    run_ids = _ids(run, "run", db)
    with _open(db) as store:
        episodes = store.episodes(run_ids=run_ids, policy=policy, status=status, limit=limit)
    if as_json:
        typer.echo(json.dumps(episodes, indent=2))
        return
    if not episodes:
        typer.echo(f"no episodes in {db}")
        return
    models = sorted({ep["model"] for ep in episodes})
    # the model column only when several models share the database: keeps the table readable at 80 columns
    shown = [i for i, name in enumerate(_LS_COLUMNS) if name != "model" or len(models) > 1]
    table = Table(
        title=f"episodes in {db}" + ("" if len(models) > 1 else f" (model {models[0]})"),
        box=box.SIMPLE_HEAD,
        show_edge=False,
        padding=(0, 0),
    )
    for i in shown:
        name = _LS_COLUMNS[i]
        table.add_column(
            name,
            justify="left" if name in ("model", "policy", "task", "outcome") else "right",
            no_wrap=name not in ("model", "task"),
            min_width=8 if name == "task" else None,
        )
    for ep in episodes:
        row = _episode_row(ep)
        table.add_row(*(row[i] for i in shown))
    Console().print(table)


def summary_command(
    db: Path = typer.Option(DEFAULT_DB_PATH, "--db", help=DB_HELP),
    run: list[int] = typer.Option(None, "--run", help="Only these run ids (repeatable)."),
    model: str | None = typer.Option(None, "--model", help="Only runs of this model."),
    as_json: bool = typer.Option(False, "--json", help="Print {policies: {name: {...}}} as JSON."),
) -> None:
    """Per-policy success, retention and KV memory vs `full` (the table `eval` prints); forced-mode runs get their
    own table (answer/action ΔNLL vs `full`)."""
    from rich.console import Console

    from traces.forced_tables import forced_json, forced_table
    from traces.summary import summary_table

    run_ids = _ids(run, "run", db)
    with _open(db) as store:
        summary = store.summary(run_ids=run_ids, model=model)
        forced = store.forced_summary(run_ids=run_ids)  # `eval --mode forced` runs: their own table
    if as_json:
        typer.echo(json.dumps({**summary.to_json(), **({"forced": forced_json(forced)} if forced else {})}, indent=2))
    elif not summary.policies and not forced:
        typer.echo(f"no finished episodes in {db}")
    else:
        if summary.policies:
            Console().print(summary_table(summary))
        if forced:
            Console().print(forced_table(forced))


def replay_command(
    episode_id: int = typer.Argument(..., help="Episode id (see `confkv-agent traces ls`)."),
    db: Path = typer.Option(DEFAULT_DB_PATH, "--db", help=DB_HELP),
    step: int | None = typer.Option(None, "--step", help="Show only this step (0-based)."),
    full_observation: bool = typer.Option(False, "--full-observation", help="Print whole observations."),
    observation_lines: int = typer.Option(12, "--observation-lines", min=0, help="Observation lines per step."),
) -> None:
    """Replay an episode: observations, actions, results and the confidence/budget curve per step."""
    from rich.console import Console

    from traces.replay import replay
    from traces.store import TraceStoreError

    _ids([episode_id], "episode", db)
    with _open(db) as store:
        try:
            replay(
                store,
                episode_id,
                Console(),
                step=step,
                full_observation=full_observation,
                observation_lines=observation_lines,
            )
        except TraceStoreError as exc:
            raise _fail(str(exc)) from None


def report_command(
    out: Path = typer.Option(..., "--out", help="Directory for the PNG files (created if missing)."),
    db: Path = typer.Option(DEFAULT_DB_PATH, "--db", help=DB_HELP),
    episode: list[int] = typer.Option(
        None, "--episode", help="Episodes for confidence/budget plots (repeatable; default: the latest of each policy)."
    ),
    run: list[int] = typer.Option(None, "--run", help="Only these run ids (repeatable)."),
) -> None:
    """Write PNG plots: confidence/budget over decoding, KV bytes per policy, success vs peak memory."""
    from traces.report import write_report
    from traces.store import TraceStoreError

    if out.exists() and not out.is_dir():
        raise _fail(f"--out {out} is an existing file; pass a directory (it is created if missing)")
    episode_ids, run_ids = _ids(episode, "episode", db), _ids(run, "run", db)
    with _open(db) as store:
        try:
            paths = write_report(store, out, episode_ids=episode_ids, run_ids=run_ids)
        except (TraceStoreError, ValueError) as exc:
            raise _fail(str(exc)) from None
    if not paths:
        typer.echo(f"nothing to plot: no finished episodes in {db}")
        return
    for path in paths:
        typer.echo(str(path))


def browse_command(db: Path = typer.Option(DEFAULT_DB_PATH, "--db", help=DB_HELP)) -> None:
    """Browse runs, episodes and steps in a terminal app (plot of the whole episode, side-by-side compare)."""
    _open(db).close()  # a missing or foreign file is the usual one-line error, before the screen switches
    try:
        from traces.browse import TraceBrowser
    except ImportError as exc:
        raise _fail(f"the trace browser needs textual and textual-plotext ({exc}); "
                    "pip install textual textual-plotext") from None  # fmt: skip
    TraceBrowser(str(db)).run()


def breakdown_command(
    db: Path = typer.Option(DEFAULT_DB_PATH, "--db", help=DB_HELP),
    tasks: list[Path] = typer.Option(None, "--tasks", help="Task files or folders the episodes ran (default: tasks/)."),
    run: list[int] = typer.Option(None, "--run", help="Only these run ids (repeatable)."),
    model: str | None = typer.Option(None, "--model", help="Only runs of this model."),
    as_json: bool = typer.Option(False, "--json", help="Print the breakdown (and every failed episode) as JSON."),
    across_runs: bool = typer.Option(False, "--across-runs", help="Count each task and policy once over all the "
                                     "runs (one suite finished under two runs, e.g. two dtypes)."),
) -> None:
    """Free-running results by site, difficulty and memory span; step cost, prefilled vs re-sent tokens; and why
    each failed episode failed (navigation, grounding, memory, format, ...; `traces.failures`), with trace ids."""
    from agent.actions import parse_action
    from envs import TASKS_DIR
    from envs.taskspec import TaskSpecError, load_tasks
    from traces.breakdown import breakdown, breakdown_markdown

    try:
        loaded = load_tasks(tasks or [TASKS_DIR])
    except TaskSpecError as exc:
        raise _fail(f"cannot load the tasks: {exc}") from None
    run_ids = _ids(run, "run", db)
    with _open(db) as store:
        data = breakdown(store, loaded, run_ids=run_ids, model=model, across_runs=across_runs, parse_step=parse_action)
    if as_json:
        typer.echo(json.dumps(data, indent=2))
    elif not data["overall"]:
        typer.echo(f"no finished free-running episodes of these tasks in {db}")
    else:
        typer.echo(breakdown_markdown(data))
        for f in data["failed_episodes"]:
            typer.echo(f"episode {f['episode_id']} task {f['task_id']} {f['policy']}: {f['category']}: {f['detail']}")


def _run_spec(spec: str, db: Path) -> tuple[Path, int]:
    """`RUN` (a run of --db) or `PATH:RUN` (a run of another database) -> (database, run id)."""
    path, _, run = spec.rpartition(":")
    if not run.isascii() or not run.isdigit():
        raise _fail(f"{spec[:60]!r} is not a run: give a run id (`traces ls` shows them) or DB_PATH:RUN_ID")
    target = Path(path) if path else db
    if len(run.lstrip("0")) > len(str(MAX_ID)) or int(run) > MAX_ID:  # (int() refuses over 4,300 digits)
        raise _no_such("run", run, target)
    return target, int(run)


def compare_command(
    old: str = typer.Argument(..., help="The older run: RUN_ID (of --db) or DB_PATH:RUN_ID."),
    new: str = typer.Argument(..., help="The newer run: RUN_ID (of --db) or DB_PATH:RUN_ID."),
    db: Path = typer.Option(DEFAULT_DB_PATH, "--db", help=DB_HELP),
    policy: str = typer.Option("full", "--policy", help="Compare the episodes of this KV policy."),
    as_json: bool = typer.Option(False, "--json", help="Print the pairs as JSON."),
) -> None:
    """Pair two runs' finished episodes by task: outcome each, and the first step where the actions differ (with
    greedy decoding on one machine and dtype, the step where a changed agent rule first bit)."""
    from dataclasses import asdict

    from traces.compare import compare_markdown, compare_runs
    from traces.store import TraceStoreError

    (old_db, old_run), (new_db, new_run) = _run_spec(old, db), _run_spec(new, db)
    with _open(old_db) as a, _open(new_db) as b:
        try:
            pairs = compare_runs(a, old_run, b, new_run, policy)
        except TraceStoreError as exc:
            raise _fail(str(exc)) from None
    if as_json:
        typer.echo(json.dumps([asdict(p) | {"first_difference": p.first_difference} for p in pairs], indent=2))
    elif not pairs:
        typer.echo(f"the two runs share no finished {policy} episode")
    else:
        typer.echo(compare_markdown(pairs))


def miniwob_command(
    run: list[int] = typer.Option(..., "--run", help="Run ids of an `eval --suite miniwob`, one per policy "
                                  "(repeatable; `traces ls` shows them)."),
    db: Path = typer.Option(DEFAULT_DB_PATH, "--db", help=DB_HELP),
    out: Path | None = typer.Option(None, "--out", help="Also write the results as JSON to this file."),
) -> None:
    """Per-task MiniWoB++ success, policy beside policy, on the (task, seed) pairs every policy finished: Wilson
    95% intervals, paired wins and losses against the first policy (`full`), peak KV vs full."""
    from traces.miniwob import miniwob_json, miniwob_markdown, miniwob_results
    from traces.store import TraceStoreError

    run_ids = _ids(run, "run", db) or []
    if out is not None and out.is_dir():
        raise _fail(f"--out {out} is a directory; pass a file")
    with _open(db) as store:
        try:
            results = miniwob_results(store, run_ids)
        except TraceStoreError as exc:
            raise _fail(str(exc)) from None
    if results.per_task:
        typer.echo(miniwob_markdown(results))
    else:
        typer.echo(f"no (task, seed) in {db} that runs {', '.join(map(str, run_ids))} all finished")
    if out is not None:
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(miniwob_json(results), indent=2) + "\n")
        except OSError as exc:
            raise _fail(f"cannot write --out {out}: {exc.strerror or exc}") from None


def register(app: typer.Typer) -> None:
    """Add the `traces` group, `replay` and `report` to the root app."""
    from cli.traces_confidence import confidence_command
    from cli.traces_forced import forced_plan_command, forced_supersede_command, forced_table_command
    from cli.traces_retention import retention_command

    traces_app = typer.Typer(help="Inspect recorded episodes.", no_args_is_help=True)
    traces_app.command("ls")(ls_command)
    traces_app.command("summary")(summary_command)
    traces_app.command("browse")(browse_command)
    traces_app.command("breakdown")(breakdown_command)
    traces_app.command("compare")(compare_command)
    traces_app.command("forced-table")(forced_table_command)
    traces_app.command("forced-plan")(forced_plan_command)
    traces_app.command("forced-supersede")(forced_supersede_command)
    traces_app.command("miniwob")(miniwob_command)
    traces_app.command("confidence")(confidence_command)
    traces_app.command("retention")(retention_command)
    app.add_typer(traces_app, name="traces")
    app.command("replay")(replay_command)
    app.command("report")(report_command)
