"""The WebArena action grammar: the `Action` value, a tolerant parser with precise errors, and the prompt text.

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

VERBS = (
    "click", "hover", "clear", "type", "press", "scroll", "new_tab", "tab_focus", "close_tab",
    "goto", "go_back", "go_forward", "stop",
)  # fmt: skip
TARGET_VERBS = {"click", "hover", "clear", "type"}
NO_ARG_VERBS = {"new_tab", "close_tab", "go_back", "go_forward"}


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
        """Canonical grammar text; `parse_action(a.to_text()) == a`."""
        target = None
        if self.target is not None:
            target = str(self.target) if isinstance(self.target, int) else self.target.to_text()
        v = self.verb
        if v in {"click", "hover", "clear"}:
            return f"{v} [{target}]"
        if v == "type":
            return f"type [{target}] [{self.text}] [{int(self.press_enter)}]"
        if v == "press":
            return f"press [{self.key}]"
        if v == "scroll":
            return f"scroll [{self.direction}]"
        if v == "tab_focus":
            return f"tab_focus [{self.index}]"
        if v == "goto":
            return f"goto [{self.url}]"
        if v == "stop":
            return f"stop [{self.answer}]"
        return v


def quote_name(name: str) -> str:
    """Quote an accessible name the way observations show it and the parser reads it back (outermost quotes)."""
    return f'"{name}"' if "'" in name and '"' not in name else f"'{name}'"


_VERB_RE = re.compile(r"^(?P<verb>[A-Za-z_]+)(?P<rest>.*)$", re.S)
_ROLE_TARGET_RE = re.compile(r"""^(?P<role>[A-Za-z][\w-]*)\s+(?P<q>['"])(?P<name>.*)(?P=q)$""", re.S)
_TYPE_RE = re.compile(r"^\[(?P<text>.*?)\](?:\s*\[(?P<enter>[01])\])?\s*$", re.S)
_LABEL_RE = re.compile(r"^\s*(?:[-*>]\s*|\d+[.)]\s*)?(?:(?:next |final )?action\s*[:=-]\s*)?", re.I)
_FENCE_RE = re.compile(r"```(?:[A-Za-z]*\n)?(.*?)```", re.S)
_INLINE_RE = re.compile(r"`([^`\n]+)`")


def _split_bracket(rest: str, verb: str) -> tuple[str, str]:
    """First `[...]` group of `rest` (bracket depth counted, so names may hold brackets) and what follows it."""
    rest = rest.strip()
    if not rest.startswith("["):
        raise ActionParseError(f"'{verb}' needs an argument in square brackets, e.g. {_EXAMPLES[verb]}")
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


def parse_line(line: str) -> Action:
    """Parse exactly one action (no surrounding prose)."""
    line = line.strip()
    m = _VERB_RE.match(line)
    if not m:
        raise ActionParseError(f"no action found in {line[:80]!r}; an action starts with a verb, e.g. click [12]")
    verb, rest = m["verb"].lower(), m["rest"].strip()
    if verb not in VERBS and rest and not rest.startswith("["):
        raise ActionParseError(f"no action found in {line[:80]!r}; an action starts with a verb, e.g. click [12]")
    if verb not in VERBS:
        raise ActionParseError(f"unknown verb '{m['verb']}'; expected one of {', '.join(VERBS)}")
    if verb in NO_ARG_VERBS:
        if rest not in ("", "[]"):
            raise ActionParseError(f"'{verb}' takes no arguments, got {rest!r}")
        return Action(verb)
    if verb == "stop":  # the answer is everything inside the outermost brackets; it may contain anything
        if not rest:
            return Action("stop", answer="")
        if not (rest.startswith("[") and rest.endswith("]")):
            raise ActionParseError(f"'stop' needs its answer in square brackets, e.g. {_EXAMPLES['stop']}")
        return Action("stop", answer=rest[1:-1].strip())
    arg, after = _split_bracket(rest, verb)
    if verb in TARGET_VERBS:
        target = _parse_target(arg, verb)
        if verb != "type":
            _no_trailing(after, verb)
            return Action(verb, target=target)
        t = _TYPE_RE.match(after)
        if not t:
            raise ActionParseError(
                f"'type' needs the text in square brackets after the target, e.g. {_EXAMPLES['type']}"
            )
        return Action("type", target=target, text=t["text"], press_enter=t["enter"] != "0")
    _no_trailing(after, verb)
    if verb == "press":
        if not arg:
            raise ActionParseError(f"'press' needs a key, e.g. {_EXAMPLES['press']}")
        return Action("press", key=arg)
    if verb == "scroll":
        direction = arg.lower().removeprefix("direction=").strip()
        if direction not in ("up", "down"):
            raise ActionParseError(f"scroll direction must be up or down, got [{arg}]")
        return Action("scroll", direction=direction)
    if verb == "tab_focus":
        if not arg.isdigit():
            raise ActionParseError(f"tab_focus needs a tab number like [0], got [{arg}]")
        return Action("tab_focus", index=int(arg))
    if not arg:  # goto
        raise ActionParseError(f"'goto' needs a URL, e.g. {_EXAMPLES['goto']}")
    return Action("goto", url=arg)


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


_EXAMPLES = {
    "click": "click [12]",
    "hover": "hover [12]",
    "clear": "clear [12]",
    "type": "type [7] [blue shoes] [1]",
    "press": "press [Enter]",
    "scroll": "scroll [down]",
    "tab_focus": "tab_focus [0]",
    "goto": "goto [http://127.0.0.1:8001/orders]",
    "stop": "stop [42]",
}

ACTION_DOCS = """\
You control a web browser. Each turn you see the open tabs, the URL and the page as a list of elements:
`[12] button 'Add to cart'` means element 12 is a button named 'Add to cart'. Reply with exactly ONE action:

click [id]            click element id, e.g. click [12]
type [id] [text] [1]  replace the content of field id with text, then press Enter (use [0] to not press Enter)
hover [id]            move the mouse over element id
clear [id]            empty the field id
press [keys]          press a key combination, e.g. press [Enter] or press [Control+a]
scroll [down]         scroll the page down (or scroll [up])
goto [url]            open a URL of the task's sites
go_back               go to the previous page;  go_forward  goes forward again
new_tab               open a new empty tab;  tab_focus [i]  switch to tab i;  close_tab  closes the current tab
stop [answer]         finish; put the answer in the brackets (stop [N/A] if the task is impossible)

Use only ids that appear in the current page. When the task is done and there is nothing to answer, reply stop [].
"""
