"""`confkv-agent bench actions`: single-step action accuracy of the agent model on 12 fixed cases.

Why single steps: a whole episode on a 2-core CPU takes many minutes and one wrong step hides everything after
it. A case is a real state of our sites (reached by replaying the first k steps of a task's reference solution in
the confined browser), the task intent, the observation the agent would see, and the reference step k as the
acceptable action. A reply is judged by meaning, not by text: an id target is right when it names the same element
(role and name) as the reference target, a `type` when the target matches and the text contains the reference text,
a `stop` when the task's own evaluator accepts the answer.

Compared side by side: free vs grammar-constrained decoding, and fp32 vs dynamic INT8 Linear layers (speed AND
accuracy), each decision from a fresh `full` cache (no eviction: this measures the model, not the cache).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.actions import Action, ActionParseError, RoleTarget, parse_action
from envs import TASKS_DIR

# (task file, k): the state after the first k reference steps; the reference step k is the expected action.
CASES: tuple[tuple[str, int], ...] = (
    ("shopping_001.yaml", 0),  # shop home: search for a product
    ("shopping_001.yaml", 1),  # search results: open the product
    ("shopping_001.yaml", 2),  # product page: answer the price
    ("shopping_003.yaml", 0),  # signed in: open My Orders
    ("shopping_003.yaml", 1),  # order list: open one order
    ("shopping_003.yaml", 2),  # order page: answer its status
    ("forum_001.yaml", 1),  # forum list: open a forum
    ("forum_001.yaml", 3),  # top threads: answer the title
    ("forum_005.yaml", 1),  # forums page: answer a count
    ("classifieds_001.yaml", 0),  # classifieds home: search
    ("classifieds_001.yaml", 2),  # listing page: answer the price
    ("classifieds_003.yaml", 1),  # seller page: answer a count
)


@dataclass
class Case:
    name: str
    task: Any  # envs.taskspec.Task
    observation: Any  # agent.observation.Observation
    expected: Action


@dataclass
class Decision:
    case: str
    reply: str
    correct: bool
    why: str
    prefill_tokens: int
    prefill_s: float
    decode_s: float


def capture_cases(names: Sequence[tuple[str, int]] = CASES, tasks_dir: Path = TASKS_DIR) -> list[Case]:
    """Reach each case's state on freshly reset sites and observe it (one confined browser per case)."""
    from envs.server import Sites
    from envs.taskspec import load_task
    from runner.browser import BrowserSession
    from runner.episode import _with_sites
    from runner.episode_tasks import SiteTask
    from runner.executor import execute
    from runner.observe import observe

    tasks = {f: load_task(tasks_dir / f, parse_action) for f, _ in names}
    out: list[Case] = []
    with Sites(sorted({s for t in tasks.values() for s in t.sites})) as sites:
        for file, k in names:
            task = tasks[file]
            sites.reset()
            with BrowserSession([sites.url(s) for s in task.sites]) as session:
                SiteTask(task).prepare(session, sites)
                for line in task.reference_solution[:k]:
                    result = execute(session, _with_sites(parse_action(line), sites.urls), None)
                    if not result.ok:
                        raise RuntimeError(f"{file}: replaying {line!r} failed: {result.error}")
                obs = observe(session)
            expected = _with_sites(parse_action(task.reference_solution[k]), sites.urls)
            out.append(Case(f"{Path(file).stem}@{k}", task, obs, expected))
    return out


