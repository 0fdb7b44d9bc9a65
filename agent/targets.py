"""Element targets by label: the agent writes `click [link 'Cart']`, the executor gets `click [9]`.

Why: given ids, the 1.5B agent often picked the neighbour of the element it meant (see `Observation.labels`). With
labels the constrained grammar offers the page's labels instead of its ids, and these two rewrites keep the rest of
the system on ids: `to_ids` turns the model's reply into the id form the executor, the bans and the traces' `action`
use; `to_labels` turns an id-form action back into what the model writes, for the prompt's examples and for the
results listed in each turn, so the model only ever reads the form it is asked to write.
"""

from __future__ import annotations

import re

from agent.actions import TARGET_VERBS

_TARGET = re.compile(rf"(?m)(^|Action: |OK: |-> )({'|'.join(TARGET_VERBS)}) \[([^\]\n]*)\]")


def to_ids(text: str, labels: dict[int, str]) -> str:
    """Replace each action's label target (`verb [label]`) by its id; anything else is left as written."""
    ids = {label: i for i, label in labels.items()}

    def swap(m: re.Match[str]) -> str:
        target = ids.get(m.group(3))
        return m.group(0) if target is None else f"{m.group(1)}{m.group(2)} [{target}]"

    return _TARGET.sub(swap, text)


def to_labels(text: str, labels: dict[int, str]) -> str:
    """Replace each action's id target (`verb [12]`) by that element's label; ids not on the page stay ids."""

    def swap(m: re.Match[str]) -> str:
        target = m.group(3)
        label = labels.get(int(target)) if target.isdigit() else None
        return m.group(0) if label is None else f"{m.group(1)}{m.group(2)} [{label}]"

    return _TARGET.sub(swap, text)
