"""Gemma 4's calls: ``<|tool_call>call:NAME{key:VALUE,…}<tool_call|>``.

Gemma 4 writes a call's arguments in a notation of its own, not JSON (its template's
``format_argument`` macro, read back by mlx-lm's ``gemma4`` parser, which turns it
into JSON):

- keys bare, in sorted order (the template's ``dictsort``), ``key:value``, separated
  by ``,`` and no spaces; a nested object the same way inside ``{…}``;
- a string between two ``<|"|>`` delimiters (one special token in Gemma 4's
  vocabulary), raw: no escapes, anything but the delimiter;
- an array ``[a,b]``; numbers as JSON writes them; ``true``/``false``.

Each call is its own ``<|tool_call>…<tool_call|>`` pair, written one after the other.
The grammar below writes exactly that notation from a tool's schema, so whatever the
weights sample the parser reads a call whose arguments validate: every required key,
only keys of the schema, sorted as the template sorts them (a call the model made
renders back token for token), each value valid against its own schema — a string's
``enum``/``const`` and lengths, a number's bounds (llguidance's JSON grammar, whose
numbers Gemma 4 writes alike), an array's item count, alternatives (``anyOf``,
``oneOf``, a list of types). A string's ``pattern``/``format`` is not enforced (as in
the XML formats: the value is raw text, not a JSON string); schema keywords this
notation cannot enforce at all (``allOf``, ``$ref``, ``not``, conditionals,
``prefixItems``) make the tool refused for a forced call, in words. A key that is not
a word (``\\w+``: mlx-lm's parser would not read it back) is refused the same way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from app.core.tools.grammar import COMPACT, Marker, more_calls
from app.core.tools.lark_pieces import (
    compile_rules,
    keyword_arguments,
    length_repeat,
    regex_literal,
)
from app.core.tools.tool_specs import ToolInputError
from app.core.turn.parts import ToolSpec

QUOTE = '<|"|>'
_WORD = re.compile(r"\w+", re.ASCII)
_UNENFORCEABLE = ("allOf", "$ref", "not", "if", "prefixItems", "patternProperties")
_NUMBER_KEYS = (
    "type",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
)


class _Rules:
    """The rules of one grammar, with fresh names for nested values.

    Args:
        quote: The string delimiter as a marker (its token when it is one).
    """

    def __init__(self, quote: Marker):
        self.lines: list[str] = []
        self._count = 0
        self._quote = quote.lark()
        self._by_token = quote.token_id is not None
        self._generic = False

    def name(self, kind: str) -> str:
        self._count += 1
        return f"{kind}_{self._count}"

    def string(self, prop: dict[str, Any]) -> str:
        """A raw string between delimiters, of the schema's lengths."""
        terminal = self.name("TEXT").upper()
        if self._by_token:
            # The delimiter is a token of its own: text cannot hold it as such, but
            # its characters spelled by other tokens would end the string for the
            # parser, so they are excluded too.
            self.lines.append(
                f"{terminal}: /(?s:.{length_repeat(prop)})/ & "
                f"~/(?s:.*{regex_literal(QUOTE)}.*)/"
            )
            return f"{self._quote} {terminal}? {self._quote}"
        close = regex_literal(QUOTE)
        self.lines.append(
            f"{terminal}: /(?s:.{length_repeat(prop)}){close}/ & "
            f"~/(?s:.*{close}.*{close}.*)/"
        )
        return f"{self._quote} {terminal}"

    def literal(self, value: Any) -> str:
        """A constant in Gemma 4's notation, as Lark."""
        if isinstance(value, str):
            return f"{self._quote} {json.dumps(value)} {self._quote}"
        if isinstance(value, dict):
            pairs = [
                f"{json.dumps(f'{k}:')} {self.literal(v)}"
                for k, v in sorted(value.items())
            ]
            return '"{" ' + ' "," '.join(pairs) + ' "}"' if pairs else '"{}"'
        if isinstance(value, list):
            items = [self.literal(v) for v in value]
            return '"[" ' + ' "," '.join(items) + ' "]"' if items else '"[]"'
        return json.dumps(json.dumps(value))

    def generic(self) -> str:
        """Any value in the notation (for a schema that says nothing of its shape)."""
        if not self._generic:
            self._generic = True
            self.lines += [
                'g_value: g_string | g_number | "true" | "false" | "null" '
                "| g_object | g_array",
                f"g_string: {self.string({})}",
                'g_number: %json {"type": "number"}',
                'g_object: "{" (g_pair ("," g_pair)*)? "}"',
                'g_pair: G_KEY ":" g_value',
                "G_KEY: /[A-Za-z0-9_]+/",
                'g_array: "[" (g_value ("," g_value)*)? "]"',
            ]
        return "g_value"

    def value(self, schema: Any, where: str) -> str:
        """The Lark expression of a value valid against ``schema``.

        Raises:
            ToolInputError: The schema uses a keyword this notation cannot enforce.
        """
        if not isinstance(schema, dict) or not schema:
            return self.generic()
        for key in _UNENFORCEABLE:
            if key in schema:
                raise ToolInputError(
                    f"{where}: '{key}' cannot be enforced in Gemma 4's call notation; "
                    "use tool_choice 'auto'",
                    "tools",
                )
        if "const" in schema or "enum" in schema:
            values = [schema["const"]] if "const" in schema else schema["enum"]
            return "(" + " | ".join(self.literal(v) for v in values) + ")"
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list):
                rest = {k: v for k, v in schema.items() if k != key}
                options = [self.value({**rest, **o}, where) for o in schema[key]]
                return "(" + " | ".join(options) + ")"
        types = schema.get("type")
        if isinstance(types, list):
            options = [self.value({**schema, "type": t}, where) for t in types]
            return "(" + " | ".join(options) + ")"
        if types is None:
            if "properties" in schema:
                types = "object"
            elif "items" in schema:
                types = "array"
            else:
                return self.generic()
        return self._typed(types, schema, where)

    def _typed(self, kind: str, schema: dict[str, Any], where: str) -> str:
        if kind == "string":
            return self.string(schema)
        if kind == "boolean":
            return '("true" | "false")'
        if kind == "null":
            return '"null"'
        if kind in ("integer", "number"):
            number = {k: schema[k] for k in _NUMBER_KEYS if k in schema}
            return f"%json {json.dumps({**number, 'x-guidance': COMPACT})}"
        if kind == "array":
            return self._array(schema, where)
        if kind == "object":
            return self._object(schema, where)
        return self.generic()

    def _array(self, schema: dict[str, Any], where: str) -> str:
        item = self.name("item")
        self.lines.append(f"{item}: {self.value(schema.get('items'), where)}")
        low = schema.get("minItems", 0)
        high = schema.get("maxItems")
        low = low if isinstance(low, int) and low > 0 else 0
        if isinstance(high, int) and high < 1:
            return '"[]"'
        if isinstance(high, int):
            more = f"{{{max(low - 1, 0)},{max(high - 1, 0)}}}"
        else:
            more = f"{{{max(low - 1, 0)},}}" if low > 1 else "*"
        items = f'{item} ("," {item}){more}'
        return f'"[" {items} "]"' if low else f'"[" ({items})? "]"'

    def _object(self, schema: dict[str, Any], where: str) -> str:
        properties = schema.get("properties")
        if not isinstance(properties, dict) or not properties:
            if schema.get("additionalProperties") is False:
                return '"{}"'
            self.generic()
            return "g_object"
        required = set(schema.get("required") or ())
        parts, needed = [], []
        for key in sorted(properties):
            if not _WORD.fullmatch(key):
                raise ToolInputError(
                    f"{where}: argument {key!r} is not a word, which Gemma 4's "
                    "call notation cannot carry; use tool_choice 'auto'",
                    "tools",
                )
            pair = self.name("pair")
            self.lines.append(
                f"{pair}: {json.dumps(key + ':')} "
                f"{self.value(properties[key], f'{where}.{key}')}"
            )
            parts.append(pair)
            needed.append(key in required)
        return f'"{{" {keyword_arguments(parts, needed, ",")} "}}"'


