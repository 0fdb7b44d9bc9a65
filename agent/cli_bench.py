"""`confkv-agent bench ...`: a thin registration layer; each benchmark's logic lives in `confkv.bench.<name>`."""

from __future__ import annotations

import json

import typer

bench = typer.Typer(help="Benchmarks: decode attention kernel, decode speed, memory, quality.", no_args_is_help=True)

CPU_DEFAULT_LENGTHS = "512,1024,2048"
GPU_DEFAULT_LENGTHS = "1024,2048,4096,8192,16384,32768"


def _parse_lengths(text: str) -> tuple[int, ...]:
    try:
        lengths = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError as exc:
        raise typer.BadParameter(f"--lengths must be comma-separated integers, got {text!r}") from exc
    if not lengths or min(lengths) < 1:
        raise typer.BadParameter(f"--lengths must be positive integers, got {text!r}")
    return lengths


@bench.command("kernel")
def kernel(
    lengths: str = typer.Option(None, help=f"context lengths, comma-separated [GPU: {GPU_DEFAULT_LENGTHS}; CPU: "
                                           f"{CPU_DEFAULT_LENGTHS}]"),
    batch: int = typer.Option(1, min=1),
    heads: int = typer.Option(32, min=1, help="query heads"),
    kv_heads: int = typer.Option(8, min=1),
    head_dim: int = typer.Option(128, min=1),
    recent: int = typer.Option(128, min=0, help="tokens kept in the model dtype in the INT8 variant"),
    iters: int = typer.Option(20, min=1),
    as_json: bool = typer.Option(False, "--json", help="print the full report as JSON"),
) -> None:
    """Decode attention (q_len=1): our kernel vs SDPA over an equal full cache, INT8 on/off, mass on/off."""
    import torch

    from confkv.bench.kernel import KernelBenchConfig, format_report, run_kernel_bench

    on_gpu = torch.cuda.is_available()
    cfg = KernelBenchConfig(
        lengths=_parse_lengths(lengths or (GPU_DEFAULT_LENGTHS if on_gpu else CPU_DEFAULT_LENGTHS)),
        batch=batch, heads=heads, kv_heads=kv_heads, head_dim=head_dim, recent=recent, iters=iters,
    )
    try:
        report = run_kernel_bench(cfg)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    for line in format_report(report):
        typer.echo(line)


def register(app: typer.Typer) -> None:
    """Add the `bench` sub-app (other areas add their bench commands to `bench` in this module)."""
    app.add_typer(bench, name="bench")
