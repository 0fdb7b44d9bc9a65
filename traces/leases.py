"""Episode leases: several `eval` processes on one trace database split the work instead of killing each other.

Why: the store used to treat any other 'running' attempt at a task as debris of a crash and closed it as an error,
so a second eval on the same database broke the first one's live episode. Now every 'running' episode names its
owner (`host:pid`) and carries a heartbeat (unix time) that the owner refreshes on every write and from a
`LeaseKeeper` thread. An attempt is stale, and may be closed and taken over, only when its owner is gone: a dead pid
on this host, or no heartbeat for `LEASE_S` seconds (another host, a hung process or a reused pid).
"""

from __future__ import annotations

import os
import socket
import sqlite3
import threading
import time
from pathlib import Path

LEASE_S = 120.0  # a live owner refreshes every LEASE_S / 6 seconds
_HOST = socket.gethostname()


def owner_id() -> str:
    """This process as a lease owner."""
    return f"{_HOST}:{os.getpid()}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (exited, not yet reaped by its parent) is dead for our purposes
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return True


def is_stale(owner: str | None, heartbeat: float | None, *, now: float | None = None,
             lease_s: float = LEASE_S) -> bool:
    """True when the owner of a 'running' episode is gone (see the module docstring)."""
    if owner is None or heartbeat is None:  # written before leases existed: only a crash leaves those
        return True
    now = time.time() if now is None else now
    if now - heartbeat > lease_s:
        return True
    host, _, pid = owner.rpartition(":")
    if host == _HOST and pid.isdigit():
        return not _pid_alive(int(pid))
    return False


class LeaseKeeper:
    """A daemon thread that refreshes the heartbeat of this process's running episodes in `db_path`, so an episode
    whose step takes minutes (a model on a CPU) is never mistaken for an orphan. Its own connection: sqlite3
    connections are not shared across threads."""

    def __init__(self, db_path: str | Path, owner: str | None = None, interval_s: float = LEASE_S / 6) -> None:
        self.db_path, self.owner, self.interval_s = str(db_path), owner or owner_id(), interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="confkv-lease", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                conn = sqlite3.connect(self.db_path, timeout=30)
                try:
                    with conn:
                        conn.execute("update episodes set heartbeat = ? where owner = ? and status = 'running'",
                                     [time.time(), self.owner])  # fmt: skip
                finally:
                    conn.close()
            except sqlite3.Error:
                pass  # a busy or vanished database: the next beat tries again

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
