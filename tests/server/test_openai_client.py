"""Acceptance: the real `openai` client against a real server on a loopback port."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time

import openai
import pytest

SYSTEM = "You are Swapless test bot. Always answer briefly."


def user_turn(i: int) -> str:
    return f"Turn {i}: please remember that item {i} costs {i * 3} euros and is blue."


def client_for(server, **kwargs) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=server.status().base_url,
        api_key=kwargs.pop("api_key", "not-needed"),
        max_retries=0,
        timeout=120,
        **kwargs,
    )


def wait_for(condition, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


def test_models_are_listed(serve, model_id):
    server = serve()
    client = client_for(server)
    assert [m.id for m in client.models.list()] == [model_id]
    assert client.models.retrieve(model_id).owned_by == "swapless"
    status = server.status()
    assert status.running and status.model == model_id and status.port > 0
    assert status.base_url == f"http://127.0.0.1:{status.port}/v1"
    reply = client.chat.completions.create(
        model="swapless", messages=[{"role": "user", "content": "hi"}], max_tokens=2
    )
    assert reply.model == model_id  # the alias answers with the served id


def test_a_reply_streamed_and_not_with_usage_and_reuse(serve, model_id):
    server = serve()
    client = client_for(server)
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": user_turn(1)},
    ]
    reply = client.chat.completions.create(
        model=model_id, messages=messages, max_tokens=12, temperature=0
    )
    choice = reply.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason == "length"
    usage = reply.usage
    assert usage.completion_tokens == 12 and usage.prompt_tokens > 20
    assert usage.total_tokens == usage.prompt_tokens + 12
    assert usage.prompt_tokens_details.cached_tokens == 0
    extension = reply.model_extra["swapless"]
    assert extension["trimmed"] is False and extension["effective_limit"] == 10000
    assert extension["cancelled"] is False

    # The same conversation, one turn on, streamed with usage.
    messages += [
        {"role": "assistant", "content": choice.message.content},
        {"role": "user", "content": user_turn(2)},
    ]
    stream = client.chat.completions.create(
        model=model_id,
        messages=messages,
        max_tokens=12,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finish[-1] == "length" and set(finish[:-1]) == {None}
    last = chunks[-1]
    assert last.choices == [] and last.usage.completion_tokens == 12
    cached = last.usage.prompt_tokens_details.cached_tokens
    assert cached >= usage.prompt_tokens  # the first request's prompt was reused
    assert (
        last.model_extra["swapless"]["new_tokens"] == last.usage.prompt_tokens - cached
    )

    # Non-streamed again, the same messages: the same greedy text as the stream.
    again = client.chat.completions.create(
        model=model_id, messages=messages, max_tokens=12, temperature=0
    )
    assert again.choices[0].message.content == text
    assert (
        again.usage.prompt_tokens_details.cached_tokens == again.usage.prompt_tokens - 1
    )


def test_over_the_limit_with_auto_trim_off_is_a_400_with_the_numbers(
    serve, model_id, make_preset
):
    server = serve(make_preset(max_context=256, auto_trim=False))
    client = client_for(server)
    long_text = " ".join(user_turn(i) for i in range(12))
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=model_id,
            messages=[{"role": "user", "content": long_text}],
            max_tokens=20,
        )
    error = caught.value
    assert error.status_code == 400 and error.code == "context_length_exceeded"
    numbers = error.body["swapless"]
    assert numbers["effective_limit"] == 256 and numbers["max_tokens"] == 20
    assert numbers["prompt_tokens"] + 20 == numbers["requested_tokens"] > 256
    assert f"{numbers['requested_tokens']}" in error.body["message"]
    assert "Auto-trim is off" in error.body["message"]


def test_over_the_limit_with_auto_trim_on_the_reply_says_it_was_trimmed(
    serve, model_id, make_preset
):
    server = serve(make_preset(max_context=512))
    client = client_for(server)
    messages = [{"role": "system", "content": SYSTEM}]
    trimmed = None
    for i in range(1, 25):
        messages.append({"role": "user", "content": user_turn(i)})
        reply = client.chat.completions.create(model=model_id, messages=messages)
        messages.append(
            {"role": "assistant", "content": reply.choices[0].message.content}
        )
        extension = reply.model_extra["swapless"]
        assert reply.usage.prompt_tokens + 16 <= 512
        if extension["trimmed"]:
            trimmed = (reply, extension)
            break
    assert trimmed is not None
    reply, extension = trimmed
    assert extension["summary_tokens"] > 0 and extension["dropped_messages"] > 0
    assert extension["effective_limit"] == 512 and extension["trim_method"] == "splice"
    assert extension["summarized_messages"] == extension["dropped_messages"]
    # The client keeps sending its whole history: the summary still stands for it.
    messages.append({"role": "user", "content": user_turn(99)})
    follow = client.chat.completions.create(model=model_id, messages=messages)
    follow_ext = follow.model_extra["swapless"]
    assert follow_ext["summarized_messages"] >= extension["summarized_messages"]
    assert (
        follow.usage.prompt_tokens_details.cached_tokens
        > 0.6 * follow.usage.prompt_tokens
    )


def test_four_concurrent_clients_are_all_answered(serve, model_id):
    server = serve()
    results, errors = {}, []

    def conversation(n):
        try:
            client = client_for(server)
            messages = [
                {"role": "system", "content": f"You are helper number {n}."},
                {"role": "user", "content": user_turn(n)},
            ]
            usages = []
            for turn in range(2):
                stream = client.chat.completions.create(
                    model=model_id,
                    messages=messages,
                    stream=True,
                    stream_options={"include_usage": True},
                )
                chunks = list(stream)
                text = "".join(
                    c.choices[0].delta.content or "" for c in chunks if c.choices
                )
                usages.append(chunks[-1].usage)
                messages += [
                    {"role": "assistant", "content": text},
                    {"role": "user", "content": user_turn(10 + turn)},
                ]
            results[n] = usages
        except Exception as exc:  # reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=conversation, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(180)
    assert errors == [] and sorted(results) == [0, 1, 2, 3]
    for usages in results.values():
        assert usages[0].completion_tokens == 16
        assert usages[1].prompt_tokens_details.cached_tokens > 0
    assert server.status().conversations == 4


def test_a_client_that_disconnects_mid_stream_stops_the_generation(serve, model_id):
    server = serve()
    client = client_for(server)
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": user_turn(5)},
    ]
    stream = client.chat.completions.create(
        model=model_id, messages=messages, max_tokens=4000, stream=True
    )
    received = 0
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            received += 1
            if received == 3:
                break
    stream.close()
    closed_at = time.monotonic()
    recent = server.service.recent
    assert wait_for(lambda: recent and recent[-1].outcome == "cancelled")
    stopped_after = time.monotonic() - closed_at
    summary = recent[-1]
    # The tiny model makes ~500 tokens/s here: 4000 would take seconds more.
    assert summary.completion_tokens < 1000, summary
    assert stopped_after < 3.0
    assert server.status().active_requests == 0
    # Its cache stays reusable: the client retries the same request.
    retry = client.chat.completions.create(
        model=model_id, messages=messages, max_tokens=4
    )
    assert (
        retry.usage.prompt_tokens_details.cached_tokens == retry.usage.prompt_tokens - 1
    )


def test_a_client_that_leaves_before_a_non_streamed_reply_stops_it(serve, model_id):
    server = serve()
    port = server.status().port
    body = json.dumps(
        {
            "model": model_id,
            "max_tokens": 4000,
            "messages": [{"role": "user", "content": user_turn(6)}],
        }
    ).encode()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        assert wait_for(lambda: server.status().active_requests == 1)
        time.sleep(0.05)  # mid-generation: the random model may end a reply in 0.4 s
    recent = server.service.recent
    assert wait_for(lambda: recent and recent[-1].outcome == "cancelled")
    assert recent[-1].completion_tokens < 4000


@pytest.mark.parametrize("stream", [False, True])
def test_a_request_is_settled_before_its_reply_reaches_the_client(
    serve, model_id, stream
):
    server = serve()
    client = client_for(server)
    for i in range(3):
        reply = client.chat.completions.create(
            model=model_id,
            messages=[{"role": "user", "content": user_turn(i)}],
            max_tokens=3,
            stream=stream,
        )
        if stream:
            list(reply)
        # No waiting: its cache is released, so forgetting it drops it at once.
        assert server.status().active_requests == 0
        server.forget_conversations()
        assert server.status().conversations == 0


def test_stopping_the_server_mid_stream_ends_the_reply_at_once(serve, model_id, engine):
    server = serve()
    client = client_for(server)
    stream = client.chat.completions.create(
        model=model_id,
        messages=[{"role": "user", "content": user_turn(7)}],
        max_tokens=4000,
        stream=True,
    )
    chunks = iter(stream)
    next(chunks)
    started = time.monotonic()
    server.stop()
    took = time.monotonic() - started
    assert took < 3.0
    assert not server.status().running and server.status().active_requests == 0
    rest = []
    with contextlib.suppress(openai.APIError):  # a closed connection is an end too
        rest = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(rest) < 4000
    assert server.service.recent[-1].outcome == "cancelled"
    # The engine is free again for the app.
    assert engine.chat(
        "after-stop", [{"role": "user", "content": "hi"}], *_greedy()
    ).wait()


def _greedy():
    from app.core.presets.generation_settings import KVSettings, SamplingSettings

    return KVSettings(bits=16), SamplingSettings(temperature=0.0, max_tokens=2)
