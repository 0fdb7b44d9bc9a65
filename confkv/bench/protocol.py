"""The benchmark protocol: a benchmark is one module, and `confkv-agent bench <name>` is generated from it.

Why: each benchmark used to be a module plus a hand-written Typer command, and the commands drifted (two output
conventions, three ways to name the results file, `--json` on some). Here, as a kvpress press, a benchmark is data:
- a config dataclass whose fields, declared with `option(...)`, ARE the command's options (flag, help, range or
  choices, default), so an option cannot exist without its check;
- `run(config, progress) -> report` (a JSON-able dict; `progress` prints to stderr) and `table(report)` (a rich
  renderable or lines); optionally `plots` ({file stem: draw(report, path)}), which gives the command `--png`;
- the object `Benchmark(name, config, run, table, ...)` the module exposes (`BENCHMARK` by default).
Every benchmark gets `--json` (the report, one line) and `--out DIR` (the report as `<stem>-<model>.json`, plots
as `<plot>-<model>.png`) from the CLI (`cli.bench`), which holds the registry: one line per benchmark, a module
name, so that `confkv-agent --help` imports none of them (importing `confkv` loads torch).
"""

from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confkv.params import Range

Progress = Callable[[str], None]
Report = dict[str, Any]
RESERVED = ("as_json", "png")  # the options every benchmark gets; `out` too, unless the config declares it


class OptionError(ValueError):
    """A value the benchmark refused; `option` names the config field, so the CLI can point at its flag."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option


def option(default: Any, help: str = "", *, low: float | None = None, high: float | None = None,
           open_low: bool = False, open_high: bool = False, choices: tuple[str, ...] | None = None,
           flag: str | None = None, kind: str = "") -> Any:
    """A config field that is a command option: `tokens: int = option(600, "text length", low=4)`.

    `flag` defaults to `--` + the field name with dashes; `kind="dtype"` marks a precision option (the CLI gives it
    the shared `--dtype` help)."""
    meta = {"range": Range(low, high, open_low, open_high, choices), "help": help, "flag": flag, "kind": kind}
    if isinstance(default, list | dict):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class Option:
    """One option as the CLI builds it."""

    name: str
    flag: str
    type: Any
    default: Any
    help: str
    range: Range
    kind: str


def options(config: type) -> list[Option]:
    """The options of a config class, in declaration order (fields not declared with `option` are not options)."""
    hints = typing.get_type_hints(config)
    out = []
    for f in dataclasses.fields(config):
        if "range" not in f.metadata or "help" not in f.metadata:
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        flag = f.metadata["flag"] or "--" + f.name.strip("_").replace("_", "-")
        out.append(Option(f.name, flag, hints[f.name], default, f.metadata["help"], f.metadata["range"],
                          f.metadata["kind"]))  # fmt: skip
    return out


def check(config: Any) -> None:
    """Every option's value within its declared range or choices (also for values not typed at a prompt)."""
    for opt in options(type(config)):
        if opt.range == Range():  # declared without a range: any value of its type
            continue
        value = getattr(config, opt.name)
        for item in value if isinstance(value, list | tuple) else [value]:
            try:
                opt.range.check(opt.flag, item)
            except ValueError as exc:
                raise OptionError(opt.name, str(exc)) from None


def label(model: str) -> str:
    """A model name fit for a file name: a registry name as it is, a directory or .gguf path by its last part."""
    path = Path(model)
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", path.stem if model.endswith(".gguf") else path.name)


def dumps(report: Any, indent: int | None = None) -> str:
    """JSON as every benchmark prints (`--json`, one line) and writes it (indented): floats for numpy/torch scalars."""
    return json.dumps(report, indent=indent, default=float)


@dataclass(frozen=True)
class Benchmark:
    """One `bench` command. `files(config, report)` overrides the one naming rule (`<stem>-<model>.json`, `stem`
    defaulting to `name`) for benchmarks whose file names predate it; `printed(report)` is what `--json` prints
    when that is not the report itself (decode's list of per-dtype reports)."""

    name: str
    config: type
    run: Callable[[Any, Progress], Report]
    table: Callable[[Report], Any]
    help: str = ""
    plots: Mapping[str, Callable[[Report, Path], None]] = field(default_factory=dict)
    out: str | None = "results"  # --out's default; None: write only when --out is given
    stem: str | None = None
    files: Callable[[Any, Report], dict[str, Any]] | None = None
    printed: Callable[[Report], Any] | None = None

    def __post_init__(self) -> None:
        names = {o.name for o in options(self.config)}
        if clash := names & set(RESERVED):
            raise TypeError(f"bench {self.name}: {sorted(clash)} are options every benchmark gets")

    def outputs(self, config: Any, report: Report) -> dict[str, Any]:
        """File name -> JSON content, under --out."""
        if self.files is not None:
            return self.files(config, report)
        model = report.get("model")
        return {f"{self.stem or self.name}" + (f"-{label(str(model))}" if model else "") + ".json": report}

    def save(self, config: Any, report: Report, out: str | Path, png: bool = True) -> list[Path]:
        """Write the JSON file(s) and, with `png`, every plot; returns the paths written."""
        root = Path(out)
        root.mkdir(parents=True, exist_ok=True)
        paths = []
        for name, data in self.outputs(config, report).items():
            (root / name).write_text(dumps(data, indent=2) + "\n")
            paths.append(root / name)
        model = report.get("model")
        for stem, draw in self.plots.items() if png else ():
            path = root / (stem + (f"-{label(str(model))}" if model else "") + ".png")
            if draw(report, path) is not False:  # False: nothing to draw for this report
                paths.append(path)
        return paths


def optional(tp: Any) -> Any:
    """`int | None` -> int (the type an option parses; None stays its "unset" default)."""
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) in (typing.Union, types.UnionType) and len(args) == 1:
        return args[0]
    return tp


def ints(text: str, option: str, flag: str | None = None) -> tuple[int, ...]:
    """Comma-separated positive integers (`--lengths 512,1024`)."""
    flag = flag or "--" + option.replace("_", "-")
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise OptionError(option, f"{flag} must be comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise OptionError(option, f"{flag} must be positive integers, got {text!r}")
    return values


def floats(text: str | None, option: str) -> tuple[float, ...] | None:
    """Comma-separated numbers, or None when the option is unset."""
    if text is None:
        return None
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise OptionError(option, f"--{option} must be comma-separated numbers, got {text!r}") from None


def names(text: str | None) -> tuple[str, ...] | None:
    """Comma-separated names, or None when the option is unset or empty."""
    return tuple(p.strip() for p in text.split(",") if p.strip()) if text else None


def resolve_dtype(name: str, model: str | None = None, progress: Progress = lambda _m: None,
                  announce: bool = True, option_name: str = "dtype") -> str:
    """A precision name checked before anything loads, `auto` resolved for `model`'s shapes (measured once per
    machine); with `announce`, why it was chosen goes to `progress`."""
    from confkv.models.dtype import DtypeError
    from confkv.models.load import choose_precision

    try:
        precision, lines = choose_precision(name, model, progress)
    except DtypeError as exc:
        raise OptionError(option_name, str(exc)) from None
    if announce:
        for line in lines:
            progress(f"dtype: {line}" if len(lines) == 1 else line)
    return precision
