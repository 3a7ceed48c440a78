"""Acceptance: tool calls and structured output through the real `openai` client.

The served model is the tiny random-weight model with a Qwen3-style tool template
(`tests.core.tools.tool_model`): its template renders tools and mlx-lm infers its
``json_tools`` parser. Random weights never choose to call a tool, so calls here are
forced (``required`` or named), which also proves that a forced call's arguments
validate against the tool's schema whatever the weights; the full loop with a model
that decides to call is the reference model's.
"""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from app.core.engine.engine import Engine
from tests.core.engine.steering import steer_calls
from tests.core.tools.tool_model import MARKERS, make_tool_model
from tests.server.test_openai_client import client_for

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather forecast for a city.",
            "parameters": WEATHER,
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "The time in a zone.",
            "parameters": {
                "type": "object",
                "properties": {"zone": {"enum": ["UTC", "CET"]}},
                "required": ["zone"],
                "additionalProperties": False,
            },
        },
    },
]
MESSAGES = [
    {"role": "system", "content": "You are a test bot with tools."},
    {"role": "user", "content": "What is the weather in Paris for 3 days?"},
]
ANSWER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 16},
        "temperature": {"type": "integer"},
        "rain": {"type": "boolean"},
    },
    "required": ["city", "temperature", "rain"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    engine = Engine()
    engine.load(make_tool_model(tmp_path_factory.mktemp("models") / "tiny-tools"))
    yield engine
    engine.shutdown()


@pytest.fixture
def client(serve, make_preset):
    return client_for(serve(make_preset(max_tokens=200)))


def test_a_required_call_comes_back_as_tool_calls(client):
    reply = client.chat.completions.create(
        model="swapless",
        messages=MESSAGES,
        tools=TOOLS,
        tool_choice="required",
        parallel_tool_calls=False,
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.id.startswith("call_") and call.type == "function"
    schema = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    jsonschema.validate(json.loads(call.function.arguments), schema[call.function.name])


def test_a_named_call_streams_in_openais_shape(client):
    stream = client.chat.completions.create(
        model="swapless",
        messages=MESSAGES,
        tools=TOOLS,
        stream=True,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        parallel_tool_calls=False,
    )
    chunks = list(stream)
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    calls = [tc for d in deltas for tc in (d.tool_calls or [])]
    assert not "".join(d.content or "" for d in deltas)  # no markup as content
    first, *rest = calls
    assert first.id and first.function.name == "get_weather" and first.index == 0
    assert rest and all(tc.id is None and tc.index == 0 for tc in rest)
    arguments = "".join(tc.function.arguments or "" for tc in calls)
    jsonschema.validate(json.loads(arguments), WEATHER)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_a_tool_result_round_trip(client):
    first = client.chat.completions.create(
        model="swapless",
        messages=MESSAGES,
        tools=TOOLS,
        tool_choice="required",
        parallel_tool_calls=False,
    )
    message = first.choices[0].message
    call = message.tool_calls[0]
    history = [
        *MESSAGES,
        message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21 C."},
    ]
    second = client.chat.completions.create(
        model="swapless", messages=history, tools=TOOLS, max_tokens=8
    )
    assert second.choices[0].finish_reason in ("stop", "length")
    # The result is in the prompt: the history grew by the call and the result.
    assert second.usage.prompt_tokens > first.usage.prompt_tokens + 10
    # The first request's prompt (tools included) came from the cache.
    assert second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens
    wrong = [*history[:-1], {**history[-1], "tool_call_id": "call_nope"}]
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="swapless", messages=wrong, tools=TOOLS)
    assert info.value.body["param"] == "messages[3].tool_call_id"


@pytest.mark.parametrize("strict", [True, False])
def test_a_json_schema_reply_validates_from_a_random_model(client, strict):
    reply = client.chat.completions.create(
        model="swapless",
        messages=MESSAGES,
        seed=3,
        temperature=1.0,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "weather", "schema": ANSWER, "strict": strict},
        },
    )
    assert reply.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(reply.choices[0].message.content), ANSWER)


@pytest.mark.parametrize(
    ("fields", "param", "words"),
    [
        (
            {
                "tools": [
                    {
                        "type": "function",
                        "function": {
                            "name": "f",
                            "parameters": {
                                "type": "object",
                                "properties": {"a": {"type": 5}},
                            },
                        },
                    }
                ]
            },
            "tools[0].function.parameters",
            "not a valid JSON schema",
        ),
        (
            {
                "tools": TOOLS,
                "tool_choice": {"type": "function", "function": {"name": "launch"}},
            },
            "tool_choice.function.name",
            "not among",
        ),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {
                        "name": "x",
                        "schema": {"type": "string", "pattern": "(?=a)"},
                    },
                }
            },
            "response_format.json_schema.schema",
            "cannot be enforced",
        ),
        (
            {
                "tools": [
                    {
                        "type": "function",
                        "function": {
                            "name": "f",
                            "parameters": {
                                "type": "object",
                                "properties": {
                                    "a": {"type": "string", "pattern": "(?<=x)"}
                                },
                            },
                        },
                    }
                ],
                "tool_choice": "required",
            },
            "tools",
            "cannot be enforced",
        ),
        (
            {
                "tools": [
                    {"type": "function", "function": {"name": f"t{i}"}}
                    for i in range(500)
                ]
            },
            "tools",
            "at most 128",
        ),
    ],
)
def test_bad_tool_input_is_a_400_naming_the_field(client, fields, param, words):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="swapless", messages=MESSAGES, **fields)
    assert info.value.body["param"] == param
    assert words in info.value.body["message"]


