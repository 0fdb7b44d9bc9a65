"""Per-task MiniWoB++ success of an `eval --suite miniwob` database, policy beside policy (README + docs/results).

    python scripts/miniwob_results.py runs/miniwob.sqlite --run 3 --run 4 --out docs/results/miniwob.json

Only tasks every selected policy finished on the same seeds are compared (a stopped eval leaves the last task
half done); the JSON keeps every final attempt as well.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

from confkv.bench.niah import wilson
from traces.store import TraceStore
from traces.summary import final_attempts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db", type=Path)
    parser.add_argument("--run", type=int, action="append", required=True, help="run ids (one per policy)")
    parser.add_argument("--out", type=Path, help="write the JSON here")
    args = parser.parse_args()
    with TraceStore.open_existing(args.db) as store:
        rows = final_attempts(store.episodes(run_ids=args.run))
        runs = {r["id"]: r for r in store.runs() if r["id"] in args.run}
    by_key: dict[tuple[str, int], dict[str, int]] = defaultdict(dict)
    for row in rows:
        by_key[_key(row)][row["policy"]] = int(row["success"] or 0)
    policies = sorted({r["policy"] for r in runs.values()}, key=lambda p: (p != "full", p))
    complete = {k: v for k, v in by_key.items() if all(p in v for p in policies)}
    tasks: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for (name, _seed), outcome in sorted(complete.items()):
        for p in policies:
            tasks[name][p].append(outcome[p])
    print("| task | seeds | " + " | ".join(policies) + " |")
    print("|---|---|" + "---|" * len(policies))
    totals = {p: 0 for p in policies}
    for name, per in sorted(tasks.items()):
        n = len(per[policies[0]])
        print(f"| {name} | {n} | " + " | ".join(f"{sum(per[p])}/{n}" for p in policies) + " |")
        for p in policies:
            totals[p] += sum(per[p])
    n_all = len(complete)
    print(f"| **all** | {n_all} (task, seed) | " + " | ".join(f"**{totals[p]}/{n_all}**" for p in policies) + " |")
    for p in policies:
        lo, hi = wilson(totals[p], n_all)
        print(f"{p}: {totals[p]}/{n_all} = {totals[p] / max(n_all, 1):.0%} (Wilson 95% {lo:.0%}-{hi:.0%})")
    for p in policies[1:]:
        wins = sum(v[p] > v[policies[0]] for v in complete.values())
        losses = sum(v[p] < v[policies[0]] for v in complete.values())
        print(f"{p} vs {policies[0]}, paired by (task, seed): {wins} won, {losses} lost, {n_all - wins - losses} tied")
    done = {(name, seed) for name, seed in complete}
    for p in policies:
        mine = [r for r in rows if r["policy"] == p and _key(r) in done]
        ratios = [r["peak_kv_bytes"] / r["full_kv_bytes"] for r in mine if r["peak_kv_bytes"] and r["full_kv_bytes"]]
        steps = sorted(int(r["steps"] or 0) for r in mine)
        walls = sorted(float(r["wall_s"] or 0) for r in mine)
        if mine:
            print(f"{p}: peak KV / full {statistics.mean(ratios):.2f} (min {min(ratios):.2f}, max {max(ratios):.2f}); "
                  f"steps median {statistics.median(steps)}, mean {statistics.mean(steps):.1f}; "
                  f"episode wall median {statistics.median(walls):.0f} s")
    if args.out:
        payload = {
            "db": str(args.db), "runs": {str(k): {"model": r["model"], "policy": r["policy"],
                                                   "config": r["policy_config"]} for k, r in runs.items()},
            "per_task": {name: {p: per[p] for p in policies} for name, per in sorted(tasks.items())},
            "totals": {p: {"success": totals[p], "episodes": n_all} for p in policies},
            "episodes": [{k: r[k] for k in ("task_id", "policy", "status", "success", "steps", "wall_s",
                                            "peak_kv_bytes", "full_kv_bytes", "eval_reason")} for r in rows],
        }  # fmt: skip
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(payload, indent=2) + "\n")


def _key(row) -> tuple[str, int]:
    _, name, seed = str(row["task_id"]).split("/")
    return name, int(seed)


if __name__ == "__main__":
    main()
