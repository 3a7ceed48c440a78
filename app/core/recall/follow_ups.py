"""A reply that matched lends relevance to the pair that goes on with it.

A reply often ends by asking ("How was the camping trip? Anything fun?"), and the
next user message answers without repeating the words ("It was an awesome time! We
explored nature and roasted marshmallows…"); or the user asks about what the reply
said ("I took the kids camping." → "How was it?") and the reply after that answers.
BM25 finds the words, not the answer, and a user+reply pair holds a reply with the
question *before* it, never what follows. So a candidate pair whose reply holds a
word of the query lends `FOLLOW_SHARE` of its relevance to the pair right after it
(added to that pair's own when it matched too) when the talk goes on there — the
reply or the next user message asks something — and the reply's words count for that
pair's coverage of the query (`ranking.ranked`). A reply that only states ("Noted:
locker 4417.") followed by a new subject lends nothing.

Measured on LoCoMo (docs/measured.md, "Evidence in the model's view"): every evidence
turn in view at 2K 58 → 63.6 % with a share of 0.8 (0.3: 61 %, 0.5: 62 %, 1.0: 63 %,
1.5: 58 %: the answers crowd out the matches; lending on a question in the reply
alone: 62.1 %, on any matching reply: 63.5 %), 4K 64 → 70 %, 8K 67 → 72 %.
"""

from __future__ import annotations

from collections.abc import Callable

from app.core.recall.block import Recallable
from app.core.recall.ranking import Found, PairKey, pair_key

FOLLOW_SHARE = 0.8


def _asks(text: str) -> bool:
    return "?" in text


def with_follow_ups(
    found: Found,
    pair_after: Callable[[int], tuple[Recallable, ...] | None],
    matches: Callable[[str], bool],
) -> tuple[Found, dict[PairKey, str]]:
    """``found`` with the pairs that answer its replies, best relevance first.

    Args:
        found: Candidate pairs with their BM25 relevance (larger is better).
        pair_after: The pair that starts right after a message id, if any
            (`Store.trimmed_pair_after`, `MessageIndex.pair_after`).
        matches: Whether a reply's text holds a word of the query: only a reply
            that does lends (a pair found by its question alone says nothing of
            what the next pair answers), and only when it or the next user message
            asks something.

    Returns:
        The candidates, follow-ups added, sorted by relevance; and for each follow-up
        the text of the reply it answers (its context for coverage).
    """
    merged: dict[PairKey, list] = {pair_key(p): [p, r] for p, r in found}
    context: dict[PairKey, str] = {}
    for pair, relevance in found:
        reply = pair[-1]
        if reply.role != "assistant" or not matches(reply.content):
            continue
        after = pair_after(reply.id)
        if not after:
            continue
        if not (_asks(reply.content) or _asks(after[0].content)):
            continue
        key = pair_key(after)
        context[key] = reply.content
        if key in merged:
            merged[key][1] += FOLLOW_SHARE * relevance
        else:
            merged[key] = [after, FOLLOW_SHARE * relevance]
    ordered = sorted(merged.values(), key=lambda item: -item[1])
    return [(pair, relevance) for pair, relevance in ordered], context
