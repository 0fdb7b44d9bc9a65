"""One agent episode: confined browser, observe -> act -> parse -> execute, WebArena stop rules, evaluate, record.

Why everything is recorded as it happens (not at the end): an episode on a 2-core CPU takes minutes; when it
crashes or is interrupted, the steps so far are in the trace database and the episode is closed as `error` with
the reason, so a resumed eval knows to rerun it. The browser is a context manager, so Chromium is gone on success,
on error and on Ctrl-C alike.
"""

from __future__ import annotations

import contextlib
import dataclasses
import resource
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.actions import Action, ActionParseError, parse_action
from agent.stopping import StopRules
from runner import interrupts
from runner.heap import trim_heap
from traces.records import DecodeToken, StepRecord

if TYPE_CHECKING:
    from agent.model_policy import Agent, StepInfo
    from envs.taskspec import Task
    from runner.episode_tasks import EpisodeTask
    from traces.store import TraceStore


@dataclass
class EpisodeResult:
    episode_id: int
    task_id: int | str  # "miniwob/<name>/<seed>" for MiniWoB++
    policy: str
    status: str  # "done" (evaluated) or "error"
    success: bool
    score: float
    reason: str  # evaluator reason, or the error for status "error"
    answer: str | None = None
    steps: int = 0
    stop_reason: str | None = None
    peak_kv_bytes: int | None = None
    full_kv_bytes: int | None = None
    peak_rss_bytes: int | None = None
    peak_cuda_bytes: int | None = None
    gate_open_rate: float | None = None
    wall_s: float = 0.0
    blocked: list[str] = field(default_factory=list)


class _PeakMemory:
    """Peak RSS of this process over the episode (Linux: VmHWM after resetting it), and peak CUDA memory."""

    def __init__(self) -> None:
        try:
            Path("/proc/self/clear_refs").write_text("5")  # resets the VmHWM high-water mark (Linux >= 4.0)
        except OSError:
            pass
        self.torch = sys.modules.get("torch")  # only when a model is in use; never import torch for a fake policy
        if self.torch is not None and self.torch.cuda.is_available():
            self.torch.cuda.reset_peak_memory_stats()

    def rss(self) -> int:
        try:
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def cuda(self) -> int | None:
        if self.torch is not None and self.torch.cuda.is_available():
            return int(self.torch.cuda.max_memory_allocated())
        return None


def _with_sites(action: Action, urls: dict[str, str]) -> Action:
    """`goto [__SHOPPING__/x]` (as in reference solutions) -> the running site's URL."""
    from envs.server import PLACEHOLDER_RE, expand_url

    if action.verb == "goto" and action.url and PLACEHOLDER_RE.search(action.url):
        return dataclasses.replace(action, url=expand_url(action.url, urls))
    return action


def _step_record(step: int, obs: Any, reply: str, info: StepInfo, action: Action | None, result: str,
                 parse_error: str | None, exec_error: str | None, step_ms: float) -> StepRecord:
    return StepRecord(
        step=step, url=obs.url, observation=obs.render(), observation_tokens=info.observation_tokens,
        prefilled_tokens=info.prefilled_tokens, total_tokens=info.total_tokens, output_tokens=info.output_tokens,
        raw_output=info.raw_output or reply, action=action.to_text() if action else None, result=result, parse_error=parse_error,
        exec_error=exec_error, kept_tokens_per_layer=info.kept_tokens_per_layer, kv_bytes=info.kv_bytes,
        prefill_ms=info.prefill_ms, decode_ms=info.decode_ms, step_ms=step_ms,
    )  # fmt: skip


