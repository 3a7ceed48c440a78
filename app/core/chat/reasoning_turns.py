"""A reasoning model's turns: its thoughts in the history, and out of the cache after.

`with_reasoning` gives each stored reply's reasoning to the model as
``reasoning_content`` (the template decides what it keeps). `align_cache` runs after
each reply: it renders the history as the next turn will (with a placeholder user
message, since templates drop a reply's reasoning once a later question exists) and
asks the engine to cut what the template drops out of the KV cache
(`app.core.reasoning.history`). A model without reasoning skips both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from app.core.chat.turn_report import TurnReport
from app.core.reasoning.history import NEXT_TURN_PLACEHOLDER
from app.core.reasoning.thinking import ThinkingSettings
from app.core.store.records import Message


def with_reasoning(messages: list[dict], stored: Sequence[Message]) -> list[dict]:
    """Add ``reasoning_content`` to the assistant messages whose reply had reasoning.

    Args:
        messages: Built by `build_messages`; its last ``len(stored)`` history
            entries (before an optional new user message) are ``stored``'s.
        stored: The stored messages in the model's context, in order.
    """
    thoughts = [m.reasoning for m in stored if m.role == "assistant"]
    if not any(thoughts):
        return messages
    replies = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    for index, reasoning in zip(replies[-len(thoughts) :], thoughts, strict=False):
        if reasoning:
            messages[index] = {**messages[index], "reasoning_content": reasoning}
    return messages


def reply_message(report: TurnReport) -> dict[str, Any]:
    """The reply as a history message (with its reasoning, if any)."""
    message: dict[str, Any] = {"role": "assistant", "content": report.reply}
    if report.reasoning:
        message["reasoning_content"] = report.reasoning
    return message


def align_cache(
    engine: Any,
    key: str,
    messages: list[dict],
    report: TurnReport,
    thinking: ThinkingSettings,
) -> TurnReport:
    """Cut the finished reply's reasoning out of the conversation's cache.

    Args:
        engine: The engine (`Engine.render`, `Engine.cut_reasoning`).
        key: The conversation's cache key.
        messages: The messages the reply answered.
        report: The turn's report (its reply and reasoning).
        thinking: The thinking settings the turn used (they shape the rendering).

    Returns:
        The report with what the cut did (unchanged for a model that does not
        reason, or after a cancelled or failed turn).
    """
    if not engine.tokenizer.reasoning.has_reasoning:
        return report
    if report.finish_reason == "cancelled":
        return report
    history = [
        *messages,
        reply_message(report),
        {"role": "user", "content": NEXT_TURN_PLACEHOLDER},
    ]
    rendered = engine.render(history, False, thinking=thinking)
    cut = engine.cut_reasoning(key, rendered)
    if cut is None:
        return report
    return replace(
        report,
        reasoning_cut_tokens=cut.dropped,
        reasoning_cut_method=cut.method,
        reasoning_cut_note=cut.reason,
        reasoning_cut_ms=cut.seconds * 1000,
        context_tokens=cut.kept,
        kv_bytes=engine.cache_state(key).kv_bytes,
    )
