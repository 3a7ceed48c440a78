"""Grammars that constrain decoding: a JSON schema, any JSON object, or a tool call.

The grammars are llguidance's (docs/structured-output.md says why that library): a
JSON schema compiles to its JSON grammar; a forced tool call is a small Lark grammar
whose body is the JSON ``{"name", "arguments"}`` object of the model's own call format
between its start and end markers (written as the marker tokens when the tokenizer has
them as single special tokens, as text otherwise). JSON has no free
whitespace (a model with random weights would otherwise wander in it forever) and is
spaced as ``json.dumps`` writes it, as templates render calls back.

Nothing here needs a model: `check_grammar` compiles without a tokenizer, so a request
whose schema the library cannot take is refused before it reaches the engine.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import llguidance

from app.core.tools.tool_specs import ToolChoice, ToolInputError
from app.core.turn.parts import ToolSpec

if TYPE_CHECKING:  # a TypedDict of the library's type stub only
    from llguidance._lib import JsonCompileOptions

# Calls one forced reply may hold when parallel calls are allowed.
MAX_PARALLEL_CALLS = 8
# JSON as Python's json.dumps (and so chat templates' ``tojson``) writes it: a call
# the model made then renders back token for token, and the cache is reused.
COMPACT: JsonCompileOptions = {
    "whitespace_flexible": False,
    "item_separator": ", ",
    "key_separator": ": ",
}


@dataclass(frozen=True)
class Marker:
    """A call marker as the grammar writes it.

    Attributes:
        text: The marker's text.
        token_id: Its token id when it is one special token, else None.
    """

    text: str
    token_id: int | None = None

    def lark(self) -> str:
        """The marker as a Lark terminal."""
        if self.token_id is not None:
            return f"<[{self.token_id}]>"
        return json.dumps(self.text)


def more_calls(separator: str, parallel: bool, rule: str = "call") -> str:
    """Up to `MAX_PARALLEL_CALLS` - 1 further calls (``rule``) after the first, each
    after ``separator`` (right after the last with an empty one; none without
    ``parallel``)."""
    if not parallel:
        return ""
    repeat = f"{{0,{MAX_PARALLEL_CALLS - 1}}}"
    if not separator:
        return f"{rule}{repeat}"
    return f"({json.dumps(separator)} {rule}){repeat}"


def json_schema_grammar(schema: dict[str, Any]) -> str:
    """The grammar of compact JSON that validates against ``schema``."""
    return llguidance.LLMatcher.grammar_from_json_schema(schema, overrides=COMPACT)


def json_object_grammar() -> str:
    """The grammar of any compact JSON object (``response_format: json_object``)."""
    return json_schema_grammar({"type": "object"})


def call_body_schema(tools: Sequence[ToolSpec], choice: ToolChoice) -> dict[str, Any]:
    """The JSON schema of one call's body: a name among the allowed tools and
    arguments valid for that tool."""
    allowed = choice.allowed(tools)
    options = [
        {
            "type": "object",
            "properties": {
                "name": {"const": tool.name},
                "arguments": tool.arguments_schema(),
            },
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for tool in allowed
    ]
    return options[0] if len(options) == 1 else {"anyOf": options}


def tool_call_grammar(
    tools: Sequence[ToolSpec],
    choice: ToolChoice,
    *,
    start: Marker,
    end: Marker,
    parallel: bool,
) -> str:
    """The grammar of a reply made of one call (or several, with ``parallel``).

    Each call is ``start`` newline ``{"name": …, "arguments": …}`` newline ``end``,
    the shape of mlx-lm's ``json_tools`` format (Qwen 2.5/3, Hermes).
    """
    body = {**call_body_schema(tools, choice), "x-guidance": COMPACT}
    lark = (
        f"start: call {more_calls(chr(10), parallel)}\n"
        f'call: {start.lark()} "\\n" body "\\n" {end.lark()}\n'
        f"body: %json {json.dumps(body)}\n"
    )
    return llguidance.LLMatcher.grammar_from_lark(lark)


def lazy_call_grammar(tools: Sequence[ToolSpec], *, end: Marker) -> str:
    """The grammar of what follows a call's start marker under ``auto``: newline,
    ``{"name": …, "arguments": …}`` for one of ``tools``, newline, ``end``.

    Applied only once the model has written the start marker itself
    (`app.core.engine.lazy_call`), so the format is mlx-lm's ``json_tools`` one.
    """
    body = {**call_body_schema(tools, ToolChoice("auto")), "x-guidance": COMPACT}
    lark = f'start: "\\n" body "\\n" {end.lark()}\nbody: %json {json.dumps(body)}\n'
    return llguidance.LLMatcher.grammar_from_lark(lark)


@dataclass(frozen=True)
class HarmonyMarkers:
    """gpt-oss's header tokens a harmony call is written with.

    Attributes:
        channel: ``<|channel|>``.
        message: ``<|message|>``.
        call: ``<|call|>`` (ends the call and the reply).
        constrain: ``<|constrain|>``, or None when the vocabulary lacks it.
    """

    channel: Marker
    message: Marker
    call: Marker
    constrain: Marker | None = None


def harmony_call_grammar(tools: Sequence[ToolSpec], markers: HarmonyMarkers) -> str:
    """The grammar of what follows ``to=functions.`` in a harmony reply.

    The function's name, then the rest of the header as gpt-oss writes it (`` <|constrain|>json``
    after a channel's recipient, or ``<|channel|>commentary json`` after a role's),
    ``<|message|>``, the arguments valid against that function's schema, ``<|call|>``.
    """
    constrain = f"{markers.constrain.lark()}? " if markers.constrain else ""
    header = (
        f'header: (" " {constrain}"json")? '
        f'| {markers.channel.lark()} "commentary" (" " {constrain}"json")?'
    )
    return _harmony_calls(tools, markers, "", header)


def harmony_forced_grammar(tools: Sequence[ToolSpec], markers: HarmonyMarkers) -> str:
    """The grammar of a harmony reply that is one call to one of ``tools``.

    The reply follows the generation prompt's ``<|start|>assistant`` and is written as
    gpt-oss's template renders a call in history — the recipient after the role:
    `` to=functions.NAME<|channel|>commentary json<|message|>{…}<|call|>`` — so the
    call the model made renders back token for token. One call only: ``<|call|>``
    ends a harmony reply (the client answers before the model goes on).
    """
    header = f'header: {markers.channel.lark()} "commentary json"'
    return _harmony_calls(tools, markers, " to=functions.", header)


def _harmony_calls(
    tools: Sequence[ToolSpec], markers: HarmonyMarkers, before: str, header: str
) -> str:
    """A call to one of ``tools``: ``before`` the function's name, ``header``, then
    ``<|message|>``, arguments valid against its schema, ``<|call|>``."""
    rules = [header]
    options = []
    for i, tool in enumerate(tools):
        arguments = {**tool.arguments_schema(), "x-guidance": COMPACT}
        options.append(f"call_{i}")
        rules.append(
            f"call_{i}: {json.dumps(before + tool.name)} header "
            f"{markers.message.lark()} args_{i} {markers.call.lark()}"
        )
        rules.append(f"args_{i}: %json {json.dumps(arguments)}")
    lark = "start: " + " | ".join(options) + "\n" + "\n".join(rules) + "\n"
    return llguidance.LLMatcher.grammar_from_lark(lark)


def check_grammar(grammar: str, field: str) -> None:
    """Compile ``grammar`` without a tokenizer; refuse it in words if it fails.

    Raises:
        ToolInputError: The library cannot compile it (e.g. a regex feature it lacks).
    """
    error = llguidance.LLMatcher.validate_grammar(grammar)
    if error:
        # The library's message spans lines (the regex, a caret under the fault).
        words = " ".join(
            line.strip()
            for line in error.splitlines()
            if any(c.isalpha() for c in line)
        )
        raise ToolInputError(f"'{field}' cannot be enforced: {words[:500]}", field)
