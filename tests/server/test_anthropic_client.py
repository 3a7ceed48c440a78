"""Acceptance: the real `anthropic` client against a real server on a loopback port."""

from __future__ import annotations

import anthropic
import pytest

from tests.server.test_http_guards import call

SYSTEM = "You are Swapless test bot. Always answer briefly."


def client_for(server, **kwargs) -> anthropic.Anthropic:
    status = server.status()
    return anthropic.Anthropic(
        base_url=f"http://127.0.0.1:{status.port}",
        api_key=kwargs.pop("api_key", "not-needed"),
        max_retries=0,
        timeout=120,
        **kwargs,
    )


def test_a_message_streamed_and_not_with_usage_and_reuse(serve, model_id):
    server = serve()
    client = client_for(server)
    messages = [{"role": "user", "content": "Item 1 costs 3 euros and is blue."}]
    reply = client.messages.create(
        model=model_id, system=SYSTEM, messages=messages, max_tokens=8
    )
    assert reply.type == "message" and reply.role == "assistant"
    assert reply.model == model_id
    assert reply.content[0].type == "text" and reply.content[0].text
    assert reply.stop_reason == "max_tokens"
    assert reply.usage.output_tokens == 8 and reply.usage.input_tokens > 10
    assert reply.usage.cache_read_input_tokens == 0

    # The same conversation one turn on, streamed: the first turn's KV is reused.
    messages += [
        {"role": "assistant", "content": reply.content[0].text},
        {"role": "user", "content": [{"type": "text", "text": "And item 2?"}]},
    ]
    kinds = []
    with client.messages.stream(
        model="swapless",
        system=[
            {"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}
        ],
        messages=messages,
        max_tokens=6,
    ) as stream:
        for event in stream:
            kinds.append(event.type)
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "content_block_start" in kinds and "content_block_stop" in kinds
    assert "message_delta" in kinds
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 6
    assert final.content[0].text
    assert final.usage.cache_read_input_tokens > 10
    total = final.usage.input_tokens + final.usage.cache_read_input_tokens
    counted = client.messages.count_tokens(
        model=model_id, system=SYSTEM, messages=messages
    )
    assert counted.input_tokens == total


def test_beta_path_and_stop_sequences(serve, model_id):
    server = serve()
    client = client_for(server)
    reply = client.beta.messages.create(
        model=model_id,
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=4,
        stop_sequences=["zzzz-never"],
    )
    assert reply.stop_reason == "max_tokens" and reply.content[0].text


def test_tool_use_history_is_accepted_and_counted(serve, model_id):
    """A conversation with tool_use / tool_result blocks and tools runs; the tools
    count in the prompt."""
    server = serve()
    client = client_for(server)
    tools = [
        {
            "name": "get_weather",
            "description": "Weather of a city",
            "input_schema": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        }
    ]
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Use the tool.", "signature": "x"},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}
            ],
        },
    ]
    without = client.messages.count_tokens(model=model_id, messages=messages)
    counted = client.messages.count_tokens(
        model=model_id, messages=messages, tools=tools
    )
    assert counted.input_tokens > without.input_tokens + 10
    reply = client.messages.create(
        model=model_id,
        messages=messages,
        tools=tools,
        tool_choice={"type": "auto"},
        max_tokens=4,
    )
    assert reply.usage.input_tokens + reply.usage.cache_read_input_tokens == (
        counted.input_tokens
    )


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"max_tokens": None}, "max_tokens: Field required"),
        ({"top_k": 5}, "top_k"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "image",
                                "source": {
                                    "type": "base64",
                                    "media_type": "image/png",
                                    "data": "iVBORw0KGgo=",
                                },
                            }
                        ],
                    }
                ]
            },
            "reads text only",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": "nope",
                                "content": "x",
                            }
                        ],
                    }
                ]
            },
            "unknown tool_use_id",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "hologram"}]}]},
            "unsupported content block type 'hologram'",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "text", "text": "x"}] * 10_000,
                    }
                ]
            },
            "more than 5000 content blocks",
        ),
    ],
)
def test_bad_requests_get_anthropic_errors(serve, model_id, change, words):
    server = serve()
    body = {
        "model": model_id,
        "max_tokens": 4,
        "messages": [{"role": "user", "content": "hi"}],
        "future_harmless_field": {"anything": 1},
        **change,
    }
    body = {k: v for k, v in body.items() if v is not None}
    status, _, error = call(server, "POST", "/v1/messages?beta=true", body)
    assert status == 400
    assert error["type"] == "error"
    assert error["error"]["type"] == "invalid_request_error"
    assert words in error["error"]["message"]
    # The server keeps serving.
    client = client_for(server)
    assert client.messages.create(
        model=model_id, messages=[{"role": "user", "content": "hi"}], max_tokens=2
    ).content


def test_sdk_errors_are_typed(serve, model_id):
    server = serve()
    client = client_for(server)
    with pytest.raises(anthropic.BadRequestError) as raised:
        client.messages.create(
            model="another-model",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=2,
        )
    assert "is not served here" in raised.value.message


