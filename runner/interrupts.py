"""Whether Ctrl-C or SIGTERM arrived during this command: set by the signal handler, read by the failure boundary.

Why a record and not just the KeyboardInterrupt: the exception can be lost on its way up. Ctrl-C reaches the whole
process group, so Playwright's driver dies of the same signal; the KeyboardInterrupt may then land inside code that
must swallow everything (closing a browser) or surface as the driver's "Connection closed" error, and `tasks check`
carried on and exited 0. `cli.main.main` asks `received()` after the command, whatever the command returned, and
a command whose normal end is Ctrl-C (`envs serve`) calls `handled()`.

A drain (SIGUSR1) is the gentle stop: a batch finishes the task in flight and stops before the next one, so a long
run can move to new code at a task boundary (each task's labels then come from one code) without losing work.
"""

from __future__ import annotations

_RECEIVED: dict[str, int] = {}
INTERRUPTED_REASON = "interrupted (Ctrl-C or SIGTERM)"  # an episode closed by the interrupt: owed again, not failed
_DRAIN: dict[str, int] = {}
DRAINED_EXIT = 75  # sysexits' EX_TEMPFAIL: stopped early on purpose, and the same command goes on with the rest


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


def on_drain(signum: int, _frame: object) -> None:
    """Signal handler for SIGUSR1: ask the batch loops to stop at the next task boundary (nothing unwinds)."""
    _DRAIN["signal"] = signum


def draining() -> bool:
    """Whether a drain was asked for: the batch loops check it before they start a task."""
    return "signal" in _DRAIN


def clear_drain() -> None:
    """Forget a drain (a test, or an in-process caller that runs a second batch)."""
    _DRAIN.clear()
