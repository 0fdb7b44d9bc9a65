"""The figure a reader of the forced evaluation wants first: what each policy keeps of the agent's decisions (and of
the answer's likelihood) against the KV memory it holds, as a fraction of `full`'s.

Why these axes: a policy is only better than another at equal memory, so x is the mean resident KV bytes over the
episode's model calls relative to `full`'s on the same tasks (INT8 counted at its size), one point per label
(`policy@budget` in a sweep), one line per base policy; y is the decision agreement with `full` (top row) and the
answer ΔNLL vs `full` (bottom row); long- and short-memory tasks apart (left, right). Points average the tasks
every label finished (`common_tasks`), so a point never moves because it saw easier tasks; whiskers are the paired
bootstrap 95% interval over those tasks of each label against `full` (`traces.paired.bootstrap_ci`, the tables'
intervals), and each panel says how many tasks it averages. Whether two labels differ is not read off overlapping
whiskers but off the head-to-head table (the interval of their paired difference). Labels at the same memory are
drawn a hair apart (`DODGE` of the x axis each) so their whiskers stay visible. `full` is a reference line, not a
point at x = 1: on the agent the pinned prompt and current turn hold most of an evicting policy's bytes, so its
footprints sit within a few percent of each other near 0.2x and a point at 1.0 would squash their lines flat. The x
axis starts at 0, so the dodge never reads as a difference in memory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean
from typing import Any

from traces.forced import common_tasks, decision_agreement, paired_with_full
from traces.paired import bootstrap_ci
from traces.plots import policy_colors, save_figure

SPANS = ("long", "short")
DODGE = 0.006  # horizontal offset between bases, a drawing aid only (points keep their x in `frontier_points`)


@dataclass(frozen=True)
class FrontierPoint:
    """One label on the frontier: memory (x) and the metric's mean (y) with its interval over `tasks` tasks."""

    x: float
    y: float
    lo: float
    hi: float
    tasks: int


def frontier_points(rows: Sequence[Mapping[str, Any]], metric: str, span: str) -> dict[str, list[FrontierPoint]]:
    """base policy -> points sorted by memory, one per label; `metric` is `agreement` (decision agreement with full)
    or `answer_dnll` (answer NLL minus full's)."""
    by_label: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    for r, b in paired_with_full(common_tasks(rows)):
        if r["memory_span"] != span or not b["mean_kv_bytes"]:
            continue
        if metric == "agreement":
            y = decision_agreement(r, b)
        elif metric == "answer_dnll":
            y = None if r["answer_nll"] is None or b["answer_nll"] is None else r["answer_nll"] - b["answer_nll"]
        else:
            raise ValueError(f"unknown metric {metric!r}: agreement or answer_dnll")
        if y is not None:
            by_label.setdefault((r["base_policy"] or r["policy"], r["policy"]), []).append(
                (r["mean_kv_bytes"], b["mean_kv_bytes"], y))
    out: dict[str, list[FrontierPoint]] = {}
    for (base, _label), vals in by_label.items():
        ys = [v[2] for v in vals]
        lo, hi = bootstrap_ci(ys)  # never None: a label is added with its first value
        out.setdefault(base, []).append(FrontierPoint(sum(v[0] for v in vals) / sum(v[1] for v in vals), fmean(ys),
                                                      lo, hi, len(ys)))  # fmt: skip
    return {k: sorted(v, key=lambda p: p.x) for k, v in out.items()}


def plot_frontier(rows: Sequence[Mapping[str, Any]], path: Path) -> Path:
    """Decision agreement and answer ΔNLL against mean KV bytes vs full, long and short tasks apart (2 x 2)."""
    from matplotlib.figure import Figure

    panels = {(m, s): frontier_points(rows, m, s) for m in ("agreement", "answer_dnll") for s in SPANS}
    if not any(panels.values()):
        raise ValueError("no forced results paired with `full` to plot")
    colors = policy_colors({base for points in panels.values() for base in points})
    fig = Figure(figsize=(11, 8))
    for i, metric in enumerate(("agreement", "answer_dnll")):
        for j, span in enumerate(SPANS):
            ax = fig.add_subplot(2, 2, 2 * i + j + 1)
            tasks, bases = 0, {b: pts for b, pts in panels[(metric, span)].items() if b != "full"}
            for k, (base, points) in enumerate(bases.items()):
                shift = (k - (len(bases) - 1) / 2) * DODGE
                ax.errorbar([p.x + shift for p in points], [p.y for p in points], capsize=3, marker="o",
                            color=colors[base], label=base, yerr=[[p.y - p.lo for p in points], [p.hi - p.y for p in points]])  # fmt: skip
                tasks = max([tasks, *(p.tasks for p in points)])
            ax.axhline(1.0 if metric == "agreement" else 0.0, color=colors.get("full", "grey"), lw=1.2, ls=":",
                       label="full (1.00x memory)")  # fmt: skip
            right = max((p.x for pts in bases.values() for p in pts), default=1.0)
            ax.set_xlim(0, min(1.02, right * 1.2 + len(bases) * DODGE))  # from 0: the dodge stays a hair wide
            if not bases:
                ax.text(0.5, 0.5, "no task where every label finished", ha="center", va="center",
                        transform=ax.transAxes, color="grey")  # fmt: skip
            if metric == "agreement":
                ax.set_ylabel("decisions equal to full's")
                ax.set_ylim(-0.02, 1.05)
            else:
                ax.set_ylabel("answer ΔNLL vs full (nats/token)")
            ax.set_xlabel("mean resident KV bytes / full's")
            ax.set_title(f"{span}-memory tasks ({tasks} with every label; 95% intervals)")
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=8)
    fig.suptitle("Trajectory-forced frontier: the agent's decisions and the answer's likelihood vs KV memory")
    return save_figure(fig, path)
