"""The agent's decoding rules: per verb, the page elements the next reply may not target (and verbs it may not use).

Each rule came from counts over the eval's traces (the docstrings say which) and works through the constrained
grammar (`ActionGrammar(avoid=..., drop=...)`), so a banned choice is never decoded rather than refused after the
fact. Elements are matched by (role, name) across pages, since ids are renumbered when content changes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from agent.actions import FIELD_ROLES, TARGET_VERBS, ActionParseError, parse_action

if TYPE_CHECKING:
    from agent.observation import Observation


def repeat_ban(last_reply: str | None, last_result: str | None, ids: Iterable[int] = ()) -> dict[str, set[int]]:
    """Per verb, the targets the next reply may not use, from the last action alone: its target if it FAILED (rule
    4 of the prompt, enforced); after a successful `type [i] ...` the field [i] for `type`; and after a successful
    *submitted* `type [i] [text] [1]`, every id of the new page (`ids`) for `type`, for this one turn.

    Why: the 1.5B agent's commonest loops on the default task were re-typing the same search into the box it had
    just filled (the results were on the page) and repeating an action that had just failed, until the 5-repeats
    rule ended the episode. In the v4 full-KV eval (run 1), a submitted `type` was followed by another `type` 78
    times out of 102, all in failed episodes (51 times a different text, e.g. the search words again into a price
    filter); in the episodes that passed, the next action was a click on the results. Forms with several fields
    stay possible with `[0]` (no Enter), and every ban here lasts one step.
    """
    if not last_reply or not last_result:
        return {}
    typed = last_result.startswith("OK: type [")
    if not (typed or last_result.startswith("FAILED")):
        return {}
    try:
        action = parse_action(last_reply)
    except ActionParseError:
        return {}
    if not isinstance(action.target, int):
        return {}
    if typed and action.verb == "type" and action.press_enter:
        return {"type": {action.target, *ids}}
    return {action.verb: {action.target}}


def page_bans(tried: set[tuple[str, str, tuple[str, str]]], observation: Observation) -> dict[str, set[int]]:
    """Per verb, the ids of this page that already took that verb from this same URL earlier in the episode.

    Why: the 1.5B agent's commonest failure over a whole episode is a two-step cycle (type the search again, type
    into a filter field, again; or retry a failed choice every other step) that the one-step `repeat_ban` cannot
    see. Doing the same thing to the same element from the same page gives the same page again, so it is never
    progress. Elements are matched by (role, name), not id: ids are renumbered when a page's content changes.
    """
    out: dict[str, set[int]] = {}
    for i, node in observation.nodes.items():
        for verb in TARGET_VERBS:
            if (observation.url, verb, node) in tried:
                out.setdefault(verb, set()).add(i)
    return out


#: Submitted `type`s one field (role, name) takes per episode before `type` into it is banned for the episode.
MAX_SUBMITS_PER_FIELD = 2


def episode_bans(submits: dict[tuple[str, str], int], goto_failed: bool,
                 observation: Observation) -> tuple[dict[str, set[int]], set[str]]:
    """Bans for the rest of the episode: (per verb, the ids of this page it may not take; verbs dropped altogether).
    After a `goto` has FAILED, `goto` is dropped; a field that took `MAX_SUBMITS_PER_FIELD` submitted types (any
    text, from any page) takes no more `type`.

    Why: over the trace DBs of agent versions 4-7 (full KV, 15 steps), not one of the 29 passing episodes used `goto`
    or submitted two types into one field, so neither rule can change a recorded pass; the failing ones did both in
    cycles the per-page and one-step bans cannot see, because the URL changes in between: v7 task 17 spent 14 steps
    alternating `goto` of a 404 URL and of the home page; v7 task 9 typed the same search 5 times, each from another
    category page. Two submits, not one, keep a comparison of two searched products possible.
    """
    avoid: dict[str, set[int]] = {}
    for i, node in observation.nodes.items():
        if node[0] in FIELD_ROLES and submits.get(node, 0) >= MAX_SUBMITS_PER_FIELD:
            avoid.setdefault("type", set()).add(i)
    return avoid, ({"goto"} if goto_failed else set())
