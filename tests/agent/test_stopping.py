"""WebArena stop rules: step limit, consecutive parse failures, identical actions in a row."""

from __future__ import annotations

import pytest

from agent.actions import Action
from agent.stopping import StopRules

A, B = Action("click", target=1), Action("click", target=2)


def test_step_limit() -> None:
    rules = StopRules(max_steps=4)
    reasons = [rules.record(a) for a in (A, B, A, B)]
    assert reasons[:3] == [None, None, None]
    assert reasons[3] == "reached the maximum of 4 steps"


def test_three_parse_failures_in_a_row_stop_but_a_valid_action_resets_them() -> None:
    rules = StopRules()
    assert [rules.record(x) for x in (None, None, A, None, None)] == [None] * 5
    assert rules.record(None) == "3 consecutive replies without a valid action"


def test_five_identical_actions_stop_and_any_other_step_breaks_the_run() -> None:
    rules = StopRules()
    for step in (A, A, A, A, B, A, A, None, A, A, A, A):
        assert rules.record(step) is None
    assert rules.record(A) == "same action repeated 5 times in a row: click [1]"


def test_identical_means_equal_arguments_too() -> None:
    rules = StopRules(max_repeats=2)
    assert rules.record(Action("type", target=3, text="a")) is None
    assert rules.record(Action("type", target=3, text="b")) is None
    assert rules.record(Action("type", target=3, text="b")) is not None


def test_rejects_nonsense_limits() -> None:
    with pytest.raises(ValueError, match="max_steps must be >= 1"):
        StopRules(max_steps=0)
