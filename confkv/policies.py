"""The registry of built `KVPolicy` instances and `--set key=value` overrides.

`random`, `recency` and `attention` share Conf-KV's gate, so they evict at the same rate and times; only the
ranking differs (the paper's matched-rate ablation).

`confkv-paper` is the paper's literal schedule (tau = 0.5, 256/512 tokens, the budget switches at once) and stays
that whatever `confkv` becomes. Today `confkv` is the same schedule: neither the calibrated gate (`--set tau=auto`,
opens on ~25% of forwards where tau = 0.5 opens on ~4-7%) nor the hysteresis gate (`--set shrink=16`) beat the same
ranker at a fixed budget of equal mean bytes (README, issue 12), so neither was made the default.
`confkv-turn` decides once per agent turn, from the agent's own decision (`confkv.gates.turn`): an unsure reply
keeps `n_high` of the older turns when the next observation arrives, a sure one `n_low`.
`confkv-turn-recall` is the turn gate with recall's cold tier: without it an unsure decision can only stop
evicting the turns to come, with it the older turns an earlier sure decision let go come back when the next
observation arrives (chosen by that forward's query).
`confkv-recall` adds recallable eviction: what a confident step evicts waits in a 2,048-token cold tier per layer
(INT8, never attended), and when the gate opens the layer refills up to `n_high` with the cold tokens the current
query scores highest, so "keep more when unsure" has something to keep.

`BASELINES` are the benchmarks' own ablations of `confkv`, registered like presets so every policy a benchmark runs
has a name `get_policy` knows: `confkv-fixed` (the gate off at a fixed budget, which the benchmarks byte-match to
`confkv`) and `confkv-noint8` (INT8 off: the reference whose budget trajectory the ranker ablation replays).
`ROLES` says which registered policies each benchmark list holds; the benchmarks, the CLI and the tests read the
names from here (`policy_names`), none types them.

A new preset is one line in `PRESETS` (or `BASELINES`); a new ranker is one file in `confkv.rankers` plus its
`RANKERS` line, then `get_policy("confkv", {"ranker": "<name>", "<its key>": "..."})`; a new gate is one file in
`confkv.gates` plus its `GATES` line, then `get_policy("confkv", {"gated": "<name>", "<its key>": "..."})`.
"""

from __future__ import annotations

import dataclasses

from confkv.policy import Gate, KVPolicy, PolicyError, Protection, RankerSpec, Storage

_CONFKV_GATE = Gate(gated="threshold", n_low=256, n_high=512, tau=0.5)
_CONFKV = KVPolicy("confkv", _CONFKV_GATE, RankerSpec("ema"), Protection(sinks=4, protect=64), Storage(int8_after=64))
_ABLATION = dataclasses.replace(_CONFKV, storage=Storage(int8_after=None))
# The turn gate's threshold on a decision's least confident choice: the 0.4-quantile of those minima for
# qwen2.5-coder-1.5b under full KV (14 forced decisions, tasks 15-16; confidences only, no reference is read), so it
# opens on about 40% of turns; `traces confidence` prints the quantiles ("decision min") for another model or DB.
TURN_TAU = 0.65

PRESETS: dict[str, KVPolicy] = {
    "full": KVPolicy("full"),
    "sliding": KVPolicy("sliding", Gate(gated="fixed", budget=512), RankerSpec("recency"), Protection(sinks=4, protect=0)),
    "h2o": KVPolicy("h2o", Gate(gated="fixed", budget=512), RankerSpec("h2o"), Protection(sinks=0, protect=256)),
    "confkv": _CONFKV,
    "confkv-paper": dataclasses.replace(_CONFKV, name="confkv-paper"),
    "confkv-recall": dataclasses.replace(_CONFKV, name="confkv-recall",
                                         storage=dataclasses.replace(_CONFKV.storage, cold=2048)),
    "confkv-turn": dataclasses.replace(_CONFKV, name="confkv-turn",
                                       gate=_CONFKV_GATE.with_values(gated="turn", tau=TURN_TAU)),
    "confkv-turn-recall": dataclasses.replace(_CONFKV, name="confkv-turn-recall",
                                              gate=_CONFKV_GATE.with_values(gated="turn", tau=TURN_TAU),
                                              storage=dataclasses.replace(_CONFKV.storage, cold=2048)),
    # The turn gate matched to a fixed budget on average, not at its peak: `confkv-turn` keeps confkv's 256/512, so
    # against `confkv-fixed` (512) it can only keep less; here n_low / n_high are 2/3 and 4/3 of 512, so a gate
    # open on half the turns holds 512 on average and an unsure turn keeps more than the fixed budget does.
    "confkv-turn-wide": dataclasses.replace(_CONFKV, name="confkv-turn-wide",
                                            gate=_CONFKV_GATE.with_values(gated="turn", tau=TURN_TAU, n_low=341,
                                                                          n_high=683)),  # fmt: skip
    "confkv-pyramid": dataclasses.replace(_CONFKV, name="confkv-pyramid",
                                          gate=_CONFKV_GATE.with_values(pyramid=True)),
    "random": dataclasses.replace(_ABLATION, name="random", ranking=RankerSpec("random")),
    "recency": dataclasses.replace(_ABLATION, name="recency", ranking=RankerSpec("recency")),
    "attention": dataclasses.replace(_ABLATION, name="attention", ranking=RankerSpec("attention")),
}

