"""What the agent must never be shown outside a live page: the entities and answers of the task suite.

Why: a few-shot example that happens to be one of the evaluated tasks (the first system prompt's "price of the
Ironleaf mug ... stop [$9.95]" was task 1 and its answer) turns a lookup into recall and scores a success that the
agent never earned. `find_leaks(text)` lists every suite string found in `text`; the test suite runs it on the
system prompt, and anything else shown to the agent before its first observation should pass it too.

What counts: every name, title and user name in the three seeded databases, the brand (first word) of every
product, and from each task its reference answers, the typed texts and URLs of its reference solution and the
quoted phrases of its intent. Element names in reference solutions are left to the database list (a link
named after a thread is a thread title) so that generic UI labels ('Reply', 'Add to cart') stay usable in the grammar. Strings shorter than 3 characters (ids, small counts) and `N/A` are skipped; a string
matches case-insensitively and only as a whole (not inside a longer word or number).
"""

from __future__ import annotations

import re
import sqlite3
import tempfile
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

ENTITY_COLUMNS = ("name", "title", "username", "display_name")
_QUOTED = re.compile(r"'([^']{3,})'|\"([^\"]{3,})\"")
_BRACKETS = re.compile(r"\[([^\]]*)\]")
_SKIP = {"n/a"}


def _answers(value: Any) -> Iterable[str]:
    """Every string inside an evaluator spec (lists, dicts, `|OR|` alternatives)."""
    if isinstance(value, str):
        yield from value.split("|OR|")
    elif isinstance(value, dict):
        for v in value.values():
            yield from _answers(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _answers(v)


def task_strings(task: Any) -> set[str]:
    """The scored and identifying strings of one task (see the module docstring)."""
    out: set[str] = set()
    ev = task.eval.model_dump() if hasattr(task.eval, "model_dump") else dict(task.eval)
    out.update(_answers(ev.get("reference_answers")))
    if ev.get("reference_url"):
        out.add(re.sub(r"^__[A-Z]+__", "", ev["reference_url"]))
    for check in ev.get("program_html") or []:
        out.update(_answers(check.get("required_contents")))
    for line in task.reference_solution:  # typed texts and URLs (element names are site entities or UI labels)
        verb, _, rest = line.strip().partition(" ")
        args = _BRACKETS.findall(rest)
        if verb == "type" and len(args) >= 2:
            out.add(args[1])
        elif verb == "goto" and args:
            out.add(re.sub(r"^__[A-Z]+__", "", args[0]))
    out.update(a or b for a, b in _QUOTED.findall(task.intent))
    return out


def site_entities(seed: int = 0) -> set[str]:
    """Names, titles and user names in the seeded site databases, and product brands."""
    return set(_site_entities(seed))


@lru_cache(maxsize=4)
def _site_entities(seed: int) -> frozenset[str]:
    from envs.server import template_db
    from envs.sites import SITES

    out: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="confkv-leaks-") as tmp:
        for spec in SITES.values():
            con = sqlite3.connect(template_db(spec, seed, Path(tmp)))
            try:
                tables = [r[0] for r in con.execute("select name from sqlite_master where type='table'")]
                for table in tables:
                    cols = {r[1] for r in con.execute(f"pragma table_info({table})")}
                    for col in cols & set(ENTITY_COLUMNS):
                        out.update(str(v) for (v,) in con.execute(f"select {col} from {table}") if v)
                if "products" in tables:
                    out.update(str(n).split()[0] for (n,) in con.execute("select name from products") if n)
            finally:
                con.close()
    return frozenset(out)


def suite_strings(tasks: Iterable[Any], seed: int = 0) -> set[str]:
    strings = site_entities(seed)
    for task in tasks:
        strings |= task_strings(task)
    return {s.strip() for s in strings if len(s.strip()) >= 3 and s.strip().lower() not in _SKIP}


def find_leaks(text: str, strings: Iterable[str]) -> list[str]:
    """The strings of `strings` that occur in `text` as a whole (case-insensitive), sorted."""
    lowered = text.lower()
    hits = []
    for s in strings:
        needle = s.lower()
        if needle not in lowered:
            continue
        if re.search(r"(?<![\w.])" + re.escape(needle) + r"(?![\w])", lowered):
            hits.append(s)
    return sorted(hits)
