"""`eval --mode forced`: what each KV policy keeps of what the agent needs, measured on the reference trajectories.

Why: free-running success mixes the cache's effect with the agent's skill (a 1.5B model fails mostly on its own).
Here the agent never decides. Each task's reference solution is replayed once in the real, confined browser on
freshly reset sites (the trajectory: the observation and previous result of every step); then, per policy, a
`ModelAgent`'s live cache is fed exactly what the agent would have seen (`ModelAgent.open_turn`: the same chat
turns, pins and prompt), and the reference action is appended as its reply, teacher-forced. The logits of those
tokens give the mean NLL and greedy token accuracy of every action and, apart, of the final `stop [...]` answer;
greedy decoding from `stop [` on a copy of the cache says whether the answer comes back (`string_match` decides).
SCBench-style: the later question is unknown when the cache decides what to drop.

Decisions: at every reference step, before the reference reply is forced, the agent's own greedy constrained
decision is decoded on a fork of the live cache (`ModelAgent.decide`, the same decoder, bans and labels as a live
episode), recorded as the step's `raw_output`, and scored as equal to the reference action (decision accuracy) and,
in `traces.forced`, as equal to `full`'s decision at the same step (agreement). A policy that drops what the agent
needs shows up as a different decision even where the reference tokens' likelihood barely moves.

Faithfulness: reference steps name elements as `role 'name'`; the executor acts on observation ids, so each target
is mapped to the first observation id with that role and name (document order, as Playwright's `.first`). The
agent sees and writes labels (agent version 7 on), so the reply forced into the cache is the reference action as
the agent would have written it (`to_labels`), exactly as in the decision replay (`runner.decisions`). A reply is
forced in one forward (eviction after it), while the agent decodes token by token (eviction after each token): the
same pins, a slightly later eviction within one reply.

A reference step that fails in the browser, or a reference answer the evaluator rejects, marks the task broken
(the episode is an error whose text starts with `traces.forced.BROKEN_PREFIX`), not a score.

MiniWoB++: no MiniWoB task can be forced yet: their instructions are drawn per seed and have no stored reference
trajectory, and this mode replays `tasks/*.yaml` reference solutions only (see docs/results/forced-smoke.md).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from agent.actions import Action, ActionParseError, RoleTarget, parse_action
from agent.targets import to_labels
from runner import interrupts
from runner.footprint import footprint_labels
from runner.heap import trim_heap
from traces.forced import BROKEN_PREFIX, same_decision
from traces.forced_plan import cheapest_first
from traces.records import StepRecord

if TYPE_CHECKING:
    from agent.model_policy import ModelAgent
    from agent.observation import Observation
    from confkv.policy import KVPolicy
    from envs.taskspec import Task
    from traces.store import TraceStore

MAX_ANSWER_TOKENS = 48


class BrokenTrajectory(RuntimeError):
    """The reference solution cannot be replayed (a step fails, or the evaluator rejects its answer)."""


@dataclass(frozen=True)
class ForcedSpec:
    """One forced run: a label (`confkv`, or `confkv@256` in a budget sweep), its policy and where it came from."""

    label: str
    policy: KVPolicy
    base: str
    budget: int | None = None


@dataclass
class RefStep:
    observation: Observation
    last_result: str | None
    action: Action  # the agent's form (observation ids), as forced and executed

    @property
    def reply(self) -> str:
        return self.action.to_text()


@dataclass
class Trajectory:
    steps: list[RefStep] = field(default_factory=list)
    answer: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The recorded replay as data (observations, forced actions as canonical text), so a machine without a
        browser or the sites (the GPU machine) can score it; `Trajectory.from_json` reads it back. The observations'
        browser node ids (`ids`, the executor's handles, different in every browser) are left out: the model never
        sees them."""
        return {"answer": self.answer, "steps": [
            {"observation": {k: v for k, v in dataclasses.asdict(s.observation).items() if k != "ids"},
             "last_result": s.last_result, "action": s.reply}
            for s in self.steps]}  # fmt: skip

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Trajectory:
        from agent.observation import Observation

        steps = []
        for s in data["steps"]:
            obs = dict(s["observation"])
            obs["nodes"] = {int(k): tuple(v) for k, v in obs.get("nodes", {}).items()}
            steps.append(RefStep(Observation(**obs), s["last_result"], parse_action(s["action"])))
        return cls(steps, data.get("answer"))


