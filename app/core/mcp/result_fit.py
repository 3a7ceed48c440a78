"""A tool result fits the room the budget leaves, or is cut in the open.

Tool results are where a conversation grows fastest (a fetched page, a file, a search
listing of 10K tokens). A result is counted before it is added; one too large for the
room left is cut at a readable boundary — a paragraph, else a line, else a sentence,
else a word — to what fits, and a note in the result says so to the model (and the
card shows it to the user). Nothing is ever cut silently.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# A cut may give back at most this share of the room to end at a readable boundary.
BOUNDARY_SLACK = 0.2
_BOUNDARIES = ("\n\n", "\n", ". ", " ")


@dataclass(frozen=True)
class FittedResult:
    """A result as it will be given to the model.

    Attributes:
        text: The text given to the model (with the note when cut).
        cut: True when the original did not fit.
        original_tokens: Tokens of the original result.
        kept_tokens: Tokens of the given text, note included.
        note: The note added when cut, else empty.
    """

    text: str
    cut: bool
    original_tokens: int
    kept_tokens: int
    note: str = ""


def cut_note(original_tokens: int, kept_tokens: int) -> str:
    """The words that tell the model (and the user) a result was cut."""
    return (
        f"[Swapless cut this tool result: it was {original_tokens:,} tokens and only "
        f"the first {kept_tokens:,} fit in the memory budget. Ask for a smaller part "
        "if you need the rest.]"
    )


def _prefix_tokens_within(
    text: str, limit: int, count_tokens: Callable[[str], int]
) -> int:
    """The longest character prefix of ``text`` whose token count is within ``limit``.

    Token counts grow with the prefix (a longer text never has fewer tokens), so a
    binary search needs O(log n) counts however long the result is.
    """
    low, high = 0, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if count_tokens(text[:middle]) <= limit:
            low = middle
        else:
            high = middle - 1
    return low


def _readable_end(text: str, end: int) -> int:
    floor = int(end * (1 - BOUNDARY_SLACK))
    for boundary in _BOUNDARIES:
        at = text.rfind(boundary, floor, end)
        if at > 0:
            return at + (1 if boundary == ". " else 0)
    return end


def fit_result(
    text: str, room_tokens: int, count_tokens: Callable[[str], int]
) -> FittedResult:
    """Return the result as it fits in ``room_tokens``.

    Args:
        text: The tool's whole result.
        room_tokens: Tokens the budget leaves for it (the caller reserves the reply's
            and the template's share first).
        count_tokens: Counts tokens with the model's tokenizer.

    Raises:
        ValueError: ``room_tokens`` is negative.
    """
    if room_tokens < 0:
        raise ValueError(f"room_tokens must be >= 0, got {room_tokens}")
    original = count_tokens(text)
    if original <= room_tokens:
        return FittedResult(text, False, original, original)
    note_budget = count_tokens(cut_note(original, room_tokens)) + 2
    room_for_text = max(0, room_tokens - note_budget)
    end = _readable_end(text, _prefix_tokens_within(text, room_for_text, count_tokens))
    kept = text[:end].rstrip()
    kept_tokens = count_tokens(kept)
    note = cut_note(original, kept_tokens)
    given = f"{kept}\n\n{note}" if kept else note
    return FittedResult(given, True, original, count_tokens(given), note)
