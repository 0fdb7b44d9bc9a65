"""How often the confidence gate opens, fixed tau = 0.5 vs `tau=auto:q` (issue 12), on a real model.

    .venv/bin/python scripts/gate_open_rate.py [--model smollm2-135m] [--q 0.2] [--out FILE.json]

Protocol: 256 tokens of the benchmark text prefilled, then 256 more teacher-forced one by one through the `confkv`
preset; reports the cache's gate-open rate over all judged forwards (warmup included), the share of decode steps
with the gate open, and the mean confidence. Needs the benchmark text (`apt-get install bible-kjv`).
"""

from __future__ import annotations

import argparse
import json

from confkv.bench.common import corpus_ids, load_model
from confkv.policies import get_policy
from confkv.session import ConfKVSession


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--q", type=float, default=0.2)
    parser.add_argument("--out")
    args = parser.parse_args()
    model, tokenizer = load_model(args.model)
    ids = corpus_ids(tokenizer, 512)
    result = {}
    for tau in ("0.5", f"auto:{args.q}"):
        policy = get_policy("confkv", {"tau": tau})
        session = ConfKVSession(model, policy)
        session.append(ids[:256])
        for token in ids[256:512]:
            session.step(token)
        decode = [r for r in session.stats.steps if r.kind == "decode"]
        result[tau] = {
            "gate_open_rate_all_forwards": session.cache.gate_open_rate,
            "decode_steps_open": sum(r.budget == policy.n_high for r in decode) / len(decode),
            "mean_confidence": sum(r.confidence for r in decode) / len(decode),
        }
        print(tau, {k: round(v, 4) for k, v in result[tau].items()}, flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"model": args.model, "protocol": "256 tokens prefilled, 256 teacher-forced one by one",
                       "gate": result}, fh, indent=1)


if __name__ == "__main__":
    main()
