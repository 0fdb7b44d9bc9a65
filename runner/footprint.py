"""KV budgets matched in bytes: every evicting policy at one footprint, so policies compare at equal memory.

Why a module of its own: the trajectory-forced eval (`runner.forced`) and the free-running eval (`eval --budgets`
in free mode, for success retention at the frontier's footprint) must build exactly the same policy for a label
like `sliding-int8@180`, or the two experiments would not measure the same thing. A footprint of `budget` stands
for `budget` model-dtype tokens per layer beyond the pins; INT8 storage is counted at its real size (an INT8 policy
keeps more tokens for the same bytes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from confkv.policy import KVPolicy

INT8_SCALE_BYTES = 4  # one fp32 scale per K and per V row of an INT8 slot (confkv.layer)
PRESET_BUDGET = 512  # the fixed baselines' budget in the presets: what a forced footprint stands for
MIN_BUDGET = 16  # the smallest footprint `eval` has ever accepted: a few sinks and recent tokens, no more


def parse_budgets(raw: str) -> list[int]:
    """`--budgets` as `eval` and `traces forced-plan` read it: comma-separated footprints, each >= `MIN_BUDGET`,
    sorted and deduplicated. One parser, so a list `forced-plan` accepts is one `eval` runs. Raises ValueError with
    the message a command line prints."""
    try:
        values = [int(b) for b in raw.split(",") if b.strip()]
    except ValueError:
        raise ValueError(f"--budgets expects comma-separated integers, got {raw!r}") from None
    if not values or min(values) < MIN_BUDGET:
        raise ValueError(f"--budgets values must be integers >= {MIN_BUDGET}, got {raw!r}")
    return sorted(set(values))


def slot_bytes(config: Any, itemsize: int) -> tuple[int, int]:
    """Bytes of one token in one layer for a model `config` whose KV is `itemsize`-byte floats: (model dtype K+V,
    INT8 K+V plus their fp32 scales), summed over KV heads."""
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return 2 * heads * dim * itemsize, 2 * heads * (dim + INT8_SCALE_BYTES)


def footprint_slots(config: Any, precision: str) -> tuple[int, int]:
    """`slot_bytes` of a model `config` run at `precision` (a concrete name, not `auto`): the cache stores K and V
    in the precision's activation dtype, the dtype the model is loaded in. The one source of a footprint's element
    size, read before the model loads (free mode) and after (forced mode), so the two modes cannot disagree."""
    from confkv.models.precision import get_precision

    return slot_bytes(config, get_precision(precision).dtype.itemsize)


def at_footprint(policy: KVPolicy, budget: int, slots: tuple[int, int]) -> KVPolicy:
    """`policy` at a footprint of `budget` model-dtype tokens per layer, in bytes (`slots` from `slot_bytes`): an
    INT8 policy keeps its model-dtype window and as many INT8 tokens as the rest of the bytes buy. The footprint
    stands for the fixed baselines' budget, 512 in the presets: a gated policy scales its own `n_low` / `n_high` by
    budget / 512 (confkv's 256 / 512 become half the budget and the budget; `confkv-turn-wide`'s 341 / 683, 2/3 and
    4/3 of it). Protected windows are clamped to half the smallest budget so every budget leaves room to evict."""
    fp, q8 = slots
    gated = policy.gate.gated
    low, high = ((max(1, n * budget // PRESET_BUDGET) for n in (policy.gate.n_low, policy.gate.n_high)) if gated
                 else (budget, budget))  # fmt: skip
    room = max(1, (low - policy.protection.sinks) // 2)
    values: dict[str, Any] = {"protect": min(policy.protection.protect, room)}
    window = policy.storage.int8_after
    if window is not None:
        window = values["int8_after"] = min(window, room)

    def tokens(b: int) -> int:
        return b if window is None or b <= window else window + (b - window) * fp // q8

    if gated:
        values.update(n_high=tokens(high), n_low=tokens(low))
    else:
        values["budget"] = tokens(budget)
    return policy.with_values(**values)


def label_budgets(policies: Mapping[str, KVPolicy], budgets: Sequence[int]) -> list[tuple[str, str, int | None]]:
    """(label, base name, budget) of every row a run of `policies` at `budgets` records: without budgets every
    policy under its own name; with them every evicting policy at every budget (`sliding@128`, `sliding@256`), a
    policy that never evicts (`full`) once, under its own name. The one place labels are spelled, so a plan read
    back from the rows (`traces forced-plan`) names what `eval` writes."""
    out: list[tuple[str, str, int | None]] = []
    for name, policy in policies.items():
        if not budgets or not policy.evicts:
            out.append((name, name, None))
        else:
            out += [(f"{name}@{b}", name, b) for b in budgets]
    return out


def footprint_labels(policies: Mapping[str, KVPolicy], budgets: Sequence[int],
                     slots: tuple[int, int]) -> dict[str, tuple[KVPolicy, str, int | None]]:
    """label -> (policy at its footprint, base name, budget), for the labels of `label_budgets`."""
    return {label: (policies[name] if b is None else at_footprint(policies[name], b, slots), name, b)
            for label, name, b in label_budgets(policies, budgets)}  # fmt: skip
