"""Per-model gate thresholds measured offline and stored with the model (issue 37): `--set tau=calibrated`.

Why: a confidence threshold only means something against the confidences one model produces on one kind of
traffic (the 1.5B's decisions sit around 0.6-0.8, a 135M model's far lower), and the running-quantile gate
(`tau=auto:q`) spends a short run in its warm-up. So tau is picked once per model from recorded traffic (a trace
database: `confkv-agent models calibrate`), as the q-quantile of the signal the gate compares with it, which makes the
gate open on about a q share of its decisions; the number, the quantile and where it came from are stored in
`<confkv home>/calibration/<model>.json`, and a policy built with `tau=calibrated` for that model reads it at the
command's edge, so a run's config holds the number, never the word.

Which signal a gate compares (`SIGNALS`): the turn gate the least confident choice of each decision ("decision
min"), the per-forward gates each forward's confidence (prefill chunks and decoded tokens).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from confkv.models.home import confkv_home

CALIBRATED = "calibrated"  # the `--set tau=` value that reads the stored threshold
SIGNALS: dict[str, tuple[str, ...]] = {  # gate kind -> the recorded kinds (traces.confidence.KINDS) it compares
    "turn": ("decision min",),
    "forward": ("prefill chunk", "action token"),
}


class CalibrationError(ValueError):
    """No stored threshold for this model and gate kind, or a calibration that cannot be computed."""


def gate_kind(gate_name: str) -> str:
    """The calibration a gate reads: the turn gate decides per decision, every other gate per forward."""
    return "turn" if gate_name == "turn" else "forward"


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile by linear interpolation between order statistics (`statistics.quantiles`' inclusive method)."""
    if not values:
        raise CalibrationError("no recorded confidences to calibrate from")
    if not 0.0 < q < 1.0:
        raise CalibrationError(f"quantile must be in (0, 1), got {q}")
    vals = sorted(values)
    pos = q * (len(vals) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(vals) - 1)
    return vals[lo] + (vals[hi] - vals[lo]) * (pos - lo)


def calibration_path(model: str) -> Path:
    """One file per model name (a path given as the model is named by its folder)."""
    stem = Path(model).name if ("/" in model or "\\" in model) else model
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", stem) or "model"
    return confkv_home() / "calibration" / f"{safe}.json"


def load_calibration(model: str) -> dict[str, Any]:
    """gate kind -> its stored record (empty when the model was never calibrated)."""
    path = calibration_path(model)
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CalibrationError(f"{path} is not a readable calibration ({exc}); delete it and calibrate again") from None
    return data.get("gates", {}) if isinstance(data, dict) else {}


def save_calibration(model: str, kind: str, record: Mapping[str, Any]) -> Path:
    """Store one gate kind's record (it must hold `tau`), keeping the model's other kinds."""
    if kind not in SIGNALS:
        raise CalibrationError(f"unknown gate kind {kind!r}; known: {', '.join(SIGNALS)}")
    tau = record.get("tau")
    if not isinstance(tau, (int, float)) or not 0.0 <= float(tau) <= 1.0:
        raise CalibrationError(f"a calibration needs a tau in [0, 1], got {tau!r}")
    gates = load_calibration(model)
    gates[kind] = dict(record)
    path = calibration_path(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"model": model, "gates": gates}, indent=2, sort_keys=True))
    tmp.replace(path)  # a crash mid-write leaves the previous file, not half a file
    return path


def calibrated_tau(model: str, kind: str) -> float:
    """The stored threshold, or a `CalibrationError` naming the command that stores one."""
    record = load_calibration(model).get(kind)
    if not record:
        raise CalibrationError(f"no calibrated tau for {model!r} ({kind} gate): run `confkv-agent models calibrate "
                               f"{model} --db <traces> --run <id>` first, or give a number (--set tau=0.6)")  # fmt: skip
    return float(record["tau"])
