"""Paired bootstrap intervals and decision agreement: the figures the forced table prints beside each delta."""

from __future__ import annotations

import json

import pytest

from traces.forced import decision_agreement, same_decision, summarize_forced
from traces.paired import bootstrap_ci


def test_bootstrap_interval_brackets_the_mean_and_narrows_with_more_tasks():
    few = [0.0, 1.0, 0.5, 0.2]
    lo, hi = bootstrap_ci(few)
    assert lo <= sum(few) / len(few) <= hi and lo >= 0.0 and hi <= 1.0
    many = few * 25
    lo2, hi2 = bootstrap_ci(many)
    assert hi2 - lo2 < (hi - lo) / 2  # 25x the tasks: about a fifth of the width
    assert bootstrap_ci(few) == (lo, hi)  # seeded: the same rows print the same interval
    assert bootstrap_ci([0.3]) == (0.3, 0.3) and bootstrap_ci([]) is None
    with pytest.raises(ValueError, match="level"):
        bootstrap_ci(few, level=1.5)


def _row(task: str, policy: str, decisions: list[str] | None, acc: float | None, sha: str = "s") -> dict:
    return {"task_id": task, "policy": policy, "broken": None, "trajectory_sha": sha, "memory_span": "long",
            "answer_nll": 1.0, "action_nll": 1.0, "action_acc": 0.5, "greedy_answer": None, "answer_exact": None,
            "answer_pass": None, "mean_kv_bytes": 10.0, "peak_kv_bytes": 10, "decision_acc": acc,
            "decisions": None if decisions is None else json.dumps(decisions)}  # fmt: skip


def test_agreement_compares_decisions_step_by_step_with_full():
    full = _row("1", "full", ["click [3]", "type [4] [mug] [1]", "stop [9.95]"], 2 / 3)
    other = _row("1", "sliding", ["click [3]", "click [7]", "stop [9.95]"], 1 / 3)
    assert decision_agreement(other, full) == pytest.approx(2 / 3)
    assert decision_agreement(full, full) == 1.0
    assert decision_agreement(_row("1", "old", None, None), full) is None  # a run from before decision scoring
    rows = [full, other, _row("2", "full", ["click [1]"], 1.0), _row("2", "sliding", ["click [2]"], 0.0),
            _row("3", "sliding", ["click [1]"], 1.0, sha="other")]  # task 3: no full on that trajectory
    s = summarize_forced(rows)["sliding"]
    assert s.paired == 2 and s.decision_agreement == pytest.approx((2 / 3 + 0) / 2)
    assert s.decision_dacc == pytest.approx(((1 / 3 - 2 / 3) + (0 - 1)) / 2)
    assert s.decision_acc == pytest.approx((1 / 3 + 0 + 1) / 3)  # accuracy needs no pair
    lo, hi = s.decision_agreement_ci
    assert lo == 0.0 and hi == pytest.approx(2 / 3)


def test_stop_answers_agree_when_the_evaluator_reads_them_alike():
    assert same_decision("stop [$290.50]", "stop [290.50]") and same_decision("stop [ Blue Mug ]", "stop [blue mug]")
    assert same_decision("stop [1,250]", "stop [1250.00]") and same_decision("click [3]", " click [3] ")
    assert not same_decision("stop [290.50]", "stop [290.05]") and not same_decision("stop [mug]", "stop [mugs]")
    assert not same_decision("stop [3]", "click [3]") and not same_decision("click [03]", "click [3]")
    full = _row("1", "full", ["click [3]", "stop [$290.50]"], 1.0)
    assert decision_agreement(_row("1", "h2o", ["click [3]", "stop [290.50]"], 0.5), full) == 1.0


def _forced_episode(store, run: int, sha: str, urls: list[str], decisions: list[str],
                    forced: list[str] | None = None) -> None:
    """One forced episode as `runner.forced` records it: its steps (observation text, the forced reference action,
    by default the decisions) and its result row."""
    from traces.forced import record_forced

    episode = store.start_episode(run, "7")
    for i, url in enumerate(urls):
        store.add_step(episode, step=i, url=url, observation=f"Tabs: [0] 'Home' (current)\nURL: {url}\n[1] link 'x'",
                       action=(forced or decisions)[i])  # fmt: skip
    result = {**_row("7", store.run(run)["policy"], decisions, 0.5, sha=sha), "steps": len(urls)}
    record_forced(store, episode, {k: v for k, v in result.items() if k != "broken"}, [])
    store.finish_episode(episode, success=True, peak_kv_bytes=10, full_kv_bytes=20)


