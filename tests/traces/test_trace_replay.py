"""Terminal replay: every step's action and errors are shown and budget expansions are marked."""

from __future__ import annotations

import pytest
from rich.console import Console

from traces.replay import EXPANSION_MARK, budget_expansions, downsample, replay, sparkline
from traces.store import TraceStore, TraceStoreError


def render(store: TraceStore, episode_id: int, **kwargs) -> str:
    console = Console(record=True, width=140)
    replay(store, episode_id, console, **kwargs)
    return console.export_text()


def test_replay_shows_header_actions_errors_and_expansions(populated):
    ep = populated["episodes"][("confkv", "shop-1")]
    n_low, n_high = populated["budgets"]
    with TraceStore.open_existing(populated["path"]) as store:
        text = render(store, ep)
    assert "task shop-1" in text and "policy confkv" in text and "success" in text
    assert "peak KV 2.93 KiB (25% of full 11.7 KiB)" in text
    for step in range(3):
        assert f"action click [{step + 3}]" in text  # ids in brackets survive (no rich markup parsing)
        assert f"url http://127.0.0.1:8000/shop-1/{step}" in text
    assert "exec error element 99 not found" in text
    # confidences 0.9, 0.3, 0.95, 0.2 ...: budget expands on the token after each low-confidence one
    assert f"budget {n_low} -> {n_high} after confidence 0.30" in text
    assert f"budget {n_low} -> {n_high} after confidence 0.20" in text
    mark_lines = [line for line in text.splitlines() if "expansions " in line]
    assert len(mark_lines) == 3 and all(EXPANSION_MARK in line for line in mark_lines)
    assert "… 18 more lines (--full-observation shows all)" in text  # 30-line observation, 12 shown


def test_single_step_and_full_observation(populated):
    ep = populated["episodes"][("full", "forum-1")]
    with TraceStore.open_existing(populated["path"]) as store:
        one = render(store, ep, step=1, full_observation=True)
        with pytest.raises(TraceStoreError, match=r"has no step 7 \(steps: 0, 1, 2\)"):
            render(store, ep, step=7)
    assert "action click [4]" in one
    assert "click [3]" not in one and "click [5]" not in one
    assert "[29] link 'item 29'" in one and "more lines" not in one


def test_observation_text_is_not_interpreted_as_markup(db_path):
    with TraceStore(db_path) as store:
        ep = store.start_episode(store.start_run("m", "full"), "t")
        store.add_step(ep, step=0, observation="[bold]Sale[/bold] [red]", action="type [3] [hello] [1]")
        store.finish_episode(ep, success=False)
        text = render(store, ep)
    assert "[bold]Sale[/bold] [red]" in text and "type [3] [hello] [1]" in text
    assert "no decoding tokens recorded" in text


def test_sparkline_downsample_and_expansion_detection():
    assert sparkline([0.0, 0.5, 1.0], 0.0, 1.0) == "▁▅█"
    assert sparkline([3, 3, 3]) == "▄▄▄"
    assert sparkline([]) == ""
    assert downsample(list(range(10)), 5, max) == [1, 3, 5, 7, 9]
    assert downsample([1, 2], 5, max) == [1, 2]
    tokens = [
        {"token_index": i, "token_text": str(i), "confidence": c, "budget": b}
        for i, (c, b) in enumerate([(0.9, 64), (0.1, 64), (0.8, 256), (0.9, 64), (0.2, 128)])
    ]
    found = budget_expansions(tokens)
    assert [(e.token_index, e.before, e.after) for e in found] == [(2, 64, 256), (4, 64, 128)]
    assert found[0].trigger_confidence == 0.1
    # the first token expands against the previous step's last budget; the trigger is then unknown here
    first = budget_expansions(tokens, previous_budget=32)[0]
    assert (first.token_index, first.before, first.trigger_confidence) == (0, 32, None)


# The sequences a hostile page, intent or answer might carry: retitle the window, red background, clear the screen,
# and the one-byte C1 CSI (U+009B) some terminals obey too.
ESCAPES = ("\x1b]0;pwned\x07", "\x1b[41m", "\x1b[2J", "\x9b31m")


def test_escape_sequences_in_pages_actions_and_answers_are_shown_not_sent(db_path):
    import io

    hostile = "".join(ESCAPES)
    with TraceStore(db_path) as store:
        ep = store.start_episode(store.start_run("m", "full"), "t")
        store.add_step(ep, step=0, url=f"http://127.0.0.1:1/{hostile}", observation=f"[1] heading '{hostile}'",
                       raw_output=f"x stop [{hostile}]", action=f"stop [{hostile}]", result=f"OK: {hostile}")
        store.finish_episode(ep, success=False, eval_reason=f"must_include '1' not found in answer '{hostile}'")
        out = io.StringIO()
        replay(store, ep, Console(file=out, force_terminal=True, width=400))  # a real terminal: styles are on
    text = out.getvalue()
    for seq in ESCAPES:
        assert seq not in text  # none reaches the terminal raw ...
    assert "\\x1b]0;pwned\\x07\\x1b[41m\\x1b[2J\\x9b31m" in text  # ... each is shown, visibly, where it was
    assert text.count("\\x1b]0;pwned") >= 5  # url, page, model output, action and the evaluator's reason
