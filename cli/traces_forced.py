"""`confkv-agent traces forced-table`: trajectory-forced results as the Markdown tables of docs/results
(`traces.forced`), the head-to-head questions and, with `--png`, the frontier figure; `forced-plan`: what a run
still owes; `forced-supersede`: tasks to score again whole."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from cli.trace_db import DB_HELP, _fail, _ids, _open
from traces import DEFAULT_DB_PATH

if TYPE_CHECKING:
    from traces.forced_plan import Coverage, Estimate


def _label(text: str) -> str:
    """A user-typed label inside an error line: short, and as its repr, so a control character is shown, not
    obeyed."""
    return repr(text if len(text) <= 40 else f"{text[:40]}...")


def forced_table_command(
    db: Path = typer.Option(DEFAULT_DB_PATH, "--db", help=DB_HELP),
    policies: str | None = typer.Option(None, "--policies", help="Only these policy labels, comma-separated "
                                        "(e.g. full,confkv@512)."),
    common: bool = typer.Option(False, "--common", help="Only the tasks every kept label finished unbroken, so "
                                "absolute figures (NLL, KV MiB) average the same tasks."),
    run: list[int] = typer.Option(None, "--run", help="Only these run ids (repeatable)."),
    tasks: str | None = typer.Option(None, "--tasks", help="Only these task ids, comma-separated."),
    exclude_tasks: str | None = typer.Option(None, "--exclude-tasks", help="Leave out these task ids, comma-separated "
                                             "(e.g. the tasks a threshold was read off: a held-out comparison)."),
    memory_span: str | None = typer.Option(None, "--memory-span", help="Only tasks of this memory span (long or "
                                           "short, the task's `memory_span`): the head-to-head questions pool "
                                           "tasks, and a short task's decisions need little of what was evicted."),
    png: Path | None = typer.Option(None, "--png", help="Also draw the frontier of the rows shown (decision agreement "
                                    "and answer ΔNLL vs mean KV bytes, over the tasks every label finished) here."),
    dtype: str | None = typer.Option(None, "--dtype", help="Only rows scored at this resolved precision (e.g. fp32, "
                                     "fp32-bf16-bf16). Rows pair within a precision; tasks are pooled, each at one "
                                     "precision (a task scored at two: the one with full and most of the labels "
                                     "shown)."),
) -> None:
    """Trajectory-forced results as Markdown: per policy label, then per task (the tables of
    docs/results/forced-*.md), then the head-to-head questions (confkv vs sliding, h2o, random; gate vs gate off;
    recall) where both labels ran, then how much of each earlier turn was resident at the decisions a policy lost."""
    from traces.fmt import task_order, terminal_safe
    from traces.forced import common_tasks, forced_rows, one_precision_per_task, unpaired_with_full
    from traces.forced_compare import question_lines
    from traces.forced_dropped import dropped_lines
    from traces.forced_tables import forced_markdown

    run_ids = _ids(run, "run", db)
    with _open(db) as store:
        rows = forced_rows(store.db, run_ids)
    if policies is not None:
        keep = [p.strip() for p in policies.split(",") if p.strip()]
        have = {r["policy"] for r in rows}
        missing = [p for p in keep if p not in have]
        if not keep or missing:
            raise _fail(f"no forced results for policy {_label(missing[0] if missing else policies)} in {db}; "
                        f"it has: {terminal_safe(', '.join(sorted(have))) or 'none'}")  # fmt: skip
        rows = [r for r in rows if r["policy"] in keep]
    only, left_out = _task_ids(tasks), _task_ids(exclude_tasks)
    if only is not None or left_out is not None:
        have_tasks = {str(r["task_id"]) for r in rows}
        unknown = sorted((only or set()) - have_tasks)
        if unknown:
            raise _fail(f"no forced results for task {terminal_safe(unknown[0])} in {db}")
        rows = [r for r in rows if (only is None or str(r["task_id"]) in only)
                and (left_out is None or str(r["task_id"]) not in left_out)]  # fmt: skip
    if memory_span is not None:
        if memory_span not in ("long", "short"):
            raise _fail(f"--memory-span must be long or short, not {_label(memory_span)}")
        rows = [r for r in rows if r["memory_span"] == memory_span]
    if dtype is not None:
        have = sorted({str(r["precision"]) for r in rows})
        rows = [r for r in rows if r["precision"] == dtype]
        if not rows:
            raise _fail(f"no forced results at precision {_label(dtype)} in {db}; it has: "
                        f"{terminal_safe(', '.join(have)) or 'none'}")  # fmt: skip
    rows, mixed = one_precision_per_task(rows)
    if mixed:
        listed = "; ".join(f"task {t} at {kept} ({', '.join(out)} left out)"
                           for t, (kept, out) in sorted(mixed.items(), key=lambda kv: task_order(kv[0])))
        typer.echo(terminal_safe("tasks scored at several precisions, each shown at the one with full and the most "
                                 f"of these labels (--dtype picks one): {listed}") + "\n")
    if not rows:
        typer.echo(f"no finished forced episodes in {db}")
        return
    shown = common_tasks(rows) if common else rows
    unpaired = unpaired_with_full(shown)
    if unpaired:
        typer.echo(terminal_safe("not paired with full (another trajectory was replayed), so left out of every delta: "
                                 + "; ".join(f"task {t}: {', '.join(labels)}" for t, labels in unpaired.items()))
                   + "\n")  # fmt: skip
    precisions = sorted({str(r["precision"]) for r in shown})
    if len(precisions) > 1:
        counts = {p: len({r["task_id"] for r in shown if str(r["precision"]) == p}) for p in precisions}
        typer.echo(terminal_safe("precisions pooled (each task at one; pairs within a precision): "
                                 + ", ".join(f"{p} ({n} tasks)" for p, n in counts.items())) + "\n")  # fmt: skip
    typer.echo(forced_markdown(shown))
    heads = question_lines(shown)
    if heads:
        typer.echo("\n" + "\n".join(heads))
    dropped = dropped_lines(shown)
    if dropped:
        typer.echo("\n" + "\n".join(dropped))
    if png is not None:
        from traces.forced_plot import plot_frontier

        try:
            typer.echo(f"wrote {plot_frontier(shown, png)}", err=True)
        except (ValueError, OSError) as exc:
            raise _fail(f"--png {png}: {exc}") from None


def _task_ids(text: str | None) -> set[str] | None:
    return None if text is None else {t.strip() for t in text.split(",") if t.strip()}


def forced_plan_command(
    tasks: list[Path] = typer.Argument(..., help="Task files or directories (e.g. tasks/)."),
    db: Path = typer.Option(DEFAULT_DB_PATH, "--db", help=DB_HELP),
    policies: str = typer.Option(..., "--policies", help="The policies the run scores, comma-separated, as given "
                                 "to `eval --mode forced`."),
    budgets: str | None = typer.Option(None, "--budgets", help="The run's footprints, as given to `eval`."),
    dtype: str = typer.Option("fp32", "--dtype", help="Precision for a task with no rows yet (a task with rows "
                              "stays at theirs: rows pair only within one precision)."),
    rebase: bool = typer.Option(False, "--rebase", help="A task that still owes labels at another precision is "
                                "planned at --dtype instead, every label owed again (its old rows stay; tables show "
                                "each task at the precision with most of its labels): for a machine where the old "
                                "precision is slow. Put full in --policies."),
    memory_span: str | None = typer.Option(None, "--memory-span", help="Only tasks of this memory span (long or "
                                           "short)."),
    exclude_tasks: str | None = typer.Option(None, "--exclude-tasks", help="Leave out these task ids, "
                                             "comma-separated (e.g. tasks to re-score by hand)."),
    commands: bool = typer.Option(False, "--commands", help="Print one line per task, `PRECISION PATH`, for a "
                                  "script that runs `eval` task by task, instead of the table."),
    coverage: bool = typer.Option(False, "--coverage", help="Print what is done instead, as a Markdown table: per "
                                  "site and memory span, the tasks with every label, with `full` and labels owed, "
                                  "and with no `full` yet."),
    estimate: bool = typer.Option(False, "--estimate", help="Print only the time left: process-hours per "
                                  "precision, from the seconds per prefilled token of the finished rows "
                                  "(this CPU kind's when it has 10, else every machine's)."),
) -> None:
    """What a forced run still owes, task by task: the labels each task lacks, at the precision its rows have, the
    cheapest tasks first (short memory span, then fewest reference steps). A session that resumes a long run on
    another machine starts from this instead of rebuilding the list by hand."""
    from rich.console import Console
    from rich.table import Table

    from confkv.cpu import cpu_kind
    from confkv.policies import PolicyError, get_policy
    from envs.taskspec import TaskSpecError, load_task, task_files
    from runner.footprint import label_budgets, parse_budgets
    from traces.fmt import terminal_safe
    from traces.forced_plan import estimate_plan, forced_coverage, forced_plan

    if memory_span not in (None, "long", "short"):
        raise _fail(f"--memory-span must be long or short, not {_label(memory_span)}")
    names = list(dict.fromkeys(p.strip() for p in policies.split(",") if p.strip()))
    try:
        built = {name: get_policy(name) for name in names}
    except PolicyError as exc:
        raise _fail(f"--policies: {terminal_safe(str(exc))}") from None
    try:
        steps = parse_budgets(budgets) if budgets is not None else []
    except ValueError as exc:
        raise _fail(terminal_safe(str(exc))) from None
    try:
        loaded = [(path, load_task(path)) for path in task_files(tasks)]
    except TaskSpecError as exc:  # a ValueError too: caught apart, or a bad task would read as a bad --budgets
        raise _fail(terminal_safe("; ".join(exc.errors))) from None
    if not names:
        raise _fail("--policies names no policy")
    every_task, kind = loaded, cpu_kind()  # the estimate guesses a new task's tokens from every task with rows
    left_out = _task_ids(exclude_tasks) or set()
    loaded = [(path, task) for path, task in loaded if str(task.task_id) not in left_out]
    labels = [label for label, _, _ in label_budgets(built, steps)]
    if memory_span is not None:
        loaded = [(path, task) for path, task in loaded if task.memory_span == memory_span]
    if rebase and "full" not in labels:
        raise _fail("--rebase plans tasks again from `full` at --dtype: add full to --policies")
    if coverage:
        if "full" not in labels:
            raise _fail("--coverage counts tasks by their `full` row: add full to --policies")
        with _open(db) as store:
            typer.echo(_coverage_table(forced_coverage(store.db, loaded, labels, dtype, rebase), len(labels)))
        return
    with _open(db) as store:
        plan = forced_plan(store.db, loaded, labels, dtype, rebase)
        est = estimate_plan(store.db, every_task, plan, kind) if plan and (estimate or not commands) else None
    if estimate:
        typer.echo(_estimate_line(est, kind) if est is not None else "nothing left to run")
        return
    if commands:
        for p in plan:
            typer.echo(f"{terminal_safe(p.precision)} {p.path}")
        return
    table = Table(title=f"{len(plan)} of {len(loaded)} tasks owe labels ({len(labels)} labels each)")
    for col in ("task", "file", "span", "steps", "precision", "done", "missing"):
        table.add_column(col, overflow="fold")
    for p in plan:
        table.add_row(str(p.task.task_id), terminal_safe(p.path.stem), p.task.memory_span, str(p.reference_steps),
                      terminal_safe(p.precision), f"{len(p.done)}/{len(labels)}",
                      terminal_safe(" ".join(p.missing)))  # fmt: skip
    Console().print(table, markup=False, highlight=False)
    if est is not None:
        typer.echo(_estimate_line(est, kind))


def _estimate_line(est: Estimate, kind: str) -> str:
    """One line a session plans by: process-hours left, per precision, and what the rates stand on."""
    from traces.fmt import terminal_safe

    if not est.rows:
        return "no finished rows with timings yet: nothing to estimate the time left from"
    parts = ", ".join(f"{terminal_safe(name)} {secs / 3600:.1f}" for name, secs in sorted(est.by_precision.items()))
    source = (f"{est.own} of {est.classes} rate classes from this CPU's own rows ({terminal_safe(kind)}), the rest "
              "from every machine's" if est.own else "rates from every machine's rows")
    line = (f"about {est.seconds / 3600:.1f} process-hours left ({parts}), at the seconds per prefilled token of "
            f"{est.rows} finished rows: {source}")
    if est.guessed:
        line += f"; {est.guessed} tasks not begun, their tokens guessed from their site's tokens per reference step"
    if est.borrowed:
        line += f"; no rows for {terminal_safe(', '.join(est.borrowed))}: priced at other precisions' median"
    if est.unknown:
        line += f"; NOT counted: {terminal_safe(', '.join(est.unknown))}"
    return line


def _coverage_table(rows: list[Coverage], labels: int) -> str:
    from traces.forced_plan import id_ranges

    def cell(ids: tuple[int, ...]) -> str:
        return f"{len(ids)}: {id_ranges(ids)}" if ids else "-"

    lines = [f"| site | memory span | tasks | every label ({labels}) | `full`, labels owed | no `full` yet |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r.site} | {r.span} | {r.tasks} | {cell(r.complete)} | {cell(r.partial)} | {cell(r.not_begun)} |"
              for r in rows]  # fmt: skip
    total = [sum(len(getattr(r, k)) for r in rows) for k in ("complete", "partial", "not_begun")]
    lines.append(f"| all | | {sum(total)} | {total[0]} | {total[1]} | {total[2]} |")
    return "\n".join(lines)


def forced_supersede_command(
    tasks: str = typer.Option(..., "--tasks", help="Task ids whose finished forced rows are superseded, "
                              "comma-separated."),
    why: str = typer.Option(..., "--why", help="The reason, kept with each row (`superseded: WHY`)."),
    db: Path = typer.Option(DEFAULT_DB_PATH, "--db", help=DB_HELP),
    policies: str | None = typer.Option(None, "--policies", help="Only these labels, comma-separated "
                                        "(e.g. sliding-int8@90) [default: every label]."),
) -> None:
    """Score tasks again whole: their finished forced rows become `error` rows that say why, so `forced-plan` owes
    their labels again and the tables leave them out (the rows stay in the database). For a task whose replay changed
    between processes, or rows a bug wrote."""
    from traces.fmt import terminal_safe
    from traces.forced_plan import supersede

    ids, labels = _task_ids(tasks) or set(), _task_ids(policies)
    if not ids:
        raise _fail("--tasks names no task")
    with _open(db) as store:
        try:
            marked = supersede(store, ids, why, labels)
        except ValueError as exc:
            raise _fail(str(exc)) from None
    if not marked:
        raise _fail(f"no finished forced rows of task(s) {terminal_safe(', '.join(sorted(ids)))}"
                    + (f" for {terminal_safe(', '.join(sorted(labels)))}" if labels else ""))
    for task, label in marked:
        typer.echo(terminal_safe(f"superseded task {task} {label}"))
