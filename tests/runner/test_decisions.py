"""Decision replay: a decision decoded on a fork leaves the live cache alone, and replaying an episode the agent
itself recorded gives back its own actions state by state (so disagreement measures the configuration, not the
replay)."""

from __future__ import annotations

from agent.model_policy import ModelAgent
from agent.observation import Observation
from confkv.testing import tiny_chat_tokenizer, tiny_model
from runner.decisions import RecordedEpisode, RecordedStep, agreement, replay_episode, run_replays, select_episodes

PAGES = [
    {3: ("searchbox", "Find"), 9: ("link", "Cart"), 11: ("link", "Mugs")},
    {4: ("link", "Ironleaf Mug"), 5: ("link", "Velvet Fern"), 6: ("button", "Next")},
    {7: ("StaticText", "Price $9.95"), 8: ("button", "Add to cart")},
]


def _page(nodes: dict, k: int) -> Observation:
    text = "\n".join(f"[{i}] {r} '{n}'" for i, (r, n) in nodes.items())
    return Observation(text=text, url=f"http://127.0.0.1:9/p{k}", title=f"p{k}", tabs=[f"p{k}"], active_tab=0,
                       ids={i: i for i in nodes}, nodes=nodes)  # fmt: skip


def _agent(seed: int = 0, policy: str = "full") -> ModelAgent:
    model, _ = tiny_model("qwen2", seed=seed, max_position_embeddings=8192)
    return ModelAgent(model, tiny_chat_tokenizer(), policy, max_action_tokens=16, model_name="tiny")


def _record(agent: ModelAgent, intent: str, episode_id: int) -> RecordedEpisode:
    """A free-running episode of `agent` over the fixed pages, stored as the trace DB stores it."""
    agent.begin(intent)
    steps, last = [], None
    for k, nodes in enumerate(PAGES):
        page = _page(nodes, k)
        action, _ = agent.act(page, last)
        last = f"OK: {action}"
        steps.append(RecordedStep(page.render(), action, last))
    agent.close()
    return RecordedEpisode(episode_id, "7", intent, tuple(steps))


def test_a_decision_on_a_fork_is_the_one_act_takes_and_leaves_the_cache_alone():
    agent, twin = _agent(), _agent()
    page = _page(PAGES[0], 0)
    agent.begin("open the cart")
    agent.session.append(agent.open_turn(page, None))
    seen, steps = agent.session.seen, len(agent.session.stats.steps)
    action, text = agent.decide(page, None)
    assert agent.session.seen == seen and len(agent.session.stats.steps) == steps  # nothing entered the cache
    again, _ = agent.decide(page, None)
    twin.begin("open the cart")
    acted, info = twin.act(page, None)
    assert action == again == acted and text == info.raw_output


def test_replaying_an_episode_gives_back_the_recorded_actions_and_agreement_counts_states():
    episodes = [_record(_agent(), intent, i) for i, intent in enumerate(["open the cart", "buy a mug"], start=1)]
    rows = {}
    for ep in episodes:
        steps = replay_episode(_agent(), ep)
        assert [s["decision"] for s in steps] == [s.action for s in ep.steps]  # faithful: same cache, same turns
        assert steps[-1]["peak_kv_bytes"] >= steps[-1]["kv_bytes"] > 0
        rows[ep.episode_id] = {"site": ep.site, "steps": steps}
    assert agreement(rows, rows)["agreement"] == 1.0
    mine = agreement(rows, rows, key="recorded")
    assert mine["states"] == 6 and mine["agreement"] == 1.0 and mine["per_site"]["shopping"]["states"] == 6
    other = {ep: {**r, "steps": [{**s, "decision": "scroll [down]"} for s in r["steps"]]} for ep, r in rows.items()}
    differs = agreement(rows, other)
    assert differs["agreement"] == sum(s["decision"] == "scroll [down]" for r in rows.values()
                                       for s in r["steps"]) / 6  # fmt: skip
    assert len(differs["differ"]) == 6 - round(differs["agreement"] * 6)


