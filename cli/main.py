"""`confkv-agent` command line: one typer app; each area registers its own commands.

Every `cli_*` module imports heavy dependencies (torch, playwright) inside its command functions, so that
`confkv-agent --help` and light commands such as `traces ls` start fast.

`main` is the failure boundary: any error a command did not turn into a message itself becomes one line on stderr
and exit code 1 (`--debug`, anywhere on the line, or CONFKV_DEBUG=1 shows the traceback instead); Ctrl-C is exit
130 with a line saying how to resume, and SIGTERM unwinds the same way (exit 143), so `finally` blocks run and the
live site folders under /tmp are removed. SIGUSR1 is the gentle stop: `eval` finishes the task in flight and exits
75 (`runner.interrupts`), the rest pending for the same command to go on with.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys

import typer

from runner import interrupts
from runner.allocator import tune_cpu_allocator

app = typer.Typer(
    name="confkv-agent",
    help="Confidence-gated KV cache (Conf-KV) for long-horizon web agents.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)

# Each module defines `register(app: typer.Typer) -> None`.
_COMMAND_MODULES = (
    "cli.models",  # models list / pull
    "cli.generate",  # generate
    "cli.policies",  # policies (the registered KV policies and --set keys)
    "cli.bench",  # bench: the registered benchmarks (cli.bench.BENCHMARKS)
    "cli.bench_agent",  # bench actions / decisions / precision / cpu-peer
    "cli.envs",  # envs serve
    "cli.tasks",  # tasks check
    "cli.run",  # run / eval
    "cli.traces",  # traces ls / replay / report
)

for _name in _COMMAND_MODULES:
    importlib.import_module(_name).register(app)


INTERRUPTED = "interrupted; rerun the same command to resume (finished episodes are kept)"


def failure_kind(exc: BaseException) -> str:
    """What an unexpected error means for the user, where we can tell, as a prefix of the one-line message.

    A full disk must not read as a damaged database: SQLite reports it as an OperationalError, a DatabaseError like
    corruption, and the user would throw away a good trace DB instead of freeing space and resuming."""
    import errno
    import sqlite3

    full = getattr(sqlite3, "SQLITE_FULL", 13)
    if (isinstance(exc, OSError) and exc.errno == errno.ENOSPC) or (
            isinstance(exc, sqlite3.OperationalError) and (getattr(exc, "sqlite_errorcode", None) == full
                                                           or "database or disk is full" in str(exc))):  # fmt: skip
        return "the disk is full (free some space, then rerun the same command to resume): "
    if isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, sqlite3.OperationalError):
        return "the database is damaged or not SQLite: "  # corrupt, or not a database (locked, I/O: not this)
    return ""


def one_line(exc: BaseException) -> str:
    """`Type: first line of the message`, at most 300 characters."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if len(text) <= 300 else text[:300] + "..."


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `confkv-agent` script (see the module docstring for the failure rules)."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or os.environ.get("CONFKV_DEBUG") == "1"
    args = [a for a in args if a != "--debug"]
    for sig, usual in ((signal.SIGTERM, signal.SIG_DFL), (signal.SIGINT, signal.default_int_handler)):
        if signal.getsignal(sig) is usual:  # an ignored signal (nohup, background job) stays ignored
            signal.signal(sig, interrupts.on_signal)  # unwinds as KeyboardInterrupt; which one decides the code
    drain = getattr(signal, "SIGUSR1", None)  # (no SIGUSR1 on Windows)
    if drain is not None and signal.getsignal(drain) is signal.SIG_DFL:
        signal.signal(drain, interrupts.on_drain)  # eval finishes the task in flight, then stops (exit 75)
    tune_cpu_allocator()  # before any command allocates (see runner.allocator)
    try:
        code = app(args=args, prog_name="confkv-agent", standalone_mode=False)
    except (typer.Abort, KeyboardInterrupt):
        code = 130
    except typer.TyperException as exc:  # usage errors: click's own message and exit code
        if not hasattr(exc, "show"):
            raise
        exc.show()
        raise SystemExit(getattr(exc, "exit_code", 2)) from None
    except Exception as exc:  # noqa: BLE001 - the one place that turns unexpected errors into a message
        if interrupts.received() is None:  # else the error is the interrupt's echo: the driver died of it too
            if debug:
                raise
            print(f"error: {failure_kind(exc)}{one_line(exc)} (--debug shows the traceback)", file=sys.stderr)
            raise SystemExit(1) from None
        code = 130
    if interrupts.received() is not None:  # even when something on the way swallowed the KeyboardInterrupt
        code = 130
    if code == 130:  # typer turns KeyboardInterrupt into exit code 130
        terminated = interrupts.received() == signal.SIGTERM
        print(f"\n{'terminated' if terminated else 'interrupted'}{INTERRUPTED[11:]}", file=sys.stderr)
        raise SystemExit(143 if terminated else 130)
    raise SystemExit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
