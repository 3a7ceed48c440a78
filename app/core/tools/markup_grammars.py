"""Grammars for calls written as markup rather than one JSON object.

Three of mlx-lm's call formats write a call's arguments one by one instead of as a JSON
object, so `grammar.tool_call_grammar` cannot constrain them:

- ``qwen3_coder`` (Qwen3-Coder, Qwen3.5 and their kin): ``<function=NAME>`` then, per
  argument, ``<parameter=KEY>`` newline, the value, newline ``</parameter>``, each line
  ended, then ``</function>``; the whole between ``<tool_call>`` newline and newline
  ``</tool_call>``. A string is written raw; anything else as its JSON text (mlx-lm's
  parser reads the value back by the parameter's schema type).
- ``glm47`` (GLM-4.5, 4.6, 4.7 and Laguna): ``NAME`` newline, then per argument
  ``<arg_key>KEY</arg_key>`` newline ``<arg_value>VALUE</arg_value>`` newline; the whole
  between ``<tool_call>`` and ``</tool_call>``. Values as in ``qwen3_coder``, except
  that mlx-lm's parser strips a value's surrounding whitespace, so a raw string has
  none (it would be read back shorter than written).
- ``minimax_m2`` (MiniMax-M2 and its successors): newline, then per call
  ``<invoke name="NAME">`` newline, per argument ``<parameter name="KEY">VALUE
  </parameter>`` newline, then ``</invoke>`` newline; the whole after
  ``<minimax:tool_call>`` and before ``</minimax:tool_call>``. Values as in ``glm47``
  (the parser strips them), and a raw string is never ``null`` in any case (the
  parser reads that as JSON null whatever the schema says).
- ``pythonic`` (LFM2 and LFM2.5): ``[NAME(KEY=VALUE, …), …]`` between the start and end
  markers. Values are written as JSON, which Python's literal syntax reads the same way
  (mlx-lm's parser maps ``true``/``false``/``null``).

The grammars below are llguidance Lark grammars built from the offered tools' schemas:
the function's name is one of the allowed names, every required argument is present in
the schema's order (optional ones may be left out), no argument outside the schema, and
every non-string value valid against its own schema (llguidance's JSON grammar). A raw
string in the XML formats is any text without the value's closing tag (the parser reads
up to the first one) within the schema's lengths, or one of its ``enum``/``const`` values; a
``pattern`` or ``format`` is not enforced there (it is in the pythonic format, where a
string is JSON).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from app.core.tools.gemma4_grammar import (
    QUOTE,
    gemma4_forced_grammar,
    gemma4_lazy_grammar,
)
from app.core.tools.grammar import (
    COMPACT,
    Marker,
    call_body_schema,
    lazy_call_grammar,
    more_calls,
    tool_call_grammar,
)
from app.core.tools.lark_pieces import (
    compile_rules,
    json_only,
    keyword_arguments,
    length_repeat,
    min_length,
    regex_literal,
    schema_properties,
    string_literals,
)
from app.core.tools.tool_specs import ToolChoice, ToolInputError
from app.core.turn.parts import ToolSpec

_STRING_TYPES = {"string"}


Mark = Callable[[str], Marker]
"""A piece of fixed markup as a grammar terminal: its token when the vocabulary holds
it as one special token (`app.core.tools.model_format.marker`), else its text."""


def _as_text(text: str) -> Marker:
    return Marker(text)


@dataclass(frozen=True)
class _XmlStyle:
    """How an XML-like format writes a function and its arguments.

    Attributes:
        name_end: What follows the function's name.
        arg_open: The pieces that open an argument, ``{name}`` standing for its name.
        before_close: Text between a value and its closing tag.
        close_tag: The tag that closes a value.
        after: Text after the closing tag.
        strip: Whether the parser strips a raw value's surrounding whitespace.
        tags: The pieces a vocabulary may hold as single special tokens.
        not_null: Whether a raw string may not read ``null`` (in any case), which
            the parser takes for JSON null.
    """

    name_end: str
    arg_open: tuple[str, ...]
    before_close: str
    close_tag: str
    after: str
    strip: bool
    tags: frozenset[str] = frozenset()
    not_null: bool = False


_XML_STYLES = {
    "qwen3_coder": _XmlStyle(
        ">\n", ("<parameter=", "{name}", ">\n"), "\n", "</parameter>", "\n", False
    ),
    # GLM's vocabulary holds its four argument tags as tokens of their own.
    "glm47": _XmlStyle(
        "\n",
        ("<arg_key>", "{name}", "</arg_key>", "\n", "<arg_value>"),
        "",
        "</arg_value>",
        "\n",
        True,
        frozenset({"<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"}),
    ),
    "minimax_m2": _XmlStyle(
        '">\n',
        ('<parameter name="', "{name}", '">'),
        "",
        "</parameter>",
        "\n",
        True,
        not_null=True,
    ),
}


def forced_call_grammar(
    format_name: str,
    tools: Sequence[ToolSpec],
    choice: ToolChoice,
    *,
    start: Marker,
    end: Marker,
    parallel: bool,
    mark: Mark = _as_text,
    template: str = "",
) -> str | None:
    """The grammar of a reply made of calls in the model's own format, or None when
    the format is not one Swapless can constrain. ``mark`` gives the format's other
    fixed tags as the vocabulary holds them; ``template`` (the model's chat template)
    tells a format's variants apart."""
    allowed = choice.allowed(tools)
    if format_name == "json_tools":
        return tool_call_grammar(tools, choice, start=start, end=end, parallel=parallel)
    if format_name == "qwen3_coder":
        rules = [
            f"start: call {more_calls(chr(10), parallel)}",
            f'call: {start.lark()} "\\n<function=" function "</function>\\n" '
            f"{end.lark()}",
            *_xml_function_rules(allowed, _XML_STYLES["qwen3_coder"], mark),
        ]
        return compile_rules(rules)
    if format_name == "glm47":
        rules = [
            f"start: call {more_calls(chr(10), parallel)}",
            f"call: {start.lark()} function {end.lark()}",
            *_xml_function_rules(allowed, _XML_STYLES["glm47"], mark),
        ]
        return compile_rules(rules)
    if format_name == "minimax_m2":
        more = more_calls("", parallel, "invoke")
        rules = [
            f'start: {start.lark()} "\\n" invoke {more} {end.lark()}',
            *_minimax_rules(allowed, mark),
        ]
        return compile_rules(rules)
    if format_name == "mistral":
        return _mistral_grammar(allowed, choice, start, mark, template, parallel)
    if format_name == "pythonic":
        rules = [
            f'start: {start.lark()} "[" call {more_calls(", ", parallel)} "]" '
            f"{end.lark()}",
            *_pythonic_call_rules(allowed),
        ]
        return compile_rules(rules)
    if format_name == "kimi_k2":
        more = more_calls("", parallel)
        rules = [f"start: {start.lark()} call {more} {end.lark()}"]
        return compile_rules(rules + _kimi_call_rules(allowed, mark))
    if format_name == "gemma4":
        return gemma4_forced_grammar(
            allowed, start=start, end=end, quote=mark(QUOTE), parallel=parallel
        )
    return None


def lazy_markup_grammar(
    format_name: str, tools: Sequence[ToolSpec], *, end: Marker, mark: Mark = _as_text
) -> str | None:
    """The grammar of what follows a call's start marker under ``auto`` (the model
    wrote the marker itself), or None when the format is not constrained."""
    if format_name == "json_tools":
        return lazy_call_grammar(tools, end=end)
    if format_name == "qwen3_coder":
        rules = [
            f'start: "\\n<function=" function "</function>\\n" {end.lark()}',
            *_xml_function_rules(tools, _XML_STYLES["qwen3_coder"], mark),
        ]
        return compile_rules(rules)
    if format_name == "glm47":
        rules = [f"start: function {end.lark()}"]
        rules += _xml_function_rules(tools, _XML_STYLES["glm47"], mark)
        return compile_rules(rules)
    if format_name == "pythonic":
        rules = [f'start: "[" call {more_calls(", ", True)} "]" {end.lark()}']
        rules += _pythonic_call_rules(tools)
        return compile_rules(rules)
    if format_name == "minimax_m2":
        more = more_calls("", True, "invoke")
        rules = [f'start: "\\n" invoke {more} {end.lark()}']
        return compile_rules(rules + _minimax_rules(tools, mark))
    if format_name == "kimi_k2":
        rules = [f"start: call {more_calls('', True)} {end.lark()}"]
        return compile_rules(rules + _kimi_call_rules(tools, mark))
    if format_name == "gemma4":
        try:
            return gemma4_lazy_grammar(tools, end=end, quote=mark(QUOTE))
        except ToolInputError:
            return None  # a schema the notation cannot enforce: the call stays free
    return None


def _mistral_grammar(
    tools: Sequence[ToolSpec],
    choice: ToolChoice,
    start: Marker,
    mark: Mark,
    template: str,
    parallel: bool,
) -> str:
    """Mistral's calls, which end with the reply (no end marker). Templates that write
    ``[ARGS]`` (Devstral, Magistral, Mistral Small 3.2) give each call a header,
    ``[TOOL_CALLS]NAME[ARGS]{…}``; older ones (Mistral Small 3.1) one JSON list,
    ``[TOOL_CALLS] [{"name": …, "arguments": …}, …]``. mlx-lm's parser reads both."""
    if "[ARGS]" in template:
        rules = [f"start: call {more_calls('', parallel)}"]
        options = []
        for i, tool in enumerate(tools):
            arguments = {
                **tool.arguments_schema(),
                "x-guidance": COMPACT,
            }
            rules.append(
                f"call_{i}: {start.lark()} {json.dumps(tool.name)} "
                f"{mark('[ARGS]').lark()} args_{i}"
            )
            rules.append(f"args_{i}: %json {json.dumps(arguments)}")
            options.append(f"call_{i}")
        rules.insert(1, "call: " + " | ".join(options))
        return compile_rules(rules)
    body = {**call_body_schema(tools, choice), "x-guidance": COMPACT}
    rules = [
        f'start: {start.lark()} " [" call {more_calls(", ", parallel)} "]"',
        f"call: %json {json.dumps(body)}",
    ]
    return compile_rules(rules)


def _arguments(parts: list[str], required: list[bool]) -> str:
    """Arguments in order, the optional ones optional."""
    return " ".join(
        p if needed else f"({p})?" for p, needed in zip(parts, required, strict=True)
    )


def _xml_function_rules(
    tools: Sequence[ToolSpec], style: _XmlStyle, mark: Mark
) -> list[str]:
    # Each tag looked up in the vocabulary once, not once per argument of every tool.
    tags = {tag: mark(tag) for tag in style.tags}

    def piece(text: str, name: str = "") -> str:
        if text == "{name}":
            return json.dumps(name)
        return tags[text].lark() if text in tags else json.dumps(text)

    closing = [style.before_close, style.close_tag, style.after]
    close = " ".join(piece(p) for p in closing if p)
    closed_by_token = (
        style.close_tag in tags and tags[style.close_tag].token_id is not None
    )
    options, rules = [], []
    for i, tool in enumerate(tools):
        props = schema_properties(tool)
        parts = []
        for j, (name, prop, _) in enumerate(props):
            value, terminal = _xml_value(
                prop, f"VALUE_{i}_{j}", style, close, closed_by_token
            )
            opened = " ".join(piece(p, name) for p in style.arg_open)
            rules.append(f"arg_{i}_{j}: {opened} {value}")
            rules += terminal
            parts.append(f"arg_{i}_{j}")
        body = _arguments(parts, [needed for _, _, needed in props])
        rules.append(
            f"function_{i}: {json.dumps(tool.name + style.name_end)} {body}".strip()
        )
        options.append(f"function_{i}")
    rules.insert(0, "function: " + " | ".join(options))
    return rules


def _xml_value(
    prop: dict[str, Any],
    terminal: str,
    style: _XmlStyle,
    close: str,
    closed_by_token: bool,
) -> tuple[str, list[str]]:
    """One XML argument's value and its closing tag, as a Lark expression, and the
    terminal it needs (a raw string's, named ``terminal``).

    Args:
        prop: The argument's schema.
        terminal: The name for a raw string's terminal.
        style: The format.
        close: What closes a value, as Lark.
        closed_by_token: The closing tag is one special token of the vocabulary.
    """
    literals = string_literals(prop)
    if literals is not None:
        return "(" + " | ".join(json.dumps(s) for s in literals) + f") {close}", []
    types = prop.get("type")
    kinds = set(types) if isinstance(types, list) else {types}
    if kinds & _STRING_TYPES or (types is None and not json_only(prop)):
        if closed_by_token:
            high = prop.get("maxLength")
            if isinstance(high, int) and high < 1:
                return close, []
            # The closing tag is one special token: no text can hold it, so the
            # value's lexeme needs no delimiter (and may be empty: optional).
            raw = f"{terminal}: {_raw_text(prop, style)}"
            value = terminal if min_length(prop) else f"({terminal})?"
            return f"{value} {close}", [raw]
        return terminal, [f"{terminal}: {_raw_value(prop, style)}"]
    if kinds == {"boolean"}:
        return f'("true" | "false") {close}', []
    return f"%json {json.dumps({**prop, 'x-guidance': COMPACT})} {close}", []


def _raw_text(prop: dict[str, Any], style: _XmlStyle) -> str:
    """A raw string value ended by a special token: one character or more of the
    schema's lengths, without surrounding whitespace where the parser strips it."""
    lexeme = rf"/(?s:.{length_repeat(prop, 1)})/"
    if style.strip:
        lexeme += r" & /\S|\S(?s:.*)\S/"
    if style.not_null:
        lexeme += r" & ~/(?i:null)/"
    return lexeme


def _raw_value(prop: dict[str, Any], style: _XmlStyle) -> str:
    """A raw string value with its closing tag: text up to the first closing tag (a
    greedy lexeme that cannot extend past it, so the value holds none), of the
    schema's ``minLength``/``maxLength`` characters, and without surrounding
    whitespace where the parser would strip it."""
    close = regex_literal(style.before_close + style.close_tag + style.after)
    tag = regex_literal(style.close_tag)
    lexeme = rf"/(?s:.{length_repeat(prop)}){close}/ & ~/(?s:.*{tag}.*{tag}.*)/"
    if style.strip:
        lexeme += rf" & /(\S|\S(?s:.*)\S)?{close}/"
    if style.not_null:
        lexeme += rf" & ~/(?i:null){close}/"
    return lexeme


def _pythonic_call_rules(tools: Sequence[ToolSpec]) -> list[str]:
    options, rules = [], []
    for i, tool in enumerate(tools):
        props = schema_properties(tool)
        parts = []
        for j, (name, prop, _) in enumerate(props):
            value = {**prop, "x-guidance": COMPACT}
            rules.append(f"value_{i}_{j}: %json {json.dumps(value)}")
            parts.append(f"{json.dumps(name + '=')} value_{i}_{j}")
        rules.append(
            f"call_{i}: {json.dumps(tool.name + '(')} "
            f'{keyword_arguments(parts, [n for _, _, n in props])} ")"'
        )
        options.append(f"call_{i}")
    rules.insert(0, "call: " + " | ".join(options))
    return rules


def _kimi_call_rules(tools: Sequence[ToolSpec], mark: Mark) -> list[str]:
    """Kimi K2's calls: ``<|tool_call_begin|>functions.NAME:INDEX``, then
    ``<|tool_call_argument_begin|>``, the arguments as JSON, ``<|tool_call_end|>``.
    The index is the conversation's running count of calls, which only the model
    knows, so any small number is allowed; mlx-lm's parser keeps
    ``functions.NAME:INDEX`` as the call's id, which the template writes back."""
    begin = mark("<|tool_call_begin|>").lark()
    argument = mark("<|tool_call_argument_begin|>").lark()
    close = mark("<|tool_call_end|>").lark()
    options, rules = [], []
    for i, tool in enumerate(tools):
        arguments = {**tool.arguments_schema(), "x-guidance": COMPACT}
        rules.append(
            f"call_{i}: {begin} {json.dumps('functions.' + tool.name + ':')} "
            f"INDEX {argument} args_{i} {close}"
        )
        rules.append(f"args_{i}: %json {json.dumps(arguments)}")
        options.append(f"call_{i}")
    return ["call: " + " | ".join(options), *rules, "INDEX: /[0-9]{1,3}/"]


def _minimax_rules(tools: Sequence[ToolSpec], mark: Mark) -> list[str]:
    """MiniMax-M2's ``<invoke name="NAME">`` blocks (one per call) around its XML
    arguments."""
    return [
        'invoke: "<invoke name=\\"" function "</invoke>\\n"',
        *_xml_function_rules(tools, _XML_STYLES["minimax_m2"], mark),
    ]
