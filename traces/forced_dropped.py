"""What the cache had let go of when a policy decided differently from `full` (issue 37 item 1).

Why: a lost decision is a symptom; the forced mode records, at every decision, the share of each earlier turn
(observation and reply) that the layers' KV heads still held (`forced_results.resident_shares`, from
`ConfKVCache.resident_shares`). Set beside whether the decision matched `full`'s on the same trajectory, it says
whether the decisions a policy lost were the ones made after it had dropped most of some earlier page, or whether
they were lost with the pages still there (then eviction is not the cause: INT8, or the ranker's mass, is).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from statistics import fmean
from typing import Any

from traces.forced import BASELINE, paired_with_full, same_decision


def decision_memory(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One record per (label, task, step) with an earlier turn: whether the decision matched `full`'s and the
    resident share of each earlier turn at that moment. Rows without shares (older runs) give none."""
    out = []
    for r, full in paired_with_full(rows):
        if r["policy"] == BASELINE or not r.get("resident_shares") or not r.get("decisions") or not full.get("decisions"):
            continue
        mine, theirs = json.loads(r["decisions"]), json.loads(full["decisions"])
        for step, shares in enumerate(json.loads(r["resident_shares"])):
            if not shares or step >= len(mine) or step >= len(theirs):
                continue
            out.append({"policy": r["policy"], "task_id": r["task_id"], "step": step,
                        "lost": not same_decision(mine[step], theirs[step]), "decided": mine[step],
                        "full_decided": theirs[step], "shares": shares, "least": min(shares)})  # fmt: skip
    return out


def _pct(values: Sequence[float]) -> str:
    return f"{fmean(values):.1%}" if values else "-"


def dropped_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Markdown: per label, the least-kept earlier turn at lost vs matched decisions; then every lost decision."""
    from traces.fmt import markdown_cell as cell

    records = decision_memory(rows)
    if not records:
        return []
    lines = ["| label | lost decisions | least-kept earlier turn, lost (mean) | matched decisions "
             "| least-kept earlier turn, matched (mean) |", "|" + "---|" * 5]  # fmt: skip
    for label in sorted({r["policy"] for r in records}):
        lost = [r["least"] for r in records if r["policy"] == label and r["lost"]]
        kept = [r["least"] for r in records if r["policy"] == label and not r["lost"]]
        lines.append(f"| {cell(label)} | {len(lost)} | {_pct(lost)} | {len(kept)} | {_pct(kept)} |")
    lost_rows = [r for r in records if r["lost"]]
    if lost_rows:
        lines += ["", "| label | task | step | decided | full decided | resident share of turns 0.. |",
                  "|" + "---|" * 6]  # fmt: skip
        for r in lost_rows:
            shares = " ".join(f"{s:.0%}" for s in r["shares"])
            lines.append(f"| {cell(r['policy'])} | {cell(r['task_id'])} | {r['step']} | {cell(r['decided'])} | "
                         f"{cell(r['full_decided'])} | {shares} |")  # fmt: skip
    return lines
