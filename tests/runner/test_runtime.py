"""The episode loop against the REAL sites in a REAL headless Chromium: scripted policy, tiny model, resume."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from agent.model_policy import ModelAgent, ScriptedAgent
from envs.taskspec import load_task
from runner import interrupts
from runner.batch import run_batch
from runner.episode import run_episode
from runner.worker import AgentSettings
from traces.store import TraceStore

pytestmark = pytest.mark.browser
TASKS = Path(__file__).resolve().parents[2] / "tasks"


@pytest.fixture(scope="module")
def sites():
    from envs.server import Sites

    with Sites(["shopping"]) as running:
        yield running


@pytest.fixture
def store(tmp_path):
    with TraceStore(tmp_path / "traces.sqlite") as s:
        yield s


@pytest.fixture(scope="module")
def mug_task():
    return load_task(TASKS / "shopping_001.yaml")


def _run(task, actions, sites, store, max_steps=30):
    run_id = store.start_run("scripted", "scripted", {"test": True})
    return run_episode(task, ScriptedAgent(actions), sites, store, run_id, max_steps=max_steps)


def test_reference_solution_succeeds_and_every_step_is_recorded(mug_task, sites, store):
    result = _run(mug_task, mug_task.reference_solution, sites, store)
    assert result.status == "done" and result.success and result.answer == "$9.95"
    assert result.stop_reason == "stop action" and result.steps == 3
    episode = store.episode(result.episode_id)
    assert episode["success"] == 1 and episode["steps"] == 3 and episode["peak_rss_bytes"] > 0
    steps = store.steps(result.episode_id)
    assert [s["action"] for s in steps] == [
        "type [searchbox 'Search products'] [Ironleaf Classic Coffee Mug] [1]",
        "click [link 'Ironleaf Classic Coffee Mug']",
        "stop [$9.95]",
    ]
    assert "Ironleaf Classic Coffee Mug" in steps[2]["observation"]  # the product page was observed before stop
    assert steps[1]["url"] != steps[0]["url"]


def test_five_identical_actions_stop_the_episode(mug_task, sites, store):
    result = _run(mug_task, ["scroll [down]"] * 10, sites, store)
    assert result.steps == 5 and "repeated 5 times" in result.stop_reason
    assert result.status == "done" and not result.success


def test_three_parse_failures_in_a_row_stop_the_episode(mug_task, sites, store):
    result = _run(mug_task, ["scroll [down]", "I think I should click", "clik [3]", "", "scroll [up]"], sites, store)
    assert result.steps == 4 and "3 consecutive replies" in result.stop_reason
    steps = store.steps(result.episode_id)
    assert steps[1]["parse_error"] and steps[2]["parse_error"] and "unknown verb" in steps[2]["parse_error"]
    assert steps[0]["parse_error"] is None


def test_goto_to_another_origin_is_refused_and_logged(mug_task, sites, store):
    foreign = "http://127.0.0.1:9/steal"
    result = _run(mug_task, [f"goto [{foreign}]", "stop [N/A]"], sites, store)
    assert result.status == "done" and foreign in result.blocked
    first = store.steps(result.episode_id)[0]
    assert "refused" in first["exec_error"] and first["result"].startswith("FAILED")
    assert store.steps(result.episode_id)[1]["url"].startswith(sites.url("shopping"))


def test_tiny_model_drives_an_episode_through_one_live_cache(mug_task, sites, store):
    from confkv.policies import get_policy
    from confkv.testing import tiny_chat_tokenizer, tiny_model

    model, _ = tiny_model("qwen2", max_position_embeddings=32768)
    tok = tiny_chat_tokenizer()
    policy = ModelAgent(model, tok, get_policy("confkv", {"n_low": "200", "n_high": "400", "prefill_chunk": "256"}),
                         max_action_tokens=24, model_name="tiny")  # fmt: skip
    run_id = store.start_run("tiny", "confkv", policy.kv_policy)
    # the policy's session is closed at the end of the episode: keep a handle to check it
    sessions = []
    begin = policy.begin

    def begin_and_keep(intent):
        begin(intent)
        sessions.append(policy.session)

    policy.begin = begin_and_keep
    result = run_episode(mug_task, policy, sites, store, run_id, max_steps=3)
    assert result.status == "done", result.reason
    steps = store.steps(result.episode_id)
    assert len(steps) >= 1 and all(s["parse_error"] is None for s in steps)  # the grammar makes every reply valid
    session = sessions[0]
    # the system prompt is prefilled (and pinned) once in begin(); each step sends only its new turn
    assert policy.system_tokens > 0
    assert session.stats.prefilled_tokens == policy.system_tokens + sum(s["prefilled_tokens"] for s in steps)
    previous_total = policy.system_tokens
    for i, s in enumerate(steps):
        in_cache_output = s["total_tokens"] - previous_total - s["prefilled_tokens"]
        assert in_cache_output in (s["output_tokens"], s["output_tokens"] - 1)  # the stop token is not cached
        if i:
            assert s["prefilled_tokens"] < previous_total  # only the new turn, not the whole conversation
        previous_total = s["total_tokens"]
        assert s["kv_bytes"] > 0 and len(s["kept_tokens_per_layer"]) == 2
    for s in steps:  # pinned (system prompt + the turn being decided) plus at most the budget of older history
        assert max(s["kept_tokens_per_layer"]) <= 400 + policy.system_tokens + s["prefilled_tokens"] + s["output_tokens"]
    tokens = store.decode_tokens(result.episode_id)
    assert tokens and all(0.0 <= t["confidence"] <= 1.0 for t in tokens)
    # every prefill call is a chunk row: step 0 carries the system prompt's chunks too, each at most 256 tokens
    chunks = store.prefill_chunks(result.episode_id)
    for s in steps:
        mine = [c["tokens"] for c in chunks if c["step"] == s["step"]]
        assert sum(mine) == s["prefilled_tokens"] + (policy.system_tokens if s["step"] == 0 else 0)
        assert max(mine) <= 256 and all(c["budget"] in (200, 400) for c in chunks)
    assert len(chunks) == len([r for r in session.stats.steps if r.kind == "prefill"])
    episode = store.episode(result.episode_id)
    assert 0 < episode["peak_kv_bytes"] < episode["full_kv_bytes"]  # it evicted for real
    # the gate-open rate is the share of the episode's forwards (system prompt included) decided above n_low
    opened = [r.budget == 400 for r in session.stats.steps]
    assert episode["gate_open_rate"] == pytest.approx(sum(opened) / len(opened))


def test_interrupted_batch_resumes_with_only_the_missing_episodes(tmp_path):
    tasks = [load_task(TASKS / "shopping_001.yaml"), load_task(TASKS / "shopping_002.yaml")]
    db = tmp_path / "batch.sqlite"
    settings = AgentSettings(model="none")

    def interrupt(result):
        raise KeyboardInterrupt  # Ctrl-C right after the first episode is recorded

    with pytest.raises(KeyboardInterrupt):
        run_batch(tasks, ["scripted"], settings, db, on_episode=interrupt)
    seen = []
    plan, summary = run_batch(tasks, ["scripted"], settings, db, on_episode=seen.append)
    assert plan.skipped == 1 and [r["task_id"] for r in seen] == [tasks[1].task_id]
    with TraceStore(db) as store:
        episodes = store.episodes()
    assert sorted(e["task_id"] for e in episodes) == ["1", "2"]  # the first task did not run twice
    assert summary.policies["scripted"].episodes == 2 and summary.policies["scripted"].success_rate == 1.0


@pytest.fixture
def drain_handler():
    """SIGUSR1 handled as `confkv-agent` handles it, for this test only; no drain left behind."""
    previous = signal.signal(signal.SIGUSR1, interrupts.on_drain)
    yield
    signal.signal(signal.SIGUSR1, previous)
    interrupts.clear_drain()


def test_a_drain_stops_the_batch_after_the_episode_in_flight_and_the_rest_resumes(tmp_path, drain_handler):
    tasks = [load_task(TASKS / "shopping_001.yaml"), load_task(TASKS / "shopping_002.yaml")]
    db = tmp_path / "batch.sqlite"
    settings = AgentSettings(model="none")
    seen = []

    def drain(result):
        seen.append(result)
        os.kill(os.getpid(), signal.SIGUSR1)  # as `kill -USR1 <eval pid>` would, while the first episode ends

    run_batch(tasks, ["scripted"], settings, db, on_episode=drain)
    assert [r["task_id"] for r in seen] == [tasks[0].task_id] and seen[0]["success"]  # it finished, then stopped
    interrupts.clear_drain()
    seen.clear()
    plan, _ = run_batch(tasks, ["scripted"], settings, db, on_episode=seen.append)
    assert plan.skipped == 1 and [r["task_id"] for r in seen] == [tasks[1].task_id]


def test_eval_exits_75_on_a_drain_with_the_rest_pending(tmp_path, drain_handler):
    from typer.testing import CliRunner

    from cli.main import app

    os.kill(os.getpid(), signal.SIGUSR1)  # a drain asked before the first episode: nothing starts
    result = CliRunner().invoke(app, ["eval", str(TASKS / "shopping_001.yaml"), "--policies", "scripted",
                                      "--db", str(tmp_path / "t.sqlite")])
    assert result.exit_code == interrupts.DRAINED_EXIT == 75, result.output
    assert "drained (SIGUSR1)" in result.output
    with TraceStore(tmp_path / "t.sqlite") as store:
        assert store.episodes() == []


class _BrokenModel(ScriptedAgent):
    def act(self, observation, last_result):
        if self.position == 1:
            raise RuntimeError("model blew up")
        return super().act(observation, last_result)


def test_a_model_error_is_recorded_as_an_error_episode_and_the_browser_is_gone(mug_task, sites, store):
    from runner import procs
    before = procs.descendants(os.getpid())
    run_id = store.start_run("broken", "scripted", {})
    result = run_episode(mug_task, _BrokenModel(["scroll [down]"] * 3), sites, store, run_id)
    assert result.status == "error" and "model blew up" in result.reason
    episode = store.episode(result.episode_id)
    assert episode["status"] == "error" and "model blew up" in episode["error"] and episode["steps"] == 1
    chromium = {p for p in procs.descendants(os.getpid()) - before
                if "chrom" in Path(f"/proc/{p}/cmdline").read_text(errors="ignore")}
    assert not chromium


def test_the_run_key_names_the_agent_so_a_resume_never_mixes_two_agents(monkeypatch):
    from agent import model_policy, prompt
    from runner import worker as batch  # the run key and the Worker live in runner.worker

    settings = AgentSettings(model="m", max_steps=15, dtype="bf16")
    _, config = batch.run_config("full", settings)
    assert config["agent"]["version"] == model_policy.AGENT_VERSION and len(config["agent"]["prompt_sha"]) == 12
    assert batch.run_config("full", settings) == (settings.model, config)  # stable: the same agent resumes
    monkeypatch.setattr(prompt, "RULES", prompt.RULES + "6. Be brief.\n")
    assert batch.run_config("full", settings)[1]["agent"]["prompt_sha"] != config["agent"]["prompt_sha"]
    monkeypatch.setattr(model_policy, "AGENT_VERSION", model_policy.AGENT_VERSION + 1)
    assert batch.run_config("full", settings)[1]["agent"]["version"] != config["agent"]["version"]


def test_the_worker_hands_freed_heap_back_after_every_episode_even_a_failed_one(monkeypatch, mug_task):
    from runner import worker as batch  # the Worker and trim_heap live in runner.worker

    assert batch.trim_heap() is True  # glibc (Linux): malloc_trim is there and runs
    trims = []
    monkeypatch.setattr(batch, "trim_heap", lambda: trims.append(1) or True)
    worker = batch.Worker.__new__(batch.Worker)  # no sites or model: only the claim-run-trim path

    class Store:
        def claim_episode(self, *a):
            return 5

    worker.store = Store()

    def boom(*a, **kw):
        raise RuntimeError("browser died")

    worker.run = boom
    with pytest.raises(RuntimeError):
        worker.run_claimed(mug_task, "full", 1)
    assert trims == [1]
