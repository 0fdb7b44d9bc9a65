"""Handing freed heap back to the OS (glibc `malloc_trim`), after every agent step and every episode.

Why: a long episode's cache grows by torch.cat into ever larger CPU buffers and each prefill chunk allocates large
temporaries; glibc keeps the freed chunks in its arenas. Measured: in a 75-task eval on qwen2.5-coder-1.5b each
process's peak RSS grew ~0.35 GB per episode; replaying a 16K-token episode held 18 GB of anonymous memory where the
weights are 3.6 GB and the KV 0.9 GB (two such processes were OOM-killed on a 24 GB machine). On SmolLM2-135M,
7 x 700-token appends with a fork and 8 decoded tokens each: 2.1 GB anonymous untrimmed, 0.59 GB trimmed after each
step (loaded 0.31 GB, KV 0.25 GB): the rest was freed memory, not live tensors.
"""

from __future__ import annotations

import ctypes
import functools
import gc


@functools.cache
def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def trim_heap() -> bool:
    """Collect, then `malloc_trim(0)`; False where there is no glibc. A few ms to ~100 ms: cheap beside a step,
    which calls it (the C library is looked up once)."""
    gc.collect()
    libc = _libc()
    return libc is not None and bool(libc.malloc_trim(0))
