"""`confkv-agent tasks check`: validate task files and replay their reference solutions against the live sites."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from envs.check import TaskCheck

tasks_app = typer.Typer(help="Task suite tools.", no_args_is_help=True)


def _split(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [v.strip() for value in values for v in value.split(",") if v.strip()]


@tasks_app.command("check")
def check(
    paths: list[Path] = typer.Argument(None, help="Task directory or YAML files (default: tasks/)."),
    sites: list[str] = typer.Option(None, "--sites", help="Only tasks whose sites are all among these "
                                    "(comma-separated or repeated), e.g. --sites shopping,forum."),
    ids: str = typer.Option(None, "--ids", help="Only these task ids, e.g. 1,2,10-12."),
    sample: int = typer.Option(None, "--sample", min=1, help="Check a seeded random sample of N valid tasks."),
    seed: int = typer.Option(0, "--seed", help="Seed of --sample."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON summary instead of a table."),
) -> None:
    """Validate every task, replay each reference solution in headless Chromium (must pass the evaluator) and a
    no-op `stop` (must fail). Exits 1 if anything is wrong."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from envs.check import TaskSelection, parse_ids, summary
    from envs.sites import SITES
    from envs.taskspec import TaskSpecError
    from runner.task_check import check_tasks
    from traces.fmt import terminal_safe

    def plain(text: str) -> Text:  # file names and reasons quote the user's files: data, never markup or escapes
        return Text(terminal_safe(text))

    site_names = _split(sites)
    unknown = sorted(set(site_names or []) - set(SITES))
    if unknown:
        raise typer.BadParameter(f"unknown site(s) {', '.join(unknown)}; known: {', '.join(SITES)}",
                                 param_hint="--sites")
    try:
        id_set = parse_ids(ids) if ids else None
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--ids") from None
    err = Console(stderr=True)

    def progress(item: TaskCheck) -> None:
        status = Text("ok", style="green") if item.ok else Text("FAIL", style="red")
        err.print(status, plain(f"{item.task_id if item.task_id is not None else '?'} {item.path} "
                                f"({item.seconds:.1f}s)"), highlight=False)  # fmt: skip

    try:
        selection = TaskSelection(paths or [Path("tasks")], sites=site_names, ids=id_set, sample=sample, seed=seed)
        results = check_tasks(selection, progress=progress)
    except TaskSpecError as exc:  # e.g. a path that does not exist
        err.print(Text("error:", style="red"), plain(str(exc)), highlight=False)
        raise typer.Exit(2) from None
    doc = summary(results)
    if as_json:
        typer.echo(json.dumps(doc, indent=2))
    else:
        mark = {True: "[green]yes[/]", False: "[red]no[/]", None: "-"}
        table = Table(title=f"{doc['tasks']} tasks: {doc['valid']} valid, {doc['reference_pass']} reference pass, "
                            f"{doc['negative_fail']} negative fail")
        for column in ("task", "file", "valid", "reference pass", "negative fail", "reason"):
            table.add_column(column, overflow="fold")
        for r in results:
            table.add_row(str(r.task_id if r.task_id is not None else "?"), plain(Path(r.path).name), mark[r.valid],
                          mark[r.reference_pass], mark[r.negative_fail], plain("\n".join(r.reasons) or "ok"))
        Console().print(table)
    if not results:
        err.print("[red]error:[/] no tasks matched", highlight=False)
        raise typer.Exit(1)
    if doc["failures"]:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add `tasks ...` to the root app."""
    app.add_typer(tasks_app, name="tasks")
