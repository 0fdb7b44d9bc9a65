"""Trajectory-forced scores in the trace store: two tables, the per-policy summary and the memory frontier plot.

Why a separate layer next to `episodes`: a forced episode has no success of its own (the reference trajectory is
replayed, never decided), its outcome is the likelihood the cache leaves to the reference tokens. Each forced
episode is an ordinary `episodes` row (status done/error, peak and full KV bytes, its `steps`) in a run whose
`mode` is `forced`, plus one `forced_results` row (the scores) and one `forced_tokens` row per scored token.
Deltas are taken against `full` on the same task and the same trajectory text (`trajectory_sha`), so the model's
own weakness cancels.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import fmean
from typing import Any

import sqlite_utils

from traces.plots import byte_scale, policy_colors, save_figure

BASELINE = "full"
BROKEN_PREFIX = "broken reference trajectory: "

FORCED_RESULTS_COLUMNS: dict[str, type] = {
    "episode_id": int,
    "task_id": str,
    "policy": str,  # the run's label: preset name, `name@budget` in a budget sweep
    "base_policy": str,  # the preset the label was built from
    "budget": int,  # --budgets value (tokens of model-dtype KV, matched in bytes); NULL = the preset's own
    "memory_span": str,  # the task's short | long
    "trajectory_sha": str,  # hash of every token fed: equal = the same trajectory text
    "steps": int,
    "action_tokens": int,
    "action_nll": float,  # mean nats per reference-action token (every step, the final stop included)
    "action_acc": float,  # greedy (argmax) token accuracy on those tokens
    "answer_tokens": int,
    "answer_nll": float,  # the same on the answer text inside the final `stop [...]`; NULL without an answer
    "answer_acc": float,
    "greedy_answer": str,  # greedy decoding from `stop [` after the forced trajectory; NULL when not judged
    "answer_exact": int,  # the greedy answer equals the reference answer (after the evaluator's cleaning)
    "answer_pass": int,  # the evaluator (string_match) accepts the greedy answer
    "mean_kv_bytes": float,  # token-weighted mean over model calls
    "peak_kv_bytes": int,
    "full_kv_bytes": int,
}
FORCED_TOKENS_COLUMNS: dict[str, type] = {
    "episode_id": int,
    "step": int,
    "token_index": int,  # 0-based within the step's reply
    "token_text": str,
    "nll": float,  # -log p(reference token)
    "correct": int,  # argmax == reference token
    "in_answer": int,  # inside the `stop [...]` answer text
}


def ensure_forced_schema(db: sqlite_utils.Database) -> None:
    """Create the two forced tables (idempotent; called from `traces.schema.ensure_schema`)."""
    db["forced_results"].create(FORCED_RESULTS_COLUMNS, pk="episode_id",
                                foreign_keys=[("episode_id", "episodes", "id")], if_not_exists=True)  # fmt: skip
    db["forced_tokens"].create(FORCED_TOKENS_COLUMNS, pk=("episode_id", "step", "token_index"),
                               foreign_keys=[("episode_id", "episodes", "id")], if_not_exists=True)  # fmt: skip


def forced_rows(db: sqlite_utils.Database, run_ids: Iterable[int] | None = None) -> list[dict[str, Any]]:
    """The latest result per (policy, task) of finished forced episodes, with broken tasks as rows whose `broken`
    holds the reason (and no scores)."""
    if "forced_results" not in db.table_names() or "mode" not in db["runs"].columns_dict:
        return []
    where, params = "r.mode = 'forced'", []
    if run_ids is not None:
        ids = list(run_ids)
        where += f" and e.run_id in ({','.join('?' * len(ids))})" if ids else " and 0"
        params += ids
    sql = (f"select e.id as eid, e.task_id as etask, e.policy as epolicy, e.status, e.error, f.* from episodes e "
           f"join runs r on r.id = e.run_id left join forced_results f on f.episode_id = e.id "
           f"where {where} and e.status in ('done', 'error') order by e.id")  # fmt: skip
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for row in db.query(sql, params):
        key = (row["epolicy"], row["etask"])
        if row["status"] == "done" and row["episode_id"] is not None:
            latest[key] = {**row, "broken": None}
        elif row["status"] == "error" and (row["error"] or "").startswith(BROKEN_PREFIX):
            if key not in latest or latest[key]["broken"]:
                latest[key] = {"policy": row["epolicy"], "task_id": row["etask"],
                               "broken": row["error"][len(BROKEN_PREFIX):]}  # fmt: skip
    return list(latest.values())


@dataclass(frozen=True)
class ForcedPolicySummary:
    policy: str
    tasks: int
    broken: int
    answer_dnll_long: float | None  # mean over long-memory tasks of answer NLL - full's answer NLL
    answer_dnll_short: float | None
    action_dnll: float | None
    action_nll: float | None
    answer_nll: float | None
    action_acc: float | None
    answer_exact: int
    answer_pass: int
    judged: int  # tasks whose greedy answer was judged
    mean_kv_vs_full: float | None
    peak_kv_vs_full: float | None
    mean_kv_bytes: float | None
    peak_kv_bytes: float | None
    paired: int  # tasks with a `full` row on the same trajectory


def _mean(values: Iterable[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return fmean(kept) if kept else None


def common_tasks(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Only the rows of tasks that every policy label present finished unbroken (all rows when no task qualifies).
    A partial (resumed, stopped) run leaves labels with different task sets; absolute figures (KV MiB, NLL)
    averaged over different tasks are not comparable, the paired deltas are."""
    done: dict[Any, set[str]] = {}
    for r in rows:
        if not r["broken"]:
            done.setdefault(r["task_id"], set()).add(r["policy"])
    labels = set().union(*done.values()) if done else set()  # a label with broken rows only does not count
    keep = {task for task, have in done.items() if have == labels}
    return [r for r in rows if r["task_id"] in keep] if keep else list(rows)


