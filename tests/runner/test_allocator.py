"""The CPU allocator tuning the CLI applies at start (runner.allocator)."""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
import sys

import pytest

from runner.allocator import tune_cpu_allocator

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


@pytest.mark.skipif(not GLIBC, reason="mallopt tuning exists on glibc Linux only")
def test_thresholds_are_set_on_glibc_and_freed_heap_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONFKV_TUNE_MALLOC", raising=False)
    assert tune_cpu_allocator() is True
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]

    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                     "keepcost")]

    libc.mallinfo2.restype = MallInfo2
    before = libc.mallinfo2().hblks  # chunks served by mmap
    block = libc.malloc(4 << 20)  # 4 MiB: above glibc's default 128 KiB mmap threshold, below ours
    try:
        assert libc.mallinfo2().hblks == before, "a 4 MiB allocation must come from the heap, not a fresh mmap"
    finally:
        libc.free(block)


def test_opt_out_leaves_the_allocator_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONFKV_TUNE_MALLOC", "0")
    assert tune_cpu_allocator() is False
