"""Queued requests' memory counts against the budget (issue #31, point 15).

First the ledger alone, with a fixed room. Then a real server on loopback with the
real `openai` client: the model thread is held busy so every request has to wait,
the room is set to about two and a half requests, and four large requests are sent at
once: two are refused with 503 ``memory_pressure`` (and ``Retry-After``) while the
model is still busy, the two admitted ones complete once it is free, and the ledger is
back at zero afterwards (also after a body that fails to parse).
"""

from __future__ import annotations

import http.client
import json
import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

import openai
import pytest

from app.server.admission import Admission, kv_need, parsed_bytes
from app.server.errors import ServiceUnavailable
from app.server.openai_chat.openai_request import parse_chat_request


def test_the_ledger_refuses_past_the_room_and_returns_to_zero():
    admission = Admission(lambda: 1000)
    first, second = admission.open(), admission.open()
    admission.charge(first, 600)
    with pytest.raises(ServiceUnavailable) as refused:
        admission.charge(second, 500)
    assert refused.value.status == 503 and refused.value.code == "memory_pressure"
    assert refused.value.details["queue_room_bytes"] == 1000
    assert (admission.held, second.held) == (600, 0)  # a refusal adds nothing
    admission.charge(second, 400)
    admission.charge(first, 300)  # shrinking is always allowed
    assert admission.held == 700
    admission.release(first)
    admission.release(first)  # idempotent
    admission.charge(first, 10_000)  # a released ticket no longer counts
    admission.release(second)
    assert admission.held == 0
    unbounded = Admission(lambda: None)  # no budget known: nothing refused for memory
    unbounded.charge(unbounded.open(), 10**12)


def test_parsed_bytes_measure_the_messages():
    text = "x" * 100_000
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": text}]})
    chat = parse_chat_request(body.encode())
    assert 100_000 < parsed_bytes(chat, len(body)) < 101_000
    wide = "\U0001f600" * 1000  # four bytes a character in a Python str
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": wide}]})
    assert parsed_bytes(parse_chat_request(body.encode()), len(body)) > 4000


def _need(server, engine, body: bytes) -> int:
    service = server.service
    limit = service.effective_limit()
    return (
        len(body)
        + parsed_bytes(parse_chat_request(body), len(body))
        + kv_need(engine, service.preset, limit, len(body))
    )


def test_requests_over_the_room_are_refused_at_once_and_the_rest_complete(
    serve, engine, model_id
):
    server = serve()
    admission = server._app.admission
    text = "a long question about memory " * 40
    messages = [{"role": "user", "content": text}]
    body = json.dumps({"model": model_id, "messages": messages}).encode()
    need = _need(server, engine, body)
    assert kv_need(engine, server.service.preset, 10**9, len(body)) > 0
    admission.room = lambda: int(2.5 * need)
    client = openai.OpenAI(
        base_url=server.status().base_url, api_key="unused", max_retries=0
    )

    def ask() -> str:
        reply = client.chat.completions.create(model=model_id, messages=messages)
        return reply.choices[0].message.content or ""

    gate = threading.Event()
    busy = engine.submit(gate.wait)  # the model thread is taken: every request waits
    pool = ThreadPoolExecutor(4)
    try:
        futures = [pool.submit(ask) for _ in range(4)]
        done: set[Future] = set()
        while len(done) < 2:
            finished, _ = wait(
                [f for f in futures if f not in done],
                timeout=60,
                return_when=FIRST_COMPLETED,
            )
            assert finished, "no request was refused while the model was busy"
            done |= finished
        # Refused while the model was still busy: no request could have run.
        assert not gate.is_set() and len(done) == 2
        for future in done:
            error = future.exception()
            assert isinstance(error, openai.APIStatusError), error
            assert error.status_code == 503
            assert error.body["code"] == "memory_pressure"
            assert error.response.headers["retry-after"].isdigit()
        assert 0 < admission.held <= 2.5 * need  # the two waiting are counted
        gate.set()
        answers = [f.result(timeout=120) for f in futures if f not in done]
        assert len(answers) == 2 and all(isinstance(a, str) for a in answers)
    finally:
        gate.set()  # never leave the model thread (or the clients) waiting
        busy.result(timeout=60)
        pool.shutdown(wait=True)
    assert admission.held == 0
    # A body that fails to parse leaves nothing counted either.
    status, _ = _call(
        server, "POST", "/v1/chat/completions", b'{"model": ' + b" " * 50_000
    )
    assert status == 400
    status, health = _call(server, "GET", "/health")
    assert status == 200 and health["queued_bytes"] == 0 and admission.held == 0


def _call(server, method: str, path: str, body: bytes | None = None):
    """One raw HTTP request on loopback; returns (status, parsed JSON)."""
    connection = http.client.HTTPConnection(
        "127.0.0.1", server.status().port, timeout=60
    )
    connection.request(
        method, path, body=body, headers={"Content-Type": "application/json"}
    )
    response = connection.getresponse()
    raw = response.read()
    connection.close()
    return response.status, json.loads(raw)
