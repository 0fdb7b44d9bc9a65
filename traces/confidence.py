"""What the confidence gate sees on agent traffic: `confkv-agent traces confidence`.

Why this exists (issue 37): on the agent, `confkv`'s gate opened on 0.26% of forwards, so its figures measure a fixed
budget. The gate reads one confidence per forward (a prefill chunk: the mean over its last positions; a decode step:
that token's), but an agent's memory grows by observation prefill, where next-token confidence is about page text,
while its decisions are short constrained action decodes. This reads the confidences the traces already hold
(`prefill_chunks`, `decode_tokens`) and shows them per kind with the threshold drawn, so a gate's design can start
from the signal it would see: per prefill chunk, per action token, and per reply (after its first token; its mean;
its minimum). A decode token's recorded confidence is that of the distribution *after* it (the one the gate acts
on for the eviction right after): the distribution the reply's first token was chosen from is the prefill's last
position, which a chunk's mean dilutes. The forced evaluation records the decisions' own choice confidences
(`forced_results.decision_confidences`): per decision its first choice (the verb) and its least confident choice,
which is what the turn-level gate (`confkv.gates.turn`) compares with tau, so "decision min below tau" is that
gate's open rate, and a quantile of it is a calibrated tau (it reads confidences only, never a reference).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean, quantiles
from typing import Any

import sqlite_utils

KINDS = ("prefill chunk", "action token", "reply after 1st token", "reply mean", "reply min", "decision 1st choice",
         "decision min")
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)


def confidence_values(db: sqlite_utils.Database, run_ids: Sequence[int],
                      tasks: Sequence[str] | None = None) -> dict[str, list[float]]:
    """kind -> every confidence of that kind in the runs' finished or failed episodes (`KINDS`), of the given
    tasks only when `tasks` is set (a calibration split apart from the tasks a gate is then evaluated on)."""
    marks = ",".join("?" * len(run_ids))
    if tasks is not None:
        marks += ") and e.task_id in (" + ",".join("?" * len(tasks))
    args = [*run_ids, *(tasks or ())]
    out: dict[str, list[float]] = {k: [] for k in KINDS}
    for row in db.query(f"select p.confidence from prefill_chunks p join episodes e on e.id = p.episode_id "
                        f"where e.run_id in ({marks}) and p.confidence is not null", args):  # fmt: skip
        out["prefill chunk"].append(float(row["confidence"]))
    replies: dict[tuple[int, int], list[tuple[int, float]]] = defaultdict(list)
    for row in db.query(f"select d.episode_id, d.step, d.token_index, d.confidence from decode_tokens d join "
                        f"episodes e on e.id = d.episode_id where e.run_id in ({marks}) and d.confidence is not null",
                        args):  # fmt: skip
        replies[(row["episode_id"], row["step"])].append((row["token_index"], float(row["confidence"])))
    for tokens in replies.values():
        values = [c for _, c in sorted(tokens)]
        out["action token"] += values
        out["reply after 1st token"].append(values[0])
        out["reply mean"].append(fmean(values))
        out["reply min"].append(min(values))
    if "decision_confidences" in (db["forced_results"].columns_dict if "forced_results" in db.table_names() else {}):
        for row in db.query(f"select f.decision_confidences from forced_results f join episodes e on e.id = "
                            f"f.episode_id where e.run_id in ({marks}) and e.status = 'done'", args):  # fmt: skip
            for choices in json.loads(row["decision_confidences"] or "[]"):
                if choices:
                    out["decision 1st choice"].append(float(choices[0]))
                    out["decision min"].append(float(min(choices)))
    return out


@dataclass(frozen=True)
class SignalStats:
    kind: str
    n: int
    quantiles: tuple[float, ...]  # at `QUANTILES`
    below_tau: float | None  # share of values under the threshold: how often a gate at tau would open


def signal_stats(values: Mapping[str, Sequence[float]], tau: float) -> list[SignalStats]:
    """Per kind: count, quantiles and the share below `tau` (none for a kind without values)."""
    out = []
    for kind in KINDS:
        vals = sorted(values.get(kind, ()))
        if not vals:
            out.append(SignalStats(kind, 0, (), None))
            continue
        cuts = quantiles(vals, n=100, method="inclusive") if len(vals) > 1 else [vals[0]] * 99
        out.append(SignalStats(kind, len(vals), tuple(cuts[round(q * 100) - 1] for q in QUANTILES),
                               sum(v < tau for v in vals) / len(vals)))  # fmt: skip
    return out


def signal_lines(stats: Iterable[SignalStats], tau: float) -> list[str]:
    """The Markdown table the command prints."""
    head = " | ".join(f"p{round(q * 100)}" for q in QUANTILES)
    lines = [f"| kind | n | {head} | below tau={tau:g} |", "|" + "---|" * (3 + len(QUANTILES))]
    for s in stats:
        cells = " | ".join(f"{v:.3f}" for v in s.quantiles) if s.n else " | ".join("-" for _ in QUANTILES)
        share = "-" if s.below_tau is None else f"{s.below_tau:.1%}"
        lines.append(f"| {s.kind} | {s.n} | {cells} | {share} |")
    return lines


def plot_signal(values: Mapping[str, Sequence[float]], tau: float, path: Path, title: str) -> Path:
    """One histogram per kind, the threshold drawn: where the gate's signal lies against where it would act."""
    from matplotlib.figure import Figure

    from traces.plots import save_figure

    kinds = [k for k in KINDS if values.get(k)]
    if not kinds:
        raise ValueError("no confidences recorded in these runs")
    fig = Figure(figsize=(11, 2.2 * len(kinds)))
    for i, kind in enumerate(kinds):
        ax = fig.add_subplot(len(kinds), 1, i + 1)
        ax.hist(values[kind], bins=50, range=(0.0, 1.0), color="#4477aa")
        ax.axvline(tau, color="#cc3311", ls="--", lw=1.2, label=f"tau = {tau:g}")
        ax.set_ylabel(kind, fontsize=8)
        ax.grid(alpha=0.3)
        if i == 0:
            ax.legend(fontsize=8)
    fig.axes[-1].set_xlabel("confidence (0.4 (1 - normalized entropy) + 0.3 sigmoid(top1 - top2) + 0.3 max prob)")
    fig.suptitle(title)
    return save_figure(fig, path)


def stats_json(stats: Iterable[SignalStats], tau: float, runs: Sequence[int], db: str) -> dict[str, Any]:
    return {"db": db, "runs": list(runs), "tau": tau, "quantiles": list(QUANTILES),
            "kinds": {s.kind: {"n": s.n, "quantiles": list(s.quantiles), "below_tau": s.below_tau} for s in stats}}
