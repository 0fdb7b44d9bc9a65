"""What the model sees each step: the pruned accessibility tree of the active tab, its URL and the open tabs.

Why an accessibility tree from CDP: it gives roles and computed names ("button 'Add to cart'"), which is what a
small model can ground actions on, at a fraction of the DOM's size. Chromium's full tree is noisy (InlineTextBox per
text run, ignored wrappers, unnamed divs, text that repeats its link's name), so we prune hard: every line costs
prefill time on a 2-core CPU. Ids are small integers assigned in document order per observation (fewer tokens than
Chromium's backend node ids) and are stable for an unchanged page state; `ids` maps them back to backend DOM nodes
for the executor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from agent.actions import quote_name

# Subtrees that never carry information for the agent.
DROP_ROLES = {"InlineTextBox", "LineBreak", "ListMarker"}
# Containers that are only layout when they have no name: their children move up one level.
COLLAPSE_ROLES = {
    "generic", "none", "presentation", "GenericContainer", "LabelText", "paragraph", "Section", "div",
    "list", "listitem", "Pre", "Abbr", "Ruby", "time", "emphasis", "strong", "mark", "subscript", "superscript",
    "group", "contentinfo", "banner", "DescriptionList", "DescriptionListTerm", "DescriptionListDetail", "term",
    "definition", "blockquote", "figure", "caption", "code", "deletion", "insertion", "MenuListPopup",
}  # fmt: skip
# Editable fields: their children are the value's own text nodes, shown as `value=` instead.
TEXT_FIELDS = {"textbox", "searchbox", "spinbutton"}
VALUE_ROLES = TEXT_FIELDS | {"combobox", "slider", "progressbar"}
CHECKABLE_ROLES = {"checkbox", "radio", "switch", "menuitemcheckbox", "menuitemradio"}
_SPACE = re.compile(r"\s+")
LABEL_NAME_CHARS = 48  # a label longer than this is cut at a word: copying a whole paragraph costs decode steps


@dataclass
class Observation:
    """One step's view of the browser. `text` is the tree; `render()` is the prompt block."""

    text: str
    url: str
    title: str
    tabs: list[str]
    active_tab: int
    ids: dict[int, int] = field(default_factory=dict)  # observation id -> CDP backendDOMNodeId
    nodes: dict[int, tuple[str, str]] = field(default_factory=dict)  # observation id -> (role, name)
    truncated: int = 0  # nodes left out because of max_nodes

    def render(self) -> str:
        tabs = ", ".join(
            f"[{i}] {quote_name(t or 'untitled')}" + (" (current)" if i == self.active_tab else "")
            for i, t in enumerate(self.tabs)
        )
        return f"Tabs: {tabs}\nURL: {self.url}\n{self.text}"

    @classmethod
    def from_text(cls, tree: str, url: str, title: str, tabs: list[str] | None = None) -> Observation:
        """A page that exists only as rendered tree text (a demonstration, a recorded step): the ids shown are the
        ids the executor would use, roles and names read back from the lines."""
        nodes = parse_nodes(tree)
        return cls(text=tree, url=url, title=title, tabs=tabs or [title], active_tab=0, ids={i: i for i in nodes},
                   nodes=nodes)  # fmt: skip

    @property
    def chars(self) -> int:
        return len(self.render())

    def labels(self, max_name_chars: int = LABEL_NAME_CHARS) -> dict[int, str]:
        """Element id -> the text the agent names it by: `role 'name'` exactly as its line shows them (a long name
        cut at a word), unique on the page (a repeated label gets ` #id`), never holding a bracket.

        Why: given ids, the 1.5B agent picks a neighbour of the element it means: in the v4 full-KV eval 70 of its
        496 clicks hit a text or landmark right after the control the task needed (`[9] link 'Cart'` then
        `[10] StaticText '(3 items)'`: it clicked 10). Copying a name it can read is what such a model does well;
        the agent maps the label back to the id (`agent.targets`), so the executor still acts on the exact node.
        """
        raw = {i: _label(role, name, max_name_chars) for i, (role, name) in self.nodes.items()}
        counts: dict[str, int] = {}
        for label in raw.values():
            counts[label] = counts.get(label, 0) + 1
        return {i: label if counts[label] == 1 else f"{label} #{i}" for i, label in raw.items()}


_LINE = re.compile(r"""^\s*\[(\d+)\] (\S+)(?: (?:'([^']*)'|"([^"]*)"))?""")


def parse_nodes(tree: str) -> dict[int, tuple[str, str]]:
    """id -> (role, name) read back from rendered tree lines (`format_tree`'s output): for pages that exist only as
    text (the prompt's demonstration, recorded observations)."""
    nodes = {}
    for line in tree.splitlines():
        if m := _LINE.match(line):
            nodes[int(m.group(1))] = (m.group(2), m.group(3) if m.group(3) is not None else m.group(4) or "")
    return nodes


