"""Which older user+reply pairs to keep word for word: the newest, or the most used.

The trim planner keeps the newest messages (`policy.choose_kept`: oldest first out).
Issue #27's third point asks whether keeping instead the pairs that later answers used
most does better at the same kept tokens. The measure here is a cheap lexical proxy
for attention from later answers: a pair scores the rarity (IDF over the conversation)
of each of its words that a *later* reply uses again, per token of the pair, weighted
by its importance (`importance.importance`: facts, decisions, corrections). Pure text:
no model.

It is measured, not used by the trim (`swapless bench --only recall_view`, on the
`recall` part's seeded conversations and on LoCoMo): at equal kept tokens it keeps
more facts referred to again than the newest messages do when recall is off (20 % vs
0 % of 200), but with recall on — the default — the gain is within chance (70 % vs
66 %), so the gate of issue #27 leaves it off and trims keep the newest messages
(figures in docs/measured.md).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from app.core.recall.query import STOPWORDS
from app.core.trim.facts import sentences
from app.core.trim.importance import importance

_WORD = re.compile(r"[^\W_]+")
# Score gained per point of importance, up to `MAX_POINTS` (as recall's ranking).
IMPORTANCE_WEIGHT = 0.15
MAX_POINTS = 8


@dataclass(frozen=True)
class Pair:
    """A user+reply pair (or a lone message) of the history, as the keeper sees it.

    Attributes:
        keys: The caller's keys of its messages, oldest first.
        tokens: Its tokens with template overhead.
        score: How much later replies used it (`reuse_scores`).
    """

    keys: tuple
    tokens: int
    score: float


def words(text: str) -> set[str]:
    """The distinct lowercased words of ``text`` that are not stopwords."""
    return {
        w
        for w in (m.group().lower() for m in _WORD.finditer(text))
        if w not in STOPWORDS
    }


def reuse_scores(groups: Sequence[Sequence[tuple[str, str]]]) -> list[float]:
    """For each group (a pair), the IDF mass of its words a later reply uses again.

    A pair's own reply does not count: only replies after the pair are "later".

    Args:
        groups: The pairs in conversation order, each ``(role, text)`` messages.

    Returns:
        One score per group (0 for one no later reply echoes).
    """
    bags = [[words(text) for _, text in group] for group in groups]
    count = sum(len(group) for group in bags) or 1
    frequency: dict[str, int] = {}
    for group in bags:
        for bag in group:
            for word in bag:
                frequency[word] = frequency.get(word, 0) + 1
    later: set[str] = set()
    scores = [0.0] * len(bags)
    for index in range(len(bags) - 1, -1, -1):
        mine = set().union(*bags[index]) if bags[index] else set()
        scores[index] = sum(math.log(count / frequency[w]) for w in mine & later)
        for (role, _), bag in zip(groups[index], bags[index], strict=True):
            if role == "assistant":
                later |= bag
    return scores


def pairs_with_scores(
    messages: Sequence[tuple[object, str, str, int]],
) -> list[Pair]:
    """Group ``messages`` into user+reply pairs and score each.

    Args:
        messages: ``(key, role, text, tokens)`` in conversation order.
    """
    groups: list[Sequence[tuple[object, str, str, int]]] = []
    index = 0
    while index < len(messages):
        size = 1
        if (
            messages[index][1] == "user"
            and index + 1 < len(messages)
            and messages[index + 1][1] == "assistant"
        ):
            size = 2
        groups.append(messages[index : index + size])
        index += size
    reuse = reuse_scores([[(m[1], m[2]) for m in group] for group in groups])
    pairs: list[Pair] = []
    for group, used in zip(groups, reuse, strict=True):
        tokens = sum(m[3] for m in group)
        points = max(
            (importance(s, m[1]) for m in group for s in sentences(m[2])), default=0
        )
        weight = 1 + IMPORTANCE_WEIGHT * min(points, MAX_POINTS)
        pairs.append(
            Pair(tuple(m[0] for m in group), tokens, used * weight / max(tokens, 1))
        )
    return pairs


def keep_most_used(pairs: Sequence[Pair], budget: int) -> list:
    """The keys to keep within ``budget`` tokens: the newest pair, then the most used.

    The newest pair is always kept (the next message answers it); the rest of the
    budget goes to the highest-scoring pairs that fit, whatever their age.

    Args:
        pairs: The history's pairs in conversation order.
        budget: Tokens the kept pairs may take (the newest-first keep's own total,
            for a comparison at equal kept tokens).

    Returns:
        Keys of the kept messages in conversation order.
    """
    if not pairs:
        return []
    chosen = {len(pairs) - 1}
    used = pairs[-1].tokens
    order = sorted(range(len(pairs) - 1), key=lambda i: (-pairs[i].score, -i))
    for index in order:
        if pairs[index].score <= 0:
            break
        if used + pairs[index].tokens <= budget:
            chosen.add(index)
            used += pairs[index].tokens
    return [key for index in sorted(chosen) for key in pairs[index].keys]
