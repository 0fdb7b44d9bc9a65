"""`confkv-agent run` (one episode, live view) and `confkv-agent eval` (tasks x policies, resumable).

Every input is checked before anything starts (task files, policy names and `--set` keys, the model name or path),
so a typo costs a one-line error and exit code 2, and never a half-written trace database.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from cli.options import POLICY_HELP, SET_HELP, checked_dtype, dtype_option
from envs import TASKS_DIR
from runner import interrupts
from traces import DEFAULT_DB_PATH
from traces.fmt import terminal_safe

if TYPE_CHECKING:
    from confkv.policy import KVPolicy
    from runner.episode import EpisodeResult
    from traces.records import DecodeToken, StepRecord

DEFAULT_AGENT_MODEL = "qwen2.5-coder-1.5b"
# The embedded default: a 3-step shopping lookup (search, open the product, answer), short enough for 2 CPU cores.
DEFAULT_TASK = TASKS_DIR / "shopping_001.yaml"
DEFAULT_TASK_MAX_STEPS = 8
_POLICY_HELP = f"scripted (replays the reference solution) or {POLICY_HELP}"


def _usage_error(message: str) -> typer.Exit:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    return typer.Exit(2)


def _check_model(name: str) -> None:
    """A registry name or an existing path; anything else is a usage error (nothing is downloaded here)."""
    from confkv.models import MODELS, get_spec
    from confkv.models.load import check_local_model

    if name in MODELS:
        return
    if Path(name).expanduser().exists():
        check_local_model(Path(name).expanduser())  # a random file or an empty folder fails here, not after a run row
        return
    if "/" in name or name.endswith(".gguf") or name.startswith("."):
        raise FileNotFoundError(f"model path {name} does not exist")
    get_spec(name)  # raises UnknownModelError listing the known names


def check_db_path(db: Path) -> None:
    """The trace database must be SQLite (or not exist yet): refuse a text file or folder before anything runs."""
    if db.is_dir():
        raise ValueError(f"--db {db} is a directory; pass a database file")
    if db.is_file():
        with db.open("rb") as f:
            head = f.read(16)
        if head and head != b"SQLite format 3\x00":
            raise ValueError(f"--db {db} exists but is not an SQLite database; pass another path")


def _validate(policies: list[str], overrides: list[str] | None, model: str, db: Path | None = None,
              policy_hint: str = "--policy") -> dict[str, KVPolicy]:
    """Every input checked before anything starts; returns the KV policies, built once here (`scripted` has none)."""
    from cli.policies import build_policies
    from confkv.models import UnknownModelError
    from runner.worker import SCRIPTED

    if not policies:
        raise typer.BadParameter("no policies given", param_hint=policy_hint)
    built = build_policies([p for p in policies if p != SCRIPTED], overrides, policy_hint, model=model)
    try:
        if built:
            _check_model(model)
        if db is not None:
            check_db_path(db)
    except (UnknownModelError, OSError, ValueError) as exc:
        raise _usage_error(str(exc)) from None
    return built


def _agent_dtype(name: str, int8: bool, policies: list[str], model: str) -> str:
    """The concrete precision of this run (printed once; `auto` measured only when a model will be loaded)."""
    from runner.worker import SCRIPTED

    if int8:
        return "int8"  # the old flag: W8A8 Linear layers, fp32 activations
    uses_model = any(p != SCRIPTED for p in policies)
    return checked_dtype(name, announce=uses_model, model=model if uses_model else None)


def clip(text: str, limit: int = 120) -> str:
    """A display prefix of user or model text: rich lays out and highlights whole strings (quadratic in their
    length), so megabytes of intent or answer would freeze the screen and Ctrl-C with it. Control characters are
    shown, not sent (`traces.fmt.terminal_safe`): an ESC in an intent must not clear or retitle the terminal."""
    shown = terminal_safe(text[:limit])
    return shown if len(text) <= limit else f"{shown}... ({len(text):,} chars)"


def _sparkline(values: list[float]) -> str:
    blocks = "▁▂▃▄▅▆▇█"
    return "".join(blocks[min(int(v * len(blocks)), len(blocks) - 1)] for v in values)


def _size(n: int | None) -> str:
    from traces.fmt import format_bytes

    return format_bytes(n)


class LiveView:
    """The `run` screen: one row per step (action, confidence sparkline over its tokens, KV size, tokens, time)."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.rows: list[tuple[StepRecord, list[float]]] = []

    def add(self, record: StepRecord, tokens: list[DecodeToken]) -> None:
        self.rows.append((record, [t.confidence for t in tokens]))

    def __rich__(self) -> Any:
        from rich.markup import escape
        from rich.table import Table

        table = Table(title=self.title, expand=False)
        for col in ("step", "action", "confidence", "KV", "prefill/total tok", "s"):
            table.add_column(col, justify="right" if col in ("step", "KV", "s") else "left")
        for e, confidences in self.rows[-20:]:
            raw = repr((e.raw_output or "")[:40])
            action = escape(clip(e.action, 100)) if e.action else f"[red]{escape(raw)}[/red]"
            error = e.parse_error or e.exec_error
            if error:
                action += f" [red]({escape(terminal_safe(error[:50]))})[/red]"
            tokens = "-" if e.prefilled_tokens is None else f"{e.prefilled_tokens}/{e.total_tokens}"
            table.add_row(str(e.step), action, _sparkline(confidences[:40]), _size(e.kv_bytes), tokens,
                          f"{(e.step_ms or 0) / 1000:.1f}")  # fmt: skip
        return table


