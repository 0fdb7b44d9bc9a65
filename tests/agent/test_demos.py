"""The demonstration episodes in front of every episode are well-formed: each action parses, names an element of
its own page, and is shown to the model in the form the agent is asked to write (labels or ids)."""

from __future__ import annotations

import pytest

from agent.actions import parse_action
from agent.observation import parse_nodes
from agent.prompt import DEMOS, demo_turns


@pytest.mark.parametrize("demo", DEMOS, ids=lambda d: d.intent[:30])
def test_each_demo_action_targets_an_element_of_its_page(demo):
    for _title, _path, tree, _thought, action in demo.pages:
        parsed = parse_action(action)
        if isinstance(parsed.target, int):
            assert parsed.target in parse_nodes(tree), f"{action!r} names no element of its page"
    assert parse_action(demo.pages[-1][4]).verb == "stop"  # each demo ends with the answer


@pytest.mark.parametrize("labels", [True, False])
def test_demo_turns_alternate_and_write_targets_as_asked(labels):
    turns = demo_turns(labels=labels)
    assert [m["role"] for m in turns] == ["user", "assistant"] * sum(len(d.pages) for d in DEMOS)
    clicks = [m["content"] for m in turns if m["role"] == "assistant" and m["content"].startswith("click")]
    assert clicks and all(("'" in c) == labels for c in clicks)
    intents = [m["content"].splitlines()[0] for m in turns if m["role"] == "user"]
    assert {f"Task: {d.intent}" for d in DEMOS} == set(intents)
    # each demo starts its own history: its first turn lists no previous actions
    firsts = [m["content"] for m in turns if m["role"] == "user" and "Step 1." in m["content"]]
    assert len(firsts) == len(DEMOS) and not any("previous actions" in f for f in firsts)
