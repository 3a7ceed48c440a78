"""The grammars of a call after its start marker (`grammar.lazy_call_grammar`,
`grammar.harmony_call_grammar`), checked token by token with llguidance itself."""

from __future__ import annotations

import llguidance
import pytest

from app.core.tools.grammar import (
    HarmonyMarkers,
    Marker,
    harmony_call_grammar,
    lazy_call_grammar,
)
from app.core.tools.tool_specs import parse_tools

TOOLS = parse_tools(
    [
        {
            "type": "function",
            "function": {
                "name": "get_time",
                "parameters": {
                    "type": "object",
                    "properties": {"zone": {"enum": ["UTC", "CET"]}},
                    "required": ["zone"],
                    "additionalProperties": False,
                },
            },
        },
        {"type": "function", "function": {"name": "ping"}},
    ]
)
# gpt-oss's header tokens, written as text here (the tiny vocabulary lacks them).
HARMONY = HarmonyMarkers(
    channel=Marker("<|channel|>"),
    message=Marker("<|message|>"),
    call=Marker("<|call|>"),
)


@pytest.fixture(scope="module")
def lltok(tool_model_dir):
    text = (tool_model_dir / "tokenizer.json").read_text(encoding="utf-8")
    return llguidance.LLTokenizer(text)


def accepts(lltok, grammar: str, text: str) -> bool:
    """True when ``text`` is a whole sentence of ``grammar``."""
    matcher = llguidance.LLMatcher(lltok, grammar)
    assert not matcher.is_error(), matcher.get_error()
    tokens = lltok.tokenize_str(text)
    return matcher.consume_tokens(tokens) and matcher.is_accepting()


def test_a_json_tools_call_after_its_marker(lltok):
    grammar = lazy_call_grammar(TOOLS, end=Marker("</call>"))
    good = '\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</call>'
    assert accepts(lltok, grammar, good)
    assert accepts(lltok, grammar, '\n{"name": "ping", "arguments": {}}\n</call>')
    for bad in (
        good.replace("UTC", "PST"),  # an argument outside the schema
        good.replace("get_time", "get_date"),  # a tool not offered
        good.replace("\n</call>", ""),  # no end marker
    ):
        assert not accepts(lltok, grammar, bad)


@pytest.mark.parametrize(
    "header",
    [" json", "", "<|channel|>commentary json", "<|channel|>commentary"],
)
def test_a_harmony_call_after_to_functions(lltok, header):
    grammar = harmony_call_grammar(TOOLS, HARMONY)
    call = f'get_time{header}<|message|>{{"zone": "CET"}}<|call|>'
    assert accepts(lltok, grammar, call)
    assert not accepts(lltok, grammar, call.replace("CET", "EST"))
    assert not accepts(lltok, grammar, call.replace("get_time", "get_tim"))
