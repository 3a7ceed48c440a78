"""Pin or unpin a stored message: the check and the words, for the CLI and the app.

A pinned message stays word for word after the summary once its turn is trimmed
(`ConversationSession.model_messages`). Pins share the part of the limit that is not
kept history, so their total is held to `app.core.trim.pins.pin_room`; a pin past it
is refused now, in words, rather than failing a later turn.
"""

from __future__ import annotations

from collections.abc import Callable

from app.core.errors import InputError, SettingsError
from app.core.presets.presets import get_preset, preset_from_dict
from app.core.store import Store
from app.core.trim.pins import estimate_tokens, pin_refusal


def pin_message(
    store: Store,
    message_id: int,
    pinned: bool = True,
    count_tokens: Callable[[str], int] | None = None,
) -> str:
    """Pin (or unpin) a message and return a sentence saying what that means.

    Args:
        store: The open store.
        message_id: The message.
        pinned: False unpins it.
        count_tokens: The model's tokenizer count, when a model is loaded (else the
            stored counts, or a cautious estimate from the length).

    Raises:
        NotFoundError: No message has that id (it was deleted).
        InputError: The pin cannot fit the conversation's limit, or the message is
            not a finished user message or reply.
    """
    message = store.get_message(message_id)
    if pinned:
        conversation = store.get_conversation(message.conversation_id)
        try:
            preset = preset_from_dict(
                conversation.preset or "chat", conversation.settings
            )
        except SettingsError:
            preset = get_preset("chat")

        def tokens(content: str, known: int | None) -> int:
            if count_tokens is not None:
                return count_tokens(content)
            return estimate_tokens(content, known)

        others = sum(
            tokens(m.content, m.token_count)
            for m in store.pinned_messages(message.conversation_id)
            if m.id != message.id
        )
        refusal = pin_refusal(
            message.id,
            others,
            tokens(message.content, message.token_count),
            preset.max_context,
        )
        if refusal:
            raise InputError(refusal)
    try:
        store.set_pinned(message.id, pinned)
    except ValueError as exc:
        raise InputError(str(exc)) from exc
    if not pinned:
        return f"Message {message.id} is no longer pinned."
    if message.trimmed:
        return (
            f"Pinned message {message.id}: it was summarised, and from the next turn "
            "it is sent word for word after the summary."
        )
    return (
        f"Pinned message {message.id}: when it is trimmed it stays word for word "
        "after the summary."
    )
