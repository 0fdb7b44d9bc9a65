"""Refresh the frontier page's quoted tables from the generated tables file (issue 36).

Why: `scripts/frontier_snapshot.sh` writes every table from the snapshot into one generated Markdown file; the page
(docs/results/frontier-qwen2.5-coder-1.5b.md) quotes a few of them beside its prose. Copying them by hand after
each snapshot went wrong (a stale row beside fresh prose) and the helper that did it lived outside the repository,
so a new machine lost it. Each quoted table follows an anchor line on the page and is replaced by the table with
the same header from a named section of the tables file; the prose is left alone (its figures are the author's to
restate). The sweep's per-label table is written by hand (it adds mean KV) and is not touched.

Usage: python scripts/frontier_page.py TABLES_MD PAGE_MD
"""

from __future__ import annotations

import re
import sys

# (anchor on the page, section title prefix in the tables file, the table's header prefix)
QUOTES = [
    ("Coverage by site and memory span", "Coverage:", "| site"),
    ("All tasks:", "The baselines at confkv's footprint, all", "| A vs B"),
    ("Long-memory tasks only", "The baselines at confkv's footprint, long", "| A vs B"),
    ("Short-memory tasks only", "The baselines at confkv's footprint, short", "| A vs B"),
    ("Per label against `full`, all tasks:", "The baselines at confkv's footprint, all", "| label | decision acc"),
    ("### Does the gate beat", "The gate and recall against", "| A vs B"),
    ("### Where the lost decisions", "The baselines at confkv's footprint, all", "| label | lost decisions"),
    ("The sweep, head to head:", "The footprint sweep", "| A vs B"),
    ("answered by the turn gates above.", "The forward gate closed", "| task | policy"),
]


def sections(text: str) -> dict[str, str]:
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def _table_at(lines: list[str]) -> str:
    """The table `lines` start with: its rows up to the first line that is not one."""
    n = next((i for i, line in enumerate(lines) if not line.startswith("|")), len(lines))
    return "\n".join(lines[:n])


def table(section: str, header: str) -> str:
    """The first table in `section` whose header line starts with `header`."""
    lines = section.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(header):
            return _table_at(lines[i:])
    raise KeyError(f"no table starting {header!r}")


def replace_after(page: str, anchor: str, new: str) -> str:
    """`page` with the first table after `anchor` replaced by `new`."""
    start = page.index("\n|", page.index(anchor)) + 1
    return page[:start] + new + page[start + len(_table_at(page[start:].split("\n"))):]


def refresh(tables_md: str, page: str) -> tuple[str, list[str]]:
    """The page with every quoted table refreshed, and the anchors it skipped (absent on the page or the table
    absent from the tables file), so a renamed heading is reported rather than silently left stale."""
    found = sections(tables_md)
    skipped = []
    for anchor, title, header in QUOTES:
        section = next((text for name, text in found.items() if name.startswith(title)), None)
        if anchor not in page or section is None:
            skipped.append(anchor)
            continue
        try:
            page = replace_after(page, anchor, table(section, header))
        except (KeyError, ValueError):
            skipped.append(anchor)
    return page, skipped


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        tables_md = f.read()
    with open(argv[2], encoding="utf-8") as f:
        page = f.read()
    page, skipped = refresh(tables_md, page)
    with open(argv[2], "w", encoding="utf-8") as f:
        f.write(page)
    for anchor in skipped:
        print(f"frontier_page: no table refreshed after {anchor!r}", file=sys.stderr)
    print(f"refreshed {len(QUOTES) - len(skipped)} of {len(QUOTES)} quoted tables in {argv[2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
