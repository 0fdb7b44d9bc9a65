"""INT8 key scales on a real model: PPL of full, the EMA ranker at a fixed 256-token budget in the model dtype, and
the same with INT8 keys quantized per token vs with per-channel pre-scaling (issue 12). Token by token (stride 1).

    .venv/bin/python scripts/int8_key_scales.py [--model smollm2-135m] [--tokens 600] [--out FILE.json]

Needs the benchmark text (`apt-get install bible-kjv`). Prints one line per variant; ~2 min each on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import json
import math

from confkv.bench.common import corpus_ids, load_model
from confkv.bench.ppl import stream_nll
from confkv.policies import get_policy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--tokens", type=int, default=600)
    parser.add_argument("--out")
    args = parser.parse_args()
    model, tokenizer = load_model(args.model)
    ids = corpus_ids(tokenizer, args.tokens)
    base = {"gated": "false", "budget": "256", "slack": "0"}
    variants = {
        "full": get_policy("full"),
        "ema256-fp": get_policy("confkv", {**base, "int8_after": "none"}),
        "ema256-int8-token": get_policy("confkv", {**base, "int8_after": "64", "key_scales": "token"}),
        "ema256-int8-channel": get_policy("confkv", {**base, "int8_after": "64", "key_scales": "channel"}),
    }
    ppl = {}
    for name, policy in variants.items():
        nlls, _ = stream_nll(model, ids, policy, stride=1)
        ppl[name] = math.exp(sum(nlls) / len(nlls))
        print(f"{name:22s} ppl {ppl[name]:.3f}", flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"model": args.model, "tokens": len(ids), "stride": 1, "budget": 256, "ppl": ppl}, fh, indent=1)


if __name__ == "__main__":
    main()
