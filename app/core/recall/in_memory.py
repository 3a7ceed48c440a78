"""Recall over messages that are not in the store: a server client's own history.

A server client resends its whole history with every request, so the messages a
summary stands for are in the request itself. They are indexed for that request in an
in-memory SQLite FTS5 table with the store's tokenizer, and searched with the same OR
query and BM25 ranking as the store's trimmed messages (`Store.search_trimmed`), so a
server conversation recalls what a chat of the app would.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass


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


def search_messages(
    messages: Sequence[Original], query: str, limit: int
) -> list[tuple[tuple[Original, ...], float]]:
    """The pairs of ``messages`` that best match ``query``, best first.

    Args:
        messages: User and assistant messages, in conversation order.
        query: An FTS5 query (`app.core.recall.query.recall_query`).
        limit: At most this many pairs.

    Returns:
        ``(pair, relevance)`` tuples; relevance is BM25 (larger is better).
    """
    usable = [m for m in messages if m.role in ("user", "assistant") and m.content]
    if not query or limit <= 0 or not usable:
        return []
    db = sqlite3.connect(":memory:")
    try:
        db.execute(
            "CREATE VIRTUAL TABLE history USING fts5(content,"
            " tokenize='unicode61 remove_diacritics 2')"
        )
        db.executemany(
            "INSERT INTO history(rowid, content) VALUES (?, ?)",
            [(m.id, m.content) for m in usable],
        )
        hits = db.execute(
            "SELECT rowid, -bm25(history) FROM history WHERE history MATCH ?"
            " ORDER BY rank LIMIT ?",
            [query, limit * 2],
        ).fetchall()
    finally:
        db.close()
    pairs = pairs_of(usable)
    found: list[tuple[tuple[Original, ...], float]] = []
    seen: set[int] = set()
    for message_id, relevance in hits:
        if message_id in seen:
            continue
        pair = pairs[message_id]
        seen.update(m.id for m in pair)
        found.append((pair, float(relevance)))
        if len(found) >= limit:
            break
    return found
