"""Gates: how many tokens each layer keeps, decided per forward. One file per gate, and this registry.

A gate is a frozen dataclass (`confkv.gates.base.BudgetGate`) whose `param` fields are its `--set` keys with their
ranges, so adding one is its file plus one line below; then `get_policy("confkv", {"gated": "<name>", "<key>":
"..."})`. As with rankers, the keys of all registered gates share the policy's flat namespace (a key declared by
several gates, like `n_low`, must agree on default, type and range), and a policy keeps the values of keys its own
gate does not read.

The policy's `gated` key names its gate. The gates that existed before gates were plugins keep the values stored
in trace DBs and run keys (`STORED_AS`): `false` is the fixed budget, `true` the confidence gate, which is the
running-quantile gate when `tau_quantile` is set (`tau=auto:q`). A gate registered since is stored by its name.
"""

from __future__ import annotations

from confkv.gates.base import BudgetGate, Schedule, TwoLevelGate, build_gate, gate_params
from confkv.gates.fixed import FixedGate
from confkv.gates.quantile import RunningQuantileGate
from confkv.gates.threshold import ThresholdGate
from confkv.gates.turn import TurnGate

GATES: dict[str, type[BudgetGate]] = {
    "fixed": FixedGate,
    "threshold": ThresholdGate,
    "quantile": RunningQuantileGate,
    "turn": TurnGate,
}

STORED_AS: dict[str, bool] = {"fixed": False, "threshold": True, "quantile": True}


def gate_name(gated: bool | str, tau_quantile: float | None) -> str:
    """The registered name of the gate a policy's `gated` value selects."""
    if gated is False:
        return "fixed"
    if gated is True:
        return "threshold" if tau_quantile is None else "quantile"
    return gated


__all__ = [
    "GATES",
    "STORED_AS",
    "BudgetGate",
    "FixedGate",
    "RunningQuantileGate",
    "Schedule",
    "ThresholdGate",
    "TurnGate",
    "TwoLevelGate",
    "build_gate",
    "gate_name",
    "gate_params",
]
