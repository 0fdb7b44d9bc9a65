"""Resume: a re-launched eval reuses its run, skips finished tasks and reruns those a crash left 'running'."""

from __future__ import annotations

import multiprocessing as mp
import os

from traces.store import TraceStore


def _crash_mid_episode(db_path: str, run_id: int, task: str) -> None:
    """A worker that dies hard (no finally, no finish) after writing one step, like a killed eval."""
    store = TraceStore(db_path)
    ep = store.start_episode(run_id, task)
    store.add_step(ep, step=0, action="click [1]", kv_bytes=10)
    os._exit(3)


def test_resume_reuses_the_run_only_for_the_same_model_policy_and_config(db_path):
    with TraceStore(db_path) as store:
        first = store.start_run("qwen", "confkv", {"n_low": 64, "n_high": 256})
        assert store.start_run("qwen", "confkv", {"n_high": 256, "n_low": 64}, resume=True) == first
        assert store.start_run("qwen", "confkv", {"n_low": 32, "n_high": 256}, resume=True) != first
        assert store.start_run("smol", "confkv", {"n_low": 64, "n_high": 256}, resume=True) != first
        assert store.start_run("qwen", "confkv", {"n_low": 64, "n_high": 256}) != first  # no resume: new run


def test_a_run_recorded_before_a_config_key_existed_resumes_while_the_key_is_at_its_default(db_path):
    defaults = {"n_low": 256, "n_high": 512, "cold": 0, "weights": (0.4, 0.3, 0.3)}
    with TraceStore(db_path) as store:
        old = store.start_run("qwen", "confkv", {"n_low": 64, "n_high": 256})  # before `cold` and `weights` existed
        now = {"n_low": 64, "n_high": 256, "cold": 0, "weights": (0.4, 0.3, 0.3)}
        assert store.start_run("qwen", "confkv", now, resume=True, defaults=defaults) == old
        other = {**now, "cold": 64}  # the new key NOT at its default: a different experiment
        assert store.start_run("qwen", "confkv", other, resume=True, defaults=defaults) != old
        changed = {**now, "n_low": 32}
        assert store.start_run("qwen", "confkv", changed, resume=True, defaults=defaults) != old
        assert store.start_run("qwen", "confkv", now, resume=True) != old  # without defaults: a new run


def test_crashed_episode_is_rerun_and_only_its_final_attempt_counts(db_path):
    with TraceStore(db_path) as store:
        run = store.start_run("qwen", "full", {})
        done = store.start_episode(run, "a")
        store.finish_episode(done, success=True, peak_kv_bytes=100)

    proc = mp.get_context("spawn").Process(target=_crash_mid_episode, args=(str(db_path), run, "b"))
    proc.start()
    proc.join(60)
    assert proc.exitcode == 3

    with TraceStore(db_path) as store:
        run_again = store.start_run("qwen", "full", {}, resume=True)
        assert run_again == run
        assert store.finished_tasks(run) == {"a"}  # 'b' was left running by the crash: it must be rerun
        [stale] = store.episodes(status="running")
        assert stale["task_id"] == "b"
        rerun = store.start_episode(run, "b")
        old = store.episode(stale["id"])
        assert old["status"] == "error" and f"rerun as episode {rerun}" in old["error"]
        store.add_step(rerun, step=0, action="stop [x]", kv_bytes=50)
        store.finish_episode(rerun, success=True)
        assert store.finished_tasks(run) == {"a", "b"}
        summary = store.summary(run_ids=[run]).policies["full"]
        # two tasks, both succeeded: the interrupted attempt is not counted as a third (failed) episode
        assert (summary.episodes, summary.successes, summary.errors) == (2, 2, 0)


def test_errored_episodes_are_retried_unless_asked_otherwise(db_path):
    with TraceStore(db_path) as store:
        run = store.start_run("qwen", "confkv", {"n": 1})
        ep = store.start_episode(run, "a")
        store.fail_episode(ep, "KeyboardInterrupt")
        assert store.finished_tasks(run) == set()
        assert store.finished_tasks(run, include_errors=True) == {"a"}
        summary = store.summary(run_ids=[run]).policies["confkv"]
        assert (summary.episodes, summary.errors, summary.success_rate) == (1, 1, 0.0)


def test_finished_keys_span_runs_and_filter_by_model(db_path):
    with TraceStore(db_path) as store:
        for model, policy, task, ok in (
            ("qwen", "full", "a", True),
            ("qwen", "confkv", "a", False),
            ("smol", "full", "b", True),
        ):
            ep = store.start_episode(store.start_run(model, policy, {}, resume=True), task)
            store.finish_episode(ep, success=ok)
        store.start_episode(store.start_run("qwen", "full", {}, resume=True), "c")  # still running
        assert store.finished_keys() == {("a", "full", "qwen"), ("a", "confkv", "qwen"), ("b", "full", "smol")}
        assert store.finished_keys(model="smol") == {("b", "full", "smol")}
