"""A reasoning model through the server: the real `openai` client sees reasoning_content.

The tiny thinking model (random weights) with the DeepSeek-R1-Distill template opens
its reasoning in the prompt, and a thinking budget of 5 tokens makes Swapless end it:
every reply has both kinds of text, and they must arrive in their own fields.
"""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from app.core.engine.engine import Engine
from app.server.openai_chat.openai_request import parse_chat_request
from tests.server.test_openai_client import client_for

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "templates"


@pytest.fixture(scope="module")
def engine(thinking_model_dir):
    engine = Engine()
    engine.load(
        thinking_model_dir((TEMPLATES / "deepseek-r1-distill.jinja").read_text())
    )
    yield engine
    engine.shutdown()


def test_reasoning_arrives_in_its_own_field(serve, make_preset, engine):
    server = serve(make_preset(thinking_budget=5, max_tokens=14))
    client = client_for(server)
    model = server.status().model
    messages = [{"role": "user", "content": "Why is the sky blue?"}]
    reply = client.chat.completions.create(model=model, messages=messages)
    message = reply.choices[0].message
    reasoning = message.model_extra["reasoning_content"]
    assert reasoning and reasoning not in (message.content or "")
    assert "</think>" not in (message.content or "")
    stream = client.chat.completions.create(model=model, messages=messages, stream=True)
    thought, answer = [], []
    for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        extra = delta.model_extra or {}
        if extra.get("reasoning_content"):
            assert not answer  # thoughts come first, never after the answer began
            thought.append(extra["reasoning_content"])
        if delta.content:
            answer.append(delta.content)
    assert "".join(thought) == reasoning and "".join(answer) == message.content


def test_reasoning_sent_back_is_understood_in_every_shape():
    def assistant(**fields):
        body = {
            "model": "m",
            "messages": [
                {"role": "user", "content": "q"},
                {"role": "assistant", **fields},
                {"role": "user", "content": "next"},
            ],
        }
        import json

        return parse_chat_request(json.dumps(body).encode()).messages[1].as_dict()

    expected = {"role": "assistant", "content": "A.", "reasoning_content": "Hmm."}
    assert assistant(content="A.", reasoning_content="Hmm.") == expected
    assert assistant(content="A.", reasoning="Hmm.") == expected
    assert assistant(content="<think>\nHmm.\n</think>\n\nA.") == expected
    # A user typing <think> is plain text.
    body = (
        b'{"model": "m", "messages": [{"role": "user", "content": "<think>x</think>"}]}'
    )
    assert parse_chat_request(body).messages[0].as_dict() == {
        "role": "user",
        "content": "<think>x</think>",
    }


def test_a_bad_reasoning_field_or_effort_is_a_400(serve, make_preset, engine):
    server = serve(make_preset())
    client = client_for(server)
    model = server.status().model
    with pytest.raises(openai.BadRequestError, match="reasoning_content"):
        client.chat.completions.create(
            model=model,
            messages=[
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": "a", "reasoning_content": 3},
                {"role": "user", "content": "q2"},
            ],
        )
    with pytest.raises(openai.BadRequestError, match="reasoning_effort"):
        client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "q"}],
            extra_body={"reasoning_effort": "max"},
        )
