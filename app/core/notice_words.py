"""What the window says about trims, summaries and documents, in plain words.

The core's own records carry the technical detail (cache method, milliseconds, why a
splice fell back to a rebuild, the mode choice with every limit); that detail belongs in
the log and in tooltips. The sentences here are what a user reads: what happened, to
what, and what to do about it, with the few figures that mean something to them.
"""

from __future__ import annotations

from app.core.text.display_numbers import format_bytes, format_count

MODEL = "model"
EXTRACTIVE = "extractive"


def messages_noun(count: int) -> str:
    """``1 earlier message`` / ``3 earlier messages``."""
    return f"{count} earlier {'message' if count == 1 else 'messages'}"


def summary_origin(method: str, preset_summary_mode: str, random_weights: bool) -> str:
    """How a summary was written, and why the model did not write it.

    Args:
        method: The stored summary's method (``model`` or ``extractive``).
        preset_summary_mode: The conversation's preset ``summary_mode``.
        random_weights: The conversation's model has random weights (the demo).

    Returns:
        A phrase such as ``written by the model`` or ``picked from the messages: the
        preset asks for extractive summaries``.
    """
    if method == MODEL:
        return "written by the model"
    picked = "picked from the messages (extractive)"
    if preset_summary_mode == EXTRACTIVE:
        return f"{picked}: this conversation's preset asks for that"
    if random_weights:
        return f"{picked}: the demo model's own summary would be noise"
    return (
        f"{picked}: the model's summary failed, came back empty, or was unusable "
        "(repeated text, or no word of the conversation)"
    )


def trim_card_title(
    count: int,
    cause: str | None = None,
    limit_tokens: int | None = None,
    trim_at_tokens: int | None = None,
) -> str:
    """The heading of a trim card: what was summarised, and what made it happen.

    Args:
        count: Messages the summary stands for.
        cause: The stored cause (``limit``, ``pressure``, ``critical``), or None for a
            summary written before Swapless recorded it.
        limit_tokens: The conversation's limit at the trim, if recorded.
        trim_at_tokens: Where the trim was due, if recorded.

    Returns:
        E.g. ``6 earlier messages summarised to stay within the limit of 4,096 tokens``.
    """
    what = f"{messages_noun(count)} summarised"
    if cause == "critical":
        return f"{what} to free memory: memory pressure was critical"
    if cause == "pressure" and limit_tokens and trim_at_tokens:
        return (
            f"{what} early, at {format_count(trim_at_tokens)} of "
            f"{format_count(limit_tokens)} tokens, because memory was under pressure"
        )
    if cause == "pressure":
        return f"{what} early, because memory was under pressure"
    if limit_tokens:
        return f"{what} to stay within the limit of {format_count(limit_tokens)} tokens"
    return f"{what} to keep the context within its limit"


def trim_notice(dropped_messages: int, summary_method: str) -> str:
    """The notice after a trim (the card in the chat shows the summary).

    Args:
        dropped_messages: Messages this trim newly summarised (the card counts every
            message its summary stands for, earlier trims' included).
        summary_method: ``model`` or ``extractive``.
    """
    who = "the model" if summary_method == MODEL else "Swapless"
    return (
        f"{messages_noun(dropped_messages).capitalize()} went into the summary at the top "
        f"of the chat (written by {who}) to keep the conversation within its limit."
    )


def document_started_notice(name: str, event) -> str:
    """How a document is being read (``event``: a long-document `RunStarted`)."""
    size = f"{format_count(event.document_tokens)} tokens"
    if event.resumed_from:
        return (
            f"Continuing {name} at segment {event.resumed_from + 1} of "
            f"{event.segments}: the segments read before were kept."
        )
    if event.mode == "segments":
        return (
            f"{name} is long ({size}), so Swapless reads it in {event.segments} "
            "segments and keeps only notes of each: the KV cache stays under "
            f"{format_bytes(event.kv_bytes_limit)} however long the document is."
        )
    return f"Reading {name} whole ({size}): it fits in the context."


def document_stopped_notice(event) -> str:
    """The notice after a stopped reading (``event``: a `RunFinished`, cancelled)."""
    if event.stopped_whole:
        return (
            "Stopped the whole reading; nothing of it could be kept. The card above "
            "the message box can read it in segments, keeping notes as it goes."
        )
    return (
        f"Stopped after {event.next_segment} of {event.segments} segments; their "
        "notes are kept. Resume on the card above the message box (also after a "
        "restart) to continue at the next one."
    )
