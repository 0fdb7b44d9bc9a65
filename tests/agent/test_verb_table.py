"""Walk the verb table: every verb has a prompt line, a grammar template that accepts its canonical text, an
executor function, and an example that parses and round-trips. A verb missing any part fails here."""

from __future__ import annotations

import runner.executor
from agent.actions import ACTION_DOCS, ARG_FIELDS, VERB_TABLE, ActionParseError, Verb, parse_action
from agent.constrained import ActionGrammar


def walk(verbs: tuple[Verb, ...]) -> list[str]:
    """What is missing, per verb (empty = the table is complete)."""
    grammar = ActionGrammar([7, 12], n_tabs=2)
    problems = []
    for verb in verbs:
        name = verb.verb
        if not verb.doc or f"{verb.usage}" not in ACTION_DOCS or verb.doc not in ACTION_DOCS:
            problems.append(f"{name}: no line in ACTION_DOCS")
        if not callable(getattr(runner.executor, verb.executor, None)) or runner.executor._HANDLERS.get(name) is None:
            problems.append(f"{name}: no executor function {verb.executor!r}")
        if any(kind not in ARG_FIELDS or kind not in grammar.arg_segments for kind in verb.args):
            problems.append(f"{name}: an argument kind without a field or a grammar segment")
            continue
        try:
            action = parse_action(verb.example)
        except ActionParseError as exc:
            problems.append(f"{name}: example {verb.example!r} does not parse: {exc}")
            continue
        if action.verb != name or parse_action(action.to_text()) != action:
            problems.append(f"{name}: example does not round-trip")
        if not grammar.accepts(grammar.advance(grammar.start(), action.to_text())):
            problems.append(f"{name}: the grammar template rejects {action.to_text()!r}")
    return problems


def test_every_verb_has_every_part() -> None:
    assert walk(VERB_TABLE) == []
    assert [v.verb for v in VERB_TABLE] == list(runner.executor._HANDLERS)


def test_the_walk_catches_a_verb_with_missing_parts() -> None:
    half_done = Verb("wait", (), "wait", "wait a second", "wait", "_wait")  # a table entry, nothing else
    assert walk((half_done,)) == [
        "wait: no line in ACTION_DOCS",
        "wait: no executor function '_wait'",
        "wait: example 'wait' does not parse: unknown verb 'wait'; expected one of click, hover, clear, type, press, "
        "scroll, new_tab, tab_focus, close_tab, goto, go_back, go_forward, stop",
    ]
