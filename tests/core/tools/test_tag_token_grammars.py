"""The grammars of Gemma 4's, Kimi K2's, MiniMax-M2's and gpt-oss's (harmony) calls,
checked token by token with llguidance on the tiny tool model's tokenizer, and read
back with the parsers Swapless uses for them (mlx-lm's ``gemma4``, ``kimi_k2`` and
``minimax_m2``, Swapless's harmony reader). Here the fixed tags are written as text (the tiny vocabulary has
only ``<tool_call>``/``</tool_call>`` as tokens, standing for each format's start
and end); the engine tests use vocabularies that hold them as tokens."""

from __future__ import annotations

import pytest
from mlx_lm.tool_parsers import gemma4 as gemma4_parser
from mlx_lm.tool_parsers import kimi_k2 as kimi_parser
from mlx_lm.tool_parsers import minimax_m2 as minimax_parser

from app.core.tools.gemma4_grammar import gemma4_forced_grammar, gemma4_lazy_grammar
from app.core.tools.grammar import HarmonyMarkers, Marker, harmony_forced_grammar
from app.core.tools.harmony import parse_call as parse_harmony
from app.core.tools.markup_grammars import forced_call_grammar, lazy_markup_grammar
from app.core.tools.tool_specs import ToolChoice, ToolInputError, parse_tools
from tests.core.tools.test_markup_grammars import TOOLS, accepts

Q = '<|"|>'


def gemma(body: str) -> str:
    return f"<tool_call>{body}</tool_call>"


def test_gemma4_calls_write_its_notation_with_sorted_keys(lltok, markers):
    start, end = markers
    grammar = gemma4_forced_grammar(
        TOOLS, start=start, end=end, quote=Marker(Q), parallel=True
    )
    full = (
        f"call:book{{city:{Q}Rome{Q},extras:[{Q}cot{Q},{Q}fan{Q}],late:true,"
        f"nights:2,room:{Q}single{Q}}}"
    )
    short = f"call:book{{city:{Q}Rome{Q},nights:2}}"
    for body in (
        full,
        short,
        "call:ping{}",
        short + "</tool_call><tool_call>call:ping{}",
    ):
        assert accepts(lltok, grammar, gemma(body)), body
    # What the grammar writes is what mlx-lm's parser reads, as JSON values.
    assert gemma4_parser.parse_tool_call(full) == {
        "name": "book",
        "arguments": {
            "city": "Rome",
            "extras": ["cot", "fan"],
            "late": True,
            "nights": 2,
            "room": "single",
        },
    }
    for body in (
        f"call:book{{nights:2,city:{Q}Rome{Q}}}",  # not sorted as the template sorts
        f"call:book{{city:{Q}Rome{Q}}}",  # a required argument missing
        f"call:book{{city:{Q}R{Q},nights:2}}",  # below minLength
        f"call:book{{city:{Q}Rome{Q},nights:0}}",  # below minimum
        f"call:book{{city:{Q}Rome{Q},nights:2,room:{Q}suite{Q}}}",  # not in enum
        f"call:book{{city: {Q}Rome{Q},nights:2}}",  # a space the notation never has
        'call:book{city:"Rome",nights:2}',  # a JSON string
        f"call:book{{city:{Q}Rome{Q},nights:2,pool:true}}",  # not in the schema
        "call:ping{x:1}",
        "call:pong{}",
    ):
        assert not accepts(lltok, grammar, gemma(body)), body
    single = gemma4_forced_grammar(
        TOOLS, start=start, end=end, quote=Marker(Q), parallel=False
    )
    two = gemma("call:ping{}") + gemma("call:ping{}")
    assert accepts(lltok, grammar, two) and not accepts(lltok, single, two)


def test_gemma4_strings_cannot_hold_the_delimiter_and_nested_values_follow_suit(
    lltok, markers
):
    start, end = markers
    tools = parse_tools(
        [
            {
                "type": "function",
                "function": {
                    "name": "plan",
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "stop": {
                                "type": "object",
                                "properties": {
                                    "day": {"type": "integer"},
                                    "note": {"type": ["string", "null"]},
                                },
                                "required": ["day"],
                            },
                            "tags": {"type": "array", "maxItems": 2},
                        },
                        "required": ["stop"],
                    },
                },
            }
        ]
    )
    grammar = gemma4_forced_grammar(
        tools, start=start, end=end, quote=Marker(Q), parallel=False
    )
    nested = f"call:plan{{stop:{{day:3,note:{Q}a {{b}}{Q}}},tags:[1,{Q}x{Q}]}}"
    assert accepts(lltok, grammar, gemma(nested))
    assert gemma4_parser.parse_tool_call(nested)["arguments"] == {
        "stop": {"day": 3, "note": "a {b}"},
        "tags": [1, "x"],
    }
    assert accepts(lltok, grammar, gemma("call:plan{stop:{day:3,note:null}}"))
    for body in (
        f"call:plan{{stop:{{day:3,note:{Q}a{Q}b{Q}}}}}",  # the delimiter inside
        "call:plan{stop:{note:null}}",  # nested required key missing
        "call:plan{stop:{day:3},tags:[1,2,3]}",  # over maxItems
    ):
        assert not accepts(lltok, grammar, gemma(body)), body


