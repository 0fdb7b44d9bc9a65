"""`confkv-agent traces confidence`: the confidence the gate would see on recorded agent traffic (`traces.confidence`)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from cli.trace_db import DB_HELP
from traces import DEFAULT_DB_PATH


def confidence_command(
    db: Path = typer.Option(DEFAULT_DB_PATH, "--db", help=DB_HELP),
    run: list[int] = typer.Option(..., "--run", help="Run ids whose episodes are read (repeatable)."),
    tau: float = typer.Option(0.5, "--tau", min=0.0, max=1.0, help="The threshold to draw and count against."),
    png: Path | None = typer.Option(None, "--png", help="Also draw the histograms here."),
    as_json: bool = typer.Option(False, "--json", help="Print the figures as JSON."),
) -> None:
    """Per prefill chunk, per action token and per reply: quantiles of the recorded confidence and the share below
    tau (how often a gate at tau would open on that kind of forward)."""
    from cli.trace_db import _ids, _open, _runs
    from traces.confidence import confidence_values, plot_signal, signal_lines, signal_stats, stats_json

    run_ids = _ids(run, "run", db) or []
    with _open(db) as store:
        _runs(store, run_ids, db)
        values = confidence_values(store.db, run_ids)
    stats = signal_stats(values, tau)
    if as_json:
        typer.echo(json.dumps(stats_json(stats, tau, run_ids, str(db)), indent=2))
    else:
        typer.echo("\n".join(signal_lines(stats, tau)))
    if png is not None:
        try:
            typer.echo(f"wrote {plot_signal(values, tau, png, f'confidence on runs {run_ids} of {db.name}')}", err=True)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--png") from None
