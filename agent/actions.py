"""The WebArena action grammar: one table of verbs, the `Action` value, a tolerant parser, and the prompt text.

`VERB_TABLE` declares each verb once: its argument shape, prompt line, error example and executor function. The
parser, `Action.to_text`, `ACTION_DOCS`, the constrained decoder's templates (`agent.constrained`) and the executor
(`runner.executor`) all read it; adding a verb is one entry plus its executor function (tests/agent/test_verb_table.py
walks the table).

Why tolerant: models wrap actions in prose and ``` fences. The parser looks for the action in this order and takes
the first candidate that parses:
  1. the contents of ``` fenced blocks, last block first (WebArena's own prompt ends "...is ```click [1234]```");
  2. `inline code` spans, last first;
  3. whole lines, LAST line first (reasoning comes before the action, so the conclusion is at the end).
A line may carry a leading "Action:"/"Next action:" label, a list bullet, surrounding backticks and a trailing
period. If no candidate parses, `ActionParseError` carries the error of the most action-like candidate, e.g.
"unknown verb 'clik'; expected one of click, hover, ...".

Why two target forms: the model addresses elements by observation id (`click [12]`); reference solutions written
by people use `role 'name'` (`click [link 'My Orders']`), which survives page changes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Verb:
    """One verb, declared once. `args` is its argument shape (kinds in `ARG_FIELDS`, in bracket order); the parser,
    `Action.to_text`, the grammar template (`agent.constrained`, `verb [arg] [arg]`), the prompt (`ACTION_DOCS`,
    from `usage` and `doc`) and the executor (`runner.executor.<executor>`) all read this entry."""

    verb: str
    args: tuple[str, ...]
    usage: str  # how the prompt writes it, e.g. "type [id] [text] [1]"
    doc: str  # what it does, for the prompt
    example: str  # quoted in parse errors
    executor: str  # the function in runner.executor that carries it out
    navigates: bool = False  # the executor waits for a navigation it may start
    target_roles: frozenset[str] | None = None  # AX roles its target may have; the constrained grammar offers no other
    skip_roles: frozenset[str] = frozenset()  # AX roles its target may not have (the grammar leaves them out)


# Accessibility roles of what `type`/`clear` can act on (the executor's text-field-or-select check, as AX roles).
FIELD_ROLES = frozenset({"textbox", "searchbox", "combobox", "spinbutton", "listbox", "textarea"})
# What `click`/`hover` may not target: landmarks and containers, whose box centre is an arbitrary child (clicking the
# `navigation` landmark opened its first category link). In the v4 full-KV eval (run 1) the 1.5B agent clicked these
# 38 times, all in failed episodes. Text, cells and headings stay clickable: the agent "points" at an answer by
# clicking it (cells, text) before `stop` in 7 of the 10 passing episodes; banning every non-control role (agent v5)
# lost such a pass at once (task 3: the `Shipped` cell click became a search, then a checkout).
CONTAINER_ROLES = frozenset({
    "navigation", "form", "region", "main", "table", "article", "search", "banner", "contentinfo", "complementary",
})  # fmt: skip


VERB_TABLE: tuple[Verb, ...] = (
    Verb("click", ("target",), "click [id]", "click element id, e.g. click [12]", "click [12]", "_click", True,
         skip_roles=CONTAINER_ROLES),
    Verb("hover", ("target",), "hover [id]", "move the mouse over element id", "hover [12]", "_hover",
         skip_roles=CONTAINER_ROLES),
    Verb("clear", ("target",), "clear [id]", "empty the field id", "clear [12]", "_clear", target_roles=FIELD_ROLES),
    Verb("type", ("target", "text", "enter"), "type [id] [text] [1]",
         "replace the content of field id with text, then press Enter (use [0] to not press Enter)",
         "type [7] [blue shoes] [1]", "_type", True, target_roles=FIELD_ROLES),
    Verb("press", ("key",), "press [keys]", "press a key combination, e.g. press [Enter] or press [Control+a]",
         "press [Enter]", "_press", True),
    Verb("scroll", ("direction",), "scroll [down]", "scroll the page down (or scroll [up])", "scroll [down]",
         "_scroll"),
    Verb("new_tab", (), "new_tab", "open a new empty tab", "new_tab", "_tabs"),
    Verb("tab_focus", ("index",), "tab_focus [i]", "switch to tab i", "tab_focus [0]", "_tabs"),
    Verb("close_tab", (), "close_tab", "closes the current tab", "close_tab", "_tabs"),
    Verb("goto", ("url",), "goto [url]", "open a URL of the task's sites", "goto [http://127.0.0.1:8001/orders]",
         "_goto", True),
    Verb("go_back", (), "go_back", "go to the previous page", "go_back", "_history", True),
    Verb("go_forward", (), "go_forward", "goes forward again", "go_forward", "_history", True),
    Verb("stop", ("answer",), "stop [answer]", "finish; put the answer in the brackets (stop [N/A] if the task is "
         "impossible)", "stop [42]", "_stop"),
)
VERB_SPECS = {v.verb: v for v in VERB_TABLE}
VERBS = tuple(VERB_SPECS)
TARGET_VERBS = tuple(v.verb for v in VERB_TABLE if v.args[:1] == ("target",))  # verbs that act on an element
# Argument kind -> the `Action` field that holds it.
ARG_FIELDS = {"target": "target", "text": "text", "enter": "press_enter", "key": "key", "direction": "direction",
              "index": "index", "url": "url", "answer": "answer"}  # fmt: skip


class ActionParseError(ValueError):
    """The model's text holds no valid action; the message says what was wrong, for the model and the trace."""


