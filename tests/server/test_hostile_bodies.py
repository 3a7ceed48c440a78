"""Hostile request bodies get a 400 naming the field, never a 500 (issue #31, 9/17).

Each body is sent over real HTTP to a real server on loopback: nesting 100,000 deep
(RecursionError in the parser), integers of 400 and 5,000 digits (an overflow when a
range was checked, and Python's 4,300-digit limit), and JSON escapes of half a
surrogate pair (which the tokenizer failed on, blaming the chat template).
"""

from __future__ import annotations

import json

import pytest

from tests.server.test_http_guards import assert_openai_error, call


def _chat(model_id: str, **fields) -> bytes:
    data = {"model": model_id, "messages": [{"role": "user", "content": "hi"}]}
    text = json.dumps({**data, **{k: f"@{k}@" for k in fields}})
    for name, raw in fields.items():  # raw JSON, written as a client could
        text = text.replace(f'"@{name}@"', raw)
    return text.encode()


@pytest.fixture
def server(serve):
    return serve()


@pytest.mark.parametrize(
    ("fields", "code", "param", "words"),
    [
        ({"metadata": "[" * 100_000 + "]" * 100_000}, "invalid_json", None, "nested"),
        ({"metadata": "[" * 70 + "]" * 70}, "invalid_json", "metadata", "nested"),
        ({"temperature": "1" + "0" * 399}, "invalid_value", "temperature", "from 0"),
        ({"seed": "9" * 5000}, "invalid_value", "seed", "whole number"),
        ({"max_tokens": "1" + "0" * 30}, "invalid_value", "max_tokens", "1 to"),
        (
            {"messages": '[{"role": "user", "content": "a\\ud800b"}]'},
            "invalid_value",
            "messages[0].content",
            "U+D800",
        ),
    ],
    ids=[
        "deep-100000",
        "deep-70",
        "temperature-400-digits",
        "seed-5000-digits",
        "max-tokens-31-digits",
        "lone-surrogate",
    ],
)
def test_hostile_bodies_are_400s_naming_the_field(
    server, model_id, fields, code, param, words
):
    status, _, body = call(
        server, "POST", "/v1/chat/completions", _chat(model_id, **fields)
    )
    assert status == 400, body
    assert_openai_error(body, code, words)
    assert body["error"]["param"] == param


def test_invalid_utf8_bytes_are_named(server, model_id):
    raw = _chat(model_id).replace(b'"hi"', b'"h\xffi"')
    status, _, body = call(server, "POST", "/v1/chat/completions", raw)
    assert status == 400
    assert_openai_error(body, "invalid_json", "byte 0xff")


def test_the_server_still_answers_afterwards(server, model_id):
    call(server, "POST", "/v1/chat/completions", _chat(model_id, metadata="[" * 10**5))
    status, _, body = call(
        server, "POST", "/v1/chat/completions", _chat(model_id, max_tokens="2")
    )
    assert status == 200 and body["usage"]["completion_tokens"] <= 2


@pytest.mark.parametrize("auto_trim", [True, False])
def test_an_over_long_message_is_refused_before_it_is_tokenized(
    serve, make_preset, engine, model_id, monkeypatch, auto_trim
):
    """One 8 MiB message cost 2.1 GiB to tokenize, and the tokenizer kept it."""
    server = serve(make_preset(max_context=2048, auto_trim=auto_trim))
    tokenizer = engine.tokenizer
    encoded: list[int] = []
    real_encode = tokenizer.encode

    def encode(text: str) -> list[int]:
        encoded.append(len(text))
        return real_encode(text)

    monkeypatch.setattr(tokenizer, "encode", encode)
    huge = "word " * (2 * 2**20 // 5)  # 2 MiB of text
    status, _, body = call(
        server,
        "POST",
        "/v1/chat/completions",
        {"model": model_id, "messages": [{"role": "user", "content": huge}]},
    )
    assert status == 400, body
    assert_openai_error(body, "context_length_exceeded", "at least")
    assert all(n < len(huge) for n in encoded)  # never tokenized
    assert body["error"]["swapless"]["effective_limit"] <= 2048


def test_a_message_within_the_character_bound_is_counted_in_pieces_and_stops_early(
    serve, make_preset, engine, model_id, monkeypatch
):
    """#31 point 15: a text the character bound lets through (a real vocabulary's
    longest token is long) was rendered and tokenized whole before its refusal (an
    8 MiB one took 2.1 GiB); now it is counted in pieces, up to the limit."""
    from app.core.engine.prompt_tokenizer import COUNT_PIECE_CHARS

    server = serve(make_preset(max_context=2048))
    tokenizer = engine.tokenizer
    encoded: list[int] = []
    real_encode = tokenizer.encode

    def encode(text: str) -> list[int]:
        encoded.append(len(text))
        return real_encode(text)

    monkeypatch.setattr(tokenizer, "encode", encode)
    huge = "word " * 40_000  # far over 2,048 tokens, under the character bound
    assert tokenizer.fewest_tokens(huge) < 2048
    status, _, body = call(
        server,
        "POST",
        "/v1/chat/completions",
        {"model": model_id, "messages": [{"role": "user", "content": huge}]},
    )
    assert status == 400, body
    assert_openai_error(body, "context_length_exceeded", "at least")
    assert max(encoded) <= COUNT_PIECE_CHARS  # one piece at a time
    assert sum(encoded) < len(huge)  # and it stopped once past the limit
