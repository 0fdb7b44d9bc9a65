"""What this CPU is, read once from /proc/cpuinfo: its name, its flags, and a kind that tells machines apart.

Why one place: the compiled kernels are built for the CPU's flags, `--dtype auto` caches its timings per CPU, and
every trace names the CPU that ran it. A cloud CPU's model name is often just "AMD EPYC" whether it is a Zen 3 with
AVX2 alone or a Zen 5 with AVX512-BF16, and which precision is fast depends on exactly that difference, so the name
alone is not a key: `cpu_kind` adds the family, model and matrix instruction sets.
"""

from __future__ import annotations

import functools
import platform
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
# The instruction sets that decide which precision is fast (`confkv.models.precision_choice`), in the order listed
MATRIX_ISA = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8")


@functools.cache
def _text(path: Path) -> str:
    """The file's text, read once per process (it does not change while a process runs; on a many-core host it is
    hundreds of KB, and every trace store open asks for the CPU kind); empty where there is none."""
    try:
        return path.read_text()
    except OSError:
        return ""


def cpuinfo(path: Path = CPUINFO) -> dict[str, str]:
    """The first processor's `key: value` lines of /proc/cpuinfo (keys lower-cased); empty where there is none."""
    out: dict[str, str] = {}
    for line in _text(path).splitlines():
        if not line.strip():
            break  # the first processor's block ends; the others repeat it
        key, sep, value = line.partition(":")
        if sep:
            out.setdefault(key.strip().lower(), value.strip())
    return out


def _name(info: dict[str, str]) -> str:
    return info.get("model name") or platform.processor() or platform.machine()


def cpu_model(path: Path = CPUINFO) -> str:
    """The CPU's model name, else what `platform` knows."""
    return _name(cpuinfo(path))


def cpu_flags(path: Path = CPUINFO) -> str:
    """The `flags` line of /proc/cpuinfo as written there (empty where there is none)."""
    return next((line for line in _text(path).splitlines() if line.startswith("flags")), "")


def cpu_kind(path: Path = CPUINFO) -> str:
    """One line telling CPU kinds apart: `AMD EPYC (family 26 model 2; avx2 avx512f avx512_bf16 avx512_vnni)`."""
    info = cpuinfo(path)
    if "cpu family" not in info:
        return _name(info)
    flags = set(info.get("flags", "").split())
    isa = " ".join(f for f in MATRIX_ISA if f in flags)
    return f"{_name(info)} (family {info['cpu family']} model {info.get('model', '?')}; {isa or 'no AVX2'})"