@dataclass(frozen=True)
class RoleTarget:
    """An element named by ARIA role and accessible name, matched exactly."""

    role: str
    name: str

    def to_text(self) -> str:
        return f"{self.role} {quote_name(self.name)}"


Target = int | RoleTarget


@dataclass(frozen=True)
class Action:
    """One parsed action. Only the fields of its verb are set; equality is used to detect repeated actions."""

    verb: str
    target: Target | None = None
    text: str | None = None  # type
    press_enter: bool = True  # type: WebArena default 1 = press Enter after typing
    key: str | None = None  # press
    direction: str | None = None  # scroll: "up" | "down"
    index: int | None = None  # tab_focus
    url: str | None = None  # goto
    answer: str | None = None  # stop

    def to_text(self) -> str:
        """Canonical grammar text (`verb [arg] [arg]`, the grammar template's form); `parse_action(a.to_text()) == a`."""
        return self.verb + "".join(f" [{_arg_text(getattr(self, ARG_FIELDS[k]))}]" for k in VERB_SPECS[self.verb].args)


def _arg_text(value: object) -> str:
    if isinstance(value, RoleTarget):
        return value.to_text()
    if isinstance(value, bool):
        return str(int(value))
    return "" if value is None else str(value)


def quote_name(name: str) -> str:
    """Quote an accessible name the way observations show it and the parser reads it back (outermost quotes)."""
    return f'"{name}"' if "'" in name and '"' not in name else f"'{name}'"


_VERB_RE = re.compile(r"^(?P<verb>[A-Za-z_]+)(?P<rest>.*)$", re.S)
_ROLE_TARGET_RE = re.compile(r"""^(?P<role>[A-Za-z][\w-]*)\s+(?P<q>['"])(?P<name>.*)(?P=q)$""", re.S)
_LABEL_RE = re.compile(r"^\s*(?:[-*>]\s*|\d+[.)]\s*)?(?:(?:next |final )?action\s*[:=-]\s*)?", re.I)
_FENCE_RE = re.compile(r"```(?:[A-Za-z]*\n)?(.*?)```", re.S)
_INLINE_RE = re.compile(r"`([^`\n]+)`")


def _split_bracket(rest: str, verb: str) -> tuple[str, str]:
    """First `[...]` group of `rest` (bracket depth counted, so names may hold brackets) and what follows it."""
    rest = rest.strip()
    if not rest.startswith("["):
        raise ActionParseError(f"'{verb}' needs an argument in square brackets, e.g. {VERB_SPECS[verb].example}")
    depth = 0
    for i, ch in enumerate(rest):
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if depth == 0:
            return rest[1:i].strip(), rest[i + 1 :].strip()
    raise ActionParseError(f"unclosed '[' in '{verb}' arguments: {rest!r}")


