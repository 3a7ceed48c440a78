"""How much room pinned messages may take, and the words that refuse a pin.

Pinned messages are sent word for word after the summary on every turn, so they share
the part of the limit that is not kept history with the summary and recall. Their
total is held to a quarter of the limit; a pin beyond that is refused when it is set,
never discovered at the next turn.
"""

from __future__ import annotations

PIN_SHARE = 0.25
# Characters per token assumed when a message's count is unknown: fewer than real
# tokenizers average, so the estimate errs towards refusing.
CHARS_PER_TOKEN = 3


def pin_room(limit: int) -> int:
    """Tokens all pinned messages of a conversation of ``limit`` tokens may take."""
    return int(PIN_SHARE * limit)


def estimate_tokens(text: str, known: int | None) -> int:
    """A message's tokens: its stored count, or a cautious estimate from its length."""
    if known is not None and known > 0:
        return known
    return max(1, -(-len(text) // CHARS_PER_TOKEN))


def pin_refusal(
    message_id: int, pinned_tokens: int, new_tokens: int, limit: int
) -> str:
    """Why pinning a message is refused, or an empty string when it fits.

    Args:
        message_id: The message to pin.
        pinned_tokens: Tokens of the conversation's other pinned messages.
        new_tokens: Tokens of the message to pin.
        limit: The conversation's context limit.
    """
    room = pin_room(limit)
    total = pinned_tokens + new_tokens
    if total <= room:
        return ""
    others = (
        f"with the {pinned_tokens:,} tokens already pinned, " if pinned_tokens else ""
    )
    return (
        f"Message {message_id} cannot be pinned: it takes about {new_tokens:,} tokens and, "
        f"{others}pins would need {total:,}, more than the {room:,} tokens (a quarter of "
        f"this conversation's {limit:,}-token limit) that pinned messages may take. "
        "Unpin another message, or raise the conversation's limit."
    )