def _print_result(console: Any, result: EpisodeResult) -> None:
    from rich.markup import escape

    colour = "green" if result.success else ("red" if result.status == "error" else "yellow")
    console.print(f"[{colour}]task {result.task_id} ({result.policy}): "
                  f"{'SUCCESS' if result.success else 'FAILED' if result.status == 'done' else 'ERROR'}[/{colour}]"
                  f" after {result.steps} steps in {result.wall_s:.0f} s; answer={escape(clip(repr(result.answer)))}",
                  highlight=False)  # fmt: skip
    console.print(terminal_safe(f"  {result.stop_reason or ''} | {result.reason[:300]}"), markup=False,
                  highlight=False)  # fmt: skip
    if result.peak_kv_bytes is not None:
        ratio = result.peak_kv_bytes / result.full_kv_bytes if result.full_kv_bytes else float("nan")
        console.print(f"  peak KV {_size(result.peak_kv_bytes)} vs full {_size(result.full_kv_bytes)} "
                      f"({ratio:.2f}); peak RSS {_size(result.peak_rss_bytes)}; episode {result.episode_id}")
    if result.blocked:
        console.print(f"  blocked requests ({len(result.blocked)}, stored in the trace DB): "
                      f"{', '.join(clip(b, 80) for b in result.blocked[:5])}", markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    """Add `run` and `eval` to the root app."""

    @app.command("run")
    def run_cmd(
        task: Path = typer.Argument(None, help=f"task YAML file [default: {DEFAULT_TASK.name}, at most "
                                               f"{DEFAULT_TASK_MAX_STEPS} steps]"),
        policy: str = typer.Option("confkv", "--policy", help=_POLICY_HELP),
        overrides: list[str] = typer.Option(None, "--set", help=SET_HELP),
        model: str = typer.Option(DEFAULT_AGENT_MODEL, "--model", help="registry name, HF directory or .gguf"),
        db: Path = typer.Option(DEFAULT_DB_PATH, "--db", help="trace database"),
        max_steps: int = typer.Option(None, "--max-steps", min=1, help="step limit [default: 30]"),
        headed: bool = typer.Option(False, "--headed", help="show the browser window"),
        screenshots: Path = typer.Option(None, "--screenshots", help="save a PNG per step into this folder"),
        free: bool = typer.Option(False, "--free", help="unconstrained decoding (default: grammar-constrained)"),
        reasoning: bool = typer.Option(False, "--reasoning", help="one line of free reasoning before the action"),
        int8: bool = typer.Option(False, "--int8", help="the same as --dtype int8 (W8A8 Linear layers, fp32 activations)"),
        dtype: str = dtype_option(),
    ) -> None:
        """Run one task with a live view, evaluate it and record it in the trace database."""
        from rich.console import Console
        from rich.live import Live

        from agent.actions import parse_action
        from envs.taskspec import TaskSpecError, load_task
        from runner.worker import AgentSettings, Worker, run_config

        if max_steps is None:
            max_steps = DEFAULT_TASK_MAX_STEPS if task is None else 30
        built = _validate([policy], overrides, model, db)
        try:
            the_task = load_task(task or DEFAULT_TASK, parse_step=parse_action)
        except TaskSpecError as exc:
            raise _usage_error(str(exc)) from None
        console = Console(stderr=True)
        settings = AgentSettings(model=model, policies=built, constrained=not free, reasoning=reasoning, int8=int8,
                                 max_steps=max_steps, dtype=_agent_dtype(dtype, int8, [policy], model))  # fmt: skip
        console.print(f"task {the_task.task_id}: {clip(the_task.intent, 300)}\npolicy {policy}, model "
                      f"{model if policy != 'scripted' else '-'}, up to {max_steps} steps, db {db}",
                      markup=False, highlight=False)  # fmt: skip
        worker = Worker(db, settings, the_task.sites)
        try:
            run_model, config = run_config(policy, settings)
            run_id = worker.store.start_run(run_model, policy, config, resume=True)
            with console.status("loading the model"):
                agent = worker.agent(policy, the_task)
            from runner.episode import run_episode

            view = LiveView(f"task {the_task.task_id} · {policy}")
            with Live(view, console=console, refresh_per_second=4):
                result = run_episode(the_task, agent, worker.sites, worker.store, run_id, max_steps=max_steps,
                                     headed=headed, screenshots_dir=screenshots, on_step=view.add)  # fmt: skip
        finally:
            worker.close()
        _print_result(console, result)
        if result.status == "error":
            raise typer.Exit(1)

    @app.command("eval")
    def eval_cmd(
        tasks: list[Path] = typer.Argument(None, help="task files or folders [default: tasks/] (suite 'tasks')"),
        suite: str = typer.Option("tasks", "--suite", help="tasks (YAML tasks on our sites) or miniwob (MiniWoB++)"),
        task_names: str = typer.Option(None, "--tasks", help="miniwob: comma-separated task names "
                                                             "[default: the 24 of runner.suites.MINIWOB_DEFAULT]"),
        seeds: int = typer.Option(5, "--seeds", min=1, help="miniwob: seeds 0..N-1 per task"),
        backend: str = typer.Option("local", "--backend", help="local (processes on this machine) or ray"),
        address: str = typer.Option(None, "--address", help="ray: cluster address [default: start a local Ray]"),
        policies: str = typer.Option("full,confkv", "--policies", help=f"comma-separated: {_POLICY_HELP}"),
        overrides: list[str] = typer.Option(None, "--set", help=f"{SET_HELP}; applies to every policy"),
        model: str = typer.Option(DEFAULT_AGENT_MODEL, "--model", help="registry name, HF directory or .gguf"),
        workers: int = typer.Option(1, "--workers", min=1, help="worker processes (each loads the model)"),
        db: Path = typer.Option(DEFAULT_DB_PATH, "--db", help="trace database"),
        as_json: bool = typer.Option(False, "--json", help="print the per-policy table as JSON on stdout"),
        limit: int = typer.Option(None, "--limit", min=1, help="only the first N tasks (by task id)"),
        max_steps: int = typer.Option(None, "--max-steps", min=1, help="[default: 30; miniwob: 10]"),
        free: bool = typer.Option(False, "--free", help="unconstrained decoding"),
        reasoning: bool = typer.Option(False, "--reasoning", help="one line of free reasoning before the action"),
        int8: bool = typer.Option(False, "--int8", help="the same as --dtype int8 (W8A8 Linear layers, fp32 activations)"),
        dtype: str = dtype_option(),
        mode: str = typer.Option("free", "--mode", help="free (the agent decides) or forced (reference trajectory "
                                 "teacher-forced: per-policy NLL of actions and answers, runner.forced)"),
        budgets: str = typer.Option(None, "--budgets", help="comma-separated KV footprints in model-dtype tokens "
                                    "per layer (INT8 counted in bytes), each evicting policy at each, labelled "
                                    "name@budget; forced or free mode"),
    ) -> None:
        """Evaluate tasks x policies; resumable (finished episodes are skipped); prints a per-policy table."""
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from envs.taskspec import TaskSpecError
        from runner.batch import run_batch
        from runner.suites import select_tasks
        from runner.worker import AgentSettings
        from traces.summary import summary_table

        names = list(dict.fromkeys(p.strip() for p in policies.split(",") if p.strip()))  # scripted,scripted: once
        built = _validate(names, overrides, model, db, policy_hint="--policies")
        if backend not in ("local", "ray"):
            raise _usage_error(f"--backend must be local or ray, got {backend!r}")
        budget_list = _budgets(mode, budgets, names)
        try:
            selected = select_tasks(suite, tasks or [TASKS_DIR], task_names, seeds)
        except (TaskSpecError, ValueError, RuntimeError) as exc:
            raise _usage_error(str(exc)) from None
        if not selected:
            raise _usage_error("no tasks found")
        selected = selected[:limit] if limit else selected
        max_steps = max_steps or (10 if suite == "miniwob" else 30)
        agent_dtype = _agent_dtype(dtype, int8, names, model)
        if mode == "free" and budget_list:
            names, built = _free_footprints(names, built, budget_list, model, agent_dtype)
        console = Console(stderr=True)
        settings = AgentSettings(model=model, policies=built, constrained=not free, reasoning=reasoning, int8=int8,
                                 max_steps=max_steps, dtype=agent_dtype)  # fmt: skip
        progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            console=console)  # fmt: skip
        bar = progress.add_task("episodes", total=None)

        def on_plan(plan: Any) -> None:
            progress.update(bar, total=len(plan.pending))
            console.print(f"{len(plan.pending)} episodes to run, {plan.skipped} already finished (resumed)")

        def on_episode(result: dict[str, Any]) -> None:
            marks = {"error": "ERROR", "skipped": "taken by another eval"}
            mark = "ok" if result["success"] else marks.get(result["status"], "fail")
            progress.update(bar, advance=1, description=f"task {result['task_id']} {result['policy']}: {mark}")

        if mode == "forced":
            _eval_forced(selected, names, settings, db, budget_list, as_json, console)
        else:
            with progress:
                _, summary = run_batch(selected, names, settings, db, workers=workers, on_episode=on_episode,
                                       on_plan=on_plan, backend=backend, address=address)  # fmt: skip
            if as_json:
                typer.echo(json.dumps(summary.to_json(), indent=2))
            else:
                Console().print(summary_table(summary))
        if interrupts.draining():
            console.print("drained (SIGUSR1): stopped after the task in flight; the rest is pending, and the same "
                          "command goes on with it", markup=False, highlight=False)  # fmt: skip
            raise typer.Exit(interrupts.DRAINED_EXIT)


