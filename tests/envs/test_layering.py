"""envs is tasks, sites and evaluators: no module under envs/ imports the agent package (the agent imports envs)."""

from __future__ import annotations

import ast
from pathlib import Path

ENVS = Path(__file__).resolve().parents[2] / "envs"


def agent_imports(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        found += [n for n in names if n == "agent" or n.startswith("agent.")]
    return found


def test_no_envs_module_imports_agent() -> None:
    files = sorted(ENVS.rglob("*.py"))
    assert len(files) > 10
    offenders = {str(f.relative_to(ENVS)): agent_imports(f.read_text()) for f in files}
    assert {f: names for f, names in offenders.items() if names} == {}


def test_the_scan_sees_lazy_and_type_only_imports() -> None:
    lazy = "def f():\n    from agent.actions import parse_action\n"
    typed = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import agent.browser\n"
    assert agent_imports(lazy) == ["agent.actions"] and agent_imports(typed) == ["agent.browser"]
    assert agent_imports("import agents_of_chaos\nfrom envs import agent_tools\n") == []
