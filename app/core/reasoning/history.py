"""Line a conversation's cache up with what the model's template renders for it.

After a reply, the cache holds the prompt and every generated token, reasoning
included. The next turn's prompt is the template's rendering of the history, and most
reasoning templates drop earlier turns' reasoning (Qwen3 keeps it only after the last
user question), so the prompt stops matching the cache at the reply and every turn
would prefill the previous answer again. `reasoning_cut` finds the one span to cut out
of the cache so that what remains is exactly a prefix of that rendering: the cache
then equals render(history) and the next turn prefills only the new message. Where the
template keeps the reasoning, the span is empty and nothing is cut.

Pure token arithmetic: the engine does the splice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# Text of the placeholder user turn rendered after the history: the template renders
# the history as it will for the next turn (an answer's reasoning is dropped only
# once a later user message exists).
NEXT_TURN_PLACEHOLDER = "\u2026"


@dataclass(frozen=True)
class Cut:
    """Cache entries to drop so the cache is a prefix of the rendered history.

    Attributes:
        start: First entry dropped (entries before it match the rendering).
        stop: First entry kept after the cut.
        kept: Entries the cache holds after the cut.
    """

    start: int
    stop: int
    kept: int

    @property
    def dropped(self) -> int:
        """Entries removed."""
        return self.stop - self.start


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def reasoning_cut(cached: Sequence[int], rendered: Sequence[int]) -> Cut | None:
    """The span of ``cached`` to drop so the rest is a prefix of ``rendered``.

    Args:
        cached: The token ids the cache holds (prompt + reply).
        rendered: The history's rendering for the next turn (with a placeholder
            user message after the reply).

    Returns:
        The cut keeping the most entries. ``start == stop`` when the cache already
        is a prefix of the rendering (the template keeps the reasoning: nothing is
        cut). ``kept`` may end before the cache does where the reply re-tokenizes
        differently from how it was generated: the entries after it are dropped and
        the next turn prefills them. None when no cut keeps anything after it.
    """
    p = common_prefix(cached, rendered)
    if p == len(cached):
        return Cut(p, p, p)
    rest = rendered[p:]
    if not rest:
        return None
    best: Cut | None = None
    first = rest[0]
    for q in range(p + 1, len(cached)):
        if cached[q] != first:
            continue
        k = common_prefix(cached[q:], rest)
        if best is None or k > best.kept - p:
            best = Cut(p, q, p + k)
            if q + k == len(cached):
                break  # the whole rest of the cache matches: no cut keeps more
    return best
