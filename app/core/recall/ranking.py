"""Rank recall's candidates by relevance, coverage and importance; drop out-of-date ones.

BM25 says which trimmed messages share the new message's words; it cannot tell a
statement from a question that merely repeats the words ("Which locker number is it?"
outranks "My locker number is 4417." by being shorter). So each pair's BM25 relevance
is weighted by its importance (`app.core.trim.importance`: facts, decisions,
corrections) and by its coverage: the share of the query's distinct words the whole
pair holds (BM25 scores the one message that matched, so a pair whose question and
reply each hold some of the words ranks with the one that repeats a single word).
A pair whose statements a newer message supersedes ("… is now 17" after "… is 42", in
another candidate or in the messages still in view) is not recalled: the model should
see the current value only.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence

from app.core.recall.block import Recallable
from app.core.store.search import prefix_stem
from app.core.trim.facts import sentences
from app.core.trim.importance import claims, importance, superseded

Found = list[tuple[tuple[Recallable, ...], float]]
PairKey = tuple[int, ...]


def pair_key(pair: tuple[Recallable, ...]) -> PairKey:
    """A pair's identity: its message ids."""
    return tuple(m.id for m in pair)


# Relevance gains this share per point of importance, up to `MAX_IMPORTANCE` points.
IMPORTANCE_WEIGHT = 0.15
MAX_IMPORTANCE = 8
# Relevance gains up to this share for a pair that holds every query word (measured
# on LoCoMo, docs/measured.md: 1, 3 and 5 gave 1,139, 1,146 and 1,147 of 1,980).
COVERAGE_WEIGHT = 3.0
_WORD = re.compile(r"[^\W_]+")


def pair_importance(pair: tuple[Recallable, ...]) -> int:
    """The most important sentence of a pair (`importance.importance`)."""
    return max(
        (importance(s, m.role) for m in pair for s in sentences(m.content)),
        default=0,
    )


def current_only(found: Found, newer: Sequence[tuple[str, str]] = ()) -> Found:
    """``found`` without the pairs whose statements are all out of date.

    A pair goes when a sentence of it states a value a later message (a newer
    candidate, or ``newer``: the messages after the trimmed ones, in view) states
    differently, and no sentence of it states a current value.

    Args:
        found: Candidate pairs with their relevance.
        newer: ``(role, text)`` of the messages after the trimmed part, oldest first.
    """
    messages = sorted({m.id: m for pair, _ in found for m in pair}.values(), key=_id)
    if not messages:
        return found
    stale = superseded([(m.role, m.content) for m in messages] + list(newer))
    stale_of = {m.id: stale[i] for i, m in enumerate(messages)}

    def out_of_date(pair: tuple[Recallable, ...]) -> bool:
        if not any(stale_of[m.id] for m in pair):
            return False
        return not any(
            claims(s, m.role)
            for m in pair
            for i, s in enumerate(sentences(m.content))
            if i not in stale_of[m.id]
        )

    return [(pair, relevance) for pair, relevance in found if not out_of_date(pair)]


def _id(message: Recallable) -> int:
    return message.id


def _fold(text: str) -> str:
    """Lowercase without diacritics, as the store's tokenizer indexes words."""
    decomposed = unicodedata.normalize("NFKD", text.lower())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def _held(terms: Sequence[str], texts: Sequence[str]) -> tuple[int, int]:
    """How many distinct ``terms`` the ``texts`` hold (as the query matches them: a
    word of four letters or more by its stem's prefix,
    `app.core.store.search.prefix_stem`), and how many distinct terms there are."""
    distinct = {_fold(t) for t in terms}
    words = {w for text in texts for w in _WORD.findall(_fold(text))}
    held = 0
    for term in distinct:
        stem = prefix_stem(term)
        held += any(w.startswith(stem) for w in words) if stem else term in words
    return held, len(distinct)


def coverage(
    pair: tuple[Recallable, ...], terms: Sequence[str], context: str = ""
) -> float:
    """The share of ``terms`` that some message of ``pair`` (or ``context``: the
    reply a follow-up answers, `app.core.recall.follow_ups`) holds; 0 for no terms.
    """
    texts = [m.content for m in pair] + ([context] if context else [])
    held, distinct = _held(terms, texts)
    return held / distinct if distinct else 0.0


def mentions(text: str, terms: Sequence[str]) -> bool:
    """Whether ``text`` holds any of ``terms``, as the query matches them."""
    return _held(terms, [text])[0] > 0


def ranked(
    found: Found,
    terms: Sequence[str] = (),
    context: Mapping[PairKey, str] | None = None,
) -> list[tuple[Recallable, ...]]:
    """Pairs best first: BM25 weighted by importance and by coverage of ``terms``
    (the query's words; a follow-up's ``context``, keyed by its message ids, counts
    as its own); at an equal score the more important, then the newer.

    A fact stated again in the same words matches the question exactly as well as
    the first statement did, so the newer wins when only one fits the budget. Near
    equals are not banded together any more: on LoCoMo, ordering a band of pairs
    within 20 % of the best by importance and age put every evidence turn in view at
    2K for 44 % of the questions, the plain weighted score for 49 % (with prefix
    terms), and the synthetic recall cells were no worse (docs/measured.md).
    """
    weighted = []
    for pair, relevance in found:
        points = min(pair_importance(pair), MAX_IMPORTANCE)
        around = context.get(pair_key(pair), "") if context else ""
        covered = 1 + COVERAGE_WEIGHT * coverage(pair, terms, around)
        weighted.append(
            (pair, relevance * (1 + IMPORTANCE_WEIGHT * points) * covered, points)
        )
    ordered = sorted(
        weighted,
        key=lambda item: (-item[1], -item[2], -max(m.id for m in item[0])),
    )
    return [pair for pair, _, _ in ordered]
