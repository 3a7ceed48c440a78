"""Deterministic prompt text of a chosen token length.

Benchmarks need prompts of exact sizes that read like chat (so the tokenizer behaves as
it does on real text) and are the same on every run. Sentences are drawn from a small
vocabulary with a seeded generator; their token counts come from the model's tokenizer.
"""

from __future__ import annotations

import random
from collections.abc import Callable

_SUBJECTS = (
    "The report",
    "Our team",
    "The new cache",
    "A careful reader",
    "The kitchen",
    "This function",
    "The river",
    "My neighbour",
    "The quarterly budget",
    "An old library",
)
_VERBS = (
    "explains",
    "measures",
    "remembers",
    "compares",
    "describes",
    "returns",
    "follows",
    "changes",
)
_OBJECTS = (
    "the cost of every item",
    "how memory grows with each turn",
    "the shortest path home",
    "a list of open questions",
    "the weather in early spring",
    "three numbers and a name",
    "why the test failed twice",
    "the colour of the front door",
)
_TAILS = (
    "before lunch.",
    "in plain words.",
    "without any rounding.",
    "for the second time.",
    "with a short example.",
    "and then stops.",
)


def sentence(rng: random.Random) -> str:
    """Return one pseudo-English sentence."""
    return (
        f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} "
        f"{rng.choice(_TAILS)}"
    )


def filler(tokens: int, count_tokens: Callable[[str], int], seed: int = 0) -> str:
    """Return text of about ``tokens`` tokens (never fewer, at most one sentence more).

    Args:
        tokens: Wanted length.
        count_tokens: Counts tokens with the model's tokenizer.
        seed: Same seed, same text.
    """
    rng = random.Random(seed)
    parts: list[str] = []
    total = 0
    while total < tokens:
        # Per-sentence counts (with the joining space) add up to within a few tokens of
        # the whole; the caller measures the rendered prompt exactly anyway.
        piece = sentence(rng)
        parts.append(piece)
        total += count_tokens(" " + piece)
    return " ".join(parts)
