"""Recall over messages that are not in the store: a server client's own history.

A server client resends its whole history with every request, so the messages a
summary stands for are in the request itself. They are indexed for that request in an
in-memory SQLite FTS5 table with the store's tokenizer, and searched with the same OR
query and BM25 ranking as the store's trimmed messages (`Store.search_trimmed`), so a
server conversation recalls what a chat of the app would. Here BM25's statistics are
the conversation's own.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from app.core.store.search import terms_match

# As the store does (`Store.informative_terms`): below this, queries are fast.
PRUNE_FROM_MESSAGES = 500


@dataclass(frozen=True)
class Original:
    """A message that can be recalled.

    Attributes:
        id: Its position (in a server request: its index in the client's messages).
        role: ``user`` or ``assistant``.
        content: Its text.
    """

    id: int
    role: str
    content: str


def pairs_of(messages: Sequence[Original]) -> dict[int, tuple[Original, ...]]:
    """Each message's user+reply pair: a question with the reply after it.

    A reply's question is the user message right before it, as in the store; a
    message without such a partner is a pair of one.
    """
    pairs: dict[int, tuple[Original, ...]] = {}
    for position, message in enumerate(messages):
        if message.id in pairs:
            continue
        after = messages[position + 1] if position + 1 < len(messages) else None
        if message.role == "user" and after is not None and after.role == "assistant":
            pairs[message.id] = pairs[after.id] = (message, after)
        else:
            pairs[message.id] = (message,)
    return pairs


class MessageIndex:
    """An in-memory FTS5 index of messages, built once and searched many times.

    A server conversation's trimmed part changes only when it is trimmed again, so
    the index is built once per trim (`app.server.service.history_recall` keeps the recent
    ones) and every later request only searches it. Thread-safe.

    Args:
        messages: The messages, in conversation order (only user and assistant
            messages with text are indexed).
    """

    def __init__(self, messages: Sequence[Original]):
        usable = [m for m in messages if m.role in ("user", "assistant") and m.content]
        self._pairs = pairs_of(usable)
        self._next = {m.id: usable[i + 1] for i, m in enumerate(usable[:-1])}
        self.size = len(usable)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._db.execute(
            "CREATE VIRTUAL TABLE history USING fts5(content,"
            " tokenize='unicode61 remove_diacritics 2')"
        )
        self._db.executemany(
            "INSERT INTO history(rowid, content) VALUES (?, ?)",
            [(m.id, m.content) for m in usable],
        )

    def informative_terms(self, terms: list[str]) -> list[str]:
        """``terms`` without those BM25 gives no weight (as `Store.informative_terms`).

        Counted as the query matches them (a long word as a prefix: `terms_match`).
        """
        if self.size < PRUNE_FROM_MESSAGES or not terms:
            return terms
        with self._lock:
            counts = {
                term: self._db.execute(
                    "SELECT count(*) FROM history WHERE history MATCH ?",
                    [terms_match(term)],
                ).fetchone()[0]
                for term in terms
            }
        return [t for t in terms if 2 * counts[t] < self.size]

    def pair_after(self, message_id: int) -> tuple[Original, ...] | None:
        """The user+reply pair that starts right after ``message_id`` (as
        `Store.trimmed_pair_after`): None when the next message is not a user one."""
        after = self._next.get(message_id)
        if after is None or after.role != "user":
            return None
        return self._pairs[after.id]

    def search(
        self, query: str, limit: int
    ) -> list[tuple[tuple[Original, ...], float]]:
        """The pairs that best match ``query``, best first.

        Args:
            query: An FTS5 query (`app.core.recall.query.terms_query`).
            limit: At most this many pairs.

        Returns:
            ``(pair, relevance)`` tuples; relevance is BM25 (larger is better).
        """
        if not query or limit <= 0 or not self.size:
            return []
        with self._lock:
            hits = self._db.execute(
                "SELECT rowid, -bm25(history) FROM history WHERE history MATCH ?"
                " ORDER BY rank LIMIT ?",
                [query, limit * 2],
            ).fetchall()
        found: list[tuple[tuple[Original, ...], float]] = []
        seen: set[int] = set()
        for message_id, relevance in hits:
            if message_id in seen:
                continue
            pair = self._pairs[message_id]
            seen.update(m.id for m in pair)
            found.append((pair, float(relevance)))
            if len(found) >= limit:
                break
        return found
