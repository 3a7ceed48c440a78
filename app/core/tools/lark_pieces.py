"""Pieces the call-format grammars share: Lark literals, lengths and argument lists.

The formats that do not write a call as one JSON object (`app.core.tools.markup_grammars`,
`app.core.tools.gemma4_grammar`) build llguidance Lark grammars from the tools' JSON
schemas; these helpers turn a schema's strings, lengths and argument lists into Lark.
"""

from __future__ import annotations

import json
from typing import Any

import llguidance

from app.core.turn.parts import ToolSpec


def compile_rules(rules: list[str]) -> str:
    """Lark rules, one a line, as an llguidance grammar."""
    return llguidance.LLMatcher.grammar_from_lark("\n".join(rules) + "\n")


def schema_properties(tool: ToolSpec) -> list[tuple[str, dict[str, Any], bool]]:
    """The tool's arguments in schema order: name, schema, required."""
    schema = tool.parameters or {}
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    return [
        (name, prop if isinstance(prop, dict) else {}, name in required)
        for name, prop in properties.items()
    ]


def regex_literal(text: str) -> str:
    """``text`` as a literal inside a Lark ``/regex/``."""
    out = []
    for char in text:
        if char == "\n":
            out.append(r"\n")
        elif char in r".^$*+?{}[]\|()/":
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)


def min_length(prop: dict[str, Any]) -> int:
    """The schema's ``minLength``, 0 when it has none."""
    low = prop.get("minLength")
    return low if isinstance(low, int) and low >= 0 else 0


def length_repeat(prop: dict[str, Any], at_least: int = 0) -> str:
    """The schema's ``minLength``/``maxLength`` as a regex repetition."""
    low = max(min_length(prop), at_least)
    high = prop.get("maxLength")
    if isinstance(high, int) and high >= low:
        return f"{{{low},{high}}}"
    return "*" if low == 0 else f"{{{low},}}"


def string_literals(prop: dict[str, Any]) -> list[str] | None:
    """The values of a string ``enum``/``const``, written raw, or None."""
    values = prop.get("enum") if "enum" in prop else None
    if "const" in prop:
        values = [prop["const"]]
    if not values or not all(isinstance(v, str) for v in values):
        return None
    return [str(v) for v in values]


def json_only(prop: dict[str, Any]) -> bool:
    """True when an untyped schema still describes JSON structure (an object's
    properties, array items, alternatives), so its value is written as JSON."""
    return any(k in prop for k in ("properties", "items", "anyOf", "oneOf", "allOf"))


def keyword_arguments(
    parts: list[str], required: list[bool], separator: str = ", "
) -> str:
    """Arguments separated by ``separator``, the optional ones optional: a separator
    is written only between two arguments that are present."""

    def tail(k: int) -> str:  # at least one argument is written before k
        if k == len(parts):
            return ""
        piece = f"{json.dumps(separator)} {parts[k]}"
        return f"{piece if required[k] else f'({piece})?'} {tail(k + 1)}".strip()

    def head(k: int) -> str:  # nothing is written yet
        if k == len(parts):
            return ""
        first = f"{parts[k]} {tail(k + 1)}".strip()
        if required[k]:
            return first
        rest = head(k + 1)
        return f"({first} | {rest})" if rest else f"({first})?"

    return head(0)