# ---- budgets matched in bytes (runner.footprint) -----------------------------------------------------------------
def forced_specs(policies: Mapping[str, KVPolicy], budgets: Sequence[int],
                 slots: tuple[int, int] = (0, 0)) -> list[ForcedSpec]:
    """Without budgets one spec per policy (name -> built policy, in order); with them, every evicting policy at
    every budget (`full` once), `slots` from `runner.footprint.footprint_slots`."""
    return [ForcedSpec(label, policy, base, budget)
            for label, (policy, base, budget) in footprint_labels(policies, budgets, slots).items()]  # fmt: skip


# ---- the trajectory, replayed once per task in the browser ----------------------------------------------------------
def agent_form(action: Action, observation: Observation) -> Action:
    """`click [link 'My Orders']` -> `click [12]`: the id the agent would have used (role targets that match no
    observation node stay as they are; the executor resolves them)."""
    target = action.target
    if isinstance(target, RoleTarget):
        for oid, (role, name) in observation.nodes.items():
            if role == target.role and name == target.name:
                return dataclasses.replace(action, target=oid)
    return action


def record_trajectory(task: Task, sites: Any, browser: Any) -> Trajectory:
    """Reset the task's sites, clear the browser, replay the reference solution; raises `BrokenTrajectory`."""
    from envs.evaluators import evaluate
    from envs.server import canonical_origins
    from runner.episode import _with_sites
    from runner.episode_tasks import SiteTask
    from runner.executor import execute
    from runner.observe import observe

    sites.reset(task.sites)
    browser.context.clear_cookies()
    for page in browser.pages[1:]:
        page.close()
    SiteTask(task).prepare(browser, sites)
    out, last_result = Trajectory(), None
    for i, text in enumerate(task.reference_solution):
        obs = observe(browser)
        action = agent_form(parse_action(text), obs)
        try:
            result = execute(browser, _with_sites(action, sites.urls), obs)
        except ValueError as exc:
            raise BrokenTrajectory(f"step {i + 1} {text!r} failed: {exc}") from None
        if not result.ok:
            raise BrokenTrajectory(f"step {i + 1} {text!r} failed: {result.error}")
        shown = dataclasses.replace(obs, url=canonical_origins(obs.url, sites.urls),
                                    text=canonical_origins(obs.text, sites.urls))  # fmt: skip
        out.steps.append(RefStep(shown, last_result, action))
        last_result = f"OK: {action.to_text()}"
        if result.done:
            out.answer = result.answer
            break
    verdict = evaluate(task, out.answer, browser.active_page, sites.urls)
    if not verdict.passed:
        raise BrokenTrajectory(f"the reference solution does not pass the evaluator: {verdict.reason}")
    return out


# ---- scoring one policy on one trajectory ---------------------------------------------------------------------------
def _answer_span(reply: str, answer: str | None) -> tuple[int, int] | None:
    if answer is None or not reply.startswith("stop [") or not answer:
        return None
    return len("stop ["), len("stop [") + len(answer)


