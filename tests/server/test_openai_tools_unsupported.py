"""A model whose template has no tool support: the generic rendering; JSON enforced."""

from __future__ import annotations

import json

from tests.server.test_openai_client import client_for

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {},
                "additionalProperties": False,
            },
        },
    }
]
MESSAGES = [{"role": "user", "content": "Weather?"}]


def test_tools_on_a_plain_chatml_model_use_the_generic_rendering(serve, make_preset):
    # The template has no tool support: the tools go into the system turn the Qwen3
    # way and a forced call is read in that format.
    client = client_for(serve(make_preset(max_tokens=300)))
    plain = client.chat.completions.create(model="swapless", messages=MESSAGES)
    reply = client.chat.completions.create(
        model="swapless", messages=MESSAGES, tools=TOOLS, tool_choice="required"
    )
    assert reply.usage.prompt_tokens > plain.usage.prompt_tokens + 50
    assert reply.choices[0].finish_reason == "tool_calls"
    call = reply.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {}


def test_json_schema_needs_no_tool_template(serve, make_preset):
    client = client_for(serve(make_preset(max_tokens=120)))
    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}, "n": {"enum": [1, 2, 3]}},
        "required": ["ok", "n"],
        "additionalProperties": False,
    }
    reply = client.chat.completions.create(
        model="swapless",
        messages=MESSAGES,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "s", "schema": schema},
        },
    )
    value = json.loads(reply.choices[0].message.content)
    assert value["ok"] in (True, False) and value["n"] in (1, 2, 3)
    assert set(value) == {"ok", "n"}
