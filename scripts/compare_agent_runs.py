"""Pair two agent versions' full-KV episodes task by task: success each, and the first step where they differ.

Why: greedy decoding is deterministic on one machine and dtype, so two agent versions that share the prompt take the
same actions until a changed rule first bites; the first differing step names the rule that changed the episode.

    python scripts/compare_agent_runs.py OLD.sqlite:RUN NEW.sqlite:RUN [--policy full]
"""

from __future__ import annotations

import argparse
import sqlite3


def episodes(spec: str, policy: str) -> dict[str, tuple[int, int | None, list[str]]]:
    """task id -> (episode id, success, actions) for the run's finished episodes of `policy`."""
    path, run = spec.rsplit(":", 1)
    db = sqlite3.connect(path)
    out = {}
    rows = db.execute("select id, task_id, success from episodes where run_id = ? and policy = ? and status = 'done'",
                      (int(run), policy))
    for ep, task, success in rows:
        actions = [a or "" for (a,) in db.execute("select action from steps where episode_id = ? order by step", (ep,))]
        out[task] = (ep, success, actions)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--policy", default="full")
    args = ap.parse_args()
    old, new = episodes(args.old, args.policy), episodes(args.new, args.policy)
    shared = sorted(set(old) & set(new), key=int)
    print("| task | old ep | new ep | old | new | first differing step: old -> new |")
    print("|---|---|---|---|---|---|")
    for task in shared:
        (oe, os_, oa), (ne, ns, na) = old[task], new[task]
        diff = next((i for i, (a, b) in enumerate(zip(oa, na, strict=False)) if a != b), None)
        if diff is None:
            where = "same actions" if len(oa) == len(na) else f"same first {min(len(oa), len(na))} actions"
        else:
            where = f"step {diff}: `{oa[diff]}` -> `{na[diff]}`"
        print(f"| {task} | {oe} | {ne} | {'pass' if os_ else 'fail'} | {'pass' if ns else 'fail'} | {where} |")
    won = sum(bool(new[t][1]) and not old[t][1] for t in shared)
    lost = sum(bool(old[t][1]) and not new[t][1] for t in shared)
    print(f"\n{len(shared)} shared tasks: old {sum(bool(old[t][1]) for t in shared)} passed, "
          f"new {sum(bool(new[t][1]) for t in shared)} passed ({won} won, {lost} lost)")


if __name__ == "__main__":
    main()