def judge(reply: str, case: Case) -> tuple[bool, str]:
    """Is the reply an acceptable action for the case? (correct, reason)"""
    from envs.evaluators import contains, string_match

    try:
        action = parse_action(reply)
    except ActionParseError as exc:
        return False, f"format: {exc}"
    want = case.expected
    if action.verb != want.verb:
        return False, f"verb {action.verb}, expected {want.verb}"
    if want.verb == "stop":
        ref = case.task.eval.reference_answers
        ok = ref is not None and string_match(action.answer, ref).passed
        return ok, "answer accepted" if ok else f"answer {action.answer!r} rejected"
    if isinstance(want.target, RoleTarget):
        role, name = case.observation.nodes.get(action.target, ("", "")) if isinstance(action.target, int) else (
            (action.target.role, action.target.name) if action.target else ("", ""))
        if (role, name) != (want.target.role, want.target.name):
            return False, f"grounding: [{action.target}] is {role} {name!r}, expected {want.target.to_text()}"
        if want.verb == "type" and not contains(want.text or "", action.text or ""):
            return False, f"typed {action.text!r}, expected {want.text!r}"
        return True, "right element"
    same = dataclasses.replace(action, press_enter=want.press_enter) == want
    return same, "same action" if same else f"{action.to_text()} != {want.to_text()}"


def run_cases(policy_factory: Callable[[], Any], cases: Sequence[Case]) -> list[Decision]:
    """One decision per case, each from a fresh conversation and cache."""
    out = []
    for case in cases:
        policy = policy_factory()
        policy.begin(case.task.intent)
        reply, info = policy.act(case.observation, None)
        policy.close()
        ok, why = judge(reply, case)
        out.append(Decision(case.name, reply, ok, why, info.prefilled_tokens or 0, (info.prefill_ms or 0) / 1000,
                            (info.decode_ms or 0) / 1000))  # fmt: skip
    return out


def run_bench(model_name: str, modes: Sequence[str] = ("free", "constrained"), precisions: Sequence[str] = ("fp32",
              "int8"), limit: int | None = None, loader: Callable[[str, bool, str], tuple[Any, Any]] | None = None,
              progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:  # fmt: skip
    """Accuracy and speed per (precision, mode); returns the JSON report."""
    from agent.model_policy import ModelAgent
    from confkv.models import load_for_inference

    loader = loader or (lambda name, int8, dtype: load_for_inference(name, dtype, int8))
    progress("capturing observations from the sites")
    cases = capture_cases(CASES[:limit] if limit else CASES)
    report: dict[str, Any] = {"model": model_name, "cases": [c.name for c in cases], "configs": {}}
    for precision in precisions:
        model, tokenizer = loader(model_name, precision == "int8", "bf16" if precision == "bf16" else "fp32")
        for mode in modes:
            progress(f"{precision} {mode}")
            decisions = run_cases(lambda m=model, t=tokenizer, mode=mode: ModelAgent(  # noqa: E731
                m, t, "full", constrained=mode == "constrained", model_name=model_name), cases)
            n = len(decisions)
            total_s = sum(d.prefill_s + d.decode_s for d in decisions)
            report["configs"][f"{precision}/{mode}"] = {
                "correct": sum(d.correct for d in decisions),
                "cases": n,
                "accuracy": sum(d.correct for d in decisions) / n,
                "s_per_decision": total_s / n,
                "prefill_share": sum(d.prefill_s for d in decisions) / total_s if total_s else None,
                "mean_prefill_tokens": sum(d.prefill_tokens for d in decisions) / n,
                "decisions": [dataclasses.asdict(d) for d in decisions],
            }
        del model
    return report


def format_report(report: dict[str, Any]) -> list[str]:
    lines = [f"bench actions: {report['model']}, {len(report['cases'])} cases"]
    lines.append(f"{'config':<20} {'correct':>8} {'s/decision':>11} {'prefill %':>10} {'prefill tok':>12}")
    for name, c in report["configs"].items():
        share = "-" if c["prefill_share"] is None else f"{100 * c['prefill_share']:.0f}"
        lines.append(f"{name:<20} {c['correct']:>4}/{c['cases']:<3} {c['s_per_decision']:>11.1f} {share:>10} "
                     f"{c['mean_prefill_tokens']:>12.0f}")
    for name, c in report["configs"].items():
        wrong = [f"{d['case']}: {d['reply']!r} ({d['why']})" for d in c["decisions"] if not d["correct"]]
        if wrong:
            lines.append(f"{name} misses: " + "; ".join(wrong))
    return lines
