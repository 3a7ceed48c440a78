"""Token layouts of probe conversations: trim coordinates and answer spans."""

from __future__ import annotations

import pytest

from app.core.chat.model_messages import SEPARATE
from app.core.quality import conversation_layout as layout


def encode(text: str) -> list[int]:
    """One id per character: layouts are then easy to check by hand."""
    return [ord(c) for c in text]


def render(messages: list[dict], add_generation_prompt: bool) -> list[int]:
    text = "".join(f"<{m['role']}>{m['content']}</>" for m in messages)
    if add_generation_prompt:
        text += "<assistant>"
    return encode(text)


def decode(ids: list[int]) -> str:
    return "".join(chr(i) for i in ids)


def test_trim_layout_replaces_the_dropped_turns_by_the_summary():
    dropped = [("user", "old question"), ("assistant", "old answer")]
    kept = [("user", "new question"), ("assistant", "new answer")]
    trim = layout.trim_layout(render, "sys", dropped, kept, "short", SEPARATE)
    untrimmed = decode(trim.untrimmed_ids)
    trimmed = decode(trim.trimmed_ids)
    kept_text = "<user>new question</><assistant>new answer</>"
    assert untrimmed.endswith(kept_text) and trimmed.endswith(kept_text)
    assert decode(trim.untrimmed_ids[: trim.keep]).startswith("<system>sys</>")
    assert decode(trim.untrimmed_ids[trim.drop_until :]) == kept_text
    spliced = (
        trim.untrimmed_ids[: trim.keep]
        + trim.insert_ids
        + trim.untrimmed_ids[trim.drop_until :]
    )
    assert spliced == trim.trimmed_ids
    assert "short" in decode(trim.insert_ids)
    assert trim.kept_tokens == len(kept_text)


def test_continuation_splits_the_question_from_the_reply():
    messages = [{"role": "user", "content": "hi"}]
    question = [
        {"role": "user", "content": "What is it?"},
        {"role": "assistant", "content": "It is 42."},
    ]
    asked, reply = layout.continuation(render, messages, question)
    assert decode(asked) == "<user>What is it?</><assistant>"
    assert decode(reply) == "It is 42.</>"


def test_answer_span_points_at_the_answer_tokens():
    reply = "It is 42."
    ids = encode(reply + "</>")
    start, end = layout.answer_span(encode, ids, reply, "42")
    assert decode(ids[start:end]) == " 42"  # the space goes with the answer
    with pytest.raises(ValueError):
        layout.answer_span(encode, ids, reply, "43")


def test_a_template_that_is_not_additive_is_refused():
    def odd_render(messages, add_generation_prompt):
        return encode("|".join(m["content"] for m in reversed(messages)))

    with pytest.raises(layout.NotAdditive):
        layout.trim_layout(
            odd_render, "s", [("user", "a")], [("user", "b")], "x", SEPARATE
        )


def test_a_reasoning_templates_empty_thinking_block_is_part_of_the_question(
    thinking_model_dir,
):
    # Qwen3's layout renders a final reply as "<think>\n\n</think>\n\n" + text, and
    # drops that block once a question follows: the question starts where the two
    # renderings part, and the reply is scored from its own first token.
    from mlx_lm.tokenizer_utils import load as load_tokenizer

    from app.core.engine.quality.quality_scoring import ChatRenderer

    chat = ChatRenderer(load_tokenizer(thinking_model_dir()))
    messages = [
        {"role": "user", "content": "My locker number is 42."},
        {"role": "assistant", "content": "Noted: your locker number is 42."},
    ]
    turns = (
        {"role": "user", "content": "What is my locker number?"},
        {"role": "assistant", "content": "Your locker number is 42."},
    )
    question = chat.question(messages, turns, "42")
    whole = chat.render([*messages, *turns], False)
    assert whole[: len(question.lead_ids)] == question.lead_ids
    assert chat.decode(question.answer_ids).strip() == "42"
    assert chat.decode(question.reply_ids).startswith("Your locker")
    assert "<think>" in chat.decode(question.prompt_ids[-6:])


def test_a_trim_on_a_reasoning_template_splices_to_the_trimmed_context(
    thinking_model_dir,
):
    # The dropped turns end with a reply: rendered alone, Qwen3's layout gives it an
    # empty thinking block it does not have once the kept turns follow. The cut is
    # where both contexts end alike, and splicing there gives the trimmed context.
    from mlx_lm.tokenizer_utils import load as load_tokenizer

    from app.core.engine.quality.quality_scoring import ChatRenderer

    chat = ChatRenderer(load_tokenizer(thinking_model_dir()))
    dropped = [("user", "My locker is 42."), ("assistant", "Noted: locker 42.")]
    kept = [("user", "My bike is red."), ("assistant", "Noted: a red bike.")]
    trim = layout.trim_layout(chat.render, "sys", dropped, kept, "Locker 42.", SEPARATE)
    spliced = (
        trim.untrimmed_ids[: trim.keep]
        + trim.insert_ids
        + trim.untrimmed_ids[trim.drop_until :]
    )
    assert spliced == trim.trimmed_ids
    assert chat.decode(trim.untrimmed_ids[trim.drop_until :]).count("locker") == 0
    assert "red bike" in chat.decode(trim.untrimmed_ids[trim.drop_until :])
