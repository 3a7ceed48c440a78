"""Acceptance: the real `openai` client's Responses and Completions APIs against a real
server on a loopback port."""

from __future__ import annotations

import openai
import pytest

from tests.server.test_http_guards import call
from tests.server.test_openai_client import client_for

SYSTEM = "You are Swapless test bot. Always answer briefly."
TOOLS = [
    {
        "type": "function",
        "name": "shell",
        "description": "Run a command",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
    {"type": "web_search"},  # hosted: left out of what the model sees
]


def test_a_response_streamed_and_not_with_cached_tokens(serve, model_id):
    server = serve()
    client = client_for(server)
    first = client.responses.create(
        model=model_id,
        instructions=SYSTEM,
        input="Item 1 is blue.",
        max_output_tokens=6,
    )
    assert first.status == "incomplete"
    assert first.incomplete_details.reason == "max_output_tokens"
    assert first.output[0].type == "message" and first.output_text
    assert first.usage.output_tokens == 6
    assert first.usage.input_tokens_details.cached_tokens == 0
    history = [
        {"role": "user", "content": "Item 1 is blue."},
        {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": [{"type": "input_text", "text": "And item 2?"}]},
    ]
    kinds = []
    final = None
    with client.responses.stream(
        model="swapless", instructions=SYSTEM, input=history, max_output_tokens=5
    ) as stream:
        for event in stream:
            kinds.append(event.type)
        final = event.response  # the SDK's final helper waits for "completed" only
    assert kinds[:2] == ["response.created", "response.in_progress"]
    for kind in (
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.output_item.done",
    ):
        assert kind in kinds
    assert kinds[-1] == "response.incomplete"
    assert final.output_text and final.usage.output_tokens == 5
    assert final.usage.input_tokens_details.cached_tokens > 10
    assert final.store is False


def test_function_call_items_and_tools_are_accepted(serve, model_id):
    server = serve()
    client = client_for(server)
    items = [
        {"type": "message", "role": "developer", "content": "Be terse."},
        {"role": "user", "content": "List files"},
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "Use shell."}],
        },
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "shell",
            "arguments": '{"command": "ls"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "a.txt"},
    ]
    reply = client.responses.create(
        model=model_id,
        input=items,
        tools=TOOLS,
        tool_choice="auto",
        max_output_tokens=3,
        store=False,
        reasoning={"effort": "low"},
        extra_body={"prompt_cache_key": "session-1"},
    )
    assert reply.usage.input_tokens > 0 and reply.usage.output_tokens == 3
    # Random weights may write only the newlines stripped before an answer: the reply
    # is then an empty message, never an empty output.
    assert reply.output and reply.output[0].type in ("message", "function_call")


@pytest.mark.parametrize(
    ("change", "code", "words"),
    [
        (
            {"previous_response_id": "resp_1"},
            "previous_response_not_found",
            "stateless",
        ),
        (
            {
                "input": [
                    {"type": "function_call_output", "call_id": "x", "output": "y"}
                ]
            },
            "invalid_value",
            "unknown call_id",
        ),
        (
            {
                "input": [
                    {
                        "role": "user",
                        "content": [{"type": "input_image", "image_url": "x"}],
                    }
                ]
            },
            "invalid_value",
            "text only",
        ),
        ({"input": [{"type": "teleport"}]}, "invalid_value", "'teleport'"),
        ({"text": {"format": {"type": "json_schema"}}}, "invalid_value", "text"),
        ({"max_output_tokens": "many"}, "invalid_value", "max_output_tokens"),
    ],
)
def test_bad_responses_requests_get_openai_errors(serve, model_id, change, code, words):
    server = serve()
    body = {"model": model_id, "input": "hi", "max_output_tokens": 2, **change}
    status, _, error = call(server, "POST", "/v1/responses", body)
    assert status == 400
    assert error["error"]["code"] == code and words in error["error"]["message"]


def test_over_the_limit_is_context_length_exceeded(serve, model_id, make_preset):
    server = serve(make_preset(max_context=256))
    client = client_for(server)
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(
            model=model_id, input="word " * 400, max_output_tokens=4
        )
    assert raised.value.code == "context_length_exceeded"
    assert "prompt is too long" in raised.value.message


def test_completions_streamed_and_not_and_fim_refused(serve, model_id):
    server = serve()
    client = client_for(server)
    reply = client.completions.create(
        model=model_id, prompt="def add(a, b):", max_tokens=5
    )
    assert reply.object == "text_completion"
    assert reply.choices[0].text and reply.choices[0].finish_reason == "length"
    assert reply.usage.completion_tokens == 5
    chunks = list(
        client.completions.create(
            model=model_id, prompt="def add(a, b):", max_tokens=4, stream=True
        )
    )
    assert "".join(c.choices[0].text for c in chunks)
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens > 0
    with pytest.raises(openai.BadRequestError) as raised:
        client.completions.create(
            model=model_id, prompt="def add(a, b):", suffix="\n", max_tokens=4
        )
    assert "no FIM tokens" in raised.value.message


def test_a_body_over_the_limit_is_refused_in_each_protocols_shape(serve, model_id):
    server = serve(max_body_bytes=2000)
    big = {
        "model": model_id,
        "max_tokens": 2,
        "input": "x" * 5000,
        "messages": [{"role": "user", "content": "x" * 5000}],
    }
    status, _, body = call(server, "POST", "/v1/messages", big)
    assert status == 413 and body["type"] == "error"
    assert body["error"]["type"] == "request_too_large"
    status, _, body = call(server, "POST", "/v1/responses", big)
    assert status == 413 and body["error"]["code"] == "request_too_large"
    status, _, body = call(server, "POST", "/v1/messages", b"[1, 2]")
    assert status == 400 and body["error"]["type"] == "invalid_request_error"