def _budgets(mode: str, raw: str | None, names: list[str]) -> list[int]:
    """`--mode` and `--budgets` checked before anything runs."""
    if mode not in ("free", "forced"):
        raise _usage_error(f"--mode must be free or forced, got {mode!r}")
    if mode == "forced" and "scripted" in names:
        raise _usage_error("--mode forced scores KV policies; drop 'scripted' from --policies")
    if raw is None:
        return []
    from runner.footprint import parse_budgets

    try:
        return parse_budgets(raw)
    except ValueError as exc:
        raise _usage_error(str(exc)) from None


def _free_footprints(names: list[str], built: dict[str, Any], budgets: list[int], model: str,
                     dtype: str) -> tuple[list[str], dict[str, Any]]:
    """Free mode with `--budgets`: every evicting policy at every footprint, labelled and built exactly as the forced
    mode builds them (`runner.footprint`), so a free run's `sliding-int8@180` is the forced run's."""
    from confkv.models import model_config
    from runner.footprint import footprint_labels, footprint_slots

    try:
        slots = footprint_slots(model_config(model), dtype)
    except (OSError, ValueError) as exc:
        raise _usage_error(f"--budgets: {exc}") from None
    labels = footprint_labels(built, budgets, slots)
    expanded = [label for name in names for label, (_, base, _) in labels.items() if base == name] + \
        [name for name in names if name not in built]  # `scripted` has no cache to budget
    return expanded, {label: policy for label, (policy, _, _) in labels.items()}


def _eval_forced(tasks: list[Any], names: list[str], settings: Any, db: Path, budgets: list[int], as_json: bool,
                 console: Any) -> None:
    from rich.console import Console

    from runner.batch import run_forced_batch
    from traces.forced_tables import forced_json, forced_table

    def on_result(r: dict[str, Any]) -> None:
        what = r.get("reason") if r["status"] != "done" else f"answer NLL {r.get('answer_nll')}"
        console.print(terminal_safe(f"task {r['task_id']} {r['policy']}: {r['status']} {what}"), markup=False,
                      highlight=False)  # fmt: skip

    try:
        _, summary = run_forced_batch(tasks, names, settings, db, budgets, on_result)
    except ValueError as exc:
        raise _usage_error(str(exc)) from None
    if as_json:
        typer.echo(json.dumps(forced_json(summary), indent=2))
    else:
        Console().print(forced_table(summary))
