"""`confkv-agent bench ...`: the registry of benchmarks and the commands generated from it.

A benchmark is one module exposing a `confkv.bench.protocol.Benchmark`; adding one is that file plus its line in
`BENCHMARKS`. The commands are built when asked for (`BenchGroup`), so `confkv-agent --help` and `bench --help`
import no benchmark (each imports torch); the listing reads each one's `help=` from its source. Benchmarks that
need the agent or the browser and do not fit the protocol (`actions`, `decisions`, `precision`, `cpu-peer`) are
hand-written commands in `cli.bench_agent`.
"""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import typer
from typer.core import TyperGroup

from cli.options import DTYPE_HELP

# name -> "module" (exposing BENCHMARK) or "module:ATTRIBUTE"; module names, so the CLI layer may name any layer's.
BENCHMARKS: dict[str, str] = {
    "kernel": "confkv.bench.kernel",
    "prefill-attention": "confkv.bench.prefill_attention",
    "ppl": "confkv.bench.ppl",
    "decode": "confkv.bench.decode",
    "niah": "confkv.bench.niah",
    "klshift": "confkv.bench.klshift",
    "memory": "confkv.bench.memory",
    "dtype": "runner.bench_dtype",
    "gate-rate": "confkv.bench.ablations:GATE_RATE",
    "gate-vs-fixed": "confkv.bench.ablations:GATE_VS_FIXED",
    "int8-keys": "confkv.bench.ablations:INT8_KEYS",
}


def _target(name: str) -> tuple[str, str]:
    module, _, attr = BENCHMARKS[name].partition(":")
    return module, attr or "BENCHMARK"


def load_benchmark(name: str) -> Any:
    """The registered `Benchmark` object (imports its module)."""
    module, attr = _target(name)
    bench_obj = getattr(importlib.import_module(module), attr)
    if bench_obj.name != name:
        raise TypeError(f"{BENCHMARKS[name]} is bench {bench_obj.name!r}, registered as {name!r}")
    return bench_obj


def _source(module: str) -> Path | None:
    """A module's file found without importing it (importing a parent package would run its `__init__`)."""
    path: list[str] | None = list(sys.path)
    spec = None
    for part in module.split("."):
        spec = importlib.machinery.PathFinder.find_spec(part, path)
        if spec is None:
            return None
        path = list(spec.submodule_search_locations or [])
    return Path(spec.origin) if spec and spec.origin else None


def summary(name: str) -> str:
    """The `help=` literal of the registered `Benchmark(...)`, read from the source (for the listing)."""
    module, attr = _target(name)
    source = _source(module)
    if source is None:
        return ""
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == attr for t in node.targets):
            for kw in getattr(node.value, "keywords", []):
                if kw.arg == "help" and isinstance(kw.value, ast.Constant):
                    return str(kw.value.value)
    return ""


class BenchGroup(TyperGroup):
    """`bench`'s group: hand-written commands plus the registry's, each built on first use."""

    listing = False

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*super().list_commands(ctx), *(n for n in BENCHMARKS if n not in self.commands)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands or cmd_name not in BENCHMARKS:
            return super().get_command(ctx, cmd_name)
        if self.listing:
            return click.Command(cmd_name, help=summary(cmd_name))
        app = typer.Typer(add_completion=False)
        app.command(cmd_name)(command(load_benchmark(cmd_name)))
        return typer.main.get_command(app)

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self.listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self.listing = False


bench = typer.Typer(cls=BenchGroup, help="Benchmarks: decode attention kernel, decode speed, memory, quality.",
                    no_args_is_help=True)  # fmt: skip


def _parameter(opt: Any) -> inspect.Parameter:
    from confkv.bench.protocol import optional

    kind = optional(opt.type)
    rng, extra = opt.range, {}
    if kind in (int, float):  # click shows and checks closed bounds; protocol.check covers the rest
        extra.update(min=None if rng.open_low else rng.low, max=None if rng.open_high else rng.high)
    help_text = opt.help or (DTYPE_HELP if opt.kind == "dtype" else "")
    if rng.choices is not None or (kind in (int, float) and (rng.open_low or rng.open_high)):
        help_text = f"{help_text} ({rng.describe()})".strip()
    return inspect.Parameter(opt.name, inspect.Parameter.KEYWORD_ONLY, annotation=opt.type,
                             default=typer.Option(opt.default, opt.flag, help=help_text or None, **extra))  # fmt: skip


def command(spec: Any) -> Callable[..., None]:
    """The Typer callback of a `Benchmark`: its config's options plus --json, --out and (with plots) --png."""
    from confkv.bench import protocol

    opts = protocol.options(spec.config)
    flags = {o.name: o.flag for o in opts}
    params = [_parameter(o) for o in opts]
    params.append(inspect.Parameter("as_json", inspect.Parameter.KEYWORD_ONLY, annotation=bool,
                                    default=typer.Option(False, "--json", help="print the report as JSON")))
    if "out" not in flags:
        where = "" if spec.out else " (default: write nothing)"
        params.append(inspect.Parameter("out", inspect.Parameter.KEYWORD_ONLY, annotation=str | None,
                                        default=typer.Option(spec.out, "--out", help=f"results directory{where}")))
    if spec.plots:
        params.append(inspect.Parameter("png", inspect.Parameter.KEYWORD_ONLY, annotation=bool,
                                        default=typer.Option(True, "--png/--no-png", help="also draw the plots")))

    def run(**values: Any) -> None:
        as_json, png = values.pop("as_json"), values.pop("png", True)
        out = values["out"] if "out" in flags else values.pop("out")
        config = spec.config(**values)
        try:
            protocol.check(config)
            report = spec.run(config, lambda m: typer.echo(m, err=True))
        except protocol.OptionError as exc:
            raise typer.BadParameter(str(exc), param_hint=flags.get(exc.option)) from None
        except ValueError as exc:  # the benchmark refused its input (missing text, unknown policy, ...)
            raise typer.BadParameter(str(exc)) from exc
        paths = spec.save(config, report, out, png) if out else []
        if as_json:
            typer.echo(protocol.dumps(spec.printed(report) if spec.printed else report))
            return
        shown = spec.table(report)
        if isinstance(shown, list | tuple):
            for line in shown:
                typer.echo(line)
        else:
            from rich.console import Console

            Console().print(shown)
        for path in paths:
            typer.echo(f"results: {path}")

    run.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in params}
    run.__doc__ = spec.help
    run.__name__ = spec.name.replace("-", "_")
    return run


def _label(model: str) -> str:
    from confkv.bench.protocol import label

    return label(model)


def _save(report: dict, out: str, name: str) -> Path:
    """Write a hand-written benchmark's JSON report under `out`; returns its path."""
    from confkv.bench.protocol import dumps

    path = Path(out) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(report, indent=2))
    return path


def _parse_lengths(text: str) -> tuple[int, ...]:
    from confkv.bench.protocol import OptionError, ints

    try:
        return ints(text, "lengths")
    except OptionError as exc:
        raise typer.BadParameter(str(exc)) from None


def register(app: typer.Typer) -> None:
    """Add the `bench` sub-app (`cli.bench_agent` adds its hand-written commands to `bench`)."""
    app.add_typer(bench, name="bench")
