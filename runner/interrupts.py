"""Whether Ctrl-C or SIGTERM arrived during this command: set by the signal handler, read by the failure boundary.

Why a record and not just the KeyboardInterrupt: the exception can be lost on its way up. Ctrl-C reaches the whole
process group, so Playwright's driver dies of the same signal; the KeyboardInterrupt may then land inside code that
must swallow everything (closing a browser) or surface as the driver's "Connection closed" error, and `tasks check`
carried on and exited 0. `cli.main.main` asks `received()` after the command, whatever the command returned, and
a command whose normal end is Ctrl-C (`envs serve`) calls `handled()`.
"""

from __future__ import annotations

_RECEIVED: dict[str, int] = {}


def on_signal(signum: int, _frame: object) -> None:
    """Signal handler for SIGINT and SIGTERM: remember which, then unwind as KeyboardInterrupt (so `finally` blocks
    and the episode bookkeeping run)."""
    _RECEIVED["signal"] = signum
    raise KeyboardInterrupt()


def received() -> int | None:
    """The signal that interrupted this command, or None."""
    return _RECEIVED.get("signal")


def handled() -> None:
    """The command stopped on the interrupt as designed (e.g. `envs serve` serves until Ctrl-C): not a failure."""
    _RECEIVED.pop("signal", None)
