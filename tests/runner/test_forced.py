"""`eval --mode forced` end to end on a tiny random model: real sites, real browser, real trace store.

What must hold whatever the weights: `full` against itself has ΔNLL exactly 0 (the same trajectory, the same
cache); a cache that keeps only the sinks (plus the pinned system prompt and current turn) of a long-memory task
has dropped the pages the answer was read from, so the answer is scored differently (ΔNLL != 0). The SIGN of that
ΔNLL is a property of the model, not of the cache: a random model gains nothing from context (measured on this
task: -0.005 nats/token), so ΔNLL > 0 is checked with a real model in docs/results/forced-smoke.md, not here.
A reference step that fails marks the task broken with the step's error, not a score; a second run over the same
database scores nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from agent.actions import parse_action
from cli.main import app
from confkv.policies import get_policy
from confkv.testing import tiny_chat_tokenizer, tiny_model
from envs.taskspec import load_task
from runner.footprint import at_footprint, footprint_slots
from runner.forced import ForcedSpec, forced_specs, run_forced, same_action
from traces.forced import forced_rows, summarize_forced
from traces.forced_compare import head_to_head
from traces.forced_dropped import decision_memory, dropped_lines
from traces.store import TraceStore

TASKS = Path(__file__).resolve().parents[2] / "tasks"


@pytest.fixture(scope="module")
def tiny():
    model, _ = tiny_model("qwen2", max_position_embeddings=65536)
    return model, tiny_chat_tokenizer()


def test_budgets_are_matched_in_bytes(tiny):
    model, _ = tiny
    slots = footprint_slots(model.config, "fp32")
    fp = 2 * 2 * 16 * 4  # K+V, 2 KV heads, head dim 16, fp32
    q8 = 2 * 2 * (16 + 4)  # int8 K+V plus an fp32 scale each
    conf = at_footprint(get_policy("confkv"), 256, slots)
    window = conf.int8_after
    assert window * fp + (conf.n_high - window) * q8 <= 256 * fp < window * fp + (conf.n_high + 1 - window) * q8
    assert conf.n_low < conf.n_high and conf.min_layer_budget <= conf.n_low
    assert at_footprint(get_policy("sliding"), 256, slots).budget == 256  # no INT8: tokens = budget
    h2o = at_footprint(get_policy("h2o"), 128, slots)  # the preset's 256-token window would not fit
    assert h2o.budget == 128 and h2o.protect < 128
    # with confkv's storage a fixed baseline holds exactly confkv-fixed's tokens, INT8 window and all
    fixed = at_footprint(get_policy("confkv-fixed"), 256, slots)
    for name in ("sliding-int8", "h2o-int8", "random-int8"):
        mine = at_footprint(get_policy(name), 256, slots)
        assert (mine.budget, mine.int8_after, mine.gated) == (fixed.budget, fixed.int8_after, False)
    assert fixed.budget > 256  # INT8 tokens past the window: more tokens than the model-dtype budget
    # the turn gate matched on average: an unsure turn keeps more than the fixed budget, a sure one less, and a gate
    # open on half the turns holds the fixed budget's bytes
    def nbytes(tokens: int, window: int) -> int:
        return window * fp + (tokens - window) * q8

    wide = at_footprint(get_policy("confkv-turn-wide"), 256, slots)
    low, high = nbytes(wide.n_low, wide.int8_after), nbytes(wide.n_high, wide.int8_after)
    assert low < nbytes(fixed.budget, fixed.int8_after) < high
    assert abs((low + high) / 2 - 256 * fp) <= 0.01 * 256 * fp
    turn = at_footprint(get_policy("confkv-turn"), 256, slots)  # peak-matched: at most the fixed budget's bytes
    assert (turn.n_high, turn.n_low) == (conf.n_high, conf.n_low)
    assert nbytes(turn.n_high, turn.int8_after) <= 256 * fp < nbytes(turn.n_high + 1, turn.int8_after)
    labels = [s.label for s in forced_specs({"full": get_policy("full"), "sliding": get_policy("sliding")}, [128, 256],
                                            slots)]  # fmt: skip
    assert labels == ["full", "sliding@128", "sliding@256"]


@pytest.mark.parametrize("kv", [(2, 16), (2, 128)], ids=["tiny", "qwen2.5-1.5b"])
def test_a_closed_gate_is_the_fixed_ranker_at_half_the_footprint(kv):
    """Why the frontier's `confkv@180` decides exactly as `confkv-fixed@90` on agent traffic, where the forward gate
    never opens: a closed gate runs at `n_low`, which `at_footprint` sets to half the footprint's tokens, and every
    other part (ranker, sinks, protected window, INT8 window) is the same."""
    heads, dim = kv
    config = SimpleNamespace(num_key_value_heads=heads, head_dim=dim, num_attention_heads=4 * heads,
                             hidden_size=4 * heads * dim)  # fmt: skip
    slots = footprint_slots(config, "fp32")
    for budget in (90, 180, 360):
        gated = at_footprint(get_policy("confkv"), 2 * budget, slots)
        fixed = at_footprint(get_policy("confkv-fixed"), budget, slots)
        assert gated.gated and not fixed.gated
        assert gated.n_low == fixed.budget < gated.n_high
        assert (gated.ranking, gated.protection, gated.storage) == (fixed.ranking, fixed.protection, fixed.storage)


def test_forced_mode_end_to_end(tiny, tmp_path):
    from envs.server import Sites

    model, tok = tiny
    long_task = load_task(TASKS / "shopping_015.yaml", parse_step=parse_action)
    assert long_task.memory_span == "long"
    broken = long_task.model_copy(update={"task_id": 98, "reference_solution": ["click [link 'No such link']",
                                                                                "stop [x]"]})
    sinks_only = get_policy("sliding", {"budget": "5", "sinks": "4", "protect": "0"})
    specs = [ForcedSpec("full", get_policy("full"), "full"), ForcedSpec("sinks", sinks_only, "sliding", 5)]
    seen: list[dict] = []
    with Sites(["shopping"], workdir=tmp_path / "sites") as sites, TraceStore(tmp_path / "t.sqlite") as store:
        run_forced([long_task, broken], specs, model, tok, "tiny", store, sites, on_result=seen.append)
        rows = forced_rows(store.db)
        # cheapest first (traces.forced_plan.cheapest_first): the 2-step task before the 7-step one given first
        assert [(r["task_id"], r["status"]) for r in seen] == [(98, "broken")] * 2 + [(15, "done")] * 2
        assert "step 1 \"click [link 'No such link']\" failed" in seen[0]["reason"]
        summary = summarize_forced(rows)
        full, sinks = summary["full"], summary["sinks"]
        assert full.answer_dnll_long == 0.0 and full.action_dnll == 0.0 and full.paired == 1
        assert sinks.paired == 1 and sinks.answer_dnll_long != 0
        assert sinks.peak_kv_vs_full < 0.7 and full.broken == 1
        by_policy = {r["policy"]: r for r in rows if not r["broken"]}
        assert by_policy["full"]["answer_tokens"] == len(tok("Maplewood Insulated Bike Helmet, $154.00").input_ids)
        assert by_policy["full"]["greedy_answer"] is not None and by_policy["full"]["steps"] == 7
        episode = by_policy["full"]["episode_id"]
        recorded = store.steps(episode)
        assert recorded[0]["action"].startswith("click [")  # ids, as the agent writes
        # the model saw the site at its canonical origin, not the port this process's server took
        assert all(s["url"].startswith("http://127.0.0.1:7770/") for s in recorded)
        assert sites.url("shopping") not in recorded[0]["observation"]
        assert store.summary().policies == {}  # forced runs stay out of the free-running table
        seen.clear()
        run_forced([long_task], specs, model, tok, "tiny", store, sites, on_result=seen.append)
        assert seen == []  # resumed: everything finished is skipped
        from traces.report import write_report

        assert tmp_path / "rep" / "forced_frontier.png" in write_report(store, tmp_path / "rep")
    result = CliRunner().invoke(app, ["traces", "summary", "--db", str(tmp_path / "t.sqlite"), "--json"])
    assert result.exit_code == 0, result.output
    forced = json.loads(result.output)["forced"]
    assert forced["mode"] == "forced" and forced["policies"]["full"]["answer_dnll_long"] == 0.0
    assert forced["policies"]["sinks"]["broken"] == 1


class _InterruptedBrowser:
    """A browser session interrupted as it opens: the reference replay's except path without a real Playwright (an
    interrupt inside a real one drops its driver for good, and the later tests in this process need one)."""

    def __init__(self, *args, **kwargs):
        pass

    def __enter__(self):
        raise KeyboardInterrupt

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("where", ["scoring", "replay"])
def test_an_interrupt_releases_every_claim_of_the_task_at_once(tiny, tmp_path, monkeypatch, where):
    """Ctrl-C or SIGTERM while the first policy of a task is scored, or while its reference is replayed, closes
    every claim of the task as interrupted (not broken: it is owed again), so another process (on another host too)
    takes them up at once, not after their lease lapses."""
    import runner.browser
    import runner.forced
    from envs.server import Sites

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    if where == "scoring":
        monkeypatch.setattr(runner.forced, "score_trajectory", interrupted)
    else:
        monkeypatch.setattr(runner.browser, "BrowserSession", _InterruptedBrowser)
    model, tok = tiny
    task = load_task(TASKS / "shopping_003.yaml", parse_step=parse_action)
    specs = [ForcedSpec("full", get_policy("full"), "full"), ForcedSpec("sliding", get_policy("sliding"), "sliding")]
    with Sites(["shopping"], workdir=tmp_path / "sites") as sites, TraceStore(tmp_path / "t.sqlite") as store:
        seen: list[dict] = []
        with pytest.raises(KeyboardInterrupt):
            run_forced([task], specs, model, tok, "tiny", store, sites, on_result=seen.append)
        assert seen == []  # nothing reported as broken
        rows = list(store.db.query("select policy, status, error from episodes order by id"))
    assert [(r["policy"], r["status"]) for r in rows] == [("full", "error"), ("sliding", "error")]
    assert all(r["error"] == "interrupted (Ctrl-C or SIGTERM)" for r in rows)


def test_a_drain_finishes_the_task_in_flight_then_leaves_the_rest_pending(tiny, tmp_path):
    """SIGUSR1 during a task's first label: its other labels are still scored (a task's labels come from one code),
    the next task is not begun, and a rerun takes it up."""
    from envs.server import Sites
    from runner import interrupts

    model, tok = tiny
    tasks = [load_task(TASKS / f"shopping_{n:03d}.yaml", parse_step=parse_action) for n in (3, 11)]
    specs = [ForcedSpec("full", get_policy("full"), "full"), ForcedSpec("sliding", get_policy("sliding"), "sliding")]
    seen: list[dict] = []

    def drain_at_once(result: dict) -> None:
        seen.append(result)
        interrupts.on_drain(10, None)

    try:
        with Sites(["shopping"], workdir=tmp_path / "sites") as sites, TraceStore(tmp_path / "t.sqlite") as store:
            run_forced(tasks, specs, model, tok, "tiny", store, sites, on_result=drain_at_once)
            first = seen[0]["task_id"]
            assert [(r["task_id"], r["policy"], r["status"]) for r in seen] == [(first, "full", "done"),
                                                                               (first, "sliding", "done")]
            interrupts.clear_drain()
            seen.clear()
            run_forced(tasks, specs, model, tok, "tiny", store, sites, on_result=seen.append)
            assert {r["task_id"] for r in seen} == {t.task_id for t in tasks} - {first} and len(seen) == 2
    finally:
        interrupts.clear_drain()


def test_forced_decisions_agree_with_full_only_where_the_cache_keeps_the_pages(tiny, tmp_path):
    """The agent's own decision at every reference step: `full` run twice decides identically at every step (the
    fork leaves the cache it decides on untouched); a cache of the sinks alone on a task whose answer sits pages
    back decides differently somewhere. Decisions are labels, as the live agent writes them."""
    from envs.server import Sites

    model, tok = tiny
    long_task = load_task(TASKS / "shopping_015.yaml", parse_step=parse_action)
    sinks_only = get_policy("sliding", {"budget": "5", "sinks": "4", "protect": "0"})
    turn = get_policy("confkv-turn", {"n_low": "12", "n_high": "24", "protect": "4", "int8_after": "4", "tau": "0.9"})
    specs = [ForcedSpec("full", get_policy("full"), "full"), ForcedSpec("full-again", get_policy("full"), "full"),
             ForcedSpec("sinks", sinks_only, "sliding", 5), ForcedSpec("turn", turn, "confkv-turn")]  # fmt: skip
    with Sites(["shopping"], workdir=tmp_path / "sites") as sites, TraceStore(tmp_path / "t.sqlite") as store:
        run_forced([long_task], specs, model, tok, "tiny", store, sites)
        rows = forced_rows(store.db)
        by_policy = {r["policy"]: r for r in rows}
        decisions = {p: json.loads(r["decisions"]) for p, r in by_policy.items()}
        assert len(decisions["full"]) == by_policy["full"]["steps"] == 7
        episode = by_policy["full"]["episode_id"]
        steps = store.steps(episode)
        assert all(s["raw_output"] for s in steps)  # the decision as written (labels), beside the forced action
        same = [same_action(d, s["action"]) for d, s in zip(decisions["full"], steps, strict=True)]
        assert by_policy["full"]["decision_acc"] == sum(same) / len(same)
        chosen = json.loads(by_policy["full"]["decision_confidences"])  # one list per step, one value per token
        assert len(chosen) == 7 and all(chosen) and all(0.0 <= c <= 1.0 for step in chosen for c in step)
        assert json.loads(by_policy["full-again"]["decision_confidences"]) == chosen
        # The turn gate's open rate is recorded, and it is its rule applied to the decisions it was told about.
        minima = [min(step) for step in json.loads(by_policy["turn"]["decision_confidences"])]
        assert by_policy["turn"]["gate_open_rate"] == pytest.approx(sum(m < 0.9 for m in minima) / len(minima))
        assert by_policy["full"]["gate_open_rate"] is None  # ungated
    summary = summarize_forced(rows)
    assert summary["full-again"].decision_agreement == 1.0 and summary["full-again"].decision_agreement_ci == (1.0, 1.0)
    assert summary["full-again"].decision_acc == summary["full"].decision_acc
    assert summary["sinks"].decision_agreement < 1.0
    assert 0.0 <= summary["sinks"].decision_acc <= 1.0
    memory = decision_memory(rows)  # each earlier turn's resident share at each decision, beside full's decision
    full_again = [m for m in memory if m["policy"] == "full-again"]
    assert len(full_again) == 6 and all(m["shares"] == [1.0] * m["step"] and not m["lost"] for m in full_again)
    sinks = [m for m in memory if m["policy"] == "sinks"]
    assert all(m["least"] < 0.05 for m in sinks) and any(m["lost"] for m in sinks)  # the pages were gone
    assert "| sinks |" in "\n".join(dropped_lines(rows))
    versus = head_to_head(rows, "full-again", "sinks")  # the head-to-head table's arithmetic on real rows
    assert versus.tasks == 1 and versus.d_agreement == 1.0 - summary["sinks"].decision_agreement > 0
    assert versus.verdict == "too few tasks (1 < 5)" and versus.kv_ratio > 1  # one task: no verdict


@pytest.mark.parametrize("args, message", [
    (["--mode", "bogus"], "--mode must be free or forced"),
    (["--budgets", "8"], "integers >= 16"),
    (["--mode", "forced", "--budgets", "12x"], "comma-separated integers"),
    (["--mode", "forced", "--policies", "scripted"], "drop 'scripted'"),
])  # fmt: skip
def test_forced_cli_rejects_bad_input_before_anything_runs(tmp_path, args, message):
    result = CliRunner().invoke(app, ["eval", str(TASKS / "shopping_001.yaml"), "--db", str(tmp_path / "t.sqlite"),
                                      *args])  # fmt: skip
    assert result.exit_code == 2 and message in result.output
    assert not (tmp_path / "t.sqlite").exists()


def test_common_tasks_keeps_only_tasks_every_label_finished():
    from traces.forced import common_tasks

    def row(task: str, policy: str, broken: int = 0) -> dict:
        return {"task_id": task, "policy": policy, "broken": broken}

    rows = [row("1", "full"), row("1", "sliding"), row("2", "full"), row("3", "full"), row("3", "sliding", 1)]
    assert sorted((r["task_id"], r["policy"]) for r in common_tasks(rows)) == [("1", "full"), ("1", "sliding")]
    assert common_tasks([row("1", "full")]) == [row("1", "full")]
    with_broken_label = [*rows, row("1", "h2o", 1)]  # a label whose only task broke does not empty the set
    assert ("1", "sliding") in {(r["task_id"], r["policy"]) for r in common_tasks(with_broken_label)}
    disjoint = [row("1", "full"), row("2", "sliding")]
    assert common_tasks(disjoint) == disjoint  # nothing in common: every row, rather than an empty plot


def test_the_gpu_checks_recorded_trajectory_is_todays_replay(tmp_path):
    """The GPU machine has no browser, so its forced episode scores a recorded trajectory
    (tests/fixtures/trajectory-shopping_015.json); it must be what the replay gives today, and read back equal."""
    from envs.server import Sites
    from runner.browser import BrowserSession
    from runner.forced import Trajectory, record_trajectory

    task = load_task(TASKS / "shopping_015.yaml", parse_step=parse_action)
    fixture = json.loads((TASKS.parent / "tests" / "fixtures" / "trajectory-shopping_015.json").read_text())
    with Sites(task.sites, workdir=tmp_path / "sites") as sites, \
            BrowserSession([sites.url(n) for n in task.sites]) as browser:  # fmt: skip
        traj = record_trajectory(task, sites, browser)
    assert json.loads(json.dumps(traj.to_json())) == fixture  # (JSON: int keys as strings, tuples as lists)
    back = Trajectory.from_json(fixture)
    assert back.to_json() == traj.to_json() and len(back.steps) == 7 and back.answer == traj.answer
    assert [s.observation.render() for s in back.steps] == [s.observation.render() for s in traj.steps]