BASELINES: dict[str, KVPolicy] = {
    "confkv-fixed": dataclasses.replace(_CONFKV, name="confkv-fixed",
                                        gate=_CONFKV_GATE.with_values(gated="fixed", budget=512)),
    "confkv-noint8": dataclasses.replace(_ABLATION, name="confkv-noint8"),
}
# The fixed-budget baselines with confkv's storage (INT8 past its 64-token window): at one footprint in bytes they
# differ from `confkv-fixed` only in the ranker and protection. The plain ones keep every token in the model dtype,
# the pinned prompt included, so on an agent whose 2K-token system prompt is never evicted they cannot be brought
# down to confkv's bytes by any budget; these can.
_INT8 = Storage(int8_after=64)
BASELINES.update({
    f"{name}-int8": dataclasses.replace(base, name=f"{name}-int8", storage=_INT8,
                                        gate=Gate(gated="fixed", budget=512))
    for name, base in (("sliding", PRESETS["sliding"]), ("h2o", PRESETS["h2o"]),
                       ("random", dataclasses.replace(PRESETS["random"], protection=_CONFKV.protection)))
})  # fmt: skip

# Which registered policies fill each slot of the quality benchmarks (confkv.bench): "main" is their default set,
# "fixed" the fixed-budget baselines byte-matched to the gated policy, "ablation" the rankers that replay the budget
# trajectory of "ablation-reference" (bench ppl), "on-request" gated policies run only when named (bench niah).
ROLES: dict[str, tuple[str, ...]] = {
    "main": ("full", "sliding", "h2o", "confkv", "confkv-fixed", "confkv-pyramid"),
    "fixed": ("sliding", "h2o", "confkv-fixed"),
    "ablation": ("random", "recency", "attention"),
    "ablation-reference": ("confkv-noint8",),
    "on-request": ("confkv-recall", "confkv-paper", "confkv-turn", "confkv-turn-wide", "confkv-turn-recall"),
}


def registered() -> dict[str, KVPolicy]:
    """Every policy `get_policy` knows by name: the presets, then the benchmark baselines."""
    return {**PRESETS, **BASELINES}


def policy_names(role: str | None = None) -> tuple[str, ...]:
    """The registered names (all, or those of one benchmark role in the role's order)."""
    if role is None:
        return tuple(registered())
    if role not in ROLES:
        raise PolicyError(f"unknown policy role {role!r}; known: {', '.join(ROLES)}")
    known = registered()
    return tuple(name for name in ROLES[role] if name in known)


def _coerce(key: str, raw: str, annotation: str) -> object:
    """Parse a `--set` value by the field's declared type."""
    text = raw.strip()
    if text.lower() in ("none", "null", "off") and "None" in annotation:
        return None
    try:
        if "tuple" in annotation:
            return tuple(float(x) for x in text.strip("()[]").split(","))
        if "bool" in annotation:
            if text.lower() in ("1", "true", "yes", "on"):
                return True
            if text.lower() in ("0", "false", "no", "off"):
                return False
            if "str" in annotation:  # `gated`: a bool as stored, or a gate's name
                return text
            raise ValueError(text)
        if "int" in annotation:
            return int(text)
        if "float" in annotation:
            return float(text)
    except ValueError as exc:
        raise PolicyError(f"--set {key}={raw}: expected {annotation}") from exc
    return text


def _type_name(annotation: object) -> str:
    """`int` for `"int"` or `int` (a ranker module without `from __future__ import annotations` has real types)."""
    return annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))


AUTO_TAU_QUANTILE = 0.2  # `tau=auto` alone: the gate opens on about a fifth of forwards


def parse_overrides(items: list[str] | None) -> dict[str, str]:
    """`["n_low=128", "tau=0.4"]` -> dict; a malformed item is a clear error."""
    out: dict[str, str] = {}
    for item in items or []:
        if "=" not in item:
            raise PolicyError(f"--set expects key=value, got {item!r}")
        key, value = item.split("=", 1)
        out[key.strip()] = value
    return out


def get_policy(name: str, overrides: dict[str, str | object] | None = None) -> KVPolicy:
    """A preset by name with overrides (strings are parsed by the key's type) applied and checked."""
    known = registered()
    if name not in known:
        raise PolicyError(f"unknown policy {name!r}; known: {', '.join(known)}")
    keys = KVPolicy.keys()
    values: dict[str, object] = {}
    for key, value in (overrides or {}).items():
        if key == "tau" and isinstance(value, str) and value.strip().startswith("auto"):
            key, value = "tau_quantile", value.strip()[5:] or str(AUTO_TAU_QUANTILE)  # tau=auto[:q]
        if key not in keys:
            raise PolicyError(f"unknown policy key {key!r}; known: {', '.join(sorted(keys))}")
        values[key] = _coerce(key, value, _type_name(keys[key][1].type)) if isinstance(value, str) else value
    return known[name].with_values(**values)


__all__ = ["BASELINES", "PRESETS", "ROLES", "KVPolicy", "PolicyError", "get_policy", "parse_overrides", "policy_names"]
