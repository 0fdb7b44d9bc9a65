"""Paired intervals over tasks: how sure a per-policy difference is, when every task is scored under both policies.

Why a bootstrap over tasks: the unit that varies is the task (its pages, its answer, how far back its memory
reaches), not the step or the token, and the tasks are few (tens); resampling tasks with replacement and taking
the percentile interval of the mean makes no normality assumption and keeps each task's pair together.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from statistics import fmean

RESAMPLES = 2000
SEED = 0  # fixed: the same rows always print the same interval


def bootstrap_ci(values: Sequence[float], level: float = 0.95, resamples: int = RESAMPLES,
                 seed: int = SEED) -> tuple[float, float] | None:  # fmt: skip
    """Percentile interval of the mean of `values` (one per task: a paired difference or a per-task rate) over
    `resamples` resamples of the tasks; None without values. One value gives a zero-width interval."""
    vals = list(values)
    if not vals:
        return None
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    rng = random.Random(seed)
    n = len(vals)
    means = sorted(fmean(rng.choices(vals, k=n)) for _ in range(resamples))
    tail = (1 - level) / 2
    lo = means[int(tail * (resamples - 1))]
    hi = means[int(round((1 - tail) * (resamples - 1)))]
    return lo, hi
