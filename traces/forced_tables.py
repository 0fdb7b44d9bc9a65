"""The forced scores as tables: the rich table `eval --mode forced` and `traces summary` print, the Markdown of
`traces forced-table` (summary, one row per task and label, the paired intervals) and the JSON form. The numbers
come from `traces.forced`; this module only lays them out, each label, task id and answer a cell of data."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from traces.forced import BASELINE, ForcedPolicySummary, agreed_steps, paired_with_full, summarize_forced


def forced_json(summary: Mapping[str, ForcedPolicySummary]) -> dict[str, Any]:
    return {"mode": "forced", "baseline": BASELINE, "policies": {k: asdict(v) for k, v in summary.items()}}


def forced_table(summary: Mapping[str, ForcedPolicySummary], title: str = "Trajectory-forced scores") -> Any:
    """The rich table `eval --mode forced` and `traces summary` print."""
    from rich.table import Table

    def num(v: float | None, fmt: str = "+.3f") -> str:
        return "-" if v is None else format(v, fmt)

    table = Table(title=title)
    cols = ("policy", "tasks", "broken", "answer ΔNLL long", "answer ΔNLL short", "action ΔNLL", "action NLL",
            "answer NLL", "action acc", "exact/pass/judged", "mean KV vs full", "peak KV vs full", "decision acc",
            "agrees with full")  # fmt: skip
    for c in cols:
        table.add_column(c, justify="left" if c == "policy" else "right")
    for s in summary.values():
        table.add_row(s.policy, str(s.tasks), str(s.broken), num(s.answer_dnll_long), num(s.answer_dnll_short),
                      num(s.action_dnll), num(s.action_nll, ".3f"), num(s.answer_nll, ".3f"),
                      num(s.action_acc, ".1%"), f"{s.answer_exact}/{s.answer_pass}/{s.judged}",
                      num(s.mean_kv_vs_full, ".1%"), num(s.peak_kv_vs_full, ".1%"), num(s.decision_acc, ".1%"),
                      num(s.decision_agreement, ".1%"))  # fmt: skip
    return table


def forced_markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    """The per-policy summary, then one row per (task, policy): the tables of docs/results/forced-*.md, as
    `confkv-agent traces forced-table` prints them. Labels, task ids, answers and broken reasons are cells of data
    (`markdown_cell`); a greedy answer is shown as its repr so an empty or blank answer is visible."""
    from traces.fmt import markdown_cell as cell

    def num(v: float | None, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    lines = ["| policy | tasks | broken | answer ΔNLL long | answer ΔNLL short | action ΔNLL | action NLL | answer NLL "
             "| action acc | exact/pass/judged | mean KV vs full | peak KV vs full |", "|" + "---|" * 12]  # fmt: skip
    for s in summarize_forced(rows).values():
        lines.append(f"| {cell(s.policy)} | {s.tasks} | {s.broken} | {num(s.answer_dnll_long, '+.3f')} | "
                     f"{num(s.answer_dnll_short, '+.3f')} | {num(s.action_dnll, '+.3f')} | {num(s.action_nll, '.3f')} | "
                     f"{num(s.answer_nll, '.3f')} | {num(s.action_acc, '.1%')} | "
                     f"{s.answer_exact}/{s.answer_pass}/{s.judged} | {num(s.mean_kv_vs_full, '.1%')} | "
                     f"{num(s.peak_kv_vs_full, '.1%')} |")  # fmt: skip
    agreed = {id(r): agreed_steps(r, b) for r, b in paired_with_full(rows)}
    lines += ["", "| task | policy | steps | action tokens | action NLL | answer tokens | answer NLL | greedy answer "
              "| pass | peak KV MiB | decided as full |", "|" + "---|" * 11]  # fmt: skip
    for r in sorted(rows, key=lambda r: (str(r["task_id"]), r["policy"] != BASELINE, r["policy"])):
        head = f"| {cell(r['task_id'])} | {cell(r['policy'])} |"
        if r["broken"]:
            lines.append(f"{head} broken: {cell(r['broken'])} |" + " |" * 8)
            continue
        answer = "-" if r["greedy_answer"] is None else cell(repr(r["greedy_answer"]))
        peak_mib = None if r["peak_kv_bytes"] is None else r["peak_kv_bytes"] / 2**20
        as_full = "-" if (counts := agreed.get(id(r))) is None else f"{counts[0]}/{counts[1]}"
        lines.append(f"{head} {r['steps']} | {r['action_tokens']} | {num(r['action_nll'], '.3f')} | "
                     f"{r['answer_tokens']} | {num(r['answer_nll'], '.3f')} | {answer} | "
                     f"{num(r['answer_pass'], 'd')} | {num(peak_mib, '.0f')} | {as_full} |")  # fmt: skip
    lines += ["", "| label | decision acc | agrees with full | Δ decision acc | answer ΔNLL long | answer ΔNLL short "
              "| action ΔNLL |", "|" + "---|" * 7, *interval_rows(rows)]  # fmt: skip
    return "\n".join(lines)


def with_ci(value: float | None, ci: tuple[float, float] | None, fmt: str) -> str:
    """`+0.120 [+0.050, +0.190]`: a figure with its paired bootstrap 95% interval ("-" without data)."""
    if value is None:
        return "-"
    return format(value, fmt) + ("" if ci is None else f" [{format(ci[0], fmt)}, {format(ci[1], fmt)}]")


def interval_rows(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """One Markdown row per label: decisions and deltas vs `full`, each with its paired 95% interval over tasks."""
    from traces.fmt import markdown_cell as cell

    out = []
    for s in summarize_forced(rows).values():
        out.append(f"| {cell(s.policy)} | {with_ci(s.decision_acc, s.decision_acc_ci, '.1%')} | "
                   f"{with_ci(s.decision_agreement, s.decision_agreement_ci, '.1%')} | "
                   f"{with_ci(s.decision_dacc, s.decision_dacc_ci, '+.1%')} | "
                   f"{with_ci(s.answer_dnll_long, s.answer_dnll_long_ci, '+.3f')} | "
                   f"{with_ci(s.answer_dnll_short, s.answer_dnll_short_ci, '+.3f')} | "
                   f"{with_ci(s.action_dnll, s.action_dnll_ci, '+.3f')} |")  # fmt: skip
    return out
