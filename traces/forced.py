"""Trajectory-forced scores in the trace store: two tables, the per-policy summary and the memory frontier plot.

Why a separate layer next to `episodes`: a forced episode has no success of its own (the reference trajectory is
replayed, never decided), its outcome is the likelihood the cache leaves to the reference tokens. Each forced
episode is an ordinary `episodes` row (status done/error, peak and full KV bytes, its `steps`) in a run whose
`mode` is `forced`, plus one `forced_results` row (the scores) and one `forced_tokens` row per scored token.
Deltas are taken against `full` on the same task and the same trajectory text (`trajectory_sha`), so the model's
own weakness cancels. The tables that lay these numbers out are `traces.forced_tables`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Any

import sqlite_utils

from envs.evaluators import normalize
from envs.sites import SITES
from traces.failures import stop_answer
from traces.paired import bootstrap_ci

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
    "decisions": str,  # JSON list: the agent's greedy decision (id form) at each step, before the reference was forced
    "decision_acc": float,  # share of steps whose decision equals the reference action
    "decision_confidences": str,  # JSON: per step, the confidence of each distribution a decision token came from
    "resident_shares": str,  # JSON: per step, the share of each earlier turn's tokens resident as it decides
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
    holds the reason (and no scores but the task's `memory_span`, None where no label scored the task)."""
    if "forced_results" not in db.table_names() or "mode" not in db["runs"].columns_dict:
        return []
    where, params = "r.mode = 'forced'", []
    if run_ids is not None:
        ids = list(run_ids)
        where += f" and e.run_id in ({','.join('?' * len(ids))})" if ids else " and 0"
        params += ids
    sql = (f"select e.id as eid, e.task_id as etask, e.policy as epolicy, e.status, e.error, e.gate_open_rate, "
           f"r.policy_config as run_config, f.* from episodes e "
           f"join runs r on r.id = e.run_id left join forced_results f on f.episode_id = e.id "
           f"where {where} and e.status in ('done', 'error') order by e.id")  # fmt: skip
    latest: dict[tuple[str, str, str | None], dict[str, Any]] = {}
    for row in db.query(sql, params):
        precision = run_precision(row.pop("run_config"))
        key = (row["epolicy"], row["etask"], precision)
        if row["status"] == "done" and row["episode_id"] is not None:
            latest[key] = {**row, "broken": None, "precision": precision}
        elif row["status"] == "error" and (row["error"] or "").startswith(BROKEN_PREFIX):
            if key not in latest or latest[key]["broken"]:
                latest[key] = {"policy": row["epolicy"], "task_id": row["etask"], "precision": precision,
                               "broken": row["error"][len(BROKEN_PREFIX):]}  # fmt: skip
    rows = list(latest.values())
    spans = {r["task_id"]: r["memory_span"] for r in rows if not r["broken"]}
    for r in rows:  # a broken row has no result of its own; its task's span is known where another label scored it
        if r["broken"]:
            r["memory_span"] = spans.get(r["task_id"])
    keys, references = _trajectory_keys(db, [r["episode_id"] for r in rows if not r["broken"]])
    for r in rows:
        if not r["broken"]:
            r["trajectory_key"], r["trajectory_canonical"] = keys.get(r["episode_id"], (None, False))
            r["decision_acc"] = decision_accuracy(r, references.get(r["episode_id"], []))
    return rows


def decision_accuracy(row: Mapping[str, Any], references: Sequence[str]) -> float | None:
    """Share of the row's decisions equal to the reference action forced at that step (the steps' `action`), by
    the rule agreement uses (`same_decision`), so accuracy and agreement read a stop answer alike. The runner's
    recorded `decision_acc` (exact text, for rows before 2026-12-07) stands where the steps are not all there."""
    decisions = json.loads(row["decisions"]) if row.get("decisions") else []
    if not decisions or len(decisions) != len(references):
        return row.get("decision_acc")
    return fmean(same_decision(d, ref) for d, ref in zip(decisions, references, strict=True))


