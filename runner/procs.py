"""Process bookkeeping through /proc, so a browser session can prove (and enforce) that no Chromium outlives it.

Playwright does not expose the browser's pid, and users of other agent runtimes complain about orphaned Chromium
processes. We therefore look at our own process tree: whatever appears under this Python process while the browser
launches is the browser, and everything below it later (renderers, GPU and utility processes) belongs to it too.
Linux only; on other systems the helpers return empty sets and the session relies on Playwright's own shutdown.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

_PROC = Path("/proc")


def _stat_fields(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of a process, or None if it is gone. The comm field may hold spaces, so split after ')'."""
    try:
        raw = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    rest = raw[raw.rfind(")") + 2 :].split()
    return rest[0], int(rest[1])


def parent_map() -> dict[int, int]:
    """pid -> ppid for every live (non-zombie) process we can see."""
    parents: dict[int, int] = {}
    if not _PROC.is_dir():
        return parents
    for entry in _PROC.iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None and fields[0] != "Z":
                parents[int(entry.name)] = fields[1]
    return parents


def descendants(root: int, parents: dict[int, int] | None = None) -> set[int]:
    """All live descendants of `root` (not `root` itself)."""
    parents = parent_map() if parents is None else parents
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def is_alive(pid: int) -> bool:
    """True if the process exists and is not a zombie (a zombie has exited; only its exit status remains)."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def cmdline(pid: int) -> str:
    """The process's command line with spaces between arguments; '' if it is gone."""
    try:
        return (_PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def kill_all(pids: set[int], must_contain: str = "") -> set[int]:
    """SIGKILL each pid that is still alive (and whose command line contains `must_contain`, a guard against a pid
    reused by another program); returns the ones that were killed. Only ever called on our own pids."""
    killed = set()
    for pid in pids:
        if is_alive(pid) and must_contain in cmdline(pid):
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except (ProcessLookupError, PermissionError):
                pass
    return killed


def wait_gone(pids: set[int], timeout_s: float = 3.0) -> set[int]:
    """Wait until none of `pids` is alive (SIGKILL is asynchronous: a process is torn down a few ms later);
    returns the ones still alive at the timeout."""
    deadline = time.monotonic() + timeout_s
    alive = {p for p in pids if is_alive(p)}
    while alive and time.monotonic() < deadline:
        time.sleep(0.02)
        alive = {p for p in alive if is_alive(p)}
    return alive