def test_rows_from_processes_whose_sites_ran_on_other_ports_pair_and_other_trajectories_do_not(tmp_path):
    """Before the replay showed canonical origins, each process's observations carried its own ephemeral port,
    so the token hash differed; the step text with origins normalized still pairs them."""
    from traces.forced import forced_rows
    from traces.store import TraceStore

    with TraceStore(tmp_path / "f.sqlite") as store:
        runs = {p: store.start_run("tiny", p, {"name": p}, mode="forced", git_revision=None, machine=None)
                for p in ("full", "sliding", "h2o")}  # fmt: skip
        _forced_episode(store, runs["full"], "a", ["http://127.0.0.1:41799/", "http://127.0.0.1:41799/p/2"],
                        ["click [1]", "stop [x]"])  # fmt: skip
        _forced_episode(store, runs["sliding"], "b", ["http://127.0.0.1:38211/", "http://127.0.0.1:38211/p/2"],
                        ["click [1]", "stop [x]"])  # fmt: skip
        _forced_episode(store, runs["h2o"], "c", ["http://127.0.0.1:38211/", "http://127.0.0.1:38211/p/3"],
                        ["click [1]", "stop [x]"])  # another page at step 2: another trajectory  # fmt: skip
        rows = forced_rows(store.db)
    summary = summarize_forced(rows)
    assert summary["sliding"].paired == 1 and summary["h2o"].paired == 0


def test_rows_that_fed_canonical_origins_pair_by_their_token_hash_alone(tmp_path):
    """Since the replay shows canonical origins, the same step text with a different token hash means another
    input (a prompt or agent version the step text does not show): such rows must not pair."""
    from traces.forced import forced_rows
    from traces.store import TraceStore

    urls = ["http://127.0.0.1:7770/", "http://127.0.0.1:7770/p/2"]
    with TraceStore(tmp_path / "f.sqlite") as store:
        runs = {p: store.start_run("tiny", p, {"name": p}, mode="forced", git_revision=None, machine=None)
                for p in ("full", "sliding", "h2o", "random")}  # fmt: skip
        _forced_episode(store, runs["full"], "a", urls, ["click [1]", "stop [x]"])
        _forced_episode(store, runs["sliding"], "a", urls, ["click [1]", "stop [x]"])
        _forced_episode(store, runs["h2o"], "other-prompt", urls, ["click [1]", "stop [x]"])
        _forced_episode(store, runs["random"], "old", ["http://127.0.0.1:38211/", "http://127.0.0.1:38211/p/2"],
                        ["click [1]", "stop [x]"])  # recorded before the fix: pairs by text  # fmt: skip
        rows = forced_rows(store.db)
    summary = summarize_forced(rows)
    assert summary["sliding"].paired == 1 and summary["h2o"].paired == 0 and summary["random"].paired == 1


def test_the_replay_shows_each_site_at_its_canonical_origin_whatever_port_it_runs_on():
    from envs.server import canonical_origins

    urls = {"__SHOPPING__": "http://127.0.0.1:41799", "__FORUM__": "http://127.0.0.1:4179/"}
    text = "URL: http://127.0.0.1:41799/p/2 and http://127.0.0.1:4179/f/1 and http://127.0.0.1:417990/"
    assert canonical_origins(text, urls) == (
        "URL: http://127.0.0.1:7770/p/2 and http://127.0.0.1:9999/f/1 and http://127.0.0.1:417990/")


def test_decision_accuracy_is_read_from_the_forced_actions_by_the_agreement_rule(tmp_path):
    """The recorded accuracy (0.5 here) compared exact text; the report recounts it against the steps' forced
    actions, so `stop [9.95]` for the reference `stop [$9.95]` counts as right, as in agreement."""
    from traces.forced import forced_rows
    from traces.store import TraceStore

    urls = ["http://127.0.0.1:7770/", "http://127.0.0.1:7770/p/2", "http://127.0.0.1:7770/p/3"]
    with TraceStore(tmp_path / "f.sqlite") as store:
        run = store.start_run("tiny", "full", {"name": "full"}, mode="forced", git_revision=None, machine=None)
        _forced_episode(store, run, "a", urls, ["click [1]", "click [2]", "stop [9.95]"],
                        forced=["click [1]", "click [5]", "stop [$9.95]"])  # fmt: skip
        [row] = forced_rows(store.db)
    assert row["decision_acc"] == pytest.approx(2 / 3)
