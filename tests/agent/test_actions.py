"""The WebArena action grammar: every verb, both target forms, prose tolerance, precise errors, round trips."""

from __future__ import annotations

import pytest

from agent.actions import ACTION_DOCS, VERBS, Action, ActionParseError, RoleTarget, parse_action

CASES = [
    ("click [12]", Action("click", target=12)),
    ("hover [3]", Action("hover", target=3)),
    ("clear [7]", Action("clear", target=7)),
    ("type [7] [blue shoes] [1]", Action("type", target=7, text="blue shoes", press_enter=True)),
    ("type [7] [blue shoes] [0]", Action("type", target=7, text="blue shoes", press_enter=False)),
    ("type [7] [blue shoes]", Action("type", target=7, text="blue shoes", press_enter=True)),
    ("type [7] [a [b] c] [0]", Action("type", target=7, text="a [b] c", press_enter=False)),
    ("press [Control+a]", Action("press", key="Control+a")),
    ("scroll [down]", Action("scroll", direction="down")),
    ("scroll [direction=up]", Action("scroll", direction="up")),
    ("new_tab", Action("new_tab")),
    ("tab_focus [2]", Action("tab_focus", index=2)),
    ("close_tab", Action("close_tab")),
    ("goto [http://127.0.0.1:8001/orders?page=2]", Action("goto", url="http://127.0.0.1:8001/orders?page=2")),
    ("go_back", Action("go_back")),
    ("go_forward", Action("go_forward")),
    ("stop [$25.00]", Action("stop", answer="$25.00")),
    ("stop [N/A]", Action("stop", answer="N/A")),
    ("stop [the answer is [x]]", Action("stop", answer="the answer is [x]")),
    ("stop", Action("stop", answer="")),
    ("click [link 'My Orders']", Action("click", target=RoleTarget("link", "My Orders"))),
    ('click [button "Add to cart"]', Action("click", target=RoleTarget("button", "Add to cart"))),
    ('click [link "Alex\'s page"]', Action("click", target=RoleTarget("link", "Alex's page"))),
    (
        "type [textbox 'Search'] [shoes] [0]",
        Action("type", target=RoleTarget("textbox", "Search"), text="shoes", press_enter=False),
    ),
    ("Click [5]", Action("click", target=5)),
]


@pytest.mark.parametrize(("text", "expected"), CASES, ids=[c[0] for c in CASES])
def test_parses_every_verb_and_round_trips(text: str, expected: Action) -> None:
    action = parse_action(text)
    assert action == expected
    assert parse_action(action.to_text()) == action


def test_every_verb_is_covered_and_documented() -> None:
    assert {a.verb for _, a in CASES} == set(VERBS)
    for verb in VERBS:
        assert verb in ACTION_DOCS


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("Let me think. The search box is [4].\nAction: click [4]", Action("click", target=4)),
        ("In summary, the next action I will perform is ```click [1234]```", Action("click", target=1234)),
        ("I will scroll.\n```\nscroll [down]\n```\nThat should reveal more.", Action("scroll", direction="down")),
        ("```text\ntype [3] [hello] [0]\n```", Action("type", target=3, text="hello", press_enter=False)),
        ("The price is shown. `stop [$12]`", Action("stop", answer="$12")),
        ("- go_back.", Action("go_back")),
        # Reasoning first, conclusion last: the LAST valid line wins.
        ("click [1]\nActually that is wrong.\nclick [2]", Action("click", target=2)),
    ],
)
def test_tolerates_prose_and_fences(reply: str, expected: Action) -> None:
    assert parse_action(reply) == expected


def test_fenced_action_wins_over_prose_lines() -> None:
    assert parse_action("```click [7]```\nclick [9]") == Action("click", target=7)


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ("clik [3]", "unknown verb 'clik'; expected one of click, hover"),
        ("I am not sure what to do here.", "no action found"),
        ("", "empty reply"),
        ("click [abc]", "bad target [abc]"),
        ("click 12", "'click' needs an argument in square brackets"),
        ("click [12", "unclosed '['"),
        ("click [12] now", "unexpected text after the 'click' arguments"),
        ("type [3] hello", "'type' needs the text in square brackets"),
        ("scroll [left]", "scroll direction must be up or down"),
        ("tab_focus [first]", "tab_focus needs a tab number"),
        ("go_back [1]", "'go_back' takes no arguments"),
        ("press []", "'press' needs a key"),
        ("goto []", "'goto' needs a URL"),
        ("stop the task", "'stop' needs its answer in square brackets"),
        ("Thinking about it...\nclik [3]\nI hope this works", "unknown verb 'clik'"),
    ],
)
def test_errors_say_what_was_wrong(reply: str, message: str) -> None:
    with pytest.raises(ActionParseError, match=None) as info:
        parse_action(reply)
    assert message in str(info.value)
