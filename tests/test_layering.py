"""The package layers and the module graph: no import cycles and no import up a layer, over every package.

Layers, lowest first: `confkv` (the KV-cache library) and `envs` (tasks, sites, evaluators), side by side and
independent of each other; then `traces` (the trace store, reports); then `agent` (the agent: grammar, observation,
prompt, `ModelAgent`); then `runner` (browser, episode loop, batches, backends); then `cli`, which nothing imports. A
module may import its own package and the layers below it, never a layer above or a package beside it.

Every import counts, wherever it is written: at the top, inside a function (a lazy import is still a dependency,
and a lazy cycle is a cycle that only shows up in some call orders), under `if TYPE_CHECKING:`. Type-only imports
never run, so they are left out of the cycle check, but they still must not reach up a layer (a type from above is
a dependency on above). A cycle is a strongly connected component of more than one module.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = {"confkv": 0, "envs": 0, "traces": 1, "agent": 2, "runner": 3, "cli": 4}

# A cycle that is known and owned elsewhere, to be broken there (each entry must still be a real cycle, so the
# entry goes when the cycle does).
PENDING_CYCLES: set[frozenset[str]] = set()


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    type_only: bool

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} (line {self.line}{', TYPE_CHECKING' if self.type_only else ''})"


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the layered packages (a package is its `__init__`)."""
    out = {}
    for package in LAYERS:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _type_checking_block(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def _imports(tree: ast.AST, type_only: bool = False) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement at any depth, and whether it sits under `if TYPE_CHECKING:` (its body only)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, type_only
        if _type_checking_block(node):
            for child in node.body:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), True)
            for child in node.orelse:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), type_only)
        else:
            yield from _imports(node, type_only)


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module a dotted name lands in (`pkg.mod.attr` -> `pkg.mod`); None outside the layered packages."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_edges(module: str, source: str, modules: dict[str, Path], is_package: bool = False) -> list[Edge]:
    """The imports of one module's source that land in a layered module (itself excluded). `from pkg import x`
    counts as importing `pkg.x` when that is a module, else `pkg`; relative imports are resolved."""
    here = module if is_package else module.rpartition(".")[0]
    edges = []
    for node, type_only in _imports(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [_resolve(alias.name, modules) for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [_resolve(f"{base}.{alias.name}", modules) for alias in node.names]
        edges += [Edge(module, t, node.lineno, type_only) for t in dict.fromkeys(targets) if t and t != module]
    return edges


def module_graph(root: Path = ROOT) -> list[Edge]:
    modules = module_files(root)
    edges = []
    for name, path in modules.items():
        edges += import_edges(name, path.read_text(), modules, is_package=path.name == "__init__.py")
    return edges


def cycles(edges: list[Edge]) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative) of the runtime imports."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        graph.setdefault(e.source, set())
        graph.setdefault(e.target, set())
        if not e.type_only:
            graph[e.source].add(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(component)
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def layer_violations(edges: list[Edge]) -> list[Edge]:
    """Imports into a higher layer, or into another package of the same layer."""
    bad = []
    for e in edges:
        src, dst = e.source.split(".")[0], e.target.split(".")[0]
        if src != dst and LAYERS[dst] >= LAYERS[src]:
            bad.append(e)
    return bad


def test_no_import_cycle_among_modules() -> None:
    edges = module_graph()
    assert len({e.source for e in edges}) > 100, "the scan must see the whole tree"
    found = [c for c in cycles(edges) if frozenset(c) not in PENDING_CYCLES]
    report = [sorted(c) + [str(e) for e in edges if e.source in c and e.target in c and not e.type_only] for c in found]
    assert report == []
    still = {frozenset(c) for c in cycles(edges)}
    assert PENDING_CYCLES <= still, "a pending cycle is gone: remove it from PENDING_CYCLES"


def test_no_import_reaches_up_a_layer_or_across_to_a_sibling_package() -> None:
    assert [str(e) for e in layer_violations(module_graph())] == []


def test_the_scan_sees_lazy_relative_and_type_only_imports_and_finds_cycles() -> None:
    modules = {name: Path() for name in ("traces", "traces.a", "traces.b", "traces.c", "agent", "agent.x")}
    source = (
        "import os\n"
        "from typing import TYPE_CHECKING\n"
        "from . import b\n"
        "from .c import thing\n"
        "if TYPE_CHECKING:\n"
        "    from agent.x import Type\n"
        "def f():\n"
        "    import agent\n"
    )
    edges = import_edges("traces.a", source, modules)
    assert [(e.target, e.type_only) for e in edges] == [
        ("traces.b", False), ("traces.c", False), ("agent.x", True), ("agent", False),
    ]  # fmt: skip
    assert [str(e) for e in layer_violations(edges)] == [
        "traces.a -> agent.x (line 6, TYPE_CHECKING)", "traces.a -> agent (line 8)",
    ]  # fmt: skip
    loop = [Edge("traces.a", "traces.b", 1, False), Edge("traces.b", "traces.c", 1, False),
            Edge("traces.c", "traces.a", 1, False)]  # fmt: skip
    assert cycles(loop) == [{"traces.a", "traces.b", "traces.c"}]
    assert cycles([*loop[:2], Edge("traces.c", "traces.a", 1, True)]) == [], "type-only imports never run"
    assert layer_violations([Edge("confkv.x", "envs.y", 1, False)]) != [], "siblings are independent"


def test_the_trace_store_and_confkv_cpu_import_without_torch() -> None:
    """`confkv/__init__` loads its names on first use, so the trace store (opened by every light `traces` command)
    and `confkv.cpu` stay light; the package's exports all still resolve."""
    import subprocess
    import sys

    code = ("import sys, traces.store, traces.machine, confkv.cpu, confkv\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n"
            "assert set(confkv.__all__) == set(confkv._HOMES), 'exports and homes differ'\n"
            "from confkv import *\n"
            "assert all(name in globals() for name in confkv.__all__)\n"
            "assert callable(confidence) and callable(confkv.confidence), 'confidence is the module'\n"
            "assert 'torch' in sys.modules\n")  # fmt: skip
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    # `confidence` names a submodule too: imported first (by confkv.cache), it must not shadow the function
    code = "import confkv.cache, confkv\nfrom confkv import confidence\nassert callable(confkv.confidence)\n" \
           "assert callable(confidence)\nimport confkv.confidence as m\n"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
