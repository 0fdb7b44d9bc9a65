"""`confkv-agent policies`: every registered KV policy and `--set` key, read from the registry; and
`build_policies`, which turns a command's `--policy`/`--set` arguments into `KVPolicy` objects once, at the edge.

Why a command and not a list in each `--policy` help: the names and keys live in `confkv.policies` and
`confkv.rankers`, and importing them loads torch, which `--help` must not wait for (see cli.main). So the help
strings point here, and this prints whatever is registered now.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from confkv.policy import KVPolicy


def build_policies(names: Sequence[str], items: list[str] | None, policy_hint: str = "--policy",
                   model: str | None = None) -> dict[str, KVPolicy]:
    """name -> the built `KVPolicy` with every `--set key=value` applied and checked: the one place a command's
    policy arguments are parsed, so the runner and the library receive objects and never re-parse strings (and a
    typo is one usage error before any model, browser or database is touched).

    `--set tau=calibrated` reads the threshold stored for `model` and the policy's kind of gate
    (`confkv.calibration`), so the built policy, and the run's config, hold the number.

    An unknown name is a `BadParameter` on `policy_hint`; a malformed item, unknown key or out-of-range value is one
    on `--set`. With no names the items are still checked for their `key=value` form."""
    from confkv.calibration import CALIBRATED, CalibrationError, calibrated_tau, gate_kind
    from confkv.gates import GATES
    from confkv.policies import PolicyError, get_policy, parse_overrides
    from traces.fmt import terminal_safe

    try:
        overrides = parse_overrides(items)
    except PolicyError as exc:
        raise typer.BadParameter(terminal_safe(str(exc)), param_hint="--set") from None
    built: dict[str, KVPolicy] = {}
    for name in dict.fromkeys(names):
        try:
            get_policy(name)
        except PolicyError as exc:
            raise typer.BadParameter(terminal_safe(str(exc)), param_hint=policy_hint) from None
        try:
            mine: dict[str, str | object] = dict(overrides)
            if str(mine.get("tau", "")).strip() == CALIBRATED:
                if model is None:
                    raise PolicyError("tau=calibrated needs the model the threshold was calibrated for")
                gate = get_policy(name, {k: v for k, v in mine.items() if k != "tau"}).gate.plugin
                if "tau" in {f.name for f in dataclasses.fields(gate)}:
                    mine["tau"] = calibrated_tau(model, gate_kind(_gate_name(type(gate), GATES)))
                else:  # a fixed budget has no threshold to calibrate (full, sliding, h2o beside a gated policy)
                    del mine["tau"]
            built[name] = get_policy(name, mine)
        except (PolicyError, CalibrationError) as exc:
            raise typer.BadParameter(terminal_safe(str(exc)), param_hint="--set") from None
    return built


def listing() -> dict:
    """The registry as data: policies (name, kind, roles, ranker) and keys (default, allowed range)."""
    from confkv.gates import GATES
    from confkv.parts import key_ranges
    from confkv.policies import BASELINES, ROLES, registered
    from confkv.policy import KVPolicy

    roles = {name: [role for role, names in ROLES.items() if name in names] for name in registered()}
    policies = [{"name": name, "kind": "baseline" if name in BASELINES else "preset", "roles": roles[name],
                 "gate": _gate_name(type(policy.gate.plugin), GATES), "ranker": policy.ranker}
                for name, policy in registered().items()]  # fmt: skip
    defaults = KVPolicy.defaults()
    keys = [{"key": key, "default": defaults[key], "allowed": rng.describe() if rng else ""}
            for key, rng in key_ranges().items()]
    return {"policies": policies, "keys": keys}


def _gate_name(cls: type, gates: dict[str, type]) -> str:
    """The registry name of a gate class (`--set gated=<name>`)."""
    return next((name for name, known in gates.items() if known is cls), cls.__name__)


def register(app: typer.Typer) -> None:
    @app.command("policies")
    def policies_cmd(as_json: bool = typer.Option(False, "--json", help="print one JSON object")) -> None:
        """List the registered KV policies (for --policy / --policies) and the --set keys with their ranges."""
        data = listing()
        if as_json:
            typer.echo(json.dumps(data, default=str))
            return
        for p in data["policies"]:
            roles = f"  [{', '.join(p['roles'])}]" if p["roles"] else ""
            typer.echo(f"{p['name']:<16} {p['kind']:<8} gate={p['gate']:<10} ranker={p['ranker']}{roles}")
        typer.echo("\n--set keys (default; allowed):")
        for k in data["keys"]:
            allowed = f"; {k['allowed']}" if k["allowed"] else ""
            typer.echo(f"  {k['key']:<20} {k['default']!s}{allowed}")