def _label(role: str, name: str, max_chars: int) -> str:
    name = name.replace("[", "(").replace("]", ")")
    if len(name) > max_chars:
        cut = name[:max_chars]
        name = (cut.rsplit(" ", 1)[0] if " " in cut[max_chars // 2 :] else cut).rstrip(" ,.;:…")
    return f"{role} {quote_name(name)}" if name else role


def _clean(text: Any, limit: int) -> str:
    text = _SPACE.sub(" ", str(text or "")).strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _props(node: dict[str, Any], role: str, with_url: bool, limit: int) -> list[str]:
    """The states that change what an action does: focus, checked, expanded, disabled, required, selected, value."""
    props = {p["name"]: p.get("value", {}).get("value") for p in node.get("properties") or []}
    out: list[str] = []
    if role in VALUE_ROLES:
        value = _clean((node.get("value") or {}).get("value"), limit)
        if value:
            out.append(f"value={quote_name(value)}")
    if role in CHECKABLE_ROLES:
        checked = props.get("checked")
        out.append({"true": "checked", "mixed": "mixed"}.get(str(checked).lower(), "unchecked"))
    if "expanded" in props:
        out.append("expanded" if props["expanded"] else "collapsed")
    for flag in ("selected", "required", "disabled", "focused"):
        if props.get(flag) is True:
            out.append(flag)
    if with_url and role == "link" and props.get("url"):
        out.append(f"url={props['url']}")
    return out


@dataclass
class _Entry:
    depth: int
    role: str
    name: str
    backend: int | None
    props: list[str]


def _walk(ax_nodes: list[dict[str, Any]], link_urls: bool, max_name_chars: int) -> list[_Entry]:
    """Depth-first walk in document order applying the pruning rules; returns the nodes worth showing."""
    by_id = {n["nodeId"]: n for n in ax_nodes}
    roots = [n for n in ax_nodes if not n.get("parentId") or n["parentId"] not in by_id]
    entries: list[_Entry] = []
    # Stack of (node, depth, name of the nearest shown ancestor); children pushed reversed to keep document order.
    stack: list[tuple[dict[str, Any], int, str]] = [(r, 0, "") for r in reversed(roots)]
    while stack:
        node, depth, parent_name = stack.pop()
        role = (node.get("role") or {}).get("value", "")
        name = _clean((node.get("name") or {}).get("value"), max_name_chars)
        if role in DROP_ROLES or (role in {"img", "image", "StaticText"} and not name):
            continue
        children = [by_id[c] for c in node.get("childIds") or [] if c in by_id]
        if role == "StaticText" and name in parent_name:  # text that only repeats its link/button/heading name
            continue
        if node.get("ignored") or role == "RootWebArea" or (role in COLLAPSE_ROLES and not name):
            stack.extend((c, depth, parent_name) for c in reversed(children))
            continue
        entries.append(
            _Entry(depth, role, name, node.get("backendDOMNodeId"), _props(node, role, link_urls, max_name_chars))
        )
        if role not in TEXT_FIELDS:
            stack.extend((c, depth + 1, name) for c in reversed(children))
    return entries


def _drop_label_echoes(entries: list[_Entry]) -> list[_Entry]:
    """Drop label text right before or after the control it names (`Query` + `textbox 'Query'`): pure repetition."""
    keep = []
    for i, e in enumerate(entries):
        if e.role == "StaticText":
            neighbours = entries[max(0, i - 1) : i] + entries[i + 1 : i + 2]
            if any(n.role != "StaticText" and n.name == e.name for n in neighbours):
                continue
        keep.append(e)
    return keep


def _render(entries: list[_Entry], max_nodes: int) -> tuple[list[str], dict[int, int], dict[int, tuple[str, str]], int]:
    lines: list[str] = []
    ids: dict[int, int] = {}
    nodes: dict[int, tuple[str, str]] = {}
    for oid, e in enumerate(entries[:max_nodes], start=1):
        if e.backend is not None:
            ids[oid] = e.backend
        nodes[oid] = (e.role, e.name)
        parts = [f"[{oid}] {e.role}"] + ([quote_name(e.name)] if e.name else []) + e.props
        lines.append("  " * e.depth + " ".join(parts))
    return lines, ids, nodes, max(0, len(entries) - max_nodes)


def format_tree(
    ax_nodes: list[dict[str, Any]],
    max_nodes: int = 400,
    link_urls: bool = False,
    max_name_chars: int = 150,
) -> tuple[list[str], dict[int, int], dict[int, tuple[str, str]], int]:
    """Prune and render CDP `Accessibility.getFullAXTree` nodes. Returns (lines, ids, nodes, truncated_count).

    Pure function of the CDP payload, so the pruning rules are testable without a browser.
    """
    entries = _drop_label_echoes(_walk(ax_nodes, link_urls, max_name_chars))
    return _render(entries, max_nodes)