def run_precision(config_json: str | None) -> str | None:
    """The agent's precision (`--dtype`, resolved) a run's rows were scored at; None for a run that did not record
    it. Rows pair only within one precision: the model's numbers differ between precisions, not only the cache's."""
    try:
        agent = json.loads(config_json or "{}").get("agent")
    except (ValueError, AttributeError):
        return None
    return agent.get("dtype") if isinstance(agent, dict) else None


def one_precision_per_task(
    rows: Sequence[dict[str, Any]],
) -> tuple[list[dict[str, Any]], dict[str, tuple[str, list[str]]]]:
    """The rows with each task at one precision, and task id -> (the precision kept, those left out) for the tasks
    scored at several. Kept: the precision with a `full` row and the most of the labels shown (ties: the name first
    in sort order, as `forced_plan.task_precision` picks). Why not ask: `forced-plan --rebase` scores a task begun at
    a slow precision again at a fast one, so one task can hold its @180 labels at fp32 and its sweep at
    `fp32-bf16-bf16`; each table then takes the experiment that answers it, whole."""
    labels: dict[str, dict[str, set[str]]] = {}
    for r in rows:
        if not r.get("broken"):
            labels.setdefault(str(r["task_id"]), {}).setdefault(str(r.get("precision")), set()).add(r["policy"])
    chosen: dict[str, tuple[str, list[str]]] = {}
    for task, by_precision in labels.items():
        if len(by_precision) > 1:
            best = min(by_precision, key=lambda p: (BASELINE not in by_precision[p], -len(by_precision[p]), p))
            chosen[task] = (best, sorted(p for p in by_precision if p != best))
    kept = [r for r in rows
            if str(r["task_id"]) not in chosen or str(r.get("precision")) == chosen[str(r["task_id"])][0]]
    return kept, chosen


_ORIGIN = re.compile(r"http://127\.0\.0\.1:\d+")


def _trajectory_keys(
    db: sqlite_utils.Database, episode_ids: Sequence[int]
) -> tuple[dict[int, tuple[str, bool]], dict[int, list[str]]]:
    """Per forced episode, its forced actions in step order (the reference replies) and (a hash of its steps' observation and forced action text with every site origin written
    as one placeholder, whether every origin in that text was a canonical one). Rows recorded before the replay
    showed canonical origins (2026-12-06) carry the port their process's sites ran on, so their `trajectory_sha`
    differs between processes although the trajectory is the same; the key pairs them (their inputs then differ
    only in the port's digits on each URL line). Rows recorded since are paired by `trajectory_sha` alone
    (`same_trajectory`), which also covers the prompt the key does not see."""
    if not episode_ids or "steps" not in db.table_names():
        return {}, {}
    canonical = {spec.canonical_origin for spec in SITES.values()}
    digests: dict[int, Any] = {}
    actions: dict[int, list[str]] = {}
    ephemeral: set[int] = set()
    for lo in range(0, len(episode_ids), 500):
        chunk = list(episode_ids[lo:lo + 500])
        sql = (f"select episode_id, observation, action from steps where episode_id in ({','.join('?' * len(chunk))}) "
               f"order by episode_id, step")  # fmt: skip
        for eid, observation, action in db.execute(sql, chunk).fetchall():
            text = f"{observation}\x00{action}\x00"
            if any(origin not in canonical for origin in _ORIGIN.findall(text)):
                ephemeral.add(eid)
            digests.setdefault(eid, hashlib.sha256()).update(_ORIGIN.sub("http://127.0.0.1:PORT", text).encode())
            actions.setdefault(eid, []).append(action or "")
    return {eid: (d.hexdigest()[:16], eid not in ephemeral) for eid, d in digests.items()}, actions