def test_over_the_limit_is_refused_in_anthropic_words_never_trimmed(
    serve, model_id, make_preset
):
    server = serve(make_preset(max_context=256))
    client = client_for(server)
    long_text = " ".join(f"word{i}" for i in range(400))
    with pytest.raises(anthropic.BadRequestError) as raised:
        client.messages.create(
            model=model_id,
            messages=[{"role": "user", "content": long_text}],
            max_tokens=8,
        )
    message = raised.value.message
    assert "prompt is too long:" in message and "> 256 maximum" in message
    prompt = int(message.split("prompt is too long: ")[1].split(" tokens")[0])
    counted = client.messages.count_tokens(
        model=model_id, messages=[{"role": "user", "content": long_text}]
    )
    assert prompt == counted.input_tokens > 256
    # Under the limit with max_tokens over it: Anthropic's other wording.
    with pytest.raises(anthropic.BadRequestError) as raised:
        client.messages.create(
            model=model_id,
            messages=[{"role": "user", "content": "word " * 30}],
            max_tokens=250,
        )
    assert "input length and `max_tokens` exceed context limit: " in (
        raised.value.message
    )


def test_api_key_by_x_api_key_or_bearer(serve, model_id):
    server = serve(api_key="s3cret")
    with pytest.raises(anthropic.AuthenticationError):
        client_for(server, api_key="wrong").messages.create(
            model=model_id, messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
    ok = client_for(server, api_key="s3cret").messages.create(
        model=model_id, messages=[{"role": "user", "content": "hi"}], max_tokens=2
    )
    assert ok.content
    bearer = client_for(server, api_key=None, auth_token="s3cret")
    assert bearer.messages.create(
        model=model_id, messages=[{"role": "user", "content": "hi"}], max_tokens=2
    ).content


def test_a_subagent_branch_reuses_the_shared_prefix_and_the_parent_stays_live(
    serve, model_id
):
    """Agents' sessions: the parent's cache is forked for a subagent that shares its
    instructions and first exchange, and the parent's next turn still reuses all of
    its own history."""
    server = serve()
    client = client_for(server)
    instructions = " ".join(
        f"Rule {i}: answer in the tone of item {i}." for i in range(40)
    )
    opening = [
        {"role": "user", "content": "Start the task."},
        {"role": "assistant", "content": "Starting."},
    ]
    parent = [*opening, {"role": "user", "content": "Now list the items, please."}]
    first = client.messages.create(
        model=model_id, system=instructions, messages=parent, max_tokens=4
    )
    shared = client.messages.count_tokens(
        model=model_id,
        system=instructions,
        messages=opening + [{"role": "user", "content": "x"}],
    ).input_tokens
    assert shared > 300  # a prefix worth forking
    child = [
        *opening,
        {"role": "user", "content": "Subtask: count the rules one by one."},
    ]
    sub = client.messages.create(
        model=model_id, system=instructions, messages=child, max_tokens=4
    )
    # The subagent reused the shared prefix (system + first exchange), copied.
    assert sub.usage.cache_read_input_tokens >= shared - 16  # "x" and the header
    # The parent's cache was not cut back by the subagent: its whole prompt is reused.
    parent += [
        {"role": "assistant", "content": first.content[0].text},
        {"role": "user", "content": "Next."},
    ]
    again = client.messages.create(
        model=model_id, system=instructions, messages=parent, max_tokens=4
    )
    prompt = first.usage.input_tokens + first.usage.cache_read_input_tokens
    # (Its generation header's last token may re-tokenize with the reply after it.)
    assert again.usage.cache_read_input_tokens >= prompt - 1
    assert len(server.service.index.branches) == 2


def test_quiet_streams_get_pings_and_a_client_that_leaves_stops_generation(
    serve, model_id
):
    import http.client
    import json
    import time

    server = serve()
    server._app.agent.keepalive_s = 0.001  # every pause between tokens is "quiet"
    connection = http.client.HTTPConnection(
        "127.0.0.1", server.status().port, timeout=60
    )
    body = {
        "model": model_id,
        "max_tokens": 6,
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
    }
    connection.request(
        "POST", "/v1/messages", json.dumps(body), {"Content-Type": "application/json"}
    )
    raw = connection.getresponse().read().decode()
    connection.close()
    names = [line[7:] for line in raw.splitlines() if line.startswith("event: ")]
    assert "ping" in names
    assert names[0] == "message_start" and names[-1] == "message_stop"

    # A long reply, and the client leaves after its first text delta.
    server._app.agent.keepalive_s = 15.0
    connection = http.client.HTTPConnection(
        "127.0.0.1", server.status().port, timeout=60
    )
    connection.request(
        "POST",
        "/v1/messages",
        json.dumps({**body, "max_tokens": 4000}),
        {"Content-Type": "application/json"},
    )
    response = connection.getresponse()
    while b"text_delta" not in response.readline():
        pass
    connection.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and server.service.active_requests:
        time.sleep(0.05)
    assert server.service.active_requests == 0
    summary = server.service.recent[-1]
    assert summary.outcome == "cancelled" and summary.completion_tokens < 4000
