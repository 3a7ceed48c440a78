"""One recall step of a turn: query, search the store, choose within the budget."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from app.core.recall.block import choose
from app.core.recall.follow_ups import with_follow_ups
from app.core.recall.in_memory import MessageIndex
from app.core.recall.query import recall_terms, terms_query
from app.core.recall.ranking import (
    Found,
    PairKey,
    current_only,
    mentions,
    ranked,
)
from app.core.store import Store
from app.core.store.records import RecalledMessage

# Candidate pairs fetched per turn: more than ever fit, few enough to stay fast.
SEARCH_PAIRS = 12


@dataclass(frozen=True)
class RecallResult:
    """What recall put back before a new message.

    Attributes:
        recalled: The originals, oldest first (empty when nothing matched or fit).
        query: The FTS5 query used (empty when the message had no usable word).
        candidates: Pairs the search returned.
        ms: Time the step took.
    """

    recalled: tuple[RecalledMessage, ...]
    query: str
    candidates: int
    ms: float

    @property
    def cut(self) -> bool:
        """Whether a recalled message was cut to fit the budget."""
        return any(r.cut for r in self.recalled)


def recall_for(
    store: Store,
    conversation_id: int,
    text: str,
    budget: int,
    count_tokens: Callable[[str], int],
    exclude: Iterable[int] = (),
    newer: Sequence[tuple[str, str]] = (),
) -> RecallResult:
    """Find the trimmed originals ``text`` needs and choose what fits ``budget``.

    Candidates are BM25's matches and the pairs that answer their replies
    (`follow_ups`), ranked by relevance weighted by importance and by how many of
    the query's words each pair holds, and out-of-date ones
    (superseded by a newer candidate or by ``newer``) are left out (`ranking`).

    Args:
        store: The open store.
        conversation_id: The conversation.
        text: The new user message.
        budget: Tokens the recall block may take.
        count_tokens: The model's tokenizer count.
        exclude: Message ids already in the model's view (recalled by a kept turn).
        newer: ``(role, text)`` of the messages in view after the trimmed ones.
    """
    started = time.perf_counter()
    terms = recall_terms(text)
    if not terms or budget <= 0:
        return RecallResult((), "", 0, (time.perf_counter() - started) * 1000)
    # Words in most messages weigh nothing in BM25 but cost the most to score.
    terms = store.informative_terms(terms, conversation_id)
    query = terms_query(terms)
    if not query:
        return RecallResult((), "", 0, (time.perf_counter() - started) * 1000)
    found, context = with_follow_ups(
        list(store.search_trimmed(conversation_id, query, SEARCH_PAIRS)),
        lambda message_id: store.trimmed_pair_after(conversation_id, message_id),
        lambda text: mentions(text, terms),
    )
    return _chosen(found, context, terms, budget, count_tokens, exclude, newer, started)


def recall_among(
    index: MessageIndex,
    text: str,
    budget: int,
    count_tokens: Callable[[str], int],
    exclude: Iterable[int] = (),
    newer: Sequence[tuple[str, str]] = (),
) -> RecallResult:
    """`recall_for` over messages that are not in the store (a server request's own
    trimmed history, indexed in memory).

    Args:
        index: The trimmed messages' index.
        text: The new user message.
        budget: Tokens the recall block may take.
        count_tokens: The model's tokenizer count.
        exclude: Message ids already in the model's view.
        newer: ``(role, text)`` of the messages in view after the trimmed ones.
    """
    started = time.perf_counter()
    terms = index.informative_terms(recall_terms(text)) if budget > 0 else []
    query = terms_query(terms)
    if not query:
        return RecallResult((), query, 0, (time.perf_counter() - started) * 1000)
    found, context = with_follow_ups(
        list(index.search(query, SEARCH_PAIRS)),
        index.pair_after,
        lambda text: mentions(text, terms),
    )
    return _chosen(found, context, terms, budget, count_tokens, exclude, newer, started)


def _chosen(
    found: Found,
    context: dict[PairKey, str],
    terms: list[str],
    budget: int,
    count_tokens: Callable[[str], int],
    exclude: Iterable[int],
    newer: Sequence[tuple[str, str]],
    started: float,
) -> RecallResult:
    skip = set(exclude)
    found = [
        (pair, relevance)
        for pair, relevance in found
        if not any(m.id in skip for m in pair)
    ]
    ordered = ranked(current_only(found, newer), terms, context)
    recalled = choose(ordered, budget, count_tokens)
    recalled = tuple(sorted(recalled, key=lambda r: r.message_id))
    return RecallResult(
        recalled, terms_query(terms), len(found), (time.perf_counter() - started) * 1000
    )
