"""What runs eval episodes in one process, whichever backend schedules them: the agent's settings, the run key
(`run_config`), the `Worker` (model, sites, store handle) and the `Plan` of pending episodes.

A module of its own, below `runner.batch` (which plans an eval and runs it here, in spawned processes, or on Ray)
and `runner.backends.ray` (whose actors each hold a `Worker`): both import it, neither imports the other's module
for it, so there is no import cycle (tests/test_layering.py).

The policy name `scripted` replays each task's reference solution instead of a model: a cheap end-to-end check of
the browser, the sites, the evaluators and the traces (model name recorded as `scripted`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.heap import trim_heap

if TYPE_CHECKING:
    from agent.model_policy import Agent
    from confkv.policy import KVPolicy
    from envs.taskspec import Task
    from runner.episode import EpisodeResult

SCRIPTED = "scripted"


@dataclass
class AgentSettings:
    """How the model policies are built (shared by `run` and `eval`).

    `policies` holds the KV policies already built, by name, with their overrides applied and checked: the command
    line builds them once (`cli.policies.build_policies`), and every process that runs episodes (spawned workers,
    Ray actors: the settings travel pickled) uses those objects, so no layer below the CLI parses `--set` strings.
    A name not in it is the registered preset unchanged (a caller without overrides need not build anything)."""

    model: str
    policies: dict[str, KVPolicy] = field(default_factory=dict)
    constrained: bool = True
    reasoning: bool = False
    int8: bool = False
    max_steps: int = 30
    dtype: str = "fp32"  # a concrete precision name (confkv.models.precision): the CLI resolves `auto` first

    def kv_policy(self, name: str) -> KVPolicy:
        """The built policy for `name`; raises `PolicyError` for a name that is neither built nor registered."""
        built = self.policies.get(name)
        if built is not None:
            return built
        from confkv.policies import get_policy

        return get_policy(name)


def check_policy_names(names: Sequence[str], settings: AgentSettings) -> None:
    """Fail fast (before any browser or model) on a policy name that is neither built nor registered."""
    if not names:
        raise ValueError("no policies given")
    for name in names:
        if name != SCRIPTED:
            settings.kv_policy(name)


def run_config(policy: str, settings: AgentSettings) -> tuple[str, dict[str, Any]]:
    """(model name, config) identifying a run; the config holds everything that changes the agent's behaviour."""
    if policy == SCRIPTED:
        return SCRIPTED, {"agent": "reference_solution"}
    config = settings.kv_policy(policy).to_dict()
    config["agent"] = {"constrained": settings.constrained, "reasoning": settings.reasoning, "int8": settings.int8,
                       "max_steps": settings.max_steps, "dtype": settings.dtype, **agent_identity(settings.reasoning)}  # fmt: skip
    return settings.model, config


def agent_identity(reasoning: bool, labels: bool = True) -> dict[str, Any]:
    """What makes two agents the same agent beyond their settings: the decision rules' version and a hash of the
    system prompt and demonstration. Part of the run key, so a resumed eval never mixes two agents' episodes.
    (`labels=False`: the id-target prompt, which the trajectory-forced eval uses.)"""
    import hashlib

    from agent.model_policy import AGENT_VERSION
    from agent.prompt import demo_turns, system_prompt

    text = system_prompt(reasoning, labels) + "".join(m["content"] for m in demo_turns(reasoning, labels))
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    return {"version": AGENT_VERSION, "prompt_sha": digest}


class Worker:
    """Everything an episode needs that is expensive to make: the model, the sites, a store handle."""

    def __init__(self, db: str | Path, settings: AgentSettings, site_names: Sequence[str]) -> None:
        from runner.episode_tasks import start_sites
        from traces.leases import LeaseKeeper
        from traces.store import TraceStore

        self.settings = settings
        self.store = TraceStore(db)
        self.sites = start_sites(list(site_names))
        self.lease = LeaseKeeper(db, self.store.owner)
        self._model: tuple[Any, Any] | None = None

    def agent(self, policy: str, task: Task) -> Agent:
        from agent.model_policy import ModelAgent, ScriptedAgent

        if policy == SCRIPTED:
            return ScriptedAgent(task.reference_solution)
        kv_policy = self.settings.kv_policy(policy)
        if self._model is None:
            from confkv.models import load_for_inference

            self._model = load_for_inference(self.settings.model, self.settings.dtype, self.settings.int8)
        model, tokenizer = self._model
        return ModelAgent(model, tokenizer, kv_policy,
                           constrained=self.settings.constrained, reasoning=self.settings.reasoning,
                           model_name=self.settings.model)  # fmt: skip

    def run(self, task: Task, policy: str, run_id: int, **kw: Any) -> EpisodeResult:
        from runner.episode import run_episode

        return run_episode(task, self.agent(policy, task), self.sites, self.store, run_id,
                           max_steps=self.settings.max_steps, **kw)  # fmt: skip

    def run_claimed(self, task: Task, policy: str, run_id: int) -> dict[str, Any]:
        """Claim the episode, run it; a task another process holds or finished comes back as status 'skipped'."""
        episode_id = self.store.claim_episode(run_id, str(task.task_id), policy)
        if episode_id is None:
            return {"task_id": task.task_id, "policy": policy, "status": "skipped", "success": False}
        try:
            return asdict(self.run(task, policy, run_id, episode_id=episode_id))
        finally:
            trim_heap()

    def close(self) -> None:
        self.lease.close()
        self.sites.stop()
        self.store.close()



@dataclass
class Plan:
    run_ids: dict[str, int]  # policy -> run id
    pending: list[tuple[Task, str]]  # (task, policy) still to run
    skipped: int  # already finished in earlier invocations
