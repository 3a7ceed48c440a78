"""The line under a reply: an empty reply is explained, one token is singular."""

from __future__ import annotations

from datetime import UTC, datetime

from app.core.store.records import Message, ReplyStats
from app.core.text.display_numbers import message_footer


def _reply(content: str, tokens: int) -> Message:
    return Message(
        id=2,
        conversation_id=1,
        role="assistant",
        content=content,
        created_at=datetime(2026, 12, 2, tzinfo=UTC),
        token_count=tokens,
        state="complete",
        stats=ReplyStats(generated_tokens=tokens, tokens_per_s=12.0),
        summary_id=None,
        error=None,
    )


def test_an_empty_reply_says_the_model_ended_at_once():
    footer = message_footer(_reply("", 1))
    assert footer == "No text: the model ended its reply at once · 12.0 tok/s · 1 token"


def test_token_counts_are_worded_properly():
    assert message_footer(_reply("Hi there", 2)).endswith("· 2 tokens")
    assert "1 token" in message_footer(_reply("Hi", 1))
    assert "1 tokens" not in message_footer(_reply("Hi", 1))
