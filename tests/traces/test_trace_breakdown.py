"""`traces.failures` and `traces.breakdown`: failure categories from the pages an episode saw, and the eval cut by
site / difficulty / memory span with step costs, on a real trace store and real task files."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from envs import TASKS_DIR
from envs.taskspec import load_task
from traces.breakdown import breakdown, breakdown_markdown
from traces.failures import classify
from traces.records import StepRecord
from traces.store import TraceStore

MUG = load_task(TASKS_DIR / "shopping_001.yaml")  # string_match: must include 9.95
PET = load_task(TASKS_DIR / "shopping_004.yaml")  # url_match: the Pet Supplies category sorted high to low
HOME = "[3] searchbox 'Search products'\n[5] link 'Pet Supplies'"
RESULTS = "[21] link 'Ironleaf Classic Coffee Mug'\nStaticText '$9.95'"


def _episode(status: str = "done", success: int = 0, **kw: object) -> dict:
    return {"id": 7, "task_id": "1", "policy": "full", "status": status, "success": success, **kw}


def _steps(*pages: tuple[str, str], last: str = "click [3]", urls: list[str] | None = None) -> list[dict]:
    actions = ["click [3]"] * (len(pages) - 1) + [last]
    urls = urls or ["http://127.0.0.1:9/"] * len(pages)
    return [{"observation": obs, "action": act, "raw_output": act, "url": url}
            for (obs, _), act, url in zip(pages, actions, urls, strict=True)]  # fmt: skip


def test_an_answer_never_on_screen_is_navigation() -> None:
    found = classify(MUG, _episode(), _steps((HOME, ""), (HOME, ""), last="stop [$12.00]"))
    assert found is not None and found.category == "navigation" and found.stopped and "'9.95'" in found.detail


def test_an_answer_on_the_last_page_not_taken_is_grounding() -> None:
    found = classify(MUG, _episode(), _steps((HOME, ""), (RESULTS, ""), (RESULTS, ""), last="type [21] [9.95] [1]"))
    assert found is not None and found.category == "grounding" and not found.stopped


def test_an_answer_seen_only_pages_back_is_memory() -> None:
    pages = [(RESULTS, ""), (HOME, ""), (HOME, ""), (HOME, "")]
    found = classify(MUG, _episode(), _steps(*pages, last="stop [$12.00]"))
    assert found is not None and found.category == "memory" and "steps 0" in found.detail


def test_a_right_answer_the_evaluator_rejected_is_format() -> None:
    found = classify(MUG, _episode(eval_reason="x"), _steps((RESULTS, ""), last="stop [the mug costs $9.95]"))
    # a rejected answer that holds the reference is a format failure, whatever the pages showed
    assert found is not None and found.category == "format"


def test_success_and_errors() -> None:
    assert classify(MUG, _episode(success=1), _steps((RESULTS, ""), last="stop [9.95]")) is None
    crashed = classify(MUG, _episode(status="error", error="BrowserCrashed: target closed\ntraceback"), [])
    assert crashed is not None and crashed.category == "error" and crashed.detail == "BrowserCrashed: target closed"


def test_action_tasks_split_on_whether_the_checked_page_was_reached() -> None:
    assert PET.eval.reference_url
    never = classify(PET, _episode(task_id="4"), _steps((HOME, ""), last="stop []"))
    assert never is not None and never.category == "navigation"
    path = PET.eval.reference_url.split("__", 2)[-1]
    there = classify(PET, _episode(task_id="4"), _steps((HOME, ""), (HOME, ""), last="stop []",
                                                        urls=["http://127.0.0.1:9/", f"http://127.0.0.1:9{path}"]))
    assert there is not None and there.category == "grounding"


def _record(store: TraceStore, run: int, task: str, policy: str, success: bool, pages: list[str],
            total: list[int], kv: int, kept: list[int] | None = None) -> None:  # fmt: skip
    ep = store.start_episode(run, task, policy)
    kept = kept or total  # full keeps the whole conversation
    for i, page in enumerate(pages):
        store.add_step(ep, StepRecord(step=i, url="http://127.0.0.1:9/", observation=page, observation_tokens=10,
                                      prefilled_tokens=100, total_tokens=total[i], output_tokens=10,
                                      raw_output="click [3]", action="click [3]", result="OK", parse_error=None,
                                      exec_error=None, kept_tokens_per_layer=[kept[i], kept[i] + 2], kv_bytes=kv,
                                      prefill_ms=1.0, decode_ms=1.0, step_ms=1000.0 * (i + 1)))  # fmt: skip
    store.finish_episode(ep, success=success, score=float(success), eval_reason="r", peak_kv_bytes=kv,
                         full_kv_bytes=4 * kv, wall_s=1.0)  # fmt: skip


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "t.sqlite"
    with TraceStore(path) as store:
        full = store.start_run("m", "full", {"name": "full"})
        conf = store.start_run("m", "confkv", {"name": "confkv"})
        _record(store, full, "1", "full", True, [HOME, RESULTS], [600, 800], 400)
        _record(store, full, "101", "full", False, [HOME, HOME, HOME], [600, 800, 1000], 600)
        _record(store, conf, "1", "confkv", False, [HOME, RESULTS], [600, 800], 100, kept=[600, 500])
        store.fail_episode(store.start_episode(conf, "101", "confkv"), "interrupted (Ctrl-C or SIGTERM)")
    return path


def test_breakdown_groups_costs_and_failures(db: Path) -> None:
    tasks = [MUG, load_task(TASKS_DIR / "classifieds_001.yaml")]
    with TraceStore.open_existing(db) as store:
        data = breakdown(store, tasks)
    assert data["overall"]["full"]["successes"] == 1 and data["overall"]["full"]["episodes"] == 2
    assert data["groups"]["site"]["shopping"]["confkv"]["retention_vs_full"] == 0.0
    assert data["groups"]["site"]["classifieds"]["full"]["success_rate"] == 0.0
    assert data["overall"]["confkv"]["peak_kv_ratio_vs_full"] == pytest.approx(100 / 400)
    costs = data["costs"]["full"]
    assert costs["steps"] == 5 and costs["median_step_s"] == 2.0
    # re-send: the context before each reply (total - output), summed; the cache prefilled 100 per step
    assert costs["mean_resend_tokens"] == pytest.approx(((590 + 790) + (590 + 790 + 990)) / 2)
    assert costs["mean_prefilled_tokens"] == pytest.approx((200 + 300) / 2)
    # attended: kept tokens per step, mean over layers (here layer 2 keeps 2 more), against the logical length
    assert costs["mean_context_tokens"] == pytest.approx((600 + 800 + 600 + 800 + 1000) / 5)
    assert costs["mean_attended_tokens"] == pytest.approx(costs["mean_context_tokens"] + 1)
    conf_costs = data["costs"]["confkv"]
    assert conf_costs["mean_attended_tokens"] == pytest.approx((601 + 501) / 2)
    assert conf_costs["mean_context_tokens"] == 700
    assert "| 551 / 700 |" in breakdown_markdown(data)
    assert data["failures"]["confkv"]["grounding"] == 1  # the price was on its last page
    assert data["failures"]["full"]["navigation"] == 1
    assert "| shopping" not in breakdown_markdown(data) and "| site: shopping |" in breakdown_markdown(data)
    # confkv's task 101 was interrupted: listed as unfinished, not counted as a failed episode
    assert data["overall"]["confkv"]["episodes"] == 1 and "confkv" not in data["groups"]["site"]["classifieds"]
    assert data["unfinished"] == [{"episode_id": 4, "task_id": "101", "policy": "confkv"}]
    assert "Interrupted, not counted (a resume reruns them): 101 confkv (episode 4)" in breakdown_markdown(data)


def test_breakdown_cli(db: Path) -> None:
    result = CliRunner().invoke(app, ["traces", "breakdown", "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert "memory_span: short" in result.output and "episode 3 task 1 confkv: grounding" in result.output
    bad = CliRunner().invoke(app, ["traces", "breakdown", "--db", str(db), "--tasks", str(db.parent / "nope")])
    assert bad.exit_code == 1 and "no such file" in bad.output
