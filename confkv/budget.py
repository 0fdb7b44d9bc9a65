"""Budget schedules: how many tokens each layer may keep at the next step.

A budget counts every kept token of a layer (sinks and the protected recent window included). The schedule is asked
after step t's logits are known; the cache applies the answer when step t+1 is appended.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class FixedBudget:
    """The same budget at every step (sliding window, H2O)."""

    n: int

    def budget(self, confidence: float | None) -> int:
        return self.n

    @property
    def max_budget(self) -> int:
        return self.n


@dataclass(frozen=True)
class GatedBudget:
    """Conf-KV: keep `n_high` tokens while the model is unsure (`c < tau`), else `n_low`.

    Before any confidence is known (the first prefill chunk) the schedule is cautious and answers `n_high`.
    """

    n_low: int
    n_high: int
    tau: float

    def __post_init__(self) -> None:
        if not 0 < self.n_low <= self.n_high:
            raise ValueError(f"need 0 < n_low <= n_high, got n_low={self.n_low}, n_high={self.n_high}")

    def budget(self, confidence: float | None) -> int:
        if confidence is None or confidence < self.tau:
            return self.n_high
        return self.n_low

    @property
    def max_budget(self) -> int:
        return self.n_high


@dataclass
class QuantileGate:
    """Conf-KV with a calibrated threshold (`tau=auto:q`): tau is the q-quantile of this cache's own recent
    confidences, so the gate opens on about a share q of forwards whatever the model's confidence scale (a fixed
    tau = 0.5 never opened on SmolLM2, whose mean confidence is ~0.8). Running, not calibrated offline: it needs no
    calibration text and follows the session (prefill chunks and decode steps share one history). The first
    `warmup` forwards answer `n_high` (nothing to compare with yet). One instance per cache: it holds state."""

    n_low: int
    n_high: int
    q: float
    warmup: int = 16
    window: int = 1024
    _order: deque = field(default_factory=deque, repr=False)
    _sorted: list = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if not 0 < self.n_low <= self.n_high:
            raise ValueError(f"need 0 < n_low <= n_high, got n_low={self.n_low}, n_high={self.n_high}")
        if not 0.0 < self.q < 1.0:
            raise ValueError(f"the quantile must be in (0, 1), got {self.q}")

    @property
    def tau(self) -> float | None:
        """The current threshold (None during warmup)."""
        if len(self._sorted) < self.warmup:
            return None
        return self._sorted[min(len(self._sorted) - 1, int(self.q * len(self._sorted)))]

    def budget(self, confidence: float | None) -> int:
        if confidence is None:
            return self.n_high
        tau = self.tau
        self._order.append(confidence)
        bisect.insort(self._sorted, confidence)
        if len(self._order) > self.window:
            old = self._order.popleft()
            del self._sorted[bisect.bisect_left(self._sorted, old)]
        return self.n_high if tau is None or confidence < tau else self.n_low

    @property
    def max_budget(self) -> int:
        return self.n_high


@dataclass
class TurnBudget:
    """Conf-KV for agents: the budget is decided once per turn, from the confidence of the decision just made, and
    held for every forward until the next decision. Why: an agent's cache grows by observation prefill, whose
    next-token confidence is about page text and hardly ever low (issue 37: the 1.5B's prefill chunks never fell
    below 0.5), while the signal that spreads is the reply's least confident choice. An unsure decision keeps
    `n_high` of the older turns when the next observation arrives, a sure one `n_low`. Before the first decision,
    `n_high` (cautious, as `GatedBudget`). One instance per cache: it holds state."""

    n_low: int
    n_high: int
    tau: float
    current: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.n_low <= self.n_high:
            raise ValueError(f"need 0 < n_low <= n_high, got n_low={self.n_low}, n_high={self.n_high}")
        self.current = self.current or self.n_high

    def budget(self, confidence: float | None) -> int:
        return self.current

    def end_turn(self, confidence: float) -> bool:
        """A decision ended with this confidence (the least confident of its choices): set the held budget; True
        when the gate opened (`n_high`)."""
        self.current = self.n_high if confidence < self.tau else self.n_low
        return self.current > self.n_low

    @property
    def max_budget(self) -> int:
        return self.n_high


@dataclass
class Hysteresis:
    """A gate whose expansions keep something: it opens at once (the inner schedule's larger answer wins) but closes
    gradually, at most `shrink` tokens per forward towards the inner answer. Why: eviction is irreversible, so the
    paper's literal schedule lets one confident step right after an uncertain one throw away everything the
    expansion kept (512 -> 256 in one step), and that step pays a 256-token eviction. With `shrink` the expansion
    decays over n_high - n_low / shrink confident forwards instead. One instance per cache: it holds state."""

    inner: GatedBudget | QuantileGate | TurnBudget
    shrink: int
    last: int | None = None

    def __post_init__(self) -> None:
        if self.shrink < 1:
            raise ValueError(f"shrink must be >= 1 token per forward, got {self.shrink}")

    @property
    def n_low(self) -> int:
        return self.inner.n_low

    @property
    def n_high(self) -> int:
        return self.inner.n_high

    def budget(self, confidence: float | None) -> int:
        target = self.inner.budget(confidence)
        if self.last is None or target >= self.last:
            self.last = target
        else:
            self.last = max(target, self.last - self.shrink)
        return self.last

    @property
    def max_budget(self) -> int:
        return self.inner.max_budget

    @property
    def end_turn(self) -> Callable[[float], bool] | None:
        """The inner gate's turn decision when it is a turn-level one (`TurnBudget`; the closing is then paced per
        forward as always), else None: the cache looks it up, so a per-forward gate with hysteresis ignores turns."""
        return getattr(self.inner, "end_turn", None)


@dataclass(frozen=True)
class ReplayBudget:
    """Replays a recorded budget trajectory, so ablations evict at exactly the rate and times of another run."""

    trajectory: Sequence[int]
    step: list[int] = None  # type: ignore[assignment]  # mutable cursor, set in __post_init__

    def __post_init__(self) -> None:
        if not self.trajectory:
            raise ValueError("ReplayBudget needs a non-empty trajectory")
        object.__setattr__(self, "step", [0])

    def budget(self, confidence: float | None) -> int:
        i = min(self.step[0], len(self.trajectory) - 1)
        self.step[0] += 1
        return int(self.trajectory[i])

    @property
    def max_budget(self) -> int:
        return int(max(self.trajectory))


def pyramid_budgets(global_budget: int, n_layers: int, spread: float = 0.5, minimum: int = 1) -> list[int]:
    """PyramidKV-style split: budgets fall linearly with depth and average exactly `global_budget`.

    Layer 0 gets about `(1 + spread) * global_budget`, the last layer `(1 - spread) * global_budget`; rounding
    leftovers go to the shallowest layers so the sum is exactly `global_budget * n_layers`. `minimum` floors each
    layer (the cache needs room for sinks and the protected window).
    """
    if n_layers < 1:
        raise ValueError("n_layers must be >= 1")
    if not 0.0 <= spread < 1.0:
        raise ValueError(f"pyramid spread must be in [0, 1), got {spread}")
    if global_budget < minimum:
        raise ValueError(f"global budget {global_budget} is below the per-layer minimum {minimum}")
    total = global_budget * n_layers
    if n_layers == 1:
        return [global_budget]
    raw = [global_budget * (1 + spread - 2 * spread * i / (n_layers - 1)) for i in range(n_layers)]
    budgets = [max(minimum, int(r)) for r in raw]
    diff = total - sum(budgets)
    i = 0
    while diff != 0:  # hand out (or take back) single tokens, shallow layers first, never below the floor
        idx = i % n_layers
        if diff > 0:
            budgets[idx] += 1
            diff -= 1
        elif budgets[idx] > minimum:
            budgets[idx] -= 1
            diff += 1
        i += 1
        if i > 10 * total + n_layers:
            raise ValueError("cannot split the budget with this minimum")
    return budgets