def run_episode(
    task: Task | EpisodeTask,
    agent: Agent,
    sites: Any,
    store: TraceStore,
    run_id: int,
    max_steps: int = 30,
    headed: bool = False,
    screenshots_dir: str | Path | None = None,
    on_step: Callable[[StepRecord, list[DecodeToken]], None] | None = None,
    browser: Any = None,
    episode_id: int | None = None,
) -> EpisodeResult:
    """Run `task` with `agent` against running `sites` (`envs.server.Sites`) and record it under `run_id` (as
    `episode_id` when the caller already claimed one with `TraceStore.claim_episode`); `on_step(record, tokens)`
    sees each step as recorded (the live view, `tasks check`).

    `browser`: an open `BrowserSession` to reuse (not closed here; the caller clears it between episodes, e.g.
    `tasks check` runs two episodes in one Chromium); by default each episode gets its own confined browser."""
    from runner.episode_tasks import as_episode_task
    from runner.executor import execute
    from runner.observe import observe

    task = as_episode_task(task)
    if episode_id is None:
        episode_id = store.start_episode(run_id, str(task.task_id), policy=agent.name)
    started = time.monotonic()
    peaks = _PeakMemory()
    out = EpisodeResult(episode_id, task.task_id, agent.name, "error", False, 0.0, "")
    urls = sites.urls

    def memory_fields() -> dict[str, Any]:
        mem = agent.memory()
        return dict(
            peak_kv_bytes=mem.peak_kv_bytes if mem else None, full_kv_bytes=mem.full_kv_bytes if mem else None,
            peak_rss_bytes=peaks.rss(), peak_cuda_bytes=peaks.cuda(), wall_s=time.monotonic() - started,
            gate_open_rate=mem.gate_open_rate if mem else None,
        )  # fmt: skip

    fields: dict[str, Any] = {}
    session = browser or task.open_session(sites, not headed, screenshots_dir)
    try:
        with session if browser is None else contextlib.nullcontext(session):
            agent.begin(task.prepare(session, sites))
            rules = StopRules(max_steps=max_steps)
            last_result: str | None = None
            for step in range(max_steps):
                t0 = time.perf_counter()
                obs = observe(session)
                reply, info = agent.act(obs, last_result)
                action, parse_error, exec_error = None, None, None
                try:
                    action = parse_action(reply)
                except ActionParseError as exc:
                    parse_error = str(exc)
                stop_reason = rules.record(action)
                done = False
                if action is None:
                    last_result = f"INVALID reply: {parse_error}"
                else:
                    try:
                        result = execute(session, _with_sites(action, urls), obs)
                    except ValueError as exc:  # a placeholder for a site this task does not run
                        result = None
                        exec_error = str(exc)
                    if result is not None and not result.ok:
                        exec_error = result.error
                    done = bool(result and result.done)
                    out.answer = result.answer if done and result else out.answer
                    last_result = f"FAILED: {exec_error}" if exec_error else f"OK: {action.to_text()}"
                session.screenshot(f"episode{episode_id}_step{step:02d}")
                step_ms = (time.perf_counter() - t0) * 1000
                if info.prefill_chunks:
                    store.add_prefill_chunks(episode_id, step, info.prefill_chunks)
                if info.tokens:
                    store.add_decode_tokens(episode_id, step, info.tokens)
                record = _step_record(step, obs, reply, info, action, last_result, parse_error, exec_error, step_ms)
                store.add_step(episode_id, record)
                out.steps = step + 1
                trim_heap()  # the step's freed prefill buffers go back to the OS (runner.heap)
                if on_step is not None:
                    on_step(record, info.tokens)
                if done:
                    out.stop_reason = "stop action"
                    break
                if task.finished(session):
                    out.stop_reason = "the task page ended the episode"
                    break
                if stop_reason:
                    out.stop_reason = stop_reason
                    break
            evaluation = task.evaluate(out.answer, session, sites)
        fields = memory_fields()
        store.add_blocked(episode_id, session.blocked)
        store.finish_episode(episode_id, success=evaluation.passed, score=evaluation.score,
                             eval_reason=evaluation.reason, **fields)
        out.status, out.success, out.score, out.reason = "done", evaluation.passed, evaluation.score, evaluation.reason
    except KeyboardInterrupt:
        store.add_blocked(episode_id, session.blocked)
        store.fail_episode(episode_id, interrupts.INTERRUPTED_REASON, **memory_fields())
        raise
    except Exception as exc:  # browser crash, model error, evaluator failure: record it, keep the batch going
        fields = memory_fields()
        store.add_blocked(episode_id, session.blocked)
        store.fail_episode(episode_id, exc, **fields)
        out.reason = f"{type(exc).__name__}: {exc}"
    finally:
        agent.close()
    for key, value in fields.items():
        setattr(out, key, value)
    out.blocked = list(session.blocked)
    return out
