"""How many prompt tokens would the compact observation save? Measured on every distinct page a trace DB recorded.

Every observation token is prefilled once per step, and on a 2-core CPU prefill is most of a step (about 17 tokens
per second per core for the 1.5B model in fp32), so tokens per page is step time. This re-renders each recorded
page with `agent.observation.compact_tree` and counts both forms with the model's tokenizer, per site:

    PYTHONPATH=. .venv/bin/python scripts/compact_tokens.py runs/free-v7.sqlite [more.sqlite ...]
"""

from __future__ import annotations

import argparse
import sqlite3

from agent.observation import compact_tree
from confkv.models.load import load_tokenizer
from envs import TASKS_DIR
from envs.taskspec import load_tasks


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dbs", nargs="+")
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    args = ap.parse_args()
    tok = load_tokenizer(args.model)
    site_of = {str(t.task_id): t.sites[0] if len(t.sites) == 1 else "cross-site" for t in load_tasks(TASKS_DIR)}
    pages: dict[str, str] = {}  # observation -> site (a page seen by many episodes counts once)
    for db in args.dbs:
        sql = "select e.task_id, s.observation from steps s join episodes e on e.id = s.episode_id"
        for task_id, text in sqlite3.connect(db).execute(sql + " where s.observation is not null"):
            pages.setdefault(text, site_of.get(task_id, "other"))
    counts: dict[str, list[tuple[int, int]]] = {}
    for text, site in pages.items():
        tabs, url, tree = (text.split("\n", 2) + ["", ""])[:3]
        compact = f"{tabs}\n{url}\n{compact_tree(tree)}"
        counts.setdefault(site, []).append((len(tok(text).input_ids), len(tok(compact).input_ids)))
    print("| site | pages | tokens per page | compact | ratio | largest page |")
    print("|---|---|---|---|---|---|")
    for site, rows in sorted(counts.items()):
        full, small = sum(a for a, _ in rows), sum(b for _, b in rows)
        big = max(rows)
        print(f"| {site} | {len(rows)} | {full / len(rows):.0f} | {small / len(rows):.0f} | {small / full:.2f} "
              f"| {big[0]} -> {big[1]} |")  # fmt: skip


if __name__ == "__main__":
    main()
