"""`confkv-agent envs serve`: run the self-hosted sites in the foreground and print their URLs."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from runner import interrupts

if TYPE_CHECKING:
    from envs.server import Sites

envs_app = typer.Typer(help="Self-hosted web sites (shopping, classifieds, forum).", no_args_is_help=True)


def parse_site_names(raw: str | None) -> list[str] | None:
    """`"shopping, forum"` -> ["shopping", "forum"]; None or "all" -> None (every site)."""
    if raw is None or raw.strip().lower() in {"", "all"}:
        return None
    return [part.strip() for part in raw.split(",") if part.strip()]


def start_sites(names: list[str] | None, seed: int, workdir: Path | None, console: Console) -> Sites:
    """Start the sites and print a table of their URLs; the caller owns (and must stop) the result."""
    from envs.server import Sites

    sites = Sites(names=names, workdir=workdir, seed=seed)
    table = Table(title=f"confkv-agent sites (seed {seed})")
    table.add_column("site")
    table.add_column("placeholder")
    table.add_column("url")
    for name in sites.names:
        table.add_row(name, sites.specs[name].placeholder, sites.url(name))
    console.print(table)
    return sites


def serve(
    sites: str | None = typer.Option(None, "--sites", help="Comma-separated site names (default: all)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the generated site data."),
    workdir: Path | None = typer.Option(None, "--workdir", help="Cache folder for seeded databases."),
    duration: float = typer.Option(0.0, "--duration", min=0.0, help="Stop after this many seconds (0 = until Ctrl-C)."),
) -> None:
    """Start the sites on 127.0.0.1, print their URLs and serve until Ctrl-C."""
    from envs.sites import SiteUnavailableError

    console = Console()
    try:
        running = start_sites(parse_site_names(sites), seed, workdir, console)
    except SiteUnavailableError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(code=2) from None
    try:
        console.print("Serving; press Ctrl-C to stop." if duration == 0 else f"Serving for {duration:g} s.")
        deadline = time.monotonic() + duration if duration > 0 else None
        while deadline is None or time.monotonic() < deadline:
            time.sleep(0.2 if deadline is None else max(0.0, min(0.2, deadline - time.monotonic())))
    except KeyboardInterrupt:
        interrupts.handled()  # Ctrl-C is how serving ends: not an interrupted command
    finally:
        running.stop()
        console.print("Sites stopped.")


def register(app: typer.Typer) -> None:
    """Add the `envs` command group to the root app."""
    envs_app.command("serve")(serve)
    app.add_typer(envs_app, name="envs")
