"""scripts/frontier_page.py: the page's quoted tables follow the generated tables file; prose and unquoted tables
stay as written; a quote it cannot refresh is reported, not left stale in silence."""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "frontier_page.py"
spec = importlib.util.spec_from_file_location("frontier_page", SCRIPT)
frontier_page = importlib.util.module_from_spec(spec)
spec.loader.exec_module(frontier_page)

TABLES = """# tables

## The baselines at confkv's footprint, all tasks

`cmd`

| task | policy |
|---|---|
| 1 | full |

| A vs B | tasks |
|---|---|
| a vs b | 40 |

| label | decision acc |
|---|---|
| full | 40% |

## The baselines at confkv's footprint, long-memory tasks

| A vs B | tasks |
|---|---|
| a vs b | 20 |
"""

PAGE = """# page

All tasks:

| A vs B | tasks |
|---|---|
| a vs b | 38 |

Prose that cites 38 tasks.

Long-memory tasks only (`--memory-span long`):

| A vs B | tasks |
|---|---|
| a vs b | 19 |

A hand table:

| label | mean KV vs full |
|---|---|
| full | 100% |
"""


def test_quoted_tables_follow_the_tables_file_and_nothing_else_moves():
    page, skipped = frontier_page.refresh(TABLES, PAGE)
    assert "| a vs b | 40 |" in page and "| a vs b | 20 |" in page
    assert "| a vs b | 38 |" not in page and "| a vs b | 19 |" not in page
    assert "Prose that cites 38 tasks." in page and "| full | 100% |" in page  # prose and hand tables kept
    assert page.count("| A vs B | tasks |") == 2 and page.endswith("| full | 100% |\n")
    # anchors absent from this page, or a section the tables file lacks, are reported
    assert "All tasks:" not in skipped and "Long-memory tasks only" not in skipped
    assert "Short-memory tasks only" in skipped and "### Does the gate beat" in skipped


def test_main_rewrites_the_page_in_place(tmp_path, capsys):
    tables, page = tmp_path / "t.md", tmp_path / "p.md"
    tables.write_text(TABLES, encoding="utf-8")
    page.write_text(PAGE, encoding="utf-8")
    assert frontier_page.main(["frontier_page.py", str(tables), str(page)]) == 0
    assert "| a vs b | 40 |" in page.read_text(encoding="utf-8")
    assert frontier_page.main(["frontier_page.py"]) == 2 and "Usage" in capsys.readouterr().err
