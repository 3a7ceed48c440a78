"""Deterministic text that reads like chat: prompts of a chosen token length, long
Markdown replies.

Benchmarks need prompts of exact sizes that read like chat (so the tokenizer behaves as
it does on real text) and are the same on every run; the window's checks and the
Markdown tests need long replies of every block kind. Sentences are drawn from a small
vocabulary with a seeded generator; their token counts come from the model's tokenizer.
It lives in core (not in the bench) because the window's own checks use it too.
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


_CODE = (
    (
        "python",
        "def step_{n}(tokens, limit={n}):",
        "    kept = tokens[-limit:]",
        "    return kept",
    ),
    (
        "bash",
        "# step {n}",
        "pip install --upgrade mlx-lm=={n}.0",
        "swapless run --preset chat",
    ),
    (
        "json",
        "{{",
        '  "preset": "chat", "kv_bits": {n},',
        '  "max_context": 8192',
        "}}",
    ),
)


def long_markdown_reply(chars: int, seed: int = 0) -> str:
    """A Markdown reply of at least ``chars`` characters, like a long model answer.

    Headings, paragraphs with inline markup and links, bullet and numbered lists, fenced
    code, tables and quotes, drawn with a seeded generator (same seed, same text).
    """
    rng = random.Random(seed)
    parts: list[str] = []
    size = 0
    section = 0
    while size < chars:
        kind = rng.random()
        if kind < 0.08:
            section += 1
            part = f"## {section}. {sentence(rng).rstrip('.')}"
        elif kind < 0.45:
            words = " ".join(sentence(rng) for _ in range(rng.randint(2, 5))).split()
            for _ in range(3):
                i = rng.randrange(len(words))
                words[i] = rng.choice(
                    (f"**{words[i]}**", f"`{words[i]}`", f"*{words[i]}*")
                )
            words.append(f"See [the notes](https://example.com/notes/{section}).")
            part = " ".join(words)
        elif kind < 0.62:
            marker = "-" if rng.random() < 0.6 else None
            part = "\n".join(
                f"{marker or f'{i + 1}.'} {sentence(rng)}"
                for i in range(rng.randint(3, 8))
            )
        elif kind < 0.78:
            language, *lines = rng.choice(_CODE)
            body = "\n".join(
                line.format(n=rng.randint(1, 99))
                for _ in range(rng.randint(2, 8))
                for line in lines
            )
            part = f"```{language}\n{body}\n```"
        elif kind < 0.9:
            rows = "\n".join(
                f"| {sentence(rng)[:24]} | {rng.randint(1, 64)} | {rng.random():.2f} |"
                for _ in range(rng.randint(3, 8))
            )
            part = f"| Step | Tokens | Share |\n|:--|--:|--:|\n{rows}"
        else:
            part = "\n".join(f"> {sentence(rng)}" for _ in range(rng.randint(1, 3)))
        parts.append(part)
        size += len(part) + 2
    return "\n\n".join(parts) + "\n"