def _parse_target(raw: str, verb: str) -> Target:
    if raw.isdigit():
        return int(raw)
    m = _ROLE_TARGET_RE.match(raw)
    if m:
        return RoleTarget(m["role"], m["name"])
    raise ActionParseError(
        f"bad target [{raw}] for '{verb}': expected an element id from the page like [12], "
        f"or a role and quoted name like [link 'My Orders']"
    )


def _no_trailing(after: str, verb: str) -> None:
    if after:
        raise ActionParseError(f"unexpected text after the '{verb}' arguments: {after!r}")


def _read_value(kind: str, raw: str, verb: str) -> object:
    """One bracket's content as the value of an argument kind; a precise error when it is not one."""
    example = VERB_SPECS[verb].example
    if kind == "target":
        return _parse_target(raw, verb)
    if kind == "key" and not raw:
        raise ActionParseError(f"'{verb}' needs a key, e.g. {example}")
    if kind == "direction":
        direction = raw.lower().removeprefix("direction=").strip()
        if direction not in ("up", "down"):
            raise ActionParseError(f"{verb} direction must be up or down, got [{raw}]")
        return direction
    if kind == "index":
        if not raw.isdigit():
            raise ActionParseError(f"{verb} needs a tab number like [0], got [{raw}]")
        return int(raw)
    if kind == "url" and not raw:
        raise ActionParseError(f"'{verb}' needs a URL, e.g. {example}")
    if kind == "enter":
        return raw != "0"
    return raw


def _read_args(spec: Verb, rest: str) -> dict[str, object]:
    """The bracket groups of `rest` by the verb's argument shape. The first group counts bracket depth (role names
    may hold brackets); a following `text` group ends at its first `]` (`type [7] [a [b] c] [0]` keeps the inner
    brackets), and a trailing `enter` group is optional (WebArena's default 1)."""
    verb, example = spec.verb, spec.example
    if spec.args == ("answer",):  # the answer is everything inside the outermost brackets; it may contain anything
        if not rest:
            return {"answer": ""}
        if not (rest.startswith("[") and rest.endswith("]")):
            raise ActionParseError(f"'{verb}' needs its answer in square brackets, e.g. {example}")
        return {"answer": rest[1:-1].strip()}
    first, after = _split_bracket(rest, verb)
    values = {spec.args[0]: _read_value(spec.args[0], first, verb)}
    tail = spec.args[1:]
    if not tail:
        _no_trailing(after, verb)
        return values
    pattern = "".join(
        r"(?:\s*\[(?P<enter>[01])\])?" if kind == "enter" else rf"\s*\[(?P<{kind}>.*?)\]" for kind in tail
    )
    m = re.fullmatch(pattern + r"\s*", after, re.S)
    if not m:
        raise ActionParseError(
            f"'{verb}' needs the {tail[0]} in square brackets after the {spec.args[0]}, e.g. {example}"
        )
    for kind in tail:
        if m[kind] is not None:
            values[kind] = _read_value(kind, m[kind], verb)
    return values


def parse_line(line: str) -> Action:
    """Parse exactly one action (no surrounding prose), by the verb's entry in `VERB_TABLE`."""
    line = line.strip()
    m = _VERB_RE.match(line)
    if not m:
        raise ActionParseError(f"no action found in {line[:80]!r}; an action starts with a verb, e.g. click [12]")
    verb, rest = m["verb"].lower(), m["rest"].strip()
    if verb not in VERBS and rest and not rest.startswith("["):
        raise ActionParseError(f"no action found in {line[:80]!r}; an action starts with a verb, e.g. click [12]")
    if verb not in VERBS:
        raise ActionParseError(f"unknown verb '{m['verb']}'; expected one of {', '.join(VERBS)}")
    spec = VERB_SPECS[verb]
    if not spec.args:
        if rest not in ("", "[]"):
            raise ActionParseError(f"'{verb}' takes no arguments, got {rest!r}")
        return Action(verb)
    values = _read_args(spec, rest)
    return Action(verb, **{ARG_FIELDS[kind]: value for kind, value in values.items()})  # type: ignore[arg-type]


