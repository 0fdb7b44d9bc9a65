"""Provenance recorded with every run: which code (git revision) on which machine produced the numbers.

Memory and speed figures are meaningless without the CPU, core count, torch version and GPU they came from, and
"which commit was this" is the first question when two runs disagree.  Nothing here imports torch: the CLI's light
commands must stay fast, and a runner that uses torch has already imported it, so we only look at `sys.modules`.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from confkv.cpu import cpu_kind, cpu_model

_REPO_ROOT = Path(__file__).resolve().parent.parent


def _torch_facts() -> tuple[str | None, str | None]:
    """(torch version, CUDA device name or None) without importing torch when it is not loaded yet."""
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            return importlib.metadata.version("torch"), None
        except importlib.metadata.PackageNotFoundError:
            return None, None
    cuda = None
    try:
        if torch.cuda.is_available():
            cuda = torch.cuda.get_device_name(torch.cuda.current_device())
    except Exception:  # a broken CUDA install must not stop a trace from being written
        cuda = None
    return str(torch.__version__), cuda


def machine_info() -> dict[str, Any]:
    """A JSON-able description of this machine for the `runs.machine` column."""
    torch_version, cuda_device = _torch_facts()
    return {
        "cpu": cpu_model(),
        "cpu_kind": cpu_kind(),
        "cores": os.cpu_count(),
        "torch": torch_version,
        "cuda_device": cuda_device,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": platform.node(),
    }


def git_revision(repo: Path = _REPO_ROOT) -> str | None:
    """HEAD commit of the code's repository, suffixed "+dirty" if tracked files changed; None outside git.

    Uses `--no-optional-locks` so reading the status never takes the index lock that a concurrent commit needs.
    """

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["git", "--no-optional-locks", "-C", str(repo), *args],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )

    try:
        head = git("rev-parse", "HEAD")
        if head.returncode != 0:
            return None
        status = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.TimeoutExpired):
        return None
    revision = head.stdout.strip()
    return revision + "+dirty" if status.stdout.strip() else revision
