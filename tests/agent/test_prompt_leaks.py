"""The agent's prompt holds no entity or answer of the evaluated suite (issue 9: the first few-shot example was
task 1 with its answer, which scored a success the agent never earned)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.prompt import demo_turns, system_prompt
from envs.leaks import find_leaks, suite_strings, task_strings
from envs.taskspec import load_task, load_tasks

TASKS = Path(__file__).resolve().parents[2] / "tasks"


@pytest.fixture(scope="module")
def strings():
    return suite_strings(load_tasks(TASKS))


@pytest.mark.parametrize("reasoning", [False, True])
def test_system_prompt_contains_no_task_entity_or_answer(strings, reasoning):
    assert find_leaks(system_prompt(reasoning), strings) == []
    demo = "\n".join(m["content"] for m in demo_turns(reasoning))  # the demonstration episode's turns too
    assert "Velvet Fern" in demo and find_leaks(demo, strings) == []


def test_no_demonstration_in_the_prompt_module_leaks(strings):
    """Every demonstration the module defines is checked, in DEMOS or not: none may show an answer."""
    import agent.prompt as prompt

    demos = tuple(v for v in vars(prompt).values() if isinstance(v, prompt.Demo))
    assert set(prompt.DEMOS) <= set(demos)
    text = "\n".join(m["content"] for m in demo_turns(demos=demos))
    assert find_leaks(text, strings) == []


def test_the_checker_flags_the_old_few_shot_example(strings):
    old = 'Task: "What is the price of the Ironleaf mug?" Page shows `[22] StaticText \'$9.95\'` -> stop [$9.95]'
    assert find_leaks(old, strings) == ["9.95", "Ironleaf"]


def test_task_strings_cover_answers_typed_texts_and_quoted_intent():
    task = load_task(TASKS / "forum_010.yaml")
    found = task_strings(task)
    assert {"rain barrel", "10"} <= found
    mug = task_strings(load_task(TASKS / "shopping_001.yaml"))
    assert {"9.95", "Ironleaf Classic Coffee Mug"} <= mug


def test_whole_matches_only(strings):
    assert find_leaks("costs $19.95 in total", {"9.95"}) == []
    assert find_leaks("costs $9.95.", {"9.95"}) == ["9.95"]
    assert find_leaks("the IRONLEAF brand", {"Ironleaf"}) == ["Ironleaf"]


def test_each_turn_lists_the_previous_actions_compactly():
    from agent.observation import Observation
    from agent.prompt import MAX_HISTORY, user_message

    obs = Observation(text="[1] link 'a'", url="http://x/", title="t", tabs=["t"], active_tab=0)
    first = user_message("find it", obs, None, 0, [])
    assert "previous actions" not in first and first.index("Task: find it") < first.index("Current page")
    history = [f"OK: click [{i}]" for i in range(MAX_HISTORY + 3)]
    text = user_message("find it", obs, history[-1], len(history), history)
    assert "(3 earlier ones not shown)" in text and "4. OK: click [3]" in text
    assert f"{MAX_HISTORY + 3}. OK: click [{MAX_HISTORY + 2}]" in text and "click [2]" not in text