def summarize_forced(rows: Sequence[Mapping[str, Any]]) -> dict[str, ForcedPolicySummary]:
    """Per policy label, baseline first: scores and deltas vs `full` on the same task and trajectory."""
    base = {r["task_id"]: r for r in rows if r["policy"] == BASELINE and not r["broken"]}
    out: dict[str, ForcedPolicySummary] = {}
    labels = sorted({r["policy"] for r in rows}, key=lambda p: (p != BASELINE, p))
    for label in labels:
        mine = [r for r in rows if r["policy"] == label]
        ok = [r for r in mine if not r["broken"]]
        pairs = [(r, base[r["task_id"]]) for r in ok
                 if r["task_id"] in base and base[r["task_id"]]["trajectory_sha"] == r["trajectory_sha"]]  # fmt: skip

        def delta(key: str, span: str | None = None, pairs: list = pairs) -> float | None:
            return _mean(r[key] - b[key] for r, b in pairs
                         if r[key] is not None and b[key] is not None and (span is None or r["memory_span"] == span))

        def ratio(key: str, pairs: list = pairs) -> float | None:
            vals = [(r[key], b[key]) for r, b in pairs if r[key] is not None and b[key]]
            return sum(a for a, _ in vals) / sum(b for _, b in vals) if vals else None

        judged = [r for r in ok if r["greedy_answer"] is not None]
        out[label] = ForcedPolicySummary(
            policy=label, tasks=len(ok), broken=len(mine) - len(ok),
            answer_dnll_long=delta("answer_nll", "long"), answer_dnll_short=delta("answer_nll", "short"),
            action_dnll=delta("action_nll"), action_nll=_mean(r["action_nll"] for r in ok),
            answer_nll=_mean(r["answer_nll"] for r in ok), action_acc=_mean(r["action_acc"] for r in ok),
            answer_exact=sum(bool(r["answer_exact"]) for r in judged), answer_pass=sum(bool(r["answer_pass"])
                                                                                       for r in judged),
            judged=len(judged), mean_kv_vs_full=ratio("mean_kv_bytes"), peak_kv_vs_full=ratio("peak_kv_bytes"),
            mean_kv_bytes=_mean(r["mean_kv_bytes"] for r in ok), peak_kv_bytes=_mean(r["peak_kv_bytes"] for r in ok),
            paired=len(pairs),
        )  # fmt: skip
    return out


def forced_json(summary: Mapping[str, ForcedPolicySummary]) -> dict[str, Any]:
    return {"mode": "forced", "baseline": BASELINE, "policies": {k: asdict(v) for k, v in summary.items()}}