def _call_rules(tools: Sequence[ToolSpec], rules: _Rules) -> str:
    options = []
    for tool in tools:
        name = rules.name("call")
        arguments = rules.value(
            tool.arguments_schema() or {"type": "object"}, f"tool {tool.name!r}"
        )
        rules.lines.append(f"{name}: {json.dumps('call:' + tool.name)} {arguments}")
        options.append(name)
    return " | ".join(options)


def gemma4_forced_grammar(
    tools: Sequence[ToolSpec],
    *,
    start: Marker,
    end: Marker,
    quote: Marker,
    parallel: bool,
) -> str:
    """The grammar of a reply made of one call (or several, with ``parallel``).

    Raises:
        ToolInputError: A tool's schema this notation cannot enforce.
    """
    rules = _Rules(quote)
    calls = _call_rules(tools, rules)
    head = [
        f"start: call {more_calls('', parallel)}",
        f"call: {start.lark()} body {end.lark()}",
        f"body: {calls}",
    ]
    return compile_rules(head + rules.lines)


def gemma4_lazy_grammar(
    tools: Sequence[ToolSpec], *, end: Marker, quote: Marker
) -> str:
    """The grammar of what follows ``<|tool_call>`` under ``auto`` (the model wrote the
    marker itself): one call to one of ``tools``, then the end marker.

    Raises:
        ToolInputError: A tool's schema this notation cannot enforce.
    """
    rules = _Rules(quote)
    calls = _call_rules(tools, rules)
    return compile_rules([f"start: body {end.lark()}", f"body: {calls}", *rules.lines])


def check_gemma4_tools(tools: Sequence[ToolSpec]) -> None:
    """Refuse, before anything runs, a forced call whose tools' schemas this notation
    cannot enforce (the same walk as the grammar, without compiling it).

    Raises:
        ToolInputError: Naming the tool, the argument and the keyword.
    """
    _call_rules(tools, _Rules(Marker(QUOTE)))
