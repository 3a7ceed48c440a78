"""Request parsing: every honoured field checked, unsupported features refused by name."""

from __future__ import annotations

import json

import pytest

from app.server.errors import RequestError
from app.server.openai_chat.openai_request import ChatMessage, parse_chat_request


def body(**fields) -> bytes:
    data = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}
    return json.dumps(data).encode()


def refused(raw: bytes) -> RequestError:
    with pytest.raises(RequestError) as caught:
        parse_chat_request(raw)
    return caught.value


def test_a_full_request_is_parsed():
    request = parse_chat_request(
        body(
            messages=[
                {"role": "developer", "content": "Be brief."},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "a"},
                        {"type": "text", "text": "b"},
                    ],
                },
                {"role": "assistant", "content": None},
                {"role": "user", "content": "c", "name": "ann"},
            ],
            stream=True,
            stream_options={"include_usage": True},
            max_completion_tokens=12,
            temperature=0.5,
            top_p=0.9,
            stop="END",
            seed=3,
            user="someone",
            n=1,
            presence_penalty=0,
        )
    )
    assert request.messages == (
        ChatMessage("system", "Be brief."),
        ChatMessage("user", "ab"),
        ChatMessage("assistant", ""),
        ChatMessage("user", "c"),
    )
    assert request.stream and request.include_usage
    assert (request.max_tokens, request.temperature, request.top_p) == (12, 0.5, 0.9)
    assert request.stop == ("END",) and request.seed == 3


def test_defaults_are_left_to_the_preset():
    request = parse_chat_request(body())
    assert request.max_tokens is None and request.temperature is None
    assert request.top_p is None and request.stop == () and not request.stream


@pytest.mark.parametrize(
    ("raw", "code", "words"),
    [
        (b"{not json", "invalid_json", "not valid JSON"),
        (b"[1, 2]", "invalid_json", "must be a JSON object"),
        (b"\xff\xfe", "invalid_json", "UTF-8"),
        (
            json.dumps({"messages": []}).encode(),
            "missing_required_parameter",
            "'model' is required",
        ),
    ],
)
def test_bad_bodies_say_what_is_wrong(raw, code, words):
    error = refused(raw)
    assert error.status == 400 and error.code == code and words in str(error)


@pytest.mark.parametrize(
    ("fields", "param", "words"),
    [
        ({"temperature": 3}, "temperature", "from 0 to 2"),
        ({"temperature": "hot"}, "temperature", "number"),
        ({"top_p": 0}, "top_p", "above 0"),
        ({"max_tokens": 0}, "max_tokens", "whole number from 1"),
        ({"max_tokens": 1.5}, "max_tokens", "whole number"),
        ({"max_tokens": 5, "max_completion_tokens": 6}, "max_tokens", "disagree"),
        ({"seed": -1}, "seed", "whole number from 0"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop", "at most 4"),
        ({"stop": [""]}, "stop", "1 to 256"),
        ({"stop": 5}, "stop", "string or a list"),
        ({"stream": "yes"}, "stream", "true or false"),
        ({"stream_options": {"include_usage": True}}, "stream_options", "only allowed"),
        ({"n": 2}, "n", "one choice"),
        ({"logprobs": True}, "logprobs", "not supported"),
        ({"tools": [{"type": "function"}]}, "tools[0].function", "must be an object"),
        ({"tool_choice": "required"}, "tool_choice", "no 'tools' are offered"),
        ({"tool_choice": "sometimes"}, "tool_choice", "'auto', 'none'"),
        ({"functions": [{"name": "f"}]}, "functions", "legacy"),
        ({"response_format": {"type": "xml"}}, "response_format.type", "json_schema"),
        ({"frequency_penalty": 0.5}, "frequency_penalty", "not supported"),
        ({"logit_bias": {"1": 3}}, "logit_bias", "not supported"),
        ({"messages": []}, "messages", "non-empty list"),
        ({"messages": "hi"}, "messages", "non-empty list"),
        (
            {"messages": [{"role": "robot", "content": "x"}]},
            "messages[0].role",
            "one of",
        ),
        (  # unhashable: once a TypeError (a 500) in the alias lookup
            {"messages": [{"role": ["user"], "content": "x"}]},
            "messages[0].role",
            "one of",
        ),
        (
            {"messages": [{"role": "tool", "content": "x"}]},
            "messages[0].tool_call_id",
            "is required",
        ),
        (
            {"messages": [{"role": "tool", "content": "x", "tool_call_id": "c9"}]},
            "messages[0].tool_call_id",
            "matches no tool call",
        ),
        (
            {"messages": [{"role": "user", "content": 7}]},
            "messages[0].content",
            "string",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            "messages[0].content",
            "only text parts",
        ),
        ({"messages": [{"role": "user"}]}, "messages[0].content", "string"),
    ],
)
def test_bad_values_name_the_field(fields, param, words):
    error = refused(body(**fields))
    assert error.status == 400
    assert error.param == param
    assert words in str(error)
