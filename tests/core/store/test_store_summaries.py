"""Summaries cover exactly their span, fold older ones, and shape the model context."""

from __future__ import annotations

import pytest

from app.core.store import Message, Summary


@pytest.fixture
def ten_messages(store, conversation_id) -> list[int]:
    roles = ["user", "assistant"] * 5
    return [
        store.add_message(conversation_id, role, f"message {i}", token_count=10)
        for i, role in enumerate(roles)
    ]


def _shape(entries) -> list[str]:
    return [
        f"S:{e.content}" if isinstance(e, Summary) else f"M:{e.content}"
        for e in entries
    ]


def test_summary_covers_exactly_its_span(store, conversation_id, ten_messages):
    other = store.create_conversation("other")
    other_message = store.add_message(other, "user", "not mine")
    summary_id = store.add_summary(
        conversation_id, ten_messages[0], ten_messages[3], "first four", 12, "model"
    )
    covered = [
        m.id for m in store.messages(conversation_id, include_trimmed=True) if m.trimmed
    ]
    assert covered == ten_messages[:4]
    assert all(
        store.get_message(mid).summary_id == summary_id for mid in ten_messages[:4]
    )
    assert store.get_message(other_message).summary_id is None
    # The default listing leaves trimmed messages out; they stay readable on request.
    assert [m.id for m in store.messages(conversation_id)] == ten_messages[4:]
    assert len(store.messages(conversation_id, include_trimmed=True)) == 10

    summary = store.get_summary(summary_id)
    assert (summary.first_message_id, summary.last_message_id) == (
        ten_messages[0],
        ten_messages[3],
    )
    assert (summary.content, summary.token_count, summary.method) == (
        "first four",
        12,
        "model",
    )
    assert summary.active


def test_context_is_system_prompt_summary_and_uncovered_messages(
    store, conversation_id, ten_messages
):
    store.add_summary(
        conversation_id, ten_messages[0], ten_messages[5], "early talk", 9, "model"
    )
    context = store.context_for_model(conversation_id)
    assert context.system_prompt == "Be brief."
    assert _shape(context.entries) == ["S:early talk"] + [
        f"M:message {i}" for i in range(6, 10)
    ]
    assert len(context.summaries) == 1
    assert all(isinstance(m, Message) for m in context.messages)


def test_later_summary_folds_in_the_earlier_one(store, conversation_id, ten_messages):
    first = store.add_summary(
        conversation_id, ten_messages[0], ten_messages[3], "A", 5, "model"
    )
    second = store.add_summary(
        conversation_id, ten_messages[0], ten_messages[7], "A and more", 8, "extractive"
    )
    assert store.get_summary(first).superseded_by == second
    assert not store.get_summary(first).active
    assert [s.id for s in store.summaries(conversation_id)] == [second]
    assert [
        s.id for s in store.summaries(conversation_id, include_superseded=True)
    ] == [
        first,
        second,
    ]
    assert {store.get_message(mid).summary_id for mid in ten_messages[:8]} == {second}
    context = store.context_for_model(conversation_id)
    assert _shape(context.entries) == ["S:A and more", "M:message 8", "M:message 9"]


def test_overlapping_summary_widens_to_keep_every_message_covered(
    store, conversation_id, ten_messages
):
    first = store.add_summary(
        conversation_id, ten_messages[0], ten_messages[3], "A", 5, "model"
    )
    second = store.add_summary(
        conversation_id, ten_messages[2], ten_messages[6], "B", 5, "model"
    )
    summary = store.get_summary(second)
    assert (summary.first_message_id, summary.last_message_id) == (
        ten_messages[0],
        ten_messages[6],
    )
    assert store.get_summary(first).superseded_by == second
    assert _shape(store.context_for_model(conversation_id).entries) == [
        "S:B",
        "M:message 7",
        "M:message 8",
        "M:message 9",
    ]


def test_separate_summaries_stay_in_conversation_order(
    store, conversation_id, ten_messages
):
    store.add_summary(
        conversation_id, ten_messages[4], ten_messages[5], "middle", 3, "model"
    )
    store.add_summary(
        conversation_id, ten_messages[0], ten_messages[1], "start", 3, "model"
    )
    context = store.context_for_model(conversation_id)
    assert _shape(context.entries) == [
        "S:start",
        "M:message 2",
        "M:message 3",
        "S:middle",
        "M:message 6",
        "M:message 7",
        "M:message 8",
        "M:message 9",
    ]


def test_context_leaves_out_failed_and_generating_replies(store, conversation_id):
    store.add_message(conversation_id, "user", "question")
    failed = store.begin_reply(conversation_id)
    store.fail_reply(failed, "garbage", "boom")
    store.begin_reply(conversation_id)
    assert _shape(store.context_for_model(conversation_id).entries) == ["M:question"]


def test_invalid_summaries_are_rejected(store, conversation_id, ten_messages):
    other = store.create_conversation("other")
    foreign = store.add_message(other, "user", "elsewhere")
    with pytest.raises(ValueError, match="method must be one of model, extractive"):
        store.add_summary(
            conversation_id, ten_messages[0], ten_messages[1], "x", 1, "magic"
        )
    with pytest.raises(ValueError, match="is after"):
        store.add_summary(
            conversation_id, ten_messages[3], ten_messages[1], "x", 1, "model"
        )
    with pytest.raises(ValueError, match="not in conversation"):
        store.add_summary(conversation_id, ten_messages[0], foreign, "x", 1, "model")
    with pytest.raises(ValueError, match="cause must be one of limit, pressure"):
        store.add_summary(
            conversation_id,
            ten_messages[0],
            ten_messages[1],
            "x",
            1,
            "model",
            cause="?",
        )
    generating = store.begin_reply(conversation_id)
    with pytest.raises(ValueError, match="still generating"):
        store.add_summary(conversation_id, ten_messages[0], generating, "x", 1, "model")
    # Nothing of the rejected attempts was written.
    assert store.summaries(conversation_id, include_superseded=True) == []
    assert not any(
        m.trimmed for m in store.messages(conversation_id, include_trimmed=True)
    )


def test_a_summary_keeps_why_its_trim_happened(store, conversation_id, ten_messages):
    plain = store.add_summary(
        conversation_id, ten_messages[0], ten_messages[1], "older", 4, "model"
    )
    assert store.get_summary(plain).cause is None
    early = store.add_summary(
        conversation_id,
        ten_messages[0],
        ten_messages[3],
        "early",
        4,
        "extractive",
        cause="pressure",
        limit_tokens=2048,
        trim_at_tokens=1536,
    )
    (active,) = store.summaries(conversation_id)
    assert active.id == early
    assert (active.cause, active.limit_tokens, active.trim_at_tokens) == (
        "pressure",
        2048,
        1536,
    )