def greedy_answer(agent: ModelAgent) -> str:
    """Greedy decoding from `stop [` on a copy of the live cache (the original goes on with the forced reply)."""
    session, tok = agent.session, agent.tokenizer
    fork = copy.deepcopy(session, {id(session.model): session.model, id(tok): tok})
    logits = fork.append(tok("stop [", add_special_tokens=False).input_ids)
    out: list[int] = []
    text = ""
    for _ in range(MAX_ANSWER_TOKENS):
        token = int(logits[0].argmax())
        if token in agent.stop_ids:
            break
        out.append(token)
        text = tok.decode(out, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        depth = 1
        for j, ch in enumerate(text):
            depth += {"[": 1, "]": -1}.get(ch, 0)
            if depth == 0:
                return text[:j]
        logits = fork.step(token)
    return text


def score_trajectory(agent: ModelAgent, task: Task, traj: Trajectory) -> tuple[dict[str, Any], list[dict[str, Any]],
                                                                                list[StepRecord]]:
    """Feed the trajectory to `agent`'s fresh cache; returns (result row, token rows, step records)."""
    import torch

    from envs.evaluators import clean_answer, string_match

    tok = agent.tokenizer
    agent.begin(task.intent)
    session = agent.session
    session.chunk_confidence = False  # the rows keep no prefill chunk's confidence: an ungated chunk computes one row
    digest = hashlib.sha256()
    tokens: list[dict[str, Any]] = []
    steps: list[StepRecord] = []
    decisions: list[str] = []
    confidences: list[list[float]] = []  # per step: each decided token's choice confidence
    turn_starts: list[int] = []  # where each step's turn (observation, then reply) begins in the cache's positions
    resident: list[list[float]] = []  # per step: the share of each earlier turn still resident when it decides
    judged = "string_match" in task.eval.eval_types and task.eval.reference_answers is not None
    greedy = None
    for i, step in enumerate(traj.steps):
        t0 = time.perf_counter()
        written = to_labels(step.reply, step.observation.labels()) if agent.labels else step.reply
        ids = agent.open_turn(step.observation, step.last_result)
        turn_starts.append(session.seen)
        last = session.append(ids)
        resident.append([round(x, 4) for x in session.cache.resident_shares(list(pairwise(turn_starts)))])
        decided = agent.decision(step.observation, step.last_result)
        decision, decided_text = decided.action, decided.text
        decisions.append(decision)
        confidences.append([round(c, 4) for c in decided.confidences])
        agent.end_turn(decided.confidences)  # a turn-level gate acts on this decision (the reference is forced next)
        reply_ids = tok(written, add_special_tokens=False).input_ids
        digest.update(repr((ids, reply_ids)).encode())
        if step.action.verb == "stop" and judged:
            greedy = greedy_answer(agent)
        logits = agent.force_reply(written, step.reply, step.observation, all_logits=True)[0]
        pred = torch.cat([last[:1], logits[:-1]]).float()
        target = torch.tensor(reply_ids, device=pred.device)
        nll = -torch.log_softmax(pred, dim=-1).gather(1, target[:, None])[:, 0]
        correct = pred.argmax(dim=-1) == target
        span = _answer_span(written, traj.answer if step.action.verb == "stop" else None)
        start = 0
        for j, t in enumerate(reply_ids):
            end = len(tok.decode(reply_ids[: j + 1], skip_special_tokens=False, clean_up_tokenization_spaces=False))
            inside = span is not None and start < span[1] and end > span[0]
            tokens.append({"step": i, "token_index": j, "token_text": tok.decode([t], skip_special_tokens=False),
                           "nll": float(nll[j]), "correct": int(correct[j]), "in_answer": int(inside)})  # fmt: skip
            start = end
        mem = session.cache.memory()
        steps.append(StepRecord(
            step=i, url=step.observation.url, observation=step.observation.render(), prefilled_tokens=len(ids),
            total_tokens=session.seen, output_tokens=len(reply_ids), raw_output=decided_text, action=step.reply,
            result=f"OK: {step.reply} (forced)", kept_tokens_per_layer=list(mem.kept_tokens), kv_bytes=mem.kv_bytes,
            step_ms=(time.perf_counter() - t0) * 1000,
        ))  # fmt: skip
        trim_heap()  # the step's fork, greedy-answer copy and logits, freed: handed back per step as in a live episode
    answer_rows = [t for t in tokens if t["in_answer"]]
    calls = session.stats.steps
    result: dict[str, Any] = {
        "memory_span": task.memory_span, "trajectory_sha": digest.hexdigest()[:16], "steps": len(traj.steps),
        "action_tokens": len(tokens), "action_nll": _mean(t["nll"] for t in tokens),
        "action_acc": _mean(t["correct"] for t in tokens), "answer_tokens": len(answer_rows),
        "answer_nll": _mean(t["nll"] for t in answer_rows), "answer_acc": _mean(t["correct"] for t in answer_rows),
        "greedy_answer": greedy,
        "decisions": json.dumps(decisions),
        "decision_confidences": json.dumps(confidences),
        "resident_shares": json.dumps(resident),
        "decision_acc": _mean(same_action(d, s.reply) for d, s in zip(decisions, traj.steps, strict=True)),
        "mean_kv_bytes": sum(c.kv_bytes * c.tokens for c in calls) / max(1, sum(c.tokens for c in calls)),
        "peak_kv_bytes": int(session.cache.peak_kv_bytes), "full_kv_bytes": int(session.cache.full_kv_bytes()),
        "gate_open_rate": session.cache.gate_open_rate,  # per turn for a turn gate, per forward otherwise
    }  # fmt: skip
    if greedy is not None:
        reference = task.eval.reference_answers
        result["answer_pass"] = int(string_match(greedy, reference).passed)
        result["answer_exact"] = int(traj.answer is not None and clean_answer(greedy) == clean_answer(traj.answer))
    return result, tokens, steps


def same_action(a: str, b: str) -> bool:
    """Two replies are the same decision when they parse to the same action (spacing aside), two stop answers when
    the evaluator reads them alike (`traces.forced.same_decision`, the rule the report applies); an unparsable
    reply equals nothing but the identical text."""
    try:
        return same_decision(parse_action(a).to_text(), parse_action(b).to_text())
    except ActionParseError:
        return a.strip() == b.strip()


def _mean(values: Any) -> float | None:
    vals = list(values)
    return sum(vals) / len(vals) if vals else None


# ---- the resumable batch --------------------------------------------------------------------------------------------
def run_config(spec: ForcedSpec, agent_settings: dict[str, Any]) -> dict[str, Any]:
    return {**spec.policy.to_dict(), "mode": "forced", "base_policy": spec.base, "budget": spec.budget,
            "agent": agent_settings}  # fmt: skip


def run_forced(
    tasks: Sequence[Task],
    specs: Sequence[ForcedSpec],
    model: Any,
    tokenizer: Any,
    model_name: str,
    store: TraceStore,
    sites: Any,
    agent_settings: dict[str, Any] | None = None,
    on_result: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, int]:
    """Score every unfinished (task, spec), cheapest tasks first (`cheapest_first`); one browser replay per task
    serves all its pending specs. Returns the run id per label. Resumable: a spec's run is found again by its config
    and its finished tasks are skipped."""
    from agent.model_policy import ModelAgent
    from confkv.policy import KVPolicy
    from runner.browser import BrowserSession
    from traces.forced import record_forced

    settings = dict(agent_settings or {})
    run_ids = {s.label: store.start_run(model_name, s.label, run_config(s, settings), resume=True, mode="forced",
                                        defaults=KVPolicy.defaults())
               for s in specs}  # fmt: skip
    for task in sorted(tasks, key=cheapest_first):  # an interrupted run has finished the most tasks
        if interrupts.draining():  # SIGUSR1: the task in flight is done; the rest stays pending for a rerun
            break
        claimed: list[tuple[ForcedSpec, int]] = []
        for spec in specs:
            if str(task.task_id) in store.finished_tasks(run_ids[spec.label]):
                continue
            episode = store.claim_episode(run_ids[spec.label], str(task.task_id), spec.label)
            if episode is not None:
                claimed.append((spec, episode))
        if not claimed:
            continue
        try:
            with BrowserSession([sites.url(name) for name in task.sites]) as browser:
                traj = record_trajectory(task, sites, browser)
        except BaseException as exc:  # a broken reference is the task's verdict; anything else is owed again
            broken, interrupted = isinstance(exc, BrokenTrajectory), not isinstance(exc, Exception)
            reason = str(exc) if broken else f"{type(exc).__name__}: {exc}"
            error = BROKEN_PREFIX + reason if broken else interrupts.INTERRUPTED_REASON if interrupted else exc
            for spec, episode in claimed:
                store.fail_episode(episode, error)
                if on_result and not interrupted:
                    on_result({"task_id": task.task_id, "policy": spec.label, "status": "broken" if broken else "error",
                               "reason": reason})  # fmt: skip
            if interrupted:
                raise
            continue
        for i, (spec, episode) in enumerate(claimed):
            started = time.monotonic()
            agent = ModelAgent(model, tokenizer, spec.policy, model_name=model_name,
                               constrained=settings.get("constrained", True),
                               reasoning=settings.get("reasoning", False), labels=True)  # fmt: skip
            try:
                result, tokens, steps = score_trajectory(agent, task, traj)
                for record in steps:
                    store.add_step(episode, record)
                record_forced(store, episode, {**result, "task_id": str(task.task_id), "policy": spec.label,
                                               "base_policy": spec.base, "budget": spec.budget}, tokens)  # fmt: skip
                store.finish_episode(episode, success=bool(result.get("answer_pass")),
                                     eval_reason=f"forced: greedy answer {result['greedy_answer']!r}",
                                     peak_kv_bytes=result["peak_kv_bytes"], full_kv_bytes=result["full_kv_bytes"],
                                     gate_open_rate=result["gate_open_rate"],
                                     wall_s=time.monotonic() - started)  # fmt: skip
                status = "done"
            except KeyboardInterrupt:
                for _, left in claimed[i:]:  # the task's later claims too: they are pending again at once
                    store.fail_episode(left, interrupts.INTERRUPTED_REASON)
                raise
            except Exception as exc:  # a model or store error in one policy must not lose the others
                store.fail_episode(episode, exc)
                result, status = {"reason": f"{type(exc).__name__}: {exc}"}, "error"
            finally:
                agent.close()
                trim_heap()  # freed prefill, fork and logits buffers go back to the OS (runner.heap)
            if on_result:
                on_result({"task_id": task.task_id, "policy": spec.label, "status": status, **result})
    return run_ids
