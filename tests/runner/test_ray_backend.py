"""`eval --backend ray`: two scripted episodes on a local Ray limited to 2 CPUs; the driver alone writes the store."""

from __future__ import annotations

from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'confkv-agent[ray]'); scripts/test.sh installs it")

from envs.taskspec import load_task  # noqa: E402
from runner.backends.ray import init_ray  # noqa: E402
from runner.batch import run_batch  # noqa: E402
from runner.worker import AgentSettings  # noqa: E402
from traces.store import TraceStore  # noqa: E402

pytestmark = pytest.mark.browser
TASKS = Path(__file__).resolve().parents[2] / "tasks"


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    """One local Ray for the module (starting it costs seconds): 2 CPUs, as on a small CI machine."""
    assert init_ray(None, workers=2)
    assert ray.cluster_resources()["CPU"] == 2
    yield
    ray.shutdown()


def test_two_scripted_episodes_on_ray_are_written_once_by_the_driver(tmp_path: Path) -> None:
    tasks = [load_task(TASKS / "shopping_001.yaml"), load_task(TASKS / "shopping_002.yaml")]
    db = tmp_path / "traces.sqlite"
    settings = AgentSettings(model="scripted", max_steps=10)
    seen: list[dict] = []
    plan, summary = run_batch(tasks, ["scripted"], settings, db, workers=2, on_episode=seen.append, backend="ray")
    assert len(plan.pending) == 2 and len(seen) == 2
    with TraceStore.open_existing(db) as store:
        (run,) = store.runs()  # the actors' scratch runs never reach this store
        rows = store.episodes()
        assert sorted(r["task_id"] for r in rows) == ["1", "2"]
        assert all(r["run_id"] == run["id"] and r["status"] == "done" and r["success"] == 1 for r in rows), rows
        assert {r["episode_id"] for r in seen} == {r["id"] for r in rows}
        for row, task in zip(sorted(rows, key=lambda r: r["task_id"]), tasks, strict=True):
            steps = store.steps(row["id"])
            assert len(steps) == len(task.reference_solution) and steps[-1]["action"] == task.reference_solution[-1]
            assert row["steps"] == len(steps) and row["wall_s"] > 0 and row["finished"] >= row["started"]
    assert summary.policies["scripted"].success_rate == 1.0
    again, _ = run_batch(tasks, ["scripted"], settings, db, workers=2, backend="ray")
    assert again.pending == [] and again.skipped == 2  # resume reads the same store


def test_settings_with_built_policies_reach_a_ray_worker_with_the_same_run_key() -> None:
    from cli.policies import build_policies
    from runner.worker import run_config

    settings = AgentSettings(model="m", policies=build_policies(["confkv"], ["n_low=128", "tau=0.4"]), dtype="bf16")

    @ray.remote(num_cpus=1)
    def remote_config(shipped: AgentSettings) -> tuple[str, dict]:
        assert shipped.policies["confkv"].n_low == 128
        return run_config("confkv", shipped)

    assert ray.get(remote_config.remote(settings)) == run_config("confkv", settings)
