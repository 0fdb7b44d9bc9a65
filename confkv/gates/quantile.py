"""The running-quantile gate (`--set tau=auto:q`): tau follows the cache's own confidences.

Why: a fixed tau = 0.5 hardly ever opens on a model whose typical confidence is ~0.8 (SmolLM2), so the threshold is
the q-quantile of the confidences this cache has judged, and the gate opens on about a share q of forwards once
warm. Its limit (issue 37): the first 16 forwards are warm-up, which a short agent turn may never leave.
"""

from __future__ import annotations

from dataclasses import dataclass

from confkv.budget import QuantileGate
from confkv.gates.base import TwoLevelGate
from confkv.params import PolicyError, param


@dataclass(frozen=True)
class RunningQuantileGate(TwoLevelGate):
    """Unsure = below the running `tau_quantile`-quantile of this cache's confidences (last 1,024 forwards)."""

    tau_quantile: float | None = param(None, 0.0, 1.0, open_low=True, open_high=True, note=" (tau=auto:q)")

    def inner(self) -> QuantileGate:
        return QuantileGate(self.n_low, self.n_high, self.tau_quantile)

    def check(self) -> None:
        super().check()
        if self.tau_quantile is None:  # (None is how every other gate's policy stores this key)
            raise PolicyError("the quantile gate needs tau_quantile: --set tau=auto:q")
