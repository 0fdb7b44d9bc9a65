"""Trace store (SQLite), terminal replay and PNG reports for agent episodes.

Light on purpose: the CLI imports this for the default path without paying for sqlite-utils or matplotlib.
"""

from pathlib import Path

DEFAULT_DB_PATH = Path("runs/traces.sqlite")  # relative to the working directory, like the `runs/` outputs
