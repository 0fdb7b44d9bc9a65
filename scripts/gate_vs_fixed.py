"""Does the confidence gate beat the same ranker with the gate off at equal mean resident bytes? (issue 12)

    .venv/bin/python scripts/gate_vs_fixed.py [--model smollm2-135m] [--tokens 600] [--out FILE.json]

Token by token (stride 1) over the benchmark text: the gated policy (`tau=auto:0.2`, n_low/n_high 128/256, with and
without the `shrink=16` hysteresis) runs first; then the same EMA ranker with the gate off runs at the fixed budget
whose mean resident bytes match the gated run's (searched over budgets, INT8 on both sides, exact budgets: slack 0).
Prints PPL and mean resident KV bytes for each; deterministic (one text), so no run-to-run spread is estimated.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics

from confkv.bench.common import corpus_ids, load_model
from confkv.bench.ppl import stream_nll
from confkv.policies import get_policy

BASE = {"n_low": "128", "n_high": "256", "int8_after": "64", "slack": "0"}


def run(model, ids, overrides: dict[str, str]) -> dict:
    nlls, session = stream_nll(model, ids, get_policy("confkv", {**BASE, **overrides}), stride=1)
    return {"ppl": math.exp(sum(nlls) / len(nlls)), "mean_kv_bytes": statistics.mean(r.kv_bytes for r in session.stats.steps),
            "gate_open_rate": session.cache.gate_open_rate, "overrides": overrides}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--tokens", type=int, default=600)
    parser.add_argument("--out")
    args = parser.parse_args()
    model, tokenizer = load_model(args.model)
    ids = corpus_ids(tokenizer, args.tokens)
    rows = {"gated": run(model, ids, {"tau": "auto:0.2"}),
            "gated+shrink16": run(model, ids, {"tau": "auto:0.2", "shrink": "16"})}
    for name in list(rows):
        target = rows[name]["mean_kv_bytes"]
        lo, hi = 128, 256  # mean bytes grow with the fixed budget: bisect for the closest
        best = None
        while lo <= hi:
            mid = (lo + hi) // 2
            row = run(model, ids, {"gated": "false", "budget": str(mid)})
            if best is None or abs(row["mean_kv_bytes"] - target) < abs(best["mean_kv_bytes"] - target):
                best = row
            if row["mean_kv_bytes"] < target:
                lo = mid + 1
            else:
                hi = mid - 1
            if abs(row["mean_kv_bytes"] - target) / target < 0.01:
                break
        rows[f"fixed matched to {name}"] = best
    for name, row in rows.items():
        print(f"{name:28s} ppl {row['ppl']:.3f}  mean KV {row['mean_kv_bytes'] / 2**20:.2f} MiB  "
              f"gate open {row['gate_open_rate']}  {row['overrides']}", flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"model": args.model, "tokens": len(ids), "stride": 1, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
