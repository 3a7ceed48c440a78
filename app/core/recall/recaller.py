"""One recall step of a turn: query, search the store, choose within the budget."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from app.core.recall.block import choose
from app.core.recall.query import recall_query
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
) -> RecallResult:
    """Find the trimmed originals ``text`` needs and choose what fits ``budget``.

    Args:
        store: The open store.
        conversation_id: The conversation.
        text: The new user message.
        budget: Tokens the recall block may take.
        count_tokens: The model's tokenizer count.
        exclude: Message ids already in the model's view (recalled by a kept turn).
    """
    started = time.perf_counter()
    query = recall_query(text)
    if not query or budget <= 0:
        return RecallResult((), query, 0, (time.perf_counter() - started) * 1000)
    skip = set(exclude)
    pairs = [
        pair
        for pair in store.search_trimmed(conversation_id, query, SEARCH_PAIRS)
        if not any(m.id in skip for m in pair)
    ]
    recalled = choose(pairs, budget, count_tokens)
    recalled = tuple(sorted(recalled, key=lambda r: r.message_id))
    return RecallResult(
        recalled, query, len(pairs), (time.perf_counter() - started) * 1000
    )
