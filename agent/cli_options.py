"""Options shared by every command that loads a model, declared once so their names and help never drift."""

from __future__ import annotations

import typer

DTYPE_HELP = ("auto|bf16|fp16|fp32: auto = bf16 on CUDA and on CPUs with AMX-BF16, "
              "fp32 otherwise (AVX512-BF16 alone included: measured slower; the choice is printed)")  # fmt: skip


def dtype_option(default: str = "auto"):
    return typer.Option(default, "--dtype", help=DTYPE_HELP)


def checked_dtype(name: str, announce: bool = True) -> str:
    """Validate `--dtype` before anything is loaded and say what `auto` picked; returns the concrete name."""
    from confkv.models.dtype import DtypeError, dtype_name, resolve_dtype

    try:
        dtype, reason = resolve_dtype(name)
    except DtypeError as exc:
        raise typer.BadParameter(str(exc), param_hint="--dtype") from None
    if announce:
        typer.echo(f"dtype: {reason}", err=True)
    return dtype_name(dtype)
