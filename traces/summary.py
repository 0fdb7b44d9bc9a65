"""Per-policy evaluation summary: the table `confkv-agent eval` prints (and `--json` emits).

Pure functions over episode rows (dicts shaped like the `episodes` table), so the math is tested without a
database.  Comparisons with the baseline policy (`full`) are PAIRED: a policy is compared with `full` on the tasks
both ran, so a policy evaluated on a subset (or resumed half-way) is not flattered or punished by task mix.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from statistics import fmean
from typing import Any

from rich.table import Table

from traces.fmt import format_bytes, format_ratio

BASELINE_POLICY = "full"


@dataclass(frozen=True)
class PolicySummary:
    """Aggregate figures for one policy.  `None` means undefined (no baseline, or nothing measured)."""

    policy: str
    episodes: int  # finished episodes (done + error) after keeping one attempt per task
    errors: int
    successes: int
    success_rate: float
    retention_vs_full: float | None  # success rate / full's, on shared tasks
    mean_peak_kv_bytes: float | None
    max_peak_kv_bytes: int | None
    peak_kv_ratio_vs_full: float | None  # mean peak KV / full's mean peak KV, on shared tasks
    max_peak_kv_ratio_vs_full: float | None  # max peak KV / full's max peak KV, on shared tasks
    kv_fraction_of_full_need: float | None  # mean over episodes of peak_kv / full_kv_bytes (no full run needed)
    mean_prefilled_tokens: float | None  # per episode
    decode_tokens_per_s: float | None  # generated tokens / decode seconds, over all episodes
    mean_wall_s: float | None
    gate_open_rate: float | None = None  # mean over episodes of the share of forwards the gate opened on


@dataclass(frozen=True)
class TraceSummary:
    """Summaries keyed by policy name, baseline first."""

    policies: dict[str, PolicySummary]
    baseline: str = BASELINE_POLICY

    def to_json(self) -> dict[str, Any]:
        """`{"baseline": ..., "policies": {name: {success_rate, retention_vs_full, peak_kv_ratio_vs_full,
        episodes, ...}}}` -- the shape `confkv-agent eval --json` promises."""
        return {
            "baseline": self.baseline,
            "policies": {
                name: {k: v for k, v in asdict(s).items() if k != "policy"} for name, s in self.policies.items()
            },
        }


def interrupted(row: Mapping[str, Any]) -> bool:
    """Whether an episode was cut short from outside (Ctrl-C, SIGTERM, a process that died): not an outcome of the
    agent. `runner.episode` and the store's stale-claim sweep both write errors that start with "interrupted"."""
    return row["status"] == "error" and str(row.get("error") or "").startswith("interrupted")


def final_attempts(rows: Iterable[Mapping[str, Any]], across_runs: bool = False) -> list[Mapping[str, Any]]:
    """One row per (run, task, policy): the latest `done` attempt, else the latest `error`; `running` is dropped,
    and so are `interrupted` attempts (a resume reruns them; `unfinished` lists tasks that have nothing else).

    A crashed episode is rerun under the same run; only its final outcome should count, and an error that a rerun
    fixed must not count as a failure. `across_runs` keys on (task, policy) alone, for one suite finished under two
    runs of the same policy (e.g. resumed on a machine that needed another dtype): each task counts once.
    """
    best: dict[tuple[Any, Any, Any], Mapping[str, Any]] = {}
    for row in rows:
        if row["status"] not in ("done", "error") or interrupted(row):
            continue
        key = _attempt_key(row, across_runs)
        current = best.get(key)
        if current is None or _attempt_rank(row) > _attempt_rank(current):
            best[key] = row
    return sorted(best.values(), key=lambda r: r.get("id") or 0)


def unfinished(rows: Iterable[Mapping[str, Any]], across_runs: bool = False) -> list[Mapping[str, Any]]:
    """The latest interrupted attempt of each (run, task, policy) that has no finished one: what a success rate
    over `final_attempts` leaves out, so a report can say how much of the suite it covers."""
    rows = list(rows)
    finished = {_attempt_key(r, across_runs) for r in final_attempts(rows, across_runs)}
    latest: dict[tuple[Any, Any, Any], Mapping[str, Any]] = {}
    for row in rows:
        key = _attempt_key(row, across_runs)
        if interrupted(row) and key not in finished and (row.get("id") or 0) >= (latest.get(key, {}).get("id") or 0):
            latest[key] = row
    return sorted(latest.values(), key=lambda r: r.get("id") or 0)


def _attempt_key(row: Mapping[str, Any], across_runs: bool) -> tuple[Any, Any, Any]:
    return (None if across_runs else row.get("run_id"), row["task_id"], row["policy"])


def _attempt_rank(row: Mapping[str, Any]) -> tuple[int, int]:
    return (1 if row["status"] == "done" else 0, row.get("id") or 0)


def summarize(rows: Iterable[Mapping[str, Any]], baseline: str = BASELINE_POLICY) -> TraceSummary:
    """Summarize finished episode rows per policy.  Rows should already be `final_attempts`.

    Errors count as failures in the success rate.  Memory means skip episodes whose peak was not measured.
    """
    by_policy: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        if row["status"] not in ("done", "error"):
            raise ValueError(f"episode {row.get('id')} has status {row['status']!r}; summarize finished episodes only")
        by_policy.setdefault(row["policy"], []).append(row)
    order = sorted(by_policy, key=lambda p: (p != baseline, p))
    base = by_policy.get(baseline)
    return TraceSummary({p: _summarize_policy(p, by_policy[p], base) for p in order}, baseline=baseline)


