"""`eval --backend ray [--address ADDR]`: the (task, policy) episodes of a plan on a Ray cluster.

Layout: one `EpisodeActor` per worker; each loads the model once (declaring one GPU when the cluster has GPUs,
else one CPU), serves the sites on its own ports, and runs episodes with the usual runner into a scratch trace
database of its own. Every finished episode travels back as rows (`traces.transfer`) and the DRIVER writes it
into the real store: the store stays the single source of truth, only one process writes it, and resume works
exactly as without Ray (the plan is made from the store before anything is scheduled).

Without `--address` a local Ray is started (at most `max(2, workers)` CPUs, never more than the machine has);
with it, the driver joins that cluster and ships this checkout as the job's working directory.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.worker import Worker

if TYPE_CHECKING:
    from runner.worker import AgentSettings, Plan

REPO_ROOT = Path(__file__).resolve().parents[2]
_UPLOAD_EXCLUDES = [".git", ".venv", "runs", "build", "*.sqlite", "*.safetensors", "*.gguf", "__pycache__"]


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RuntimeError("the Ray backend needs Ray: pip install 'confkv-agent[ray]'") from None
    return ray


def init_ray(address: str | None = None, workers: int = 1) -> bool:
    """Connect to `address` or start a local Ray; returns True when this call started/joined it (so it may stop it)."""
    ray = _ray()
    if ray.is_initialized():
        return False
    if address is None:
        cpus = min(os.cpu_count() or 1, max(2, workers))
        runtime_env = {"env_vars": {"PYTHONPATH": str(REPO_ROOT)}}
        ray.init(num_cpus=cpus, include_dashboard=False, runtime_env=runtime_env, logging_level="WARNING")
    else:
        runtime_env = {"working_dir": str(REPO_ROOT), "excludes": _UPLOAD_EXCLUDES}
        ray.init(address=address, runtime_env=runtime_env, logging_level="WARNING")
    return True


class EpisodeActor:
    """One Ray worker: a model, the sites, a scratch store; returns each episode as rows for the driver."""

    def __init__(self, settings: AgentSettings, site_names: Sequence[str]) -> None:
        self.scratch = Path(tempfile.mkdtemp(prefix="confkv-ray-"))
        self.worker = Worker(self.scratch / "traces.sqlite", settings, list(site_names))
        self.run_ids: dict[str, int] = {}

    def _model_to_gpu(self) -> None:
        import ray

        if ray.get_gpu_ids() and self.worker._model is None:
            from confkv.models import load_for_inference

            settings = self.worker.settings  # (on the GPU ray gave this actor, unless INT8: that stays on the CPU)
            self.worker._model = load_for_inference(settings.model, settings.dtype, settings.int8)

    def run(self, task: Any, policy: str) -> tuple[str, dict[str, Any], dict[str, list[dict[str, Any]]]]:
        from runner.worker import SCRIPTED, run_config
        from traces.transfer import export_episode

        if policy != SCRIPTED:
            self._model_to_gpu()
        if policy not in self.run_ids:
            model, config = run_config(policy, self.worker.settings)
            self.run_ids[policy] = self.worker.store.start_run(model, policy, config, git_revision=None, machine=None)
        result = self.worker.run(task, policy, self.run_ids[policy])
        return policy, asdict(result), export_episode(self.worker.store, result.episode_id)

    def close(self) -> None:
        import shutil

        self.worker.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


def run_on_ray(the_plan: Plan, db: str | Path, settings: AgentSettings, site_names: list[str], workers: int,
               on_episode: Callable[[dict[str, Any]], None] | None, address: str | None = None) -> None:
    """Run `the_plan.pending` on `workers` actors; import each result into `db` as it arrives."""
    from traces.store import TraceStore
    from traces.transfer import import_episode

    ray = _ray()
    started = init_ray(address, workers)
    try:
        gpus = 1 if ray.cluster_resources().get("GPU", 0) >= 1 else 0
        remote = ray.remote(num_cpus=0 if gpus else 1, num_gpus=gpus)(EpisodeActor)
        n = min(workers, len(the_plan.pending))
        actors = [remote.remote(settings, site_names) for _ in range(n)]
        pool = ray.util.ActorPool(actors)
        try:
            with TraceStore(db) as store:
                results = pool.map_unordered(lambda actor, item: actor.run.remote(*item), the_plan.pending)
                for policy, result, payload in results:
                    result["episode_id"] = import_episode(store, the_plan.run_ids[policy], payload)
                    if on_episode is not None:
                        on_episode(result)
        finally:
            try:
                ray.get([a.close.remote() for a in actors], timeout=60)
            except Exception:  # noqa: BLE001 - a dead actor cannot close; killing it below frees it anyway
                pass
            for actor in actors:
                ray.kill(actor)
    finally:
        if started:
            ray.shutdown()
