"""Tool calls and structured output through the real engine on a random-weight model.

The weights are random, so nothing here depends on what the model "wants": whatever
it samples, a forced call must parse and its arguments validate against the tool's
schema, and a reply under ``response_format`` must validate against its schema.
"""

from __future__ import annotations

import json

import jsonschema
import pytest

from app.core.engine.engine import Engine
from app.core.presets.generation_settings import KVSettings, SamplingSettings
from app.core.tools.tool_specs import ToolChoice, parse_tools
from app.core.tools.turn_tools import TurnTools
from app.core.turn.parts import ToolCallDelta, ToolCallFinished, ToolCallStarted
from tests.core.tools.tool_model import make_tool_model

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "unit": {"enum": ["C", "F"]},
    },
    "required": ["city", "days", "unit"],
    "additionalProperties": False,
}
TOOLS = parse_tools(
    [
        {
            "type": "function",
            "function": {"name": "get_weather", "parameters": WEATHER},
        },
        {
            "type": "function",
            "function": {
                "name": "get_time",
                "parameters": {
                    "type": "object",
                    "properties": {"zone": {"type": "string", "maxLength": 8}},
                    "required": ["zone"],
                    "additionalProperties": False,
                },
            },
        },
    ]
)
MESSAGES = [
    {"role": "system", "content": "You are a test bot."},
    {"role": "user", "content": "What is the weather in Paris?"},
]
ANSWER = {
    "type": "object",
    "properties": {
        "answer": {"type": "string", "maxLength": 20},
        "confidence": {"type": "number"},
        "sure": {"type": "boolean"},
        "tags": {"type": "array", "items": {"enum": ["x", "y"]}, "maxItems": 3},
    },
    "required": ["answer", "confidence", "sure", "tags"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def tool_engine(tmp_path_factory):
    engine = Engine()
    engine.load(make_tool_model(tmp_path_factory.mktemp("models") / "tiny-tools"))
    yield engine
    engine.shutdown()


def sampling(seed: int, max_tokens: int = 200) -> SamplingSettings:
    return SamplingSettings(
        temperature=1.0, top_p=1.0, max_tokens=max_tokens, seed=seed
    )


def events(engine, key, tools, seed, messages=MESSAGES, max_tokens=200):
    return list(
        engine.chat(
            key, messages, KVSettings(), sampling(seed, max_tokens), tools=tools
        )
    )


def text_of(items) -> str:
    return "".join(e.text for e in items if type(e).__name__ == "GenerationEvent")


def test_the_model_format_comes_from_mlx_lm(tool_engine):
    assert tool_engine.supports_tools()
    assert tool_engine.tool_call_format().name == "json_tools"


@pytest.mark.parametrize("seed", range(4))
def test_a_required_call_parses_and_validates_whatever_the_weights(tool_engine, seed):
    turn = TurnTools(TOOLS, ToolChoice("required"), parallel=False)
    items = events(tool_engine, f"req{seed}", turn, seed)
    calls = [e for e in items if isinstance(e, ToolCallFinished)]
    assert len(calls) == 1, text_of(items)
    call = calls[0].call
    schema = {t.name: t.parameters for t in TOOLS}[call.name]
    jsonschema.validate(call.arguments_dict(), schema)
    # The call streamed as events only: no markup in the answer text.
    assert "<tool_call>" not in text_of(items)
    kinds = [type(e) for e in items if type(e) in (ToolCallStarted, ToolCallDelta)]
    assert kinds == [ToolCallStarted, ToolCallDelta]
    assert items[-1].finish_reason == "stop"


@pytest.mark.parametrize("seed", range(2))
def test_a_named_call_calls_that_function(tool_engine, seed):
    turn = TurnTools(TOOLS, ToolChoice("named", "get_time"), parallel=True)
    calls = [
        e.call
        for e in events(tool_engine, f"named{seed}", turn, seed, max_tokens=400)
        if isinstance(e, ToolCallFinished)
    ]
    assert calls and {c.name for c in calls} == {"get_time"}
    for call in calls:
        assert set(call.arguments_dict()) == {"zone"}


@pytest.mark.parametrize("seed", range(4))
def test_a_json_schema_reply_validates_whatever_the_weights(tool_engine, seed):
    items = events(
        tool_engine, f"schema{seed}", TurnTools(response_schema=ANSWER), seed
    )
    assert items[-1].finish_reason == "stop"
    jsonschema.validate(json.loads(text_of(items)), ANSWER)


def test_without_a_constraint_the_random_model_writes_no_json(tool_engine):
    # The constraint is what makes the replies above valid, not luck.
    items = events(tool_engine, "free", None, 0)
    with pytest.raises((ValueError, jsonschema.ValidationError)):
        jsonschema.validate(json.loads(text_of(items)), ANSWER)


def test_tool_history_renders_and_tools_join_the_stable_prefix(tool_engine):
    turn = TurnTools(TOOLS, ToolChoice("auto"))
    history = [
        *MESSAGES,
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {
                        "name": "get_weather",
                        "arguments": '{"city": "Paris"}',
                    },
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "name": "get_weather",
            "content": "sunny, 21 C",
        },
    ]
    tools = turn.template_tools()
    ids = tool_engine.render(history, True, tools)
    text = tool_engine.tokenizer.decode(ids)
    assert "<tools>" in text and '"name": "get_time"' in text
    assert "<tool_response>\nsunny, 21 C\n</tool_response>" in text
    assert '{"name": "get_weather", "arguments": {"city": "Paris"}}' in text
    from app.core.tools.model_format import stable_prefix_length

    prefix = stable_prefix_length(
        lambda m, g: tool_engine.render(m, g, tools), history, ids
    )
    # Everything up to the first user message is shared by every request with these
    # tools: the definitions are in it.
    assert "</tools>" in tool_engine.tokenizer.decode(ids[:prefix])
    assert "Paris?" not in tool_engine.tokenizer.decode(ids[:prefix])
    # A turn under auto runs on the rendered history.
    items = events(tool_engine, "hist", turn, 0, messages=history, max_tokens=24)
    assert items[-1].finished and items[-1].prompt_tokens == len(ids)


def test_tool_definitions_are_reused_from_the_prefix_cache(tool_engine):
    turn = TurnTools(TOOLS, ToolChoice("auto"))
    tools = turn.template_tools()
    first = [*MESSAGES[:1], {"role": "user", "content": "One question."}]
    second = [*MESSAGES[:1], {"role": "user", "content": "Another one, longer."}]
    ids = tool_engine.render(second, True, tools)
    from app.core.tools.model_format import stable_prefix_length

    prefix = stable_prefix_length(
        lambda m, g: tool_engine.render(m, g, tools), second, ids
    )
    events(tool_engine, "prefix-a", turn, 0, messages=first, max_tokens=2)
    final = events(tool_engine, "prefix-b", turn, 0, messages=second, max_tokens=2)[-1]
    # A new conversation: only the prefix cache can have supplied these tokens.
    assert final.reused_tokens >= prefix > 100


def test_the_event_filter_sends_calls_as_events_and_bad_calls_as_text(tool_engine):
    from dataclasses import replace

    from app.core.engine.tool_hooks import TurnHooks
    from app.core.tools.call_stream import CallStream, MalformedCall

    final = events(tool_engine, "filter", None, 0, max_tokens=2)[-1]
    hooks = TurnHooks(None, CallStream(tool_engine.tool_call_format(), TOOLS))
    got: list = []
    send = hooks.wrap(got.append)
    pieces = [
        "Checking <tool",
        '_call>\n{"name": "get_time", "arguments": ',
        '{"zone": "UTC"}}\n</tool_call>',
        " then <tool_call>{oops</tool_call>",
    ]
    for piece in pieces:
        send(replace(final, text=piece, finish_reason=None))
    # Reasoning is not searched for calls: it passes through untouched.
    send(
        replace(
            final, text="<tool_call> thought", finish_reason=None, channel="reasoning"
        )
    )
    send(replace(final, text=" end"))
    texts = "".join(
        e.text
        for e in got
        if type(e).__name__ == "GenerationEvent" and e.channel == "answer"
    )
    assert [e.text for e in got if getattr(e, "channel", "") == "reasoning"] == [
        "<tool_call> thought"
    ]
    assert texts == "Checking  then <tool_call>{oops</tool_call> end"
    (finished,) = [e for e in got if isinstance(e, ToolCallFinished)]
    assert finished.call.arguments_dict() == {"zone": "UTC"}
    (note,) = [e for e in got if isinstance(e, MalformedCall)]
    assert "could not be used" in note.reason
    assert got[-1].finish_reason == final.finish_reason and got[-1].text == ""
