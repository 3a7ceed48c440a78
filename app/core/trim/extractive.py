"""A summary made without calling the model: deterministic, bounded, always available.

Used for the demo model (whose own summaries would be noise), for the ``extractive``
summary mode, and as the fallback when a model summary fails. It keeps the opening
sentence of every dropped message, newest messages first when space runs out, inside a
token budget measured with the model's own tokenizer.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_MAX_SENTENCE_CHARS = 240
HEADER = "Summary of the earlier conversation:"


def first_sentence(text: str) -> str:
    """Return the first sentence of ``text``, whitespace folded, at most ~240 chars."""
    folded = " ".join(text.split())
    sentence = _SENTENCE_END.split(folded, maxsplit=1)[0] if folded else ""
    if len(sentence) > _MAX_SENTENCE_CHARS:
        cut = sentence[:_MAX_SENTENCE_CHARS].rsplit(" ", 1)[0]
        sentence = cut + "…"
    return sentence


def extractive_summary(
    messages: list[tuple[str, str]],
    max_tokens: int,
    count_tokens: Callable[[str], int],
    previous_summary: str = "",
) -> str:
    """Summarise dropped messages within ``max_tokens``.

    Args:
        messages: ``(role, content)`` pairs, oldest first.
        max_tokens: Upper bound on the summary's tokens.
        count_tokens: Counts the tokens of a text with the model's tokenizer.
        previous_summary: An earlier summary being folded into this one.

    Returns:
        The summary text (only the header when nothing fits).
    """
    lines = []
    if previous_summary:
        earlier = previous_summary.removeprefix(HEADER).strip()
        if earlier:
            lines.append(f"- Before that: {first_sentence(earlier)}")
    for role, content in messages:
        sentence = first_sentence(content)
        if sentence:
            who = "User" if role == "user" else "Assistant"
            lines.append(f"- {who}: {sentence}")
    # Drop the oldest lines first until the text fits: recent context matters most.
    while lines:
        text = "\n".join([HEADER, *lines])
        if count_tokens(text) <= max_tokens:
            return text
        lines.pop(0)
    return HEADER