def test_gemma4_refuses_in_words_what_its_notation_cannot_enforce(markers):
    start, end = markers

    def tool(properties):
        return parse_tools(
            [
                {
                    "type": "function",
                    "function": {
                        "name": "t",
                        "parameters": {"type": "object", "properties": properties},
                    },
                }
            ]
        )

    for properties, words in (
        ({"a": {"allOf": [{"type": "string"}]}}, "'allOf' cannot be enforced"),
        ({"a-b": {"type": "string"}}, "'a-b' is not a word"),
    ):
        with pytest.raises(ToolInputError, match=words):
            gemma4_forced_grammar(
                tool(properties), start=start, end=end, quote=Marker(Q), parallel=False
            )
        # Under auto such a call is left free (the parser still reads it).
        assert lazy_markup_grammar("gemma4", tool(properties), end=end) is None
    lazy = gemma4_lazy_grammar(TOOLS, end=end, quote=Marker(Q))
    assert lazy is not None


def test_kimi_calls_write_json_between_its_tags_and_keep_their_ids(lltok, markers):
    start, end = markers
    grammar = forced_call_grammar(
        "kimi_k2", TOOLS, ToolChoice("required"), start=start, end=end, parallel=True
    )
    assert grammar is not None

    def call(name: str, arguments: str, index: int = 0) -> str:
        return (
            f"<|tool_call_begin|>functions.{name}:{index}"
            f"<|tool_call_argument_begin|>{arguments}<|tool_call_end|>"
        )

    book = call("book", '{"city": "Rome", "nights": 2}')
    both = f"<tool_call>{book}{call('ping', '{}', 1)}</tool_call>"
    assert accepts(lltok, grammar, f"<tool_call>{book}</tool_call>")
    assert accepts(lltok, grammar, both)
    parsed = kimi_parser.parse_tool_call(both)
    assert parsed[0] == {
        "id": "functions.book:0",
        "name": "book",
        "arguments": {"city": "Rome", "nights": 2},
    }
    assert parsed[1]["id"] == "functions.ping:1"
    for body in (
        call("book", '{"city": "Rome"}'),
        call("ping", '{"x": 1}'),
        book.replace("functions.", ""),
        call("pong", "{}"),
    ):
        assert not accepts(lltok, grammar, f"<tool_call>{body}</tool_call>"), body
    lazy = lazy_markup_grammar("kimi_k2", TOOLS, end=end)
    assert lazy is not None and accepts(lltok, lazy, f"{book}</tool_call>")


def test_a_forced_harmony_call_is_written_as_the_template_renders_calls(lltok):
    markers = HarmonyMarkers(
        channel=Marker("<|channel|>"),
        message=Marker("<|message|>"),
        call=Marker("<|call|>"),
    )
    named = [t for t in TOOLS if t.name == "book"]
    grammar = harmony_forced_grammar(named, markers)
    call = (
        ' to=functions.book<|channel|>commentary json<|message|>{"city": "Rome", '
        '"nights": 2}<|call|>'
    )
    assert accepts(lltok, grammar, call)
    text = call.split("to=functions.", 1)[1].removesuffix("<|call|>")
    assert parse_harmony(text) == {
        "name": "book",
        "arguments": {"city": "Rome", "nights": 2},
    }
    for wrong in (
        call.replace("book", "ping"),  # not the named tool
        call.replace('"nights": 2', '"nights": 0'),
        # The channel-first header is gpt-oss's own, not the template's.
        '<|channel|>commentary to=functions.book <|constrain|>json<|message|>{"city": '
        '"Rome", "nights": 2}<|call|>',
    ):
        assert not accepts(lltok, grammar, wrong), wrong


def test_minimax_calls_take_the_schema_as_xml_invokes(lltok, markers):
    start, end = markers
    grammar = forced_call_grammar(
        "minimax_m2", TOOLS, ToolChoice("required"), start=start, end=end, parallel=True
    )
    assert grammar is not None

    def invoke(name: str, *args: tuple[str, str]) -> str:
        params = "".join(f'<parameter name="{k}">{v}</parameter>\n' for k, v in args)
        return f'<invoke name="{name}">\n{params}</invoke>\n'

    book = invoke("book", ("city", "São Paulo"), ("room", "double"), ("nights", "3"))
    both = f"<tool_call>\n{book}{invoke('ping')}</tool_call>"
    assert accepts(lltok, grammar, f"<tool_call>\n{book}</tool_call>")
    assert accepts(lltok, grammar, both)
    tools = [t.template_dict() for t in TOOLS]
    assert minimax_parser.parse_tool_call(both, tools) == [
        {
            "name": "book",
            "arguments": {"city": "São Paulo", "room": "double", "nights": 3},
        },
        {"name": "ping", "arguments": {}},
    ]
    for body in (
        invoke("book", ("city", "Rome")),  # a required argument missing
        invoke("book", ("city", " Rome"), ("nights", "2")),  # the parser strips it
        invoke("book", ("city", "Null"), ("nights", "2")),  # the parser reads null
        invoke("book", ("nights", "2"), ("city", "Rome")),  # not the schema's order
        invoke("book", ("city", "Rome"), ("nights", "0")),  # below minimum
        invoke("pong"),
    ):
        assert not accepts(lltok, grammar, f"<tool_call>\n{body}</tool_call>"), body
    lazy = lazy_markup_grammar("minimax_m2", TOOLS, end=end)
    assert lazy is not None and accepts(lltok, lazy, f"\n{book}</tool_call>")