def test_a_tool_result_that_cannot_fit_is_refused_with_the_numbers(serve, make_preset):
    client = client_for(
        serve(make_preset(max_tokens=200, max_context=1024, auto_trim=False))
    )
    first = client.chat.completions.create(
        model="swapless",
        messages=MESSAGES,
        tools=TOOLS,
        tool_choice="required",
        parallel_tool_calls=False,
    )
    message = first.choices[0].message
    history = [
        *MESSAGES,
        message.model_dump(exclude_none=True),
        {
            "role": "tool",
            "tool_call_id": message.tool_calls[0].id,
            "content": "rain " * 3000,
        },
    ]
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="swapless", messages=history, tools=TOOLS)
    body = info.value.body
    assert body["code"] == "context_length_exceeded"
    # The tool definitions and the result are both counted.
    assert body["swapless"]["prompt_tokens"] > 3000 + first.usage.prompt_tokens - 100


@pytest.fixture
def steered(engine, monkeypatch):
    """Every tool turn is steered to open a call and to stop after one
    (`tests.core.engine.steering`); what the call holds is the random model's."""
    tokenizer = engine._require_model().tokenizer
    start, end = (tokenizer.convert_tokens_to_ids(t) for t in MARKERS)
    steer_calls(monkeypatch, start, end, min(tokenizer.eos_token_ids))


@pytest.mark.parametrize("stream", [False, True])
def test_an_auto_call_the_model_opens_is_well_formed(client, steered, stream):
    schema = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    for seed in range(3):
        fields = dict(
            model="swapless",
            messages=MESSAGES,
            tools=TOOLS,
            tool_choice="auto",
            parallel_tool_calls=False,
            temperature=1.0,
            seed=seed,
        )
        if stream:
            chunks = list(client.chat.completions.create(stream=True, **fields))
            deltas = [c.choices[0].delta for c in chunks if c.choices]
            calls = [tc for d in deltas for tc in (d.tool_calls or [])]
            assert not "".join(d.content or "" for d in deltas)
            name = calls[0].function.name
            arguments = "".join(tc.function.arguments or "" for tc in calls)
            finish = chunks[-1].choices[0].finish_reason
        else:
            reply = client.chat.completions.create(**fields)
            (call,) = reply.choices[0].message.tool_calls
            name, arguments = call.function.name, call.function.arguments
            finish = reply.choices[0].finish_reason
            assert "tool_call_notes" not in (reply.model_extra["swapless"] or {})
        jsonschema.validate(json.loads(arguments), schema[name])
        assert finish == "tool_calls"


def test_tool_choice_none_shows_no_tools_and_returns_no_calls(client, steered):
    plain = client.chat.completions.create(
        model="swapless", messages=MESSAGES, max_tokens=12
    )
    offered = client.chat.completions.create(
        model="swapless", messages=MESSAGES, tools=TOOLS, max_tokens=200
    )
    reply = client.chat.completions.create(
        model="swapless",
        messages=MESSAGES,
        tools=TOOLS,
        tool_choice="none",
        max_tokens=12,
    )
    # The model was steered to open a call: under auto it did, under none it could not.
    assert offered.choices[0].message.tool_calls
    message = reply.choices[0].message
    assert not message.tool_calls and "<tool_call>" not in (message.content or "")
    assert reply.choices[0].finish_reason != "tool_calls"
    # The prompt is the one without tools (the definitions were not rendered).
    assert reply.usage.prompt_tokens == plain.usage.prompt_tokens
    assert offered.usage.prompt_tokens > plain.usage.prompt_tokens + 50


def test_the_anthropic_client_gets_well_formed_calls_and_none_shows_no_tools(
    serve, make_preset, steered
):
    import anthropic

    from tests.server.test_anthropic_client import client_for as anthropic_client

    client: anthropic.Anthropic = anthropic_client(serve(make_preset(max_tokens=200)))
    tools = [
        {
            "name": t["function"]["name"],
            "description": t["function"]["description"],
            "input_schema": t["function"]["parameters"],
        }
        for t in TOOLS
    ]
    fields = dict(
        model="swapless",
        system=MESSAGES[0]["content"],
        messages=[MESSAGES[1]],
        max_tokens=200,
        tools=tools,
    )
    reply = client.messages.create(
        tool_choice={"type": "auto", "disable_parallel_tool_use": True}, **fields
    )
    (use,) = [b for b in reply.content if b.type == "tool_use"]
    schema = {t["name"]: t["input_schema"] for t in tools}
    jsonschema.validate(use.input, schema[use.name])
    assert reply.stop_reason == "tool_use"
    none = client.messages.create(tool_choice={"type": "none"}, **fields)
    assert [b.type for b in none.content] == ["text"]
    assert "<tool_call>" not in none.content[0].text
    bare = {k: v for k, v in fields.items() if k not in ("tools", "max_tokens")}
    counted = client.messages.count_tokens(
        tool_choice={"type": "none"}, tools=tools, **bare
    )
    assert counted.input_tokens == client.messages.count_tokens(**bare).input_tokens
    assert none.usage.input_tokens == counted.input_tokens
