"""Opening a trace database and checking ids from the command line, shared by the read-only `traces` commands:
a missing or foreign file, or an id SQLite cannot hold, is a one-line error."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from traces.store import TraceStore

DB_HELP = "Trace database (SQLite) written by `run` / `eval`."
MAX_ID = 2**63 - 1  # SQLite's INTEGER: a larger run or episode id cannot exist (and cannot even be a query parameter)


def _fail(message: str) -> typer.Exit:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    return typer.Exit(1)


def _ids(values: list[int] | None, what: str, db: Path) -> list[int] | None:
    """Ids from the command line, checked before any query: one SQLite cannot hold is a one-line error (it was a raw
    OverflowError from sqlite3); None for none given."""
    for value in values or []:
        if not 1 <= value <= MAX_ID:
            raise _no_such(what, str(value), db)
    return values or None


def _no_such(what: str, given: str, db: Path) -> typer.Exit:
    shown = given if len(given) <= 30 else f"{given[:30]}..."
    return _fail(f"no {what} {shown} in {db}: ids go from 1 to {MAX_ID:,} (`confkv-agent traces ls` lists them)")


def _runs(store: TraceStore, run_ids: list[int], db: Path) -> dict[int, dict[str, Any]]:
    """The given runs by id, every one checked to exist (the first unknown id is a one-line error)."""
    runs = {r["id"]: r for r in store.runs()}
    for rid in run_ids:
        if rid not in runs:
            raise _no_such("run", str(rid), db)
    return {rid: runs[rid] for rid in run_ids}


def _open(db: Path) -> TraceStore:
    from traces.store import TraceStore, TraceStoreError

    try:
        return TraceStore.open_existing(db)
    except TraceStoreError as exc:
        raise _fail(str(exc)) from None