def _summarize_policy(
    policy: str, rows: list[Mapping[str, Any]], base: list[Mapping[str, Any]] | None
) -> PolicySummary:
    peaks = [r["peak_kv_bytes"] for r in rows if r.get("peak_kv_bytes") is not None]
    fractions = [
        r["peak_kv_bytes"] / r["full_kv_bytes"]
        for r in rows
        if r.get("peak_kv_bytes") is not None and r.get("full_kv_bytes")
    ]
    prefilled = [r["prefilled_tokens"] for r in rows if r.get("prefilled_tokens") is not None]
    walls = [r["wall_s"] for r in rows if r.get("wall_s") is not None]
    gates = [r["gate_open_rate"] for r in rows if r.get("gate_open_rate") is not None]
    out_tokens = sum(r.get("output_tokens") or 0 for r in rows)
    decode_s = sum(r.get("decode_ms") or 0.0 for r in rows) / 1000.0
    successes = sum(_success(r) for r in rows)
    retention = kv_ratio = max_kv_ratio = None
    if base is not None:
        retention, kv_ratio, max_kv_ratio = _paired_vs_baseline(rows, base)
    return PolicySummary(
        policy=policy,
        episodes=len(rows),
        errors=sum(r["status"] == "error" for r in rows),
        successes=successes,
        success_rate=successes / len(rows),
        retention_vs_full=retention,
        mean_peak_kv_bytes=fmean(peaks) if peaks else None,
        max_peak_kv_bytes=max(peaks) if peaks else None,
        peak_kv_ratio_vs_full=kv_ratio,
        max_peak_kv_ratio_vs_full=max_kv_ratio,
        kv_fraction_of_full_need=fmean(fractions) if fractions else None,
        mean_prefilled_tokens=fmean(prefilled) if prefilled else None,
        decode_tokens_per_s=out_tokens / decode_s if decode_s > 0 else None,
        mean_wall_s=fmean(walls) if walls else None,
        gate_open_rate=fmean(gates) if gates else None,
    )


def _success(row: Mapping[str, Any]) -> int:
    return 1 if row["status"] == "done" and row.get("success") else 0


def _per_task(rows: list[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    tasks: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        tasks.setdefault(row["task_id"], []).append(row)
    return tasks


def _paired_vs_baseline(
    rows: list[Mapping[str, Any]], base: list[Mapping[str, Any]]
) -> tuple[float | None, float | None, float | None]:
    """(success retention, mean-peak ratio, max-peak ratio) against the baseline on the tasks both policies ran.

    A task run several times (several runs selected) contributes its mean, so it weighs once on both sides.
    """
    mine, theirs = _per_task(rows), _per_task(base)
    shared = sorted(mine.keys() & theirs.keys())
    if not shared:
        return None, None, None

    def task_rate(group: dict[str, list[Mapping[str, Any]]], task: str) -> float:
        return fmean(_success(r) for r in group[task])

    def task_peaks(group: dict[str, list[Mapping[str, Any]]], task: str) -> list[float]:
        return [r["peak_kv_bytes"] for r in group[task] if r.get("peak_kv_bytes") is not None]

    base_rate = fmean(task_rate(theirs, t) for t in shared)
    retention = fmean(task_rate(mine, t) for t in shared) / base_rate if base_rate > 0 else None
    kv_tasks = [t for t in shared if task_peaks(mine, t) and task_peaks(theirs, t)]
    if not kv_tasks:
        return retention, None, None
    my_mean = fmean(fmean(task_peaks(mine, t)) for t in kv_tasks)
    base_mean = fmean(fmean(task_peaks(theirs, t)) for t in kv_tasks)
    my_max = max(max(task_peaks(mine, t)) for t in kv_tasks)
    base_max = max(max(task_peaks(theirs, t)) for t in kv_tasks)
    kv_ratio = my_mean / base_mean if base_mean > 0 else None
    max_ratio = my_max / base_max if base_max > 0 else None
    return retention, kv_ratio, max_ratio


def summary_table(summary: TraceSummary, title: str | None = "Per-policy results") -> Table:
    """The rich table `confkv-agent eval` prints."""
    table = Table(title=title)
    for name in (
        "policy",
        "episodes",
        "errors",
        "success",
        f"retention vs {summary.baseline}",
        "mean peak KV",
        "max peak KV",
        f"KV vs {summary.baseline}",
        "KV / full need",
        "prefilled tok/ep",
        "decode tok/s",
        "gate open",
    ):
        table.add_column(name, justify="left" if name == "policy" else "right")
    for s in summary.policies.values():
        table.add_row(
            s.policy,
            str(s.episodes),
            str(s.errors),
            format_ratio(s.success_rate, percent=True),
            format_ratio(s.retention_vs_full, percent=True),
            format_bytes(s.mean_peak_kv_bytes),
            format_bytes(s.max_peak_kv_bytes),
            format_ratio(s.peak_kv_ratio_vs_full),
            format_ratio(s.kv_fraction_of_full_need),
            "-" if s.mean_prefilled_tokens is None else f"{s.mean_prefilled_tokens:.0f}",
            "-" if s.decode_tokens_per_s is None else f"{s.decode_tokens_per_s:.1f}",
            format_ratio(s.gate_open_rate, percent=True),
        )
    return table
