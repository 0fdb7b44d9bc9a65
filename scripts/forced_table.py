"""Print a trace database's trajectory-forced results as Markdown (per policy, then per task): docs/results tables."""

from __future__ import annotations

import argparse

from traces.forced import common_tasks, forced_rows, summarize_forced
from traces.store import TraceStore


def _f(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def main(db: str, labels: list[str] | None = None, common: bool = False) -> None:
    with TraceStore.open_existing(db) as store:
        rows = forced_rows(store.db)
    if labels:
        rows = [r for r in rows if r["policy"] in labels]
    if common:
        rows = common_tasks(rows)
    summary = summarize_forced(rows)
    print("| policy | tasks | broken | answer ΔNLL long | answer ΔNLL short | action ΔNLL | action NLL | answer NLL "
          "| action acc | exact/pass/judged | mean KV vs full | peak KV vs full |")
    print("|" + "---|" * 12)
    for s in summary.values():
        print(f"| {s.policy} | {s.tasks} | {s.broken} | {_f(s.answer_dnll_long, '+.3f')} | "
              f"{_f(s.answer_dnll_short, '+.3f')} | {_f(s.action_dnll, '+.3f')} | {_f(s.action_nll, '.3f')} | "
              f"{_f(s.answer_nll, '.3f')} | {_f(s.action_acc, '.1%')} | {s.answer_exact}/{s.answer_pass}/{s.judged} | "
              f"{_f(s.mean_kv_vs_full, '.1%')} | {_f(s.peak_kv_vs_full, '.1%')} |")
    print("\n| task | policy | steps | action tokens | action NLL | answer tokens | answer NLL | greedy answer | pass "
          "| peak KV MiB |")
    print("|" + "---|" * 10)
    for r in sorted(rows, key=lambda r: (r["task_id"], r["policy"] != "full", r["policy"])):
        if r["broken"]:
            print(f"| {r['task_id']} | {r['policy']} | broken: {r['broken']} |" + " |" * 7)
            continue
        print(f"| {r['task_id']} | {r['policy']} | {r['steps']} | {r['action_tokens']} | {r['action_nll']:.3f} | "
              f"{r['answer_tokens']} | {_f(r['answer_nll'], '.3f')} | {r['greedy_answer']!r} | {r['answer_pass']} | "
              f"{r['peak_kv_bytes'] / 2**20:.0f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db", nargs="?", default="runs/forced-smoke.sqlite")
    parser.add_argument("--labels", help="comma-separated policy labels to keep (e.g. full,confkv@512)")
    parser.add_argument("--common", action="store_true", help="only tasks every kept label finished")
    args = parser.parse_args()
    main(args.db, args.labels.split(",") if args.labels else None, args.common)
