"""A reply cut at max_tokens inside its reasoning: marked, never an empty answer.

The tiny thinking model with DeepSeek-R1-Distill's template opens its reasoning in the
prompt; with no thinking budget and a few tokens of max_tokens every reply ends inside
the thought. The real `openai` client must see the thought in ``reasoning_content``, an
empty answer, ``finish_reason: length`` and ``swapless.reasoning_truncated`` — the mark
a client reads instead of taking the empty content as the model's answer.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.engine.engine import Engine
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


def test_a_reply_cut_inside_reasoning_is_marked(serve, make_preset):
    server = serve(make_preset(thinking_budget=0, max_tokens=4))
    client = client_for(server)
    model = server.status().model
    messages = [{"role": "user", "content": "Why is the sky blue?"}]
    reply = client.chat.completions.create(model=model, messages=messages)
    choice = reply.choices[0]
    assert choice.finish_reason == "length"
    assert choice.message.model_extra["reasoning_content"]
    assert not choice.message.content
    assert reply.model_extra["swapless"]["reasoning_truncated"] is True
    # A reply that does answer is not marked.
    server.stop()
    server = serve(make_preset(thinking_budget=3, max_tokens=8))
    reply = client_for(server).chat.completions.create(model=model, messages=messages)
    assert reply.model_extra["swapless"]["reasoning_truncated"] is False
    assert reply.choices[0].message.content
