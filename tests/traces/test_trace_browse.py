"""The trace browser: its pure data (episode series, filters, alignment) and the Textual app driven headless."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.traces.conftest import decode_rows
from traces.browse_data import filter_episodes, parse_filter, partner
from traces.episode_plot import align_by_step, episode_series, layer_strip
from traces.records import PrefillChunk, StepRecord
from traces.store import TraceStore

CONFIDENCES = [[0.9, 0.3, 0.95, 0.2], [0.8, 0.9, 0.4], [0.9, 0.9]]


def _record(store: TraceStore, run_id: int, task: str, n_steps: int, success: bool, layers: list[int]) -> int:
    """An episode written the way `run_episode` writes one: prefill chunks, decode tokens, then the step row."""
    ep = store.start_episode(run_id, task)
    for step in range(n_steps):
        chunks = [PrefillChunk(0, 512, 0.6, 512, 300, 3000), PrefillChunk(1, 88, 0.7, 256, 256, 2560)] if step == 0 \
            else [PrefillChunk(0, 120, 0.2, 512, 256, 2560)]  # fmt: skip
        store.add_prefill_chunks(ep, step, chunks)
        store.add_decode_tokens(ep, step, decode_rows(CONFIDENCES[step]))
        store.add_step(ep, StepRecord(step=step, url=f"http://127.0.0.1:1/{task}/{step}",
                                      observation=f"[1] RootWebArea 'page {step}'\n[2] button 'Go {step}'",
                                      prefilled_tokens=sum(c.tokens for c in chunks), raw_output=f"click [{step + 2}]",
                                      action=f"click [{step + 2}]", result=f"OK: click [{step + 2}]",
                                      exec_error="element 99 not found" if step == 1 else None,
                                      kept_tokens_per_layer=[k * (step + 1) for k in layers]))  # fmt: skip
    store.finish_episode(ep, success=success)
    return ep


@pytest.fixture
def browse_db(tmp_path: Path) -> dict[str, object]:
    path = tmp_path / "traces.sqlite"
    with TraceStore(path) as store:
        full = store.start_run("tiny", "full", {})
        pyramid = store.start_run("tiny", "confkv-pyramid", {"pyramid": True})
        ids = {
            "full": _record(store, full, "shop-1", 3, True, [100, 100, 100]),
            "pyramid": _record(store, pyramid, "shop-1", 2, False, [40, 80, 120]),
            "other": _record(store, full, "forum-1", 1, True, [100, 100, 100]),
        }
    return {"path": path, "ids": ids}


def test_series_puts_prefill_chunks_and_decode_tokens_on_one_axis(browse_db) -> None:
    with TraceStore.open_existing(browse_db["path"]) as store:
        ep = browse_db["ids"]["full"]
        s = episode_series(store.steps(ep), store.prefill_chunks(ep), store.decode_tokens(ep))
    # step 0: chunks end at 512 and 600, then 4 decoded tokens 601..604; step 1: chunk to 724, tokens 725..727 ...
    assert s.x[:6] == [512, 600, 601, 602, 603, 604]
    assert s.kind[:6] == ["prefill", "prefill", "decode", "decode", "decode", "decode"]
    assert s.step_starts == [(0, 0), (1, 604), (2, 727)]
    assert s.x[6] == 724 and s.confidence[6] == 0.2 and s.x[-1] == 727 + 120 + 2
    assert len(s) == 2 + 4 + 1 + 3 + 1 + 2
    # gate openings: every point whose budget is larger than the previous point's
    expected = [(x, a, b) for x, a, b in zip(s.x[1:], s.budget, s.budget[1:], strict=False) if b > a]
    assert s.gate_openings == expected and (603, 128, 512) in s.gate_openings  # decode: conf 0.3 -> n_high
    assert (724, 128, 512) in s.gate_openings  # step 1's prefill chunk raised the budget again


def test_series_without_chunk_rows_still_places_steps_by_prefilled_tokens() -> None:
    steps = [{"step": 0, "prefilled_tokens": 300}, {"step": 1, "prefilled_tokens": 50}]
    tokens = [{"step": s, "token_index": i, "confidence": 0.5, "budget": 10, "kept_tokens": 5}
              for s in (0, 1) for i in range(2)]  # fmt: skip
    s = episode_series(steps, [], tokens)
    assert s.x == [301, 302, 353, 354] and s.step_starts == [(0, 0), (1, 302)] and s.gate_openings == []


def test_filters_alignment_partner_and_layer_strip(browse_db) -> None:
    with TraceStore.open_existing(browse_db["path"]) as store:
        episodes = store.episodes()
        steps_full, steps_pyr = store.steps(browse_db["ids"]["full"]), store.steps(browse_db["ids"]["pyramid"])
    assert parse_filter("policy:full shop") == {"policy": ["full"], "task": ["shop"]}
    with pytest.raises(ValueError, match="unknown filter 'model:'"):
        parse_filter("model:x")
    assert [e["id"] for e in filter_episodes(episodes, "outcome:failure")] == [browse_db["ids"]["pyramid"]]
    assert [e["task_id"] for e in filter_episodes(episodes, "policy:full")] == ["shop-1", "forum-1"]
    pairs = align_by_step(steps_full, steps_pyr)
    assert [(a["step"], b and b["step"]) for a, b in pairs] == [(0, 0), (1, 1), (2, None)]
    pyr = next(e for e in episodes if e["id"] == browse_db["ids"]["pyramid"])
    assert partner(episodes, pyr)["id"] == browse_db["ids"]["full"]
    assert partner(episodes, next(e for e in episodes if e["task_id"] == "forum-1")) is None
    strip = layer_strip(steps_pyr)
    assert [(layer, last) for layer, _, last in strip] == [(0, 80), (1, 160), (2, 240)]
    assert [blocks for _, blocks, _ in strip] == ["▂▃", "▃▆", "▅█"]  # one block per step, shared scale 0..240


def _text(widget) -> str:
    return str(widget.render())


def test_app_navigates_episodes_steps_and_side_by_side(browse_db) -> None:
    from textual.widgets import DataTable, Input, Static

    from traces.browse import EpisodePlot, SideBySide, TraceBrowser

    ids = browse_db["ids"]

    async def scenario() -> None:
        app = TraceBrowser(str(browse_db["path"]))
        async with app.run_test(size=(180, 60)) as pilot:
            episodes = app.query_one("#episodes", DataTable)
            steps = app.query_one("#steps", DataTable)
            assert episodes.row_count == 3 and steps.row_count == 3  # first episode (full, 3 steps) selected
            assert "click [2]" in _text(app.query_one("#detail", Static))
            plot = app.query_one("#plot", EpisodePlot)
            assert app.view.series.x[:2] == [512, 600] and not app.query_one("#layers", Static).display
            assert "confidence" in _text(plot) and "tokens through the episode" in _text(plot)
            await pilot.press("t", "down")  # the step list, step 1
            detail = _text(app.query_one("#detail", Static))
            assert "action: click [3]" in detail and "error:  element 99 not found" in detail
            assert "button 'Go 1'" in detail
            await pilot.press("e", "down")  # the pyramid episode: 2 steps, per-layer strip shown
            assert app.view.episode["id"] == ids["pyramid"] and steps.row_count == 2
            layers = app.query_one("#layers", Static)
            assert layers.display and "L02" in _text(layers) and _text(layers).rstrip().endswith("240")
            await pilot.press("s")
            await pilot.pause()
            screen = app.screen
            assert isinstance(screen, SideBySide)
            aligned = screen.query_one("#aligned", DataTable)
            assert aligned.row_count == 3
            assert [str(c) for c in aligned.get_row_at(2)] == ["2", "", "", "click [4]", "0.90"]
            assert "click [2]" in _text(screen.query_one("#left-step", Static))
            await pilot.press("down", "down")
            assert "episode had ended" in _text(screen.query_one("#left-step", Static))
            assert "click [4]" in _text(screen.query_one("#right-step", Static))
            await pilot.press("escape", "slash")
            assert app.focused is app.query_one("#filter", Input)
            await pilot.press(*"forum", "enter")
            assert episodes.row_count == 1 and app.view.episode["id"] == ids["other"]
            await pilot.press("s")
            assert not isinstance(app.screen, SideBySide)  # nothing to compare with: a notice, no screen
            await pilot.press("q")

    asyncio.run(scenario())


def test_browse_on_a_missing_database_is_a_one_line_error(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from cli.main import app

    result = CliRunner().invoke(app, ["traces", "browse", "--db", str(tmp_path / "nope.sqlite")])
    assert result.exit_code == 1 and "no trace database at" in result.output


# What the agent really writes (its grammar is brackets) and what a hostile page, answer or model can hold: console
# markup that closes tags it never opened, a link tag, and terminal escapes (retitle, red background, clear screen).
MARKUP = "[/] [link=http://evil.example]x[/link] [/bold]"
ESCAPES = "\x1b]0;pwned\x07 \x1b[41m \x1b[2J"
HOSTILE_STEPS = [
    "type [3] [Ironleaf Classic Coffee Mug] [1]",
    "click [link 'Cart']",
    f"stop [{MARKUP} {ESCAPES}]",
]


@pytest.fixture
def hostile_db(tmp_path: Path) -> Path:
    path = tmp_path / "traces.sqlite"
    with TraceStore(path) as store:
        ep = store.start_episode(store.start_run("tiny", "full", {}), "shop-1")
        for step, action in enumerate(HOSTILE_STEPS):
            store.add_step(ep, StepRecord(step=step, url=f"http://127.0.0.1:1/{step}", raw_output=action, action=action,
                                          observation=f"[1] RootWebArea 'Sale {MARKUP}'\n[2] StaticText '{ESCAPES}'",
                                          result=f"OK: {action}", exec_error=f"odd {MARKUP}" if step == 1 else None))
        store.finish_episode(ep, success=False, eval_reason=f"must_include '9.95' not found in answer '{MARKUP}'")
    return path


def test_app_shows_markup_and_escapes_in_actions_answers_and_pages_literally(hostile_db: Path) -> None:
    from textual.widgets import DataTable, Input, Static

    from traces.browse import TraceBrowser

    shown_escapes = "\\x1b]0;pwned\\x07 \\x1b[41m \\x1b[2J"

    def rows(table: DataTable) -> list[str]:  # what the table draws (header line first), not what it was given
        return [table.render_line(y).text for y in range(table.row_count + 1)]

    async def scenario() -> None:
        app = TraceBrowser(str(hostile_db))
        async with app.run_test(size=(400, 60), notifications=True) as pilot:  # wide: every column of the steps
            steps = app.query_one("#steps", DataTable)
            drawn = "\n".join(rows(steps))
            assert "type [3] [Ironleaf Classic Coffee Mug] [1]" in drawn and "click [link 'Cart']" in drawn
            assert "odd [/] [link=http://evil.example]x[/lin" in drawn  # the error column: 40 characters
            detail = _text(app.query_one("#detail", Static))
            assert f"not found in answer '{MARKUP}'" in detail  # the evaluator's reason quotes the answer
            assert "action: type [3] [Ironleaf Classic Coffee Mug] [1]" in detail
            assert f"RootWebArea 'Sale {MARKUP}'" in detail and shown_escapes in detail and "\x1b" not in detail
            await pilot.press("t", "down", "down")  # the answer step
            detail = _text(app.query_one("#detail", Static))
            assert f"action: stop [{MARKUP} {shown_escapes}]" in detail and "\x1b" not in detail
            await pilot.press("slash", *"[/]:x")  # a filter that is itself markup: a notice, not a crash
            await pilot.pause()
            assert app.query_one("#filter", Input).value == "[/]:x" and app.is_running
            await pilot.press("q")

    asyncio.run(scenario())
