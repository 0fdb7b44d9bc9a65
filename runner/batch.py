"""`confkv-agent eval`: tasks x policies, resumable, optionally across worker processes.

Resume: each (model, policy, policy config) is one trace run, found again with `start_run(resume=True)`; tasks it
already finished (`finished_tasks`) are skipped, and episodes that ended in an error (a crash, Ctrl-C) run again.
So a batch killed after N episodes and launched again runs only what is missing.

Workers: `--workers N` starts N spawned processes; each loads the model once, serves the sites on its own ports
(its own live databases, so resets do not race) and writes through its own `TraceStore` handle (the store
serializes writers). With one worker everything runs in this process.

Cooperation: every episode is claimed atomically (`TraceStore.claim_episode`) right before it runs, under a lease
that a `LeaseKeeper` thread keeps fresh, so two `eval` commands on one database split the pending work: a task that
another live process holds, or has finished meanwhile, is skipped (reported with status "skipped"); one whose owner
died is taken over.

Drain: SIGUSR1 to the eval process (`runner.interrupts`) stops it at the next episode boundary, the episodes already
running finished (with workers, the queued ones are not started; a Ray run ignores it).

The policy name `scripted` replays each task's reference solution instead of a model (`runner.worker.SCRIPTED`).
What runs the episodes in one process (settings, run key, `Worker`, `Plan`) lives in `runner.worker`.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner import interrupts
from runner.worker import SCRIPTED, AgentSettings, Plan, Worker, agent_identity, check_policy_names, run_config

if TYPE_CHECKING:
    from envs.taskspec import Task
    from traces.summary import TraceSummary

_WORKER: Worker | None = None


def _init_worker(db: str, settings: AgentSettings, site_names: list[str]) -> None:
    global _WORKER
    if hasattr(signal, "SIGUSR1"):  # a drain sent to the process group is the parent's to act on, not a kill
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    _WORKER = Worker(db, settings, site_names)


def _run_in_worker(task: Task, policy: str, run_id: int) -> dict[str, Any]:
    assert _WORKER is not None
    return _WORKER.run_claimed(task, policy, run_id)


def plan(store: Any, tasks: Sequence[Task], policies: Sequence[str], settings: AgentSettings) -> Plan:
    """Find (or create) one run per policy and list the episodes that are not finished yet."""
    from confkv.policy import KVPolicy

    run_ids: dict[str, int] = {}
    done: dict[str, set[str]] = {}
    for policy in policies:
        model, config = run_config(policy, settings)
        run_ids[policy] = store.start_run(model, policy, config, resume=True, defaults=KVPolicy.defaults())
        done[policy] = store.finished_tasks(run_ids[policy])
    # task-major order: an eval stopped halfway has every policy on the same tasks, so its figures compare
    pending = [(task, p) for task in tasks for p in policies if str(task.task_id) not in done[p]]
    return Plan(run_ids, pending, len(tasks) * len(policies) - len(pending))


def run_batch(
    tasks: Sequence[Task],
    policies: Sequence[str],
    settings: AgentSettings,
    db: str | Path,
    workers: int = 1,
    on_episode: Callable[[dict[str, Any]], None] | None = None,
    on_plan: Callable[[Plan], None] | None = None,
    backend: str = "local",
    address: str | None = None,
) -> tuple[Plan, TraceSummary]:
    """Run every unfinished (task, policy) episode; returns the plan and the summary of this eval's runs.

    `backend="ray"` runs them on a Ray cluster (`runner.backends.ray`; `address` None = a local Ray)."""
    from traces.store import TraceStore

    check_policy_names(policies, settings)
    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    with TraceStore(db) as store:
        the_plan = plan(store, tasks, policies, settings)
    if on_plan is not None:
        on_plan(the_plan)
    site_names = sorted({name for task, _ in the_plan.pending for name in task.sites})
    if the_plan.pending:
        if backend == "ray":
            from runner.backends.ray import run_on_ray

            run_on_ray(the_plan, db, settings, site_names, workers, on_episode, address=address)
        elif workers == 1:
            worker = Worker(db, settings, site_names)
            try:
                for task, policy in the_plan.pending:
                    if interrupts.draining():  # SIGUSR1: the episode in flight is done; the rest stays pending
                        break
                    result = worker.run_claimed(task, policy, the_plan.run_ids[policy])
                    if on_episode is not None:
                        on_episode(result)
            finally:
                worker.close()
        else:
            _run_parallel(the_plan, db, settings, site_names, workers, on_episode)
    with TraceStore(db) as store:
        summary = store.summary(run_ids=the_plan.run_ids.values())
    return the_plan, summary


def _run_parallel(the_plan: Plan, db: str | Path, settings: AgentSettings, site_names: list[str], workers: int,
                  on_episode: Callable[[dict[str, Any]], None] | None) -> None:
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")  # no fork after torch and Playwright threads exist
    n = min(workers, len(the_plan.pending))
    with ProcessPoolExecutor(n, mp_context=ctx, initializer=_init_worker,
                             initargs=(str(db), settings, site_names)) as pool:  # fmt: skip
        futures = {pool.submit(_run_in_worker, t, p, the_plan.run_ids[p]) for t, p in the_plan.pending}
        try:
            while futures:
                finished, futures = wait(futures, return_when=FIRST_COMPLETED)
                if interrupts.draining():  # SIGUSR1: the running episodes finish, the queued ones are not started
                    futures = {fut for fut in futures if not fut.cancel()}
                for fut in finished:
                    result = fut.result()
                    if on_episode is not None:
                        on_episode(result)
        except BaseException:
            for fut in futures:
                fut.cancel()
            raise


def run_forced_batch(
    tasks: Sequence[Task],
    policies: Sequence[str],
    settings: AgentSettings,
    db: str | Path,
    budgets: Sequence[int] = (),
    on_result: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[dict[str, int], dict[str, Any]]:
    """`eval --mode forced` (see `runner.forced`): load the model once, serve the tasks' sites, score every
    unfinished (task, policy[, budget]); returns (run id per label, the forced summary of those runs)."""
    from envs.server import Sites
    from runner.footprint import footprint_slots
    from runner.forced import forced_specs, run_forced
    from traces.leases import LeaseKeeper
    from traces.store import TraceStore

    if SCRIPTED in policies:
        raise ValueError("--mode forced scores KV policies; 'scripted' has no cache to score")
    check_policy_names(policies, settings)
    from confkv.models import load_for_inference

    model, tokenizer = load_for_inference(settings.model, settings.dtype, settings.int8)
    specs = forced_specs({name: settings.kv_policy(name) for name in policies}, budgets,
                         footprint_slots(model.config, settings.dtype))
    agent = {"constrained": settings.constrained, "reasoning": settings.reasoning, "int8": settings.int8,
             "dtype": settings.dtype, **agent_identity(settings.reasoning)}  # fmt: skip
    with TraceStore(db) as store, Sites(sorted({n for t in tasks for n in t.sites})) as sites:
        lease = LeaseKeeper(db, store.owner)
        try:
            run_ids = run_forced(tasks, specs, model, tokenizer, settings.model, store, sites, agent, on_result)
        finally:
            lease.close()
        return run_ids, store.forced_summary(run_ids=run_ids.values())
