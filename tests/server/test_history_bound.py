"""A queued request's older history is bounded before it is rendered (#31, point 15).

One 8 MiB *older* message (one the trim drops anyway) was rendered and tokenized whole
on the request's worker thread before its first event: about 0.5 GiB each, not counted
in the request's ledger. Real server on loopback, the tiny model's real tokenizer: its
``encode`` is watched, so the assertions are on the characters tokenized (work), not
on time or RSS.
"""

from __future__ import annotations

import json

import pytest

from app.core.engine.prompt_tokenizer import COUNT_PIECE_CHARS
from app.server.admission import kv_need, parsed_bytes
from app.server.openai_chat.client_history import ClientHistory, model_view
from app.server.openai_chat.openai_request import ChatMessage, parse_chat_request
from app.server.service.history_trim import (
    RENDER_WHOLE_FACTOR,
    WORK_BYTES_PER_TOKEN,
    count_history,
    tokenize_need,
)
from tests.server.test_http_guards import call

LIMIT = 2048


@pytest.fixture
def encoded(engine, monkeypatch) -> list[int]:
    """Lengths of every text the model's tokenizer encodes during the test."""
    tokenizer = engine.tokenizer
    seen: list[int] = []
    real_encode = tokenizer.encode

    def encode(text: str) -> list[int]:
        seen.append(len(text))
        return real_encode(text)

    monkeypatch.setattr(tokenizer, "encode", encode)
    return seen


def _history(older: str) -> list[dict]:
    return [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": older},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": "And of Italy?"},
    ]


@pytest.mark.parametrize(
    "older",
    [
        "word " * (2**20 // 5),  # 1 MiB: past the character bound, never tokenized
        "word " * 40_000,  # within the character bound: counted in pieces, stopped
    ],
    ids=["past-the-character-bound", "counted-in-pieces"],
)
def test_an_older_huge_message_is_trimmed_without_being_rendered_whole(
    serve, make_preset, engine, model_id, encoded, older
):
    server = serve(make_preset(max_context=LIMIT))
    status, _, body = call(
        server,
        "POST",
        "/v1/chat/completions",
        {"model": model_id, "messages": _history(older), "max_tokens": 4},
    )
    assert status == 200, body
    swapless = body["swapless"]
    assert swapless["trimmed"] and swapless["dropped_messages"] >= 2
    assert swapless["trim_method"] in ("rebuild", "none")
    # Never rendered nor counted whole: one counting piece at a time, and far less
    # than the message in all (the whole render alone was more than the message).
    assert max(encoded) <= COUNT_PIECE_CHARS
    assert sum(encoded) < len(older) // 2
    # The client's next request (the same history and one more turn) finds the trim
    # remembered: the huge message is not counted again.
    encoded.clear()
    later = [
        *_history(older),
        {"role": "assistant", "content": "Rome."},
        {"role": "user", "content": "Thanks."},
    ]
    status, _, body = call(
        server,
        "POST",
        "/v1/chat/completions",
        {"model": model_id, "messages": later, "max_tokens": 4},
    )
    assert status == 200, body
    assert max(encoded, default=0) <= COUNT_PIECE_CHARS
    assert sum(encoded) < len(older) // 2


def test_counting_is_exact_within_the_bound_and_stops_past_it(engine, encoded):
    tokenizer = engine.tokenizer
    short = [
        ChatMessage("user", "hello there"),
        ChatMessage("assistant", "hi"),
        ChatMessage("user", "bye"),
    ]
    view = model_view(ClientHistory.of(tuple(short)), None, "system")
    counted = count_history(tokenizer, view, LIMIT, 3)
    assert counted.counts == (
        tokenizer.count("hello there") + 3,
        tokenizer.count("hi") + 3,
    )
    assert not counted.bounded
    huge = "word " * 200_000  # 1 MB, within the character bound of a 1 M limit
    messages = (ChatMessage("user", huge), *short)
    view = model_view(ClientHistory.of(messages), None, "system")
    encoded.clear()
    counted = count_history(tokenizer, view, LIMIT, 3)
    assert counted.bounded and counted.counts[0] > RENDER_WHOLE_FACTOR * LIMIT
    assert sum(encoded) <= 2 * COUNT_PIECE_CHARS  # stopped after about one piece


def test_the_ledger_counts_the_tokenizing_work(serve, make_preset, engine, model_id):
    """A request with an 8 MiB older message holds, while it waits, the counting and
    renders of its history besides its body, parsed texts and prompt cache: a room
    that has space for those but not for the work refuses it at once with 503
    ``memory_pressure`` (it was admitted, and held ~0.5 GiB uncounted)."""
    server = serve(make_preset(max_context=LIMIT), max_body_bytes=16 * 2**20)
    admission = server._app.admission
    older = "word " * (8 * 2**20 // 5)
    payload = {"model": model_id, "messages": _history(older), "max_tokens": 4}
    body = json.dumps(payload).encode()
    service = server.service
    limit = service.effective_limit()
    work = tokenize_need(limit, len(body))
    assert work == WORK_BYTES_PER_TOKEN * (
        RENDER_WHOLE_FACTOR * limit + COUNT_PIECE_CHARS
    )
    assert tokenize_need(limit, 100) == WORK_BYTES_PER_TOKEN * 100
    without_work = (
        len(body)
        + parsed_bytes(parse_chat_request(body), len(body))
        + kv_need(engine, service.preset, limit, len(body))
    )
    admission.room = lambda: without_work + work // 2
    status, headers, reply = call(server, "POST", "/v1/chat/completions", body)
    assert status == 503, reply
    assert reply["error"]["code"] == "memory_pressure"
    assert headers["retry-after"].isdigit()
    assert reply["error"]["swapless"]["queued_request_bytes"] == without_work + work
    admission.room = lambda: without_work + work
    status, _, reply = call(server, "POST", "/v1/chat/completions", body)
    assert status == 200, reply
    assert admission.held == 0
