"""`confkv-agent policies`: every registered KV policy and `--set` key, read from the registry.

Why a command and not a list in each `--policy` help: the names and keys live in `confkv.policies` and
`confkv.rankers`, and importing them loads torch, which `--help` must not wait for (see cli.main). So the help
strings point here, and this prints whatever is registered now.
"""

from __future__ import annotations

import json

import typer


def listing() -> dict:
    """The registry as data: policies (name, kind, roles, ranker) and keys (default, allowed range)."""
    from confkv.parts import key_ranges
    from confkv.policies import BASELINES, ROLES, registered
    from confkv.policy import KVPolicy

    roles = {name: [role for role, names in ROLES.items() if name in names] for name in registered()}
    policies = [{"name": name, "kind": "baseline" if name in BASELINES else "preset", "roles": roles[name],
                 "ranker": policy.ranker} for name, policy in registered().items()]
    defaults = KVPolicy.defaults()
    keys = [{"key": key, "default": defaults[key], "allowed": rng.describe() if rng else ""}
            for key, rng in key_ranges().items()]
    return {"policies": policies, "keys": keys}


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
            typer.echo(f"{p['name']:<16} {p['kind']:<8} ranker={p['ranker']}{roles}")
        typer.echo("\n--set keys (default; allowed):")
        for k in data["keys"]:
            allowed = f"; {k['allowed']}" if k["allowed"] else ""
            typer.echo(f"  {k['key']:<20} {k['default']!s}{allowed}")
