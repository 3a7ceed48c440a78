"""The HTTP edge: keys, hosts, sizes, CORS and bad requests answered in OpenAI's shape."""

from __future__ import annotations

import http.client
import json
import time

import openai
import pytest


def call(server, method, path, body=None, headers=None):
    """One raw HTTP request; returns (status, headers, parsed JSON or text)."""
    connection = http.client.HTTPConnection(
        "127.0.0.1", server.status().port, timeout=60
    )
    payload = (
        body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    )
    sent = {"Content-Type": "application/json", **(headers or {})}
    connection.request(method, path, body=payload, headers=sent)
    response = connection.getresponse()
    raw = response.read()
    connection.close()
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = raw.decode()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, parsed


def assert_openai_error(body, code, *words):
    error = body["error"]
    assert set(error) >= {"message", "type", "param", "code"}
    assert error["code"] == code
    for word in words:
        assert word in error["message"]
    assert "Traceback" not in error["message"]


@pytest.fixture
def server(serve):
    return serve()


def chat_body(model_id, **fields):
    return {
        "model": model_id,
        "messages": [{"role": "user", "content": "hi"}],
        **fields,
    }


def test_bad_json_and_bad_values_are_400s(server, model_id):
    status, _, body = call(server, "POST", "/v1/chat/completions", b"{oops")
    assert status == 400
    assert_openai_error(body, "invalid_json", "not valid JSON")
    status, _, body = call(
        server, "POST", "/v1/chat/completions", chat_body(model_id, temperature=9)
    )
    assert status == 400 and body["error"]["param"] == "temperature"
    status, _, body = call(
        server, "POST", "/v1/chat/completions", chat_body("other-model")
    )
    assert status == 400
    assert_openai_error(body, "model_not_found", model_id)


