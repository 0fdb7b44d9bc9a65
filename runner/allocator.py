"""Keep large transient CPU tensors off `mmap`: glibc's allocator tuned for decode loops.

Why: glibc serves every allocation above its mmap threshold (128 KiB, raised only after such a chunk is freed) with
a fresh `mmap`, and gives freed heap back to the OS above its trim threshold, so a decode step that allocates a few
hundred KiB per layer (the INT8 segment dequantized for attention, `DynamicCache`'s `torch.cat`) page-faults its
buffers in again every step. Measured on SmolLM2-135M with 2 cores (`bench kernel`, a 4K-token INT8 dequantize:
3.3 ms against 0.10 ms with the thresholds raised; a whole decode step at 4K context: confkv 120.7 -> 114.1 ms,
plain `DynamicCache` 151.8 -> 149.5 ms). The price: up to `TRIM_BYTES` of freed memory stays with the process.
This is what PyTorch's CPU tuning guides get from tcmalloc or jemalloc, with no extra install.
"""

from __future__ import annotations

import ctypes
import os
import sys

M_TRIM_THRESHOLD = -1  # glibc <malloc.h>
M_MMAP_THRESHOLD = -3
MMAP_BYTES = 32 << 20  # glibc's own upper bound for the dynamic mmap threshold on 64-bit
TRIM_BYTES = 256 << 20
OPT_OUT = "CONFKV_TUNE_MALLOC"


def tune_cpu_allocator() -> bool:
    """Raise glibc's mmap and trim thresholds for this process (idempotent). Returns whether they were set: False
    off Linux/glibc, or with `CONFKV_TUNE_MALLOC=0`. The `confkv-agent` CLI calls it at start; library users may."""
    if os.environ.get(OPT_OUT, "1") == "0" or not sys.platform.startswith("linux"):
        return False
    try:  # the process's own symbols: no `find_library`, which runs `ldconfig` in a subprocess on every CLI start
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # musl and other libcs have no mallopt
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_BYTES))
