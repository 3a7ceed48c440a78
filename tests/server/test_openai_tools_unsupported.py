"""A model whose template has no tool support: tools refused in words, JSON still enforced."""

from __future__ import annotations

import json

import openai
import pytest

from tests.server.test_openai_client import client_for

TOOLS = [{"type": "function", "function": {"name": "get_weather"}}]
MESSAGES = [{"role": "user", "content": "Weather?"}]


def test_tools_on_a_plain_chatml_model_are_a_400_that_says_so(serve):
    client = client_for(serve())
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="swapless", messages=MESSAGES, tools=TOOLS)
    body = info.value.body
    assert body["param"] == "tools" and body["code"] == "tools_not_supported"
    assert "no tool support" in body["message"]


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