def forced_table(summary: Mapping[str, ForcedPolicySummary], title: str = "Trajectory-forced scores") -> Any:
    """The rich table `eval --mode forced` and `traces summary` print."""
    from rich.table import Table

    def num(v: float | None, fmt: str = "+.3f") -> str:
        return "-" if v is None else format(v, fmt)

    table = Table(title=title)
    cols = ("policy", "tasks", "broken", "answer ΔNLL long", "answer ΔNLL short", "action ΔNLL", "action NLL",
            "answer NLL", "action acc", "exact/pass/judged", "mean KV vs full", "peak KV vs full")  # fmt: skip
    for c in cols:
        table.add_column(c, justify="left" if c == "policy" else "right")
    for s in summary.values():
        table.add_row(s.policy, str(s.tasks), str(s.broken), num(s.answer_dnll_long), num(s.answer_dnll_short),
                      num(s.action_dnll), num(s.action_nll, ".3f"), num(s.answer_nll, ".3f"),
                      num(s.action_acc, ".1%"), f"{s.answer_exact}/{s.answer_pass}/{s.judged}",
                      num(s.mean_kv_vs_full, ".1%"), num(s.peak_kv_vs_full, ".1%"))  # fmt: skip
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
    lines += ["", "| task | policy | steps | action tokens | action NLL | answer tokens | answer NLL | greedy answer "
              "| pass | peak KV MiB |", "|" + "---|" * 10]  # fmt: skip
    for r in sorted(rows, key=lambda r: (str(r["task_id"]), r["policy"] != BASELINE, r["policy"])):
        head = f"| {cell(r['task_id'])} | {cell(r['policy'])} |"
        if r["broken"]:
            lines.append(f"{head} broken: {cell(r['broken'])} |" + " |" * 7)
            continue
        answer = "-" if r["greedy_answer"] is None else cell(repr(r["greedy_answer"]))
        peak_mib = None if r["peak_kv_bytes"] is None else r["peak_kv_bytes"] / 2**20
        lines.append(f"{head} {r['steps']} | {r['action_tokens']} | {num(r['action_nll'], '.3f')} | "
                     f"{r['answer_tokens']} | {num(r['answer_nll'], '.3f')} | {answer} | "
                     f"{num(r['answer_pass'], 'd')} | {num(peak_mib, '.0f')} |")  # fmt: skip
    return "\n".join(lines)


def plot_frontier(rows: Sequence[Mapping[str, Any]], path: Path) -> Path:
    """Answer ΔNLL vs full (y) against mean and peak KV bytes (x, two columns), one line per base policy across
    its budgets, long-memory tasks in the top row and short ones below; over the tasks every label finished
    (`common_tasks`), so each point averages the same tasks."""
    from matplotlib.figure import Figure

    rows = common_tasks(rows)
    base = {r["task_id"]: r for r in rows if r["policy"] == BASELINE and not r["broken"]}
    ok = [r for r in rows if not r["broken"] and r["task_id"] in base and r["answer_nll"] is not None
          and base[r["task_id"]]["answer_nll"] is not None
          and base[r["task_id"]]["trajectory_sha"] == r["trajectory_sha"]]  # fmt: skip
    if not ok:
        raise ValueError("no forced results paired with `full` to plot")
    divisor, unit = byte_scale(r["peak_kv_bytes"] or 0 for r in ok)
    colors = policy_colors({r["base_policy"] for r in ok})
    fig = Figure(figsize=(11, 8))
    for i, span in enumerate(("long", "short")):
        for j, key in enumerate(("mean_kv_bytes", "peak_kv_bytes")):
            ax = fig.add_subplot(2, 2, 2 * i + j + 1)
            for policy, color in colors.items():
                points: dict[str, list[tuple[float, float]]] = {}
                for r in ok:
                    if r["base_policy"] == policy and r["memory_span"] == span:
                        d = r["answer_nll"] - base[r["task_id"]]["answer_nll"]
                        points.setdefault(r["policy"], []).append((r[key] / divisor, d))
                xy = sorted((fmean(p[0] for p in v), fmean(p[1] for p in v)) for v in points.values())
                if xy:
                    ax.plot([x for x, _ in xy], [y for _, y in xy], marker="o", color=color, label=policy)
            ax.axhline(0, color="grey", lw=0.8, ls=":")
            ax.set_xlabel(f"{'mean' if j == 0 else 'peak'} KV ({unit})")
            ax.set_ylabel("answer ΔNLL vs full (nats/token)")
            ax.set_title(f"{span}-memory tasks")
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=8)
    fig.suptitle("Trajectory-forced memory frontier: answer ΔNLL vs KV bytes")
    return save_figure(fig, path)


def record_forced(store: Any, episode_id: int, result: Mapping[str, Any], tokens: Iterable[Mapping[str, Any]]) -> None:
    """Write one forced episode's result row and its per-token rows in one transaction (episode still running)."""
    row = {k: result.get(k) for k in FORCED_RESULTS_COLUMNS if k != "episode_id"}
    with store._write() as db:
        store._require_running(episode_id)
        db["forced_results"].insert({"episode_id": episode_id, **row})
        db["forced_tokens"].insert_all({"episode_id": episode_id, **t} for t in tokens)
