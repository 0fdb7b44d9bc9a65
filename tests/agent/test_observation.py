"""Pruning rules of the accessibility-tree rendering, on a hand-written CDP payload (no browser needed)."""

from __future__ import annotations

from agent.observation import Observation, format_tree


def node(nid, role, name="", parent=None, children=(), backend=None, ignored=False, props=None, value=None):
    n = {
        "nodeId": str(nid),
        "ignored": ignored,
        "role": {"type": "role", "value": role},
        "name": {"type": "computedString", "value": name},
        "childIds": [str(c) for c in children],
        "backendDOMNodeId": backend if backend is not None else nid + 100,
        "properties": [{"name": k, "value": {"type": "x", "value": v}} for k, v in (props or {}).items()],
    }
    if parent is not None:
        n["parentId"] = str(parent)
    if value is not None:
        n["value"] = {"type": "string", "value": value}
    return n


PAYLOAD = [
    node(1, "RootWebArea", "Shop", children=[2]),
    node(2, "generic", parent=1, children=[3, 6, 9, 12, 14], ignored=True),
    node(3, "link", "My Orders", parent=2, children=[4], props={"url": "http://x/orders"}),
    node(4, "StaticText", "My Orders", parent=3, children=[5]),
    node(5, "InlineTextBox", "My Orders", parent=4),
    node(6, "generic", parent=2, children=[7, 8]),
    node(7, "StaticText", "Search", parent=6),
    node(8, "textbox", "Search", parent=6, children=[10], value="shoes", props={"focused": True, "required": True}),
    node(10, "generic", parent=8, children=[11]),
    node(11, "StaticText", "shoes", parent=10),
    node(9, "checkbox", "Gift wrap", parent=2, props={"checked": "false", "disabled": True}),
    node(12, "img", "", parent=2),
    node(14, "button", "Add to cart 'now'", parent=2, props={"expanded": False}),
]


def test_prunes_noise_and_shows_states() -> None:
    lines, ids, nodes, truncated = format_tree(PAYLOAD)
    assert lines == [
        "[1] link 'My Orders'",
        "[2] textbox 'Search' value='shoes' required focused",
        "[3] checkbox 'Gift wrap' unchecked disabled",
        "[4] button \"Add to cart 'now'\" collapsed",
    ]
    assert ids == {1: 103, 2: 108, 3: 109, 4: 114}
    assert nodes[2] == ("textbox", "Search")
    assert truncated == 0


def test_nesting_indents_and_link_urls_are_optional() -> None:
    payload = [
        node(1, "RootWebArea", "", children=[2]),
        node(2, "navigation", "Main", parent=1, children=[3]),
        node(3, "link", "Home", parent=2, props={"url": "http://x/"}),
    ]
    lines, *_ = format_tree(payload, link_urls=True)
    assert lines == ["[1] navigation 'Main'", "  [2] link 'Home' url=http://x/"]


def test_max_nodes_truncates_and_counts() -> None:
    payload = [node(1, "RootWebArea", "", children=list(range(2, 12)))]
    payload += [node(i, "link", f"item {i}", parent=1) for i in range(2, 12)]
    lines, ids, _, truncated = format_tree(payload, max_nodes=4)
    assert len(lines) == 4 and truncated == 6 and max(ids) == 4


def test_long_names_are_cut() -> None:
    payload = [node(1, "RootWebArea", "", children=[2]), node(2, "StaticText", "x" * 500, parent=1)]
    lines, *_ = format_tree(payload, max_name_chars=20)
    assert len(lines[0]) < 40 and lines[0].endswith("…'")


def test_render_lists_tabs_and_url() -> None:
    obs = Observation(text="[1] link 'A'", url="http://h/a", title="B", tabs=["A", "B"], active_tab=1)
    assert obs.render() == "Tabs: [0] 'A', [1] 'B' (current)\nURL: http://h/a\n[1] link 'A'"
    assert obs.chars == len(obs.render())


def test_labels_name_each_element_as_its_line_shows_it_and_stay_unique() -> None:
    from agent.observation import parse_nodes

    tree = ("[9] link 'Cart'\n  [10] StaticText '(3 items)'\n[11] button 'Add to cart'\n[12] button 'Add to cart'\n"
            "[13] StaticText \"Bob's [old] notes\"\n[14] main\n"
            "[15] StaticText 'A very long review text that goes on and on about the product and its many merits'")
    nodes = parse_nodes(tree)
    assert nodes[13] == ("StaticText", "Bob's [old] notes") and nodes[14] == ("main", "")
    labels = Observation(text=tree, url="u", title="t", tabs=["t"], active_tab=0, nodes=nodes).labels()
    assert labels[9] == "link 'Cart'" and labels[10] == "StaticText '(3 items)'"
    assert labels[11] == "button 'Add to cart' #11" and labels[12] == "button 'Add to cart' #12"  # repeated: + id
    assert labels[13] == "StaticText \"Bob's (old) notes\"" and labels[14] == "main"  # never a bracket
    assert labels[15] == "StaticText 'A very long review text that goes on and on'"  # cut at a word
    assert len(set(labels.values())) == len(labels)


def test_targets_rewrite_between_labels_and_ids() -> None:
    from agent.targets import to_ids, to_labels

    labels = {9: "link 'Cart'", 3: "searchbox 'Search'", 11: "button 'Add to cart' #11"}
    assert to_ids("click [link 'Cart']", labels) == "click [9]"
    assert to_ids("type [searchbox 'Search'] [mug] [1]", labels) == "type [3] [mug] [1]"
    assert to_ids("I will open it.\nAction: click [button 'Add to cart' #11]", labels).endswith("Action: click [11]")
    assert to_ids("click [link 'Help']", labels) == "click [link 'Help']"  # not on the page: left for the executor
    assert to_ids("stop [link 'Cart']", labels) == "stop [link 'Cart']"  # an answer is never rewritten
    assert to_labels("OK: type [3] [mug] [1]", labels) == "OK: type [searchbox 'Search'] [mug] [1]"
    assert to_labels("click [77]", labels) == "click [77]" and to_labels("go_back", labels) == "go_back"
    for action in ("click [9]", "type [3] [mug] [0]", "hover [11]"):
        assert to_ids(to_labels(action, labels), labels) == action