def test_replays_are_resumable_one_line_per_episode(tmp_path):
    ep = _record(_agent(), "open the cart", 5)
    path = tmp_path / "d.jsonl"
    made = []

    def make():
        made.append(1)
        return _agent()

    first = run_replays([ep], make, path)
    with path.open("a") as fh:
        fh.write('{"episode_id": 9, "tor')  # a killed run's torn last line
    again = run_replays([ep], make, path)
    assert len(made) == 1 and first[5]["steps"] == again[5]["steps"] and set(again) == {5}

    # two processes split a sample: each its own file, both read as one
    other = [_record(_agent(), "buy a mug", 6), _record(_agent(), "open the cart", 7)]
    odd = run_replays([ep, *other], make, path, shard=(1, 2))
    assert set(odd) == {5, 6} and len(made) == 2  # 5 was done; index 1 (episode 6) is shard 1's
    assert path.with_name("d.shard1of2.jsonl").exists()
    even = run_replays([ep, *other], make, path, shard=(0, 2))
    assert set(even) == {5, 6, 7} and path.with_name("d.shard0of2.jsonl").exists()  # 7: shard 0's file


def test_episodes_are_selected_per_site_from_a_trace_db(tmp_path):
    from traces.records import StepRecord
    from traces.store import TraceStore

    db = tmp_path / "t.sqlite"
    with TraceStore(db) as store:
        run = store.start_run("m", "full", {})
        for task, steps in (("3", 2), ("4", 3), ("105", 2), ("203", 1)):
            ep = store.start_episode(run, task, "full")
            for k in range(steps):
                store.add_step(ep, StepRecord(step=k, observation="Tabs: [0] 'p'\nURL: http://x/\n[1] link 'a'",
                                              total_tokens=100 * (k + 1) * int(task), action="click [1]"))  # fmt: skip
            store.finish_episode(ep, success=False)
    intents = {"3": "a", "4": "b", "105": "c", "203": "d"}
    chosen = select_episodes(db, run, states_per_site=2, intents=intents, episodes_per_site=1)
    assert [(e.task_id, len(e.steps)) for e in chosen] == [("3", 2), ("105", 2), ("203", 1)]
    assert select_episodes(db, run, 4, intents, episodes_per_site=1)[1].task_id == "4"
    obs = chosen[0].steps[0].observation
    assert obs.endswith("[1] link 'a'")


def test_recorded_actions_stand_for_fp32_only_for_this_agent_and_records_feed_the_choice(tmp_path, monkeypatch):
    from confkv.models.precision_choice import acceptance, allowed
    from runner.decisions import acceptance_record, recorded_reference, write_acceptance
    from traces.store import TraceStore

    me = {"version": 9, "prompt_sha": "abc"}
    db = tmp_path / "t.sqlite"
    with TraceStore(db) as store:
        ok = store.start_run("m", "full", {"agent": {"dtype": "fp32", **me}})
        bf16 = store.start_run("m", "full", {"agent": {"dtype": "bf16", **me}})
        old = store.start_run("m", "full", {"agent": {"dtype": "fp32", "version": 8, "prompt_sha": "abc"}})
        evicting = store.start_run("m", "confkv", {"agent": {"dtype": "fp32", **me}})
    assert "fp32, full, agent v9" in recorded_reference(db, ok, "full", me)
    assert [recorded_reference(db, r, "full", me) for r in (bf16, old, evicting, 99)] == [None] * 4

    row = {"precision": "int8", "policy": "full",
           "vs_reference": {"agreement": 0.98, "states": 100, "per_site": {"shopping": {"states": 100}}}}
    path = tmp_path / "home" / "precision" / "acceptance.json"
    write_acceptance(path, "m", {"int8": acceptance_record(row, 144, "run 3 recorded", 3, db)})
    done = {**row, "vs_reference": {**row["vs_reference"], "states": 144}}
    write_acceptance(path, "m", {"fp32-bf16-int8wo": acceptance_record(done, 144, "run 3 recorded", 3, db)})
    monkeypatch.setenv("CONFKV_HOME", str(tmp_path / "home"))
    records = acceptance("m", tmp_path / "none.json")
    assert set(records) == {"fp32-w8a8-w8a8", "fp32-bf16-int8wo"} and records["fp32-w8a8-w8a8"]["planned"] == 144
    why = allowed("m", tmp_path / "none.json")
    assert why["fp32-w8a8-w8a8"].startswith("not: pending") and not why["fp32-bf16-int8wo"].startswith("not")
    assert why["bf16"].startswith("not: no decision-agreement record")


def test_a_replay_hands_freed_heap_back_after_every_step(monkeypatch):
    import runner.decisions as decisions
    from runner.heap import trim_heap

    assert trim_heap() is True  # glibc (Linux): malloc_trim is there and runs
    ep = _record(_agent(), "open the cart", 3)
    trims = []
    monkeypatch.setattr(decisions, "trim_heap", lambda: trims.append(1) or True)
    steps = replay_episode(_agent(), ep)
    assert len(trims) == len(steps) == len(ep.steps)
