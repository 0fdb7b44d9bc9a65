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

_REPO_ROOT = Path(__file__).resolve().parent.parent


CPUINFO = Path("/proc/cpuinfo")
# The instruction sets that decide which precision is fast (`confkv.models.precision_choice`), in the order listed
MATRIX_ISA = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8")


def _cpuinfo(path: Path = CPUINFO) -> dict[str, str]:
    """The first processor's `key: value` lines of /proc/cpuinfo (Linux); empty elsewhere."""
    out: dict[str, str] = {}
    try:
        text = path.read_text()
    except OSError:
        return out
    for line in text.splitlines():
        if not line.strip():
            break  # the first processor's block ends; the others repeat it
        key, sep, value = line.partition(":")
        if sep:
            out.setdefault(key.strip().lower(), value.strip())
    return out


def _cpu_model(info: dict[str, str]) -> str:
    """CPU model name from /proc/cpuinfo, else what `platform` knows."""
    return info.get("model name") or platform.processor() or platform.machine()


def cpu_kind(path: Path = CPUINFO) -> str:
    """One line telling CPU kinds apart: `AMD EPYC (family 26 model 2; avx2 avx512f avx512_bf16 ...)`.

    Why: a cloud CPU's model name is often just "AMD EPYC" whether it is a Zen 3 with AVX2 alone or a Zen 5 with
    AVX512-BF16, and which precision is fast (hence how long an episode took, and at which precision a resumed task
    runs) depends on exactly that. Every run and every episode records it."""
    info = _cpuinfo(path)
    name = _cpu_model(info)
    if "cpu family" not in info:
        return name
    flags = set(info.get("flags", "").split())
    isa = " ".join(f for f in MATRIX_ISA if f in flags)
    return f"{name} (family {info['cpu family']} model {info.get('model', '?')}; {isa or 'no AVX2'})"


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
        "cpu": _cpu_model(_cpuinfo()),
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