def test_wrong_paths_methods_types_and_sizes(serve, model_id):
    server = serve(max_body_bytes=2000)
    status, _, body = call(server, "GET", "/v1/embeddings")
    assert status == 404
    assert_openai_error(body, "not_found", "/v1/chat/completions")
    status, headers, body = call(server, "GET", "/v1/chat/completions")
    assert status == 405 and "POST" in headers["allow"]
    status, _, body = call(
        server,
        "POST",
        "/v1/chat/completions",
        b"model=x",
        {"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert status == 415
    assert_openai_error(body, "unsupported_media_type", "application/json")
    big = chat_body(model_id, messages=[{"role": "user", "content": "x" * 5000}])
    status, _, body = call(server, "POST", "/v1/chat/completions", big)
    assert status == 413
    assert_openai_error(body, "request_too_large", "2,000 bytes")
    status, _, body = call(server, "GET", f"/v1/models/{model_id}-nope")
    assert status == 404 and body["error"]["code"] == "model_not_found"


def test_an_api_key_is_required_when_set(serve, model_id):
    server = serve(api_key="s3cret")
    status, headers, body = call(server, "GET", "/v1/models")
    assert status == 401 and headers["www-authenticate"] == "Bearer"
    assert_openai_error(body, "invalid_api_key", "Authorization: Bearer")
    status, _, _ = call(
        server, "GET", "/v1/models", headers={"Authorization": "Bearer no"}
    )
    assert status == 401
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(
            base_url=server.status().base_url, api_key="wrong", max_retries=0
        ).models.list()
    client = openai.OpenAI(
        base_url=server.status().base_url, api_key="s3cret", max_retries=0
    )
    assert [m.id for m in client.models.list()] == [model_id]
    reply = client.chat.completions.create(
        model=model_id, messages=[{"role": "user", "content": "hi"}], max_tokens=2
    )
    assert reply.usage.completion_tokens == 2


def test_other_host_names_are_refused_on_loopback(server):
    status, _, body = call(
        server, "GET", "/v1/models", headers={"Host": "evil.example"}
    )
    assert status == 403
    assert_openai_error(body, "host_not_allowed", "DNS rebinding")
    for host in ("localhost:1234", "127.0.0.1", "[::1]:80"):
        assert call(server, "GET", "/v1/models", headers={"Host": host})[0] == 200


def test_no_cors_unless_asked(serve):
    preflight = {
        "Origin": "http://localhost:3000",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type",
    }
    plain = serve()
    status, headers, _ = call(
        plain, "OPTIONS", "/v1/chat/completions", headers=preflight
    )
    assert status == 405 and "access-control-allow-origin" not in headers
    _, headers, _ = call(
        plain, "GET", "/v1/models", headers={"Origin": "http://localhost:3000"}
    )
    assert "access-control-allow-origin" not in headers
    allowed = serve(cors_origins=("http://localhost:3000",))
    status, headers, _ = call(
        allowed, "OPTIONS", "/v1/chat/completions", headers=preflight
    )
    assert status == 200
    assert headers["access-control-allow-origin"] == "http://localhost:3000"
    other = {**preflight, "Origin": "http://elsewhere.example"}
    status, headers, _ = call(allowed, "OPTIONS", "/v1/chat/completions", headers=other)
    assert status == 400 and "access-control-allow-origin" not in headers


def test_a_bug_is_a_500_without_a_traceback(server, model_id, monkeypatch):
    def broken(request, cancel):
        raise RuntimeError("secret internals")
        yield

    monkeypatch.setattr(server.service, "run", broken)
    for stream in (False, True):
        status, _, body = call(
            server, "POST", "/v1/chat/completions", chat_body(model_id, stream=stream)
        )
        assert status == 500
        assert_openai_error(body, "internal_error", "log")
        assert "secret internals" not in json.dumps(body)


def test_an_error_after_the_stream_started_is_an_sse_error_event(
    server, model_id, monkeypatch
):
    real = server.service.run

    def fails_midway(request, cancel):
        events = real(request, cancel)
        yield next(events)  # Accepted: the stream starts
        raise RuntimeError("midway")

    monkeypatch.setattr(server.service, "run", fails_midway)
    status, headers, text = call(
        server, "POST", "/v1/chat/completions", chat_body(model_id, stream=True)
    )
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    events = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["error"]["code"] == "internal_error"


def test_too_many_pending_requests_get_a_429(serve, model_id):
    server = serve(max_pending=1)
    connection = http.client.HTTPConnection(
        "127.0.0.1", server.status().port, timeout=60
    )
    long = chat_body(model_id, max_tokens=4000, stream=True)
    connection.request(
        "POST",
        "/v1/chat/completions",
        body=json.dumps(long).encode(),
        headers={"Content-Type": "application/json"},
    )
    response = connection.getresponse()
    assert response.status == 200
    response.readline()  # the stream is running
    status, _, body = call(server, "POST", "/v1/chat/completions", chat_body(model_id))
    assert status == 429
    assert_openai_error(body, "too_many_requests", "retry later")
    connection.close()
    deadline = time.monotonic() + 10
    while server.status().active_requests and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.status().active_requests == 0


def test_every_refusal_is_logged_once_whichever_check_made_it(server, model_id, caplog):
    import logging

    with caplog.at_level(logging.INFO, logger="app.server"):
        call(server, "POST", "/v1/chat/completions", b"{oops")  # the body
        call(server, "POST", "/v1/chat/completions", chat_body("other-model"))
        call(server, "POST", "/v1/chat/completions", chat_body(model_id, max_tokens=0))
    refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refused) == 3, refused
    assert refused[0].startswith("request refused (400): ")
    assert "not valid JSON" in refused[0] and model_id in refused[1]


def test_conversation_keys_differ_between_runs_of_the_server():
    import subprocess
    import sys

    code = (
        "from app.server.service.conversation_index import ConversationIndex\n"
        "print(ConversationIndex(lambda key: 0).acquire(('a',), 0).key)\n"
    )
    keys = {
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.strip()
        for _ in range(2)
    }
    assert len(keys) == 2 and all(k.startswith("server-") for k in keys), keys
