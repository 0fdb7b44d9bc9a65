"""Head-to-head questions on forced decisions (issues 36 and 37): one policy against another at the same budget.

Why beside the per-policy table: that table compares each policy with `full`; the questions a reader asks compare
two evicting policies at equal bytes (does confkv beat sliding, h2o and random? does the gate beat the same ranker
with the gate off? does recall help?). Each is answered per task on the same trajectory, as the difference of the
two policies' agreement with `full`'s decisions, of their decision accuracy and of their answer NLL, with a paired
bootstrap 95% interval over tasks (`traces.paired`), and a verdict only when the interval excludes zero.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from traces.forced import BASELINE, decision_agreement, same_trajectory
from traces.forced_tables import with_ci
from traces.paired import bootstrap_ci

# (challenger, reference) by preset name; each is asked at every budget both ran at.
# The `-int8` baselines share confkv's storage, so only they meet it at equal bytes on an agent whose pinned
# prompt dominates the cache; the plain ones show what a model-dtype cache keeps (at its own, larger, bytes).
QUESTIONS: tuple[tuple[str, str], ...] = (
    ("confkv", "sliding-int8"),
    ("confkv", "h2o-int8"),
    ("confkv", "random-int8"),
    ("confkv-fixed", "sliding-int8"),
    ("confkv-fixed", "h2o-int8"),
    ("confkv-fixed", "random-int8"),
    ("confkv", "sliding"),
    ("confkv", "h2o"),
    ("confkv", "random"),
    ("confkv", "confkv-fixed"),
    ("confkv-turn", "confkv-fixed"),
    ("confkv-turn-wide", "confkv-fixed"),
    ("confkv-recall", "confkv"),
    ("confkv-turn-recall", "confkv-fixed"),  # the one gate that opens on agent traffic, against the gate off
    ("confkv-turn-recall", "confkv-turn"),  # does recall help the turn gate
)


MIN_TASKS = 5  # paired tasks before a verdict is printed


@dataclass(frozen=True)
class HeadToHead:
    a: str
    b: str
    tasks: int  # tasks both finished on the same trajectory (decision accuracy and answer NLL are over these)
    agreement_tasks: int  # of those, the tasks where `full` ran on the same trajectory too (agreement's tasks)
    d_agreement: float | None  # a's agreement with full minus b's, mean over tasks
    d_agreement_ci: tuple[float, float] | None
    d_decision_acc: float | None
    d_decision_acc_ci: tuple[float, float] | None
    d_answer_nll: float | None  # a minus b: negative = a leaves the reference answer more likely
    d_answer_nll_ci: tuple[float, float] | None
    kv_ratio: float | None  # a's mean resident KV bytes over b's, summed over the paired tasks
    gate_open_a: float | None  # mean recorded gate-open rate (None: ungated or not recorded)
    gate_open_b: float | None

    @property
    def verdict(self) -> str:
        """Which keeps more of full's decisions, only where the paired interval excludes zero over enough tasks (a
        bootstrap over one or two tasks gives an interval of zero width that excludes zero on any difference)."""
        if self.d_agreement_ci is None:
            return "no paired tasks"
        if self.agreement_tasks < MIN_TASKS:
            return f"too few tasks ({self.agreement_tasks} < {MIN_TASKS})"
        lo, hi = self.d_agreement_ci
        if lo > 0:
            return f"{self.a} agrees more"
        if hi < 0:
            return f"{self.b} agrees more"
        return "not shown (interval spans 0)"


def _split(label: str) -> tuple[str, str]:
    name, _, budget = label.partition("@")
    return name, budget


def head_to_head(rows: Sequence[Mapping[str, Any]], a: str, b: str) -> HeadToHead:
    """Compare labels `a` and `b` task by task (rows as `traces.forced.forced_rows` gives them)."""
    by = {(r["policy"], r["task_id"]): r for r in rows if not r["broken"]}
    tasks = sorted({t for (p, t) in by if p == a} & {t for (p, t) in by if p == b})
    pairs = [(by[(a, t)], by[(b, t)], by.get((BASELINE, t))) for t in tasks
             if same_trajectory(by[(a, t)], by[(b, t)])]  # fmt: skip
    agree, dacc, dnll = [], [], []
    for ra, rb, full in pairs:
        if full is not None and same_trajectory(full, ra):
            xa, xb = decision_agreement(ra, full), decision_agreement(rb, full)
            if xa is not None and xb is not None:
                agree.append(xa - xb)
        if ra.get("decision_acc") is not None and rb.get("decision_acc") is not None:
            dacc.append(ra["decision_acc"] - rb["decision_acc"])
        if ra.get("answer_nll") is not None and rb.get("answer_nll") is not None:
            dnll.append(ra["answer_nll"] - rb["answer_nll"])
    kv = [(ra["mean_kv_bytes"], rb["mean_kv_bytes"]) for ra, rb, _ in pairs if ra["mean_kv_bytes"] and rb["mean_kv_bytes"]]

    def gate(label: str) -> float | None:
        vals = [r["gate_open_rate"] for (p, _), r in by.items() if p == label and r.get("gate_open_rate") is not None]
        return fmean(vals) if vals else None

    return HeadToHead(a, b, len(pairs), len(agree), fmean(agree) if agree else None, bootstrap_ci(agree),
                      fmean(dacc) if dacc else None, bootstrap_ci(dacc), fmean(dnll) if dnll else None,
                      bootstrap_ci(dnll), sum(x for x, _ in kv) / sum(y for _, y in kv) if kv else None,
                      gate(a), gate(b))  # fmt: skip


def questions(rows: Sequence[Mapping[str, Any]]) -> list[HeadToHead]:
    """Every `QUESTIONS` pair at every budget where both labels have rows."""
    labels = {r["policy"] for r in rows}
    out = []
    for a_name, b_name in QUESTIONS:
        for a in sorted(label for label in labels if _split(label)[0] == a_name):
            b = f"{b_name}@{_split(a)[1]}" if "@" in a else b_name
            if b in labels:
                out.append(head_to_head(rows, a, b))
    return out


def question_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The Markdown table (empty when no question has both labels)."""
    from traces.fmt import markdown_cell as cell

    found = questions(rows)
    if not found:
        return []

    def pct(v: float | None) -> str:
        return "-" if v is None else f"{v:.0%}"

    lines = ["| A vs B | tasks | Δ agreement with full | Δ decision acc | Δ answer NLL | mean KV A/B | gate open A / B "
             "| verdict |", "|" + "---|" * 8]  # fmt: skip
    for q in found:
        kv = "-" if q.kv_ratio is None else f"{q.kv_ratio:.2f}"
        tasks = f"{q.tasks}" if q.agreement_tasks == q.tasks else f"{q.tasks} ({q.agreement_tasks} with full)"
        lines.append(f"| {cell(q.a)} vs {cell(q.b)} | {tasks} | {with_ci(q.d_agreement, q.d_agreement_ci, '+.1%')} | "
                     f"{with_ci(q.d_decision_acc, q.d_decision_acc_ci, '+.1%')} | "
                     f"{with_ci(q.d_answer_nll, q.d_answer_nll_ci, '+.3f')} | {kv} | "
                     f"{pct(q.gate_open_a)} / {pct(q.gate_open_b)} | {cell(q.verdict)} |")  # fmt: skip
    return lines

