"""Reasoning a client sends to a model that does not reason: ignored, and said so.

The tiny model (random weights, a ChatML template) has no reasoning markers. A client
that sends an earlier assistant turn back with its thoughts (in ``reasoning_content``,
``reasoning`` or as ``<think>`` in ``content``) gets a normal reply, and the
``swapless`` object notes that the reasoning was ignored; without reasoning sent there
is no note. Through the real `openai` client on loopback.
"""

from __future__ import annotations

import pytest

from tests.server.test_openai_client import client_for

QUESTION = {"role": "user", "content": "What is two plus two?"}
FOLLOW_UP = {"role": "user", "content": "And three plus three?"}


@pytest.mark.parametrize(
    "reply",
    [
        {"role": "assistant", "content": "Four.", "reasoning_content": "2 + 2 = 4"},
        {"role": "assistant", "content": "Four.", "reasoning": "2 + 2 = 4"},
        {"role": "assistant", "content": "<think>\n2 + 2 = 4\n</think>\n\nFour."},
    ],
    ids=["reasoning_content", "reasoning", "think-in-content"],
)
def test_reasoning_for_a_model_without_it_is_ignored_with_a_note(serve, reply):
    server = serve()
    client = client_for(server)
    model = server.status().model
    answer = client.chat.completions.create(
        model=model, messages=[QUESTION, reply, FOLLOW_UP]
    )
    note = answer.model_extra["swapless"]["reasoning_note"]
    assert "1 assistant message was ignored" in note
    assert "does not reason" in note
    assert answer.choices[0].message.model_extra.get("reasoning_content") is None
    # Streamed, the last chunk's swapless object says the same.
    stream = client.chat.completions.create(
        model=model, messages=[QUESTION, reply, FOLLOW_UP], stream=True
    )
    extras = [c.model_extra.get("swapless") for c in stream]
    assert any(e and e.get("reasoning_note") == note for e in extras)


def test_no_reasoning_sent_no_note(serve):
    server = serve()
    client = client_for(server)
    answer = client.chat.completions.create(
        model=server.status().model,
        messages=[QUESTION, {"role": "assistant", "content": "Four."}, FOLLOW_UP],
    )
    assert "reasoning_note" not in answer.model_extra["swapless"]
