"""A summary made without calling the model: deterministic, bounded, always available.

Used for the demo model (whose own summaries would be noise), for the ``extractive``
summary mode, and as the fallback when a model summary fails. It keeps the opening
sentence of every dropped message, newest messages first when space runs out, inside a
token budget measured with the model's own tokenizer. It always says something: when
not even one whole sentence fits, the newest one is cut to the words that do, and
messages without any text are counted rather than left out.
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
        The summary text: the header and at least one line (a line cut to the words
        that fit when the budget is smaller than any whole line).
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
    if not lines:
        count = len(messages)
        noun = "message" if count == 1 else "messages"
        lines.append(f"- {count} earlier {noun} without any text.")
    # Drop the oldest lines first until the text fits: recent context matters most.
    while len(lines) > 1:
        text = "\n".join([HEADER, *lines])
        if count_tokens(text) <= max_tokens:
            return text
        lines.pop(0)
    return _cut_to_fit(lines[0], max_tokens, count_tokens)


def _cut_to_fit(line: str, max_tokens: int, count_tokens: Callable[[str], int]) -> str:
    """The header and as many words of ``line`` as fit (at least its first words)."""
    words = line.split(" ")

    def text(n: int) -> str:
        cut = " ".join(words[:n])
        return f"{HEADER}\n{cut}" + ("…" if n < len(words) else "")

    if count_tokens(text(len(words))) <= max_tokens:
        return text(len(words))
    # "- User: first" is the shortest line that still says something.
    low, high = min(3, len(words)), len(words)
    while low < high:
        middle = (low + high + 1) // 2
        if count_tokens(text(middle)) <= max_tokens:
            low = middle
        else:
            high = middle - 1
    return text(low)
