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
    from confkv.models.dtype import DtypeError, resolve_precision

    config, registry_name = None, None
    if name == "auto" and model is not None:
        from confkv.models.load import MODELS, _config, resolve

        path = resolve(model, lambda m: typer.echo(m, err=True))
        if path.is_dir():
            config = _config(path)
        registry_name = model if model in MODELS else None
    try:
        precision, lines = resolve_precision(name, config=config, model_name=registry_name,
                                             progress=lambda m: typer.echo(m, err=True))  # fmt: skip
    except DtypeError as exc:
        raise typer.BadParameter(str(exc), param_hint="--dtype") from None
    if announce:
        for line in lines:
            typer.echo(f"dtype: {line}" if len(lines) == 1 else line, err=True)
    return precision.name
