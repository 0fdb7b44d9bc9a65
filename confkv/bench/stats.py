"""Intervals the benchmarks and the trace tables print beside a success count (one definition for both layers)."""

from __future__ import annotations

import math


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of k successes in n (95% by default): unlike k/n ± 1.96·SE it stays inside [0, 1] and
    is honest at the small n and at the 0 or n that a few trials per cell give."""
    if n == 0:
        return 0.0, 1.0
    p, zz = k / n, z * z
    centre = (p + zz / (2 * n)) / (1 + zz / n)
    half = z / (1 + zz / n) * math.sqrt(p * (1 - p) / n + zz / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)