def _candidates(text: str) -> list[str]:
    fenced = [b.strip() for b in _FENCE_RE.findall(text)]
    unfenced = _FENCE_RE.sub("\n", text)
    inline = _INLINE_RE.findall(unfenced)
    lines = [ln for block in fenced for ln in reversed(block.splitlines())]
    lines += list(reversed(inline))
    lines += list(reversed(unfenced.splitlines()))
    cleaned = []
    for ln in lines:
        ln = _LABEL_RE.sub("", ln.strip()).strip().strip("`").strip()
        ln = ln[:-1].rstrip() if ln.endswith(".") else ln  # "click [12]." at the end of a sentence
        if ln:
            cleaned.append(ln)
    return cleaned


_ACTION_SHAPE = re.compile(r"^[A-Za-z_]+\s*(\[.*)?$", re.S)


def parse_action(text: str) -> Action:
    """Find and parse the action in a model reply (see the module docstring for the search order)."""
    if not text or not text.strip():
        raise ActionParseError("empty reply; expected one action such as click [12]")
    errors: list[tuple[str, ActionParseError]] = []
    for candidate in _candidates(text):
        try:
            return parse_line(candidate)
        except ActionParseError as exc:
            errors.append((candidate, exc))
    # Report the candidate that looks most like an action (`word [...]`), not a line of prose.
    shaped = [exc for cand, exc in errors if _ACTION_SHAPE.match(cand)]
    raise (shaped or [exc for _, exc in errors])[0]


# The prompt's layout: verbs sharing a line (any verb not listed gets a line of its own, in table order).
DOC_LINES: tuple[tuple[str, ...], ...] = (
    ("click",), ("type",), ("hover",), ("clear",), ("press",), ("scroll",), ("goto",), ("go_back", "go_forward"),
    ("new_tab", "tab_focus", "close_tab"), ("stop",),
)  # fmt: skip


def _label_form(line: str) -> str:
    for old, new in _LABEL_FORMS:
        line = line.replace(old, new)
    return line


def _doc_lines(labels: bool = False) -> list[str]:
    listed = [v for line in DOC_LINES for v in line]
    groups = list(DOC_LINES) + [(v,) for v in VERBS if v not in listed]
    form = _label_form if labels else str
    width = 26 if labels else 21
    lines = []
    for group in groups:
        head, *more = (VERB_SPECS[v] for v in group)
        lines.append(";  ".join([f"{form(head.usage):<{width}} {form(head.doc)}"]
                                + [f"{form(v.usage)}  {form(v.doc)}" for v in more]))
    return lines


ACTION_DOCS = (
    "You control a web browser. Each turn you see the open tabs, the URL and the page as a list of elements:\n"
    "`[12] button 'Add to cart'` means element 12 is a button named 'Add to cart'. Reply with exactly ONE action:\n\n"
    + "\n".join(_doc_lines())
    + """

Use only ids that appear in the current page. When the task is done and there is nothing to answer, reply stop [].
"""
)

# The same grammar when elements are named by label (`agent.targets`): `click [button 'Add to cart']`.
_LABEL_FORMS = (("[id]", "[element]"), ("element id, e.g. click [12]", "an element, e.g. click [link 'Help']"),
                ("element id", "an element"), ("the field id", "the field"), ("field id", "the field"), ("type [7]", "type [textbox 'Name']"))
LABEL_ACTION_DOCS = (
    "You control a web browser. Each turn you see the open tabs, the URL and the page as a list of elements:\n"
    "`[12] button 'Add to cart'` means element 12 is a button named 'Add to cart'. Name an element by its role and "
    "name as the page shows them: click [button 'Add to cart']. If two elements read the same, add # and the id: "
    "click [button 'Add to cart' #12]. Reply with exactly ONE action:\n\n"
    + "\n".join(_doc_lines(labels=True))
    + """

Name only elements of the current page. When the task is done and there is nothing to answer, reply stop [].
"""
)
