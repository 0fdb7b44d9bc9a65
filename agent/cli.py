"""`confkv-agent` command line: one typer app; each area registers its own commands.

Every `cli_*` module imports heavy dependencies (torch, playwright) inside its command functions, so that
`confkv-agent --help` and light commands such as `traces ls` start fast.
"""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="confkv-agent",
    help="Confidence-gated KV cache (Conf-KV) for long-horizon web agents.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)

# Each module defines `register(app: typer.Typer) -> None`.
_COMMAND_MODULES = (
    "agent.cli_models",  # models list / pull
    "agent.cli_generate",  # generate
    "agent.cli_bench",  # bench decode / kernel / ppl / niah / klshift / memory / actions
    "agent.cli_envs",  # envs serve
    "agent.cli_tasks",  # tasks check
    "agent.cli_run",  # run / eval
    "agent.cli_traces",  # traces ls / replay / report
)

for _name in _COMMAND_MODULES:
    importlib.import_module(_name).register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
