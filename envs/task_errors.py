"""How a malformed task file is reported: one sentence per problem, located by file, key path and YAML line.

Split from `envs.taskspec` (the format itself): these turn pydantic's errors and our semantic checks into messages
such as "tasks/shopping_003.yaml: eval.reference_answers.must_include: expected a list, got str (line 14)", and
never embed a whole (possibly huge) value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

YAML_TYPES = {"str": "str", "int": "int", "float": "float", "bool": "bool", "list": "list", "dict": "mapping",
               "NoneType": "null"}


def short(value: Any, limit: int = 60) -> str:
    """`repr(value)`, cut to a short prefix: a message never embeds a whole (possibly huge) value."""
    if isinstance(value, str | bytes) and len(value) > limit:
        return f"{value[:limit]!r}... ({len(value):,} characters)"
    if isinstance(value, list | dict | tuple | set) and len(value) > 8:
        return f"a {type(value).__name__} of {len(value):,} items"
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def describe(err: Mapping[str, Any]) -> str:
    """Turn a pydantic error into a sentence a task author understands."""
    kind, value = err["type"], err.get("input")
    if kind == "string_too_long":
        return f"text is {len(value):,} characters; at most {err['ctx']['max_length']:,} allowed"
    got = YAML_TYPES.get(type(value).__name__, type(value).__name__)
    expected = {"list_type": "a list", "string_type": "a string", "int_type": "an integer", "bool_type": "true or false",
                "dict_type": "a mapping", "model_type": "a mapping", "float_type": "a number"}
    if kind in expected:
        hint = f" (quote it: '{short(value)}')" if kind == "string_type" and isinstance(value, int | float) else ""
        return f"expected {expected[kind]}, got {got}{hint}"
    if kind == "missing":
        return "required key is missing"
    if kind == "extra_forbidden":
        return "unknown key (not part of the task format; check the spelling)"
    if kind == "literal_error":
        return f"{err['msg'].replace('Input should be', 'expected')}, got {short(value)}"
    if kind == "value_error":
        return str(err["msg"]).removeprefix("Value error, ")
    return f"{err['msg']} (got {short(value)})"


def loc_text(loc: tuple[Any, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(task)"


def yaml_line(node: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """1-based line of the deepest YAML node that `loc` reaches (the key itself for unknown keys)."""
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            match = next(((k, v) for k, v in node.value if getattr(k, "value", None) == part), None)
            if match is None:
                break
            line, node = match[0].start_mark.line + 1, match[1]
            line = node.start_mark.line + 1 if not isinstance(node, yaml.MappingNode | yaml.SequenceNode) else line
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


def located(source: str, loc: tuple[Any, ...], message: str, line: int | None) -> str:
    where = f" (line {line})" if line is not None else ""
    if len(message) > 400:  # e.g. a validator that printed a long list
        message = f"{message[:400]}... ({len(message):,} characters)"
    return f"{source}: {loc_text(loc)}: {message}{where}"