def same_trajectory(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two forced rows replayed the same trajectory, so their scores pair: the same tokens fed
    (`trajectory_sha`); where either row was recorded with its process's ephemeral ports (before 2026-12-06),
    the same step text up to the sites' ports."""
    if a.get("trajectory_sha") is not None and a.get("trajectory_sha") == b.get("trajectory_sha"):
        return True
    if a.get("trajectory_canonical") and b.get("trajectory_canonical"):
        return False  # both fed canonical origins: a different hash is a different input (prompt, text)
    return bool(a.get("trajectory_key")) and a.get("trajectory_key") == b.get("trajectory_key")


def unpaired_with_full(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    """task id -> the labels whose unbroken row replayed another trajectory than `full`'s row of that task at its
    precision. Every delta leaves such rows out, so they are named rather than dropped in silence (a replay that
    showed the wall clock once kept two tasks' rows out of the tables for three sessions unnoticed)."""
    paired = {id(r) for r, _ in paired_with_full(rows)}
    has_full = {(r["task_id"], r.get("precision")) for r in rows if r["policy"] == BASELINE and not r["broken"]}
    out: dict[str, list[str]] = {}
    for r in rows:
        if not r["broken"] and id(r) not in paired and (r["task_id"], r.get("precision")) in has_full:
            out.setdefault(str(r["task_id"]), []).append(str(r["policy"]))
    return {task: sorted(labels) for task, labels in sorted(out.items())}


def paired_with_full(rows: Sequence[Mapping[str, Any]]) -> list[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """(row, `full`'s row of its task at its precision) for every unbroken row replayed on the same trajectory as
    that `full` row (`full`'s own rows included, paired with themselves): the pairs every delta and agreement is
    taken over."""
    base = {(r["task_id"], r.get("precision")): r for r in rows if r["policy"] == BASELINE and not r["broken"]}
    return [(r, b) for r in rows
            if not r["broken"] and (b := base.get((r["task_id"], r.get("precision")))) is not None
            and same_trajectory(b, r)]  # fmt: skip


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
    decision_acc: float | None = None  # mean over tasks of the share of steps deciding the reference action
    decision_agreement: float | None = None  # mean over paired tasks of the share of steps deciding as `full` did
    decision_dacc: float | None = None  # decision accuracy minus full's, paired
    # paired bootstrap 95% intervals over tasks (`traces.paired.bootstrap_ci`) of the figures above
    answer_dnll_long_ci: tuple[float, float] | None = None
    answer_dnll_short_ci: tuple[float, float] | None = None
    action_dnll_ci: tuple[float, float] | None = None
    decision_acc_ci: tuple[float, float] | None = None
    decision_agreement_ci: tuple[float, float] | None = None
    decision_dacc_ci: tuple[float, float] | None = None


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
    all_pairs = paired_with_full(rows)
    out: dict[str, ForcedPolicySummary] = {}
    labels = sorted({r["policy"] for r in rows}, key=lambda p: (p != BASELINE, p))
    for label in labels:
        mine = [r for r in rows if r["policy"] == label]
        ok = [r for r in mine if not r["broken"]]
        pairs = [(r, b) for r, b in all_pairs if r["policy"] == label]

        def deltas(key: str, span: str | None = None, pairs: list = pairs) -> list[float]:
            return [r[key] - b[key] for r, b in pairs
                    if r[key] is not None and b[key] is not None and (span is None or r["memory_span"] == span)]

        def ratio(key: str, pairs: list = pairs) -> float | None:
            vals = [(r[key], b[key]) for r, b in pairs if r[key] is not None and b[key]]
            return sum(a for a, _ in vals) / sum(b for _, b in vals) if vals else None

        judged = [r for r in ok if r["greedy_answer"] is not None]
        long_d, short_d, action_d = deltas("answer_nll", "long"), deltas("answer_nll", "short"), deltas("action_nll")
        accs = [r["decision_acc"] for r in ok if r.get("decision_acc") is not None]
        agree = [a for r, b in pairs if (a := decision_agreement(r, b)) is not None]
        dacc = [r["decision_acc"] - b["decision_acc"] for r, b in pairs
                if r.get("decision_acc") is not None and b.get("decision_acc") is not None]  # fmt: skip
        out[label] = ForcedPolicySummary(
            policy=label, tasks=len(ok), broken=len(mine) - len(ok),
            answer_dnll_long=_mean(long_d), answer_dnll_short=_mean(short_d),
            action_dnll=_mean(action_d), action_nll=_mean(r["action_nll"] for r in ok),
            answer_nll=_mean(r["answer_nll"] for r in ok), action_acc=_mean(r["action_acc"] for r in ok),
            answer_exact=sum(bool(r["answer_exact"]) for r in judged), answer_pass=sum(bool(r["answer_pass"])
                                                                                       for r in judged),
            judged=len(judged), mean_kv_vs_full=ratio("mean_kv_bytes"), peak_kv_vs_full=ratio("peak_kv_bytes"),
            mean_kv_bytes=_mean(r["mean_kv_bytes"] for r in ok), peak_kv_bytes=_mean(r["peak_kv_bytes"] for r in ok),
            paired=len(pairs), decision_acc=_mean(accs), decision_agreement=_mean(agree), decision_dacc=_mean(dacc),
            answer_dnll_long_ci=bootstrap_ci(long_d), answer_dnll_short_ci=bootstrap_ci(short_d),
            action_dnll_ci=bootstrap_ci(action_d), decision_acc_ci=bootstrap_ci(accs),
            decision_agreement_ci=bootstrap_ci(agree), decision_dacc_ci=bootstrap_ci(dacc),
        )  # fmt: skip
    return out


def decision_agreement(row: Mapping[str, Any], base: Mapping[str, Any]) -> float | None:
    """Share of steps where `row`'s decision equals `base`'s (the same trajectory, so the same steps); None when
    either run predates decision scoring. Decisions are grammar-constrained outputs in id form, so equal actions
    are equal strings, but for stop answers the evaluator reads alike (`same_decision`)."""
    counts = agreed_steps(row, base)
    return None if counts is None else counts[0] / counts[1]


def agreed_steps(row: Mapping[str, Any], base: Mapping[str, Any]) -> tuple[int, int] | None:
    """(k, n): at how many of the task's n decisions `row` decided as `base` did; None as `decision_agreement`."""
    if not row.get("decisions") or not base.get("decisions"):
        return None
    mine, theirs = json.loads(row["decisions"]), json.loads(base["decisions"])
    if len(mine) != len(theirs) or not mine:
        return None
    return sum(same_decision(a, b) for a, b in zip(mine, theirs, strict=True)), len(mine)


def same_decision(a: str, b: str) -> bool:
    """Two recorded decisions of the same step agree: grammar-constrained id-form text, equal up to spacing; two
    `stop` answers agree when the evaluator's normalization reads them alike (`stop [$290.50]` and `stop [290.50]`,
    `stop [Mug]` and `stop [mug]`): an answer the evaluator cannot tell apart is the same decision, where exact
    text had counted it lost."""
    if a.strip() == b.strip():
        return True
    mine, theirs = stop_answer(a), stop_answer(b)
    return mine is not None and theirs is not None and normalize(mine) == normalize(theirs)


def record_forced(store: Any, episode_id: int, result: Mapping[str, Any], tokens: Iterable[Mapping[str, Any]]) -> None:
    """Write one forced episode's result row and its per-token rows in one transaction (episode still running)."""
    row = {k: result.get(k) for k in FORCED_RESULTS_COLUMNS if k != "episode_id"}
    with store._write() as db:
        store._require_running(episode_id)
        db["forced_results"].insert({"episode_id": episode_id, **row}, alter=True)  # a DB from before `decisions`
        db["forced_tokens"].insert_all({"episode_id": episode_id, **t} for t in tokens)
