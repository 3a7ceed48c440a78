"""Recall for server conversations: the real `openai` client against a real server.

A client's history is trimmed by the server (a summary stands for its oldest
messages); a later question that needs a trimmed message gets the original put back
before it, and the response's ``swapless`` object says which client messages those
were (by their index in the request's ``messages``).
"""

from __future__ import annotations

import openai

SYSTEM = "You are Swapless test bot. Always answer briefly."
FACT = "My locker number is 4417 and the locker is in hall Quorvant."


def client_for(server) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=server.status().base_url,
        api_key="not-needed",
        max_retries=0,
        timeout=120,
    )


def filler(i: int) -> str:
    return f"Turn {i}: the blue item {i} costs {i * 3} euros, and the red one less."


def long_history(pairs: int = 14) -> list[dict]:
    """A client's history over the limit of 512: the fact first, then filler turns."""
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": FACT},
        {"role": "assistant", "content": "Noted: locker 4417, in hall Quorvant."},
    ]
    for i in range(1, pairs + 1):
        messages.append({"role": "user", "content": filler(i)})
        messages.append({"role": "assistant", "content": f"Noted: item {i} is blue."})
    return messages


def test_a_trimmed_message_the_question_needs_is_recalled_and_reported(
    serve, model_id, make_preset
):
    server = serve(make_preset(max_context=512))
    client = client_for(server)
    messages = long_history()
    messages.append({"role": "user", "content": "Which locker number is in Quorvant?"})
    asked = client.chat.completions.create(model=model_id, messages=messages)
    extension = asked.model_extra["swapless"]
    # This request was over the limit: the server summarised the oldest messages
    # (the fact among them) and recalled the fact for the question.
    assert extension["trimmed"] and extension["summarized_messages"] >= 2
    recalled = extension["recalled"]
    # The fact pair, whole: the question and the reply the client sent for it.
    assert [r["message_index"] for r in recalled] == [1, 2]
    assert recalled[0] == {
        "message_index": 1,
        "role": "user",
        "text": FACT,
        "cut": False,
    }
    assert recalled[1]["text"] == messages[2]["content"]
    assert asked.usage.prompt_tokens + 16 <= 512

    # The next request resends the question without the block: the server puts the
    # same block back, so the whole earlier prompt is reused from the cache, and what
    # is already in view is not recalled again.
    messages += [
        {"role": "assistant", "content": asked.choices[0].message.content},
        {"role": "user", "content": "And the locker in Quorvant again?"},
    ]
    follow = client.chat.completions.create(model=model_id, messages=messages)
    follow_ext = follow.model_extra["swapless"]
    assert follow_ext["trimmed"] is False
    assert follow_ext["recalled"] == []
    assert follow.usage.prompt_tokens_details.cached_tokens >= asked.usage.prompt_tokens


def test_no_recall_without_a_searchable_word_or_with_recall_off(
    serve, model_id, make_preset
):
    server = serve(make_preset(max_context=512))
    client = client_for(server)
    messages = long_history()
    messages.append({"role": "user", "content": 'What is "OR" AND * ( ?'})
    reply = client.chat.completions.create(model=model_id, messages=messages)
    assert reply.model_extra["swapless"]["recalled"] == []  # no error either

    off = serve(make_preset(max_context=512, recall=False))
    client = client_for(off)
    messages = long_history()
    messages.append({"role": "user", "content": "Which locker number is in Quorvant?"})
    reply = client.chat.completions.create(model=model_id, messages=messages)
    extension = reply.model_extra["swapless"]
    assert extension["summarized_messages"] >= 2 and extension["recalled"] == []
