"""Options shared by every command that loads a model, declared once so their names and help never drift."""

from __future__ import annotations

import typer

DTYPE_HELP = ("precision: auto|fp32|bf16|fp16|bf16-int8|bf16-w8a8|fp32-int8|int8. auto = bf16 on CUDA; on a CPU "
              "the model's own matrix shapes are timed once per machine (cached) and the fastest precision the "
              "model is allowed wins (INT8 forms only with a recorded decision agreement >= 97%); what it "
              "measured and chose is printed")  # fmt: skip

# The names are not listed here: they come from the registry, whose import loads torch (`confkv-agent policies`).
POLICY_HELP = "a registered KV policy (`confkv-agent policies` lists them and their --set keys)"
SET_HELP = "policy override key=value, repeatable (`confkv-agent policies` lists the keys and their ranges)"


def dtype_option(default: str = "auto"):
    return typer.Option(default, "--dtype", help=DTYPE_HELP)


def checked_dtype(name: str, announce: bool = True, model: str | None = None) -> str:
    """Validate `--dtype` before anything is loaded and resolve `auto` (for `model`'s shapes, measured once per
    machine); returns the concrete precision name and, with `announce`, prints why it was chosen."""
    from confkv.bench.protocol import OptionError, resolve_dtype

    try:
        return resolve_dtype(name, model, lambda m: typer.echo(m, err=True), announce)
    except OptionError as exc:
        raise typer.BadParameter(str(exc), param_hint="--dtype") from None
